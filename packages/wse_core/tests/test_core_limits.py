"""The table of limits: alias bombs, deep files and files that never end are refused before
they are built, against independent counts (the expansion of a bomb by formula, the depth of
a nested value by recursion, the file's size by stat)."""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from wse_core.host import limits, readers
from wse_core.host.limits import LIMITS, LimitError
from wse_core.host.readers import load_json, load_yaml, read_text

ROOT = Path(__file__).resolve().parents[3]


def _bomb(fanout: int, levels: int) -> str:
    """Billion laughs: level i is a list of `fanout` aliases of level i - 1."""
    lines = [f"l0: &l0 [{', '.join(['x'] * fanout)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fanout)}]")
    return "\n".join(lines) + "\n"


def _bomb_nodes(fanout: int, levels: int) -> int:
    """The oracle: nodes of the bomb's document with every alias expanded (the root mapping,
    each key, and each level's tree: t0 = 1 + f, t_i = 1 + f t_(i-1))."""
    trees, t = [], 1 + fanout
    for _ in range(levels):
        trees.append(t)
        t = 1 + fanout * t
    return 1 + levels + sum(trees)


@settings(max_examples=40, deadline=None)
@given(fanout=st.integers(1, 12), levels=st.integers(1, 12), cap=st.integers(10, 10**6))
def test_alias_expansion_is_refused_exactly_past_the_limit(fanout, levels, cap):
    text, nodes = _bomb(fanout, levels), _bomb_nodes(fanout, levels)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WSE_LIMIT_YAML_NODES", str(cap))
        if nodes > cap:
            with pytest.raises(LimitError, match="WSE_LIMIT_YAML_NODES") as e:
                load_yaml(text, "params file 'bomb.yaml'")
            assert f"{nodes:,} nodes" in str(e.value) and "\n" not in str(e.value)
        else:
            assert load_yaml(text, "f") == yaml.safe_load(text)  # as PyYAML loads it


def test_a_billion_laughs_is_refused_in_milliseconds_without_memory():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with pytest.raises(LimitError, match="with its aliases expanded"):
        load_yaml(_bomb(10, 9), "params file")  # 1.1e9 nodes
    assert time.perf_counter() - t0 < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 * 1024  # KiB


def test_a_recursive_alias_is_refused():
    with pytest.raises(LimitError, match="recursive"):
        load_yaml("a: &a [1, *a]\n", "spec file")


def _nested(depth: int, kind: str):
    v: object = 1
    for _ in range(depth):
        v = [v] if kind == "list" else {"k": v}
    return v


def _depth(v) -> int:  # the oracle: by recursion, on small values only
    if isinstance(v, list):
        return 1 + max((_depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((_depth(x) for x in v.values()), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.integers() | st.text(alphabet='ab"\\[]{}', max_size=5),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3)
    ),
    max_leaves=30,
)


@settings(max_examples=100, deadline=None)
@given(value=json_values)
def test_text_depth_matches_the_parsed_depth(value):
    """Brackets inside strings (escaped quotes included) are not nesting."""
    assert readers.text_depth(json.dumps(value)) == _depth(value)


def _commas(text):
    """The offsets just past each comma outside JSON strings (where a piece may end)."""
    inside = {i for m in readers._JSON_STRING.finditer(text) for i in range(*m.span())}
    return [i + 1 for i, c in enumerate(text) if c == "," and i not in inside]


# JSON lines: records whose keys hold colons, quotes, escapes and brackets
json_records = st.lists(
    st.dictionaries(st.text(alphabet='a:"\\{[ ', max_size=3), json_values, max_size=6),
    min_size=1,
    max_size=5,
)


@settings(max_examples=100, deadline=None)
@given(records=json_records, cut=st.integers(0, 10_000))
def test_lines_run_counts_each_records_top_level_fields(records, cut):
    """`lines_run` on JSON lines: the most top-level fields of a record (colons inside keys,
    values and nested objects are not fields) and its line, the same when the text arrives in
    two pieces cut between two fields (the open line's fields and nesting carried), and
    `depth_run`'s nesting."""
    text = "".join(json.dumps(r) + "\n" for r in records)
    widths = [len(r) for r in records]
    deepest, last, most, line, still = readers.lines_run(text)
    assert (most, line, still, last) == (max(widths), widths.index(max(widths)), 0, 0)
    assert deepest == readers.depth_run(text)[0]
    commas = _commas(text)
    if not commas:
        return
    cut = commas[cut % len(commas)]  # a piece ends between fields, as a chunk may
    first = readers.lines_run(text[:cut])
    second = readers.lines_run(text[cut:], first[1], first[4])
    assert max(first[2], second[2]) == max(widths)


def _names(v):
    """Every dict key at any depth, as json.dumps writes it (escapes kept)."""
    if isinstance(v, dict):
        return {json.dumps(k)[1:-1] for k in v} | set().union(*map(_names, v.values()))
    if isinstance(v, list):
        return set().union(*map(_names, v))
    return set()


@settings(max_examples=100, deadline=None)
@given(records=json_records, cut=st.integers(0, 10_000))
def test_lines_run_gathers_every_field_name_at_any_depth(records, cut):
    """Given a set, `lines_run` adds the field names of JSON lines (keys of nested objects and
    of objects in lists too; a value string followed by a colon inside a string is not one),
    the same set when the text arrives in two pieces cut between two fields; its figures
    are those it gives without the set."""
    text = "".join(json.dumps(r) + "\n" for r in records)
    keys: set[str] = set()
    assert readers.lines_run(text, keys=keys) == readers.lines_run(text)
    assert keys == set().union(*map(_names, records))
    commas = _commas(text)
    cut = commas[cut % len(commas)] if commas else 0
    pieces: set[str] = set()
    first = readers.lines_run(text[:cut], keys=pieces)
    readers.lines_run(text[cut:], first[1], first[4], keys=pieces)
    assert pieces == keys


@settings(max_examples=20, deadline=None)
@given(depth=st.integers(1, 200_000), kind=st.sampled_from(["list", "dict"]))
def test_deep_json_is_refused_before_parsing(depth, kind):
    text = ("[" * depth + "]" * depth) if kind == "list" else ('{"k":' * depth + "1" + "}" * depth)
    if depth <= limits.limit("json_depth"):
        assert _depth(load_json(text, "config.json")) == depth
    else:
        with pytest.raises(LimitError, match="WSE_LIMIT_JSON_DEPTH"):
            load_json(text, "config.json")


@pytest.mark.parametrize("depth", [65, 5000, 100_000])
def test_deep_yaml_is_refused(depth):
    with pytest.raises(LimitError, match="WSE_LIMIT_JSON_DEPTH"):
        load_yaml("[" * depth + "]" * depth, "spec file")


def test_files_past_the_size_limit_or_not_regular_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("WSE_LIMIT_FILE_BYTES", "100")
    small, big = tmp_path / "a.yaml", tmp_path / "b.yaml"
    small.write_text("x" * 100)
    big.write_text("x" * 101)
    assert read_text(small, "spec file") == "x" * 100
    with pytest.raises(LimitError, match="101 bytes.*WSE_LIMIT_FILE_BYTES"):
        read_text(big, "spec file")
    with pytest.raises(LimitError, match="not a regular file"):
        read_text("/dev/zero", "spec file")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer, so that opening does not block
    try:
        with pytest.raises(LimitError, match="not a regular file"):
            read_text(fifo, "spec file")
    finally:
        os.close(fd)


def test_not_regular_names_each_kind_against_what_the_test_made(tmp_path):
    """`readers.not_regular`: the kind of each thing made here by its own call (mkdir,
    mkfifo, a bound AF_UNIX socket, /dev/null, links), never opened (the FIFO has no writer:
    an open would block); None for a regular file, a link to one, and nothing there."""
    import socket

    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    (tmp_path / "to_file").symlink_to(tmp_path / "file")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    try:
        got = {
            name: readers.not_regular(tmp_path / name)
            for name in ("file", "to_file", "nowhere", "folder", "fifo", "sock", "dangling", "loop")
        }
    finally:
        sock.close()
    got["/dev/null"] = readers.not_regular("/dev/null")
    words = "is {}, not a regular file".format
    assert got == {
        "file": None, "to_file": None, "nowhere": None, "folder": words("a folder"),
        "fifo": words("a FIFO"), "sock": words("a socket"), "dangling": words("a broken link"),
        "loop": words("a broken link"), "/dev/null": words("a device"),
    }  # fmt: skip


def test_overrides_lift_limits_and_bad_overrides_are_one_line(monkeypatch):
    monkeypatch.setenv("WSE_LIMIT_SERVE_SLOTS", "10")
    limits.check("serve_slots", 10, "--max-num-seqs")
    with pytest.raises(LimitError, match="over the limit of 10 slots.*WSE_LIMIT_SERVE_SLOTS"):
        limits.check("serve_slots", 11, "--max-num-seqs")
    for bad in ("-1", "0", "lots"):
        monkeypatch.setenv("WSE_LIMIT_SERVE_SLOTS", bad)
        with pytest.raises(ValueError, match="WSE_LIMIT_SERVE_SLOTS must be a positive integer"):
            limits.limit("serve_slots")


def test_the_machine_limits_keep_the_tests_legal():
    assert limits.limit("devices") >= 8
    assert limits.limit("processes") == len(os.sched_getaffinity(0))


def test_docs_list_every_limit_and_its_override():
    page = (ROOT / "docs" / "limits.md").read_text()
    for lim in LIMITS.values():
        assert f"`{lim.name}`" in page, lim.name
    assert "WSE_LIMIT_<NAME>" in page


def _verlet_amplitude(omega_dt: float, steps: int = 200) -> float:
    """The largest |x| of a unit harmonic oscillator (x0 = 1, v0 = 0) integrated by velocity
    Verlet, as `wse hpc md` integrates, in units where omega = 1 and the step is omega_dt."""
    x, v, h, peak = 1.0, 0.0, omega_dt, 1.0
    for _ in range(steps):
        v_half = v - 0.5 * h * x
        x = x + h * v_half
        v = v_half - 0.5 * h * x
        peak = max(peak, abs(x))
    return peak


def test_the_md_timestep_limit_is_past_verlets_stability_for_every_metal():
    """The basis of `md_dt_fs`, checked by integrating: at cesium's Debye frequency (the
    slowest highest vibration of any metal) velocity Verlet stays bounded just under the
    bound the limit is a multiple of, and grows without bound past it; the limit itself is
    past the bound for that frequency, and far above the 1-5 fs LAMMPS metal runs use."""
    import math

    omega = 2 * math.pi * limits.BOLTZMANN_J_PER_K * 38.0 / limits.PLANCK_J_S  # Cs, 38 K
    dt_fs = limits.limit("md_dt_fs")
    bound_fs = dt_fs / limits.MD_DT_MARGIN
    assert _verlet_amplitude(omega * bound_fs * 1e-15 * 0.95) < 10
    assert _verlet_amplitude(omega * bound_fs * 1e-15 * 1.05) > 1e6
    assert _verlet_amplitude(omega * dt_fs * 1e-15) > 1e100  # at the limit: no metal is stable
    assert dt_fs >= 100 * 5  # LAMMPS' metal timesteps (1-5 fs) are never near it


def test_a_refusal_carries_its_figures(monkeypatch):
    """A caller rewording a refusal (a checkpoint's seal) reads its figures, not its text."""
    monkeypatch.setenv("WSE_LIMIT_JSON_DEPTH", "5")
    err = limits.refusal("json_depth", "the nesting of SEAL", "200 levels")
    assert (err.limit_name, err.value, err.limit) == ("json_depth", "200 levels", 5)
    assert str(err).startswith("the nesting of SEAL is 200 levels, over the limit of 5 levels")
    assert LimitError("a FIFO").limit_name is None
