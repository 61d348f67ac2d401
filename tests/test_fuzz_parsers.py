"""Fuzzed inputs, zero tracebacks: every parser of a user's file, fed valid files that
`wse_core.testing.mutate` truncates and corrupts, either parses or raises the package's own
`WseError` with a one-line message; nothing else escapes (no IndexError, KeyError,
UnicodeDecodeError, numpy or yaml exceptions). The hypothesis profile (root conftest) fixes
the seed when CI=true. A few of the same corruptions go through the `wse` command too: exit 2
and one line."""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner
from wse_core import WseError
from wse_core.testing import mutate, one_line_error

OPS = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 2**20), st.integers(0, 255)),
    min_size=1,
    max_size=6,
)
WORK = Path(tempfile.mkdtemp(prefix="wse-fuzz-"))


def _accepts(parse, path: Path, data: bytes) -> None:
    """parse(path) after writing `data` there: a result, or a one-line WseError."""
    path.write_bytes(data)
    try:
        parse(path)
    except WseError as e:
        assert one_line_error(e), repr(str(e))


def _valid(name: str, text: str | bytes) -> tuple[Path, bytes]:
    data = text.encode() if isinstance(text, str) else text
    return WORK / name, data


# --- wse_core: wafer spec YAML -------------------------------------------------------------
SPEC = _valid("spec.yaml", "base: wse2\nname: fuzz\npe_rows: 40\npe_cols: 50\nclock_hz: 8.5e8\n")


@settings(max_examples=60)
@given(ops=OPS)
def test_spec_yaml(ops):
    from wse_core import load_spec

    path, data = SPEC
    _accepts(load_spec, path, mutate(data, ops))


# --- trainer: params YAML and dotted overrides --------------------------------------------
@functools.cache
def _params_text() -> str:
    from wse_trainer.config import shipped_config

    return shipped_config("tiny").read_text()


@settings(max_examples=60)
@given(ops=OPS)
def test_params_yaml(ops):
    from wse_trainer.config import load_config
    from wse_trainer.config_check import check_config

    def parse(path):
        check_config(load_config(path))

    _accepts(parse, WORK / "params.yaml", mutate(_params_text().encode(), ops))


OVERRIDE = st.builds(
    lambda sec, key, sep, val: f"{sec}{sep}{key}={val}",
    st.sampled_from(["runconfig", "train_input", "model", "optimizer", "", "x", "runconfig.a"]),
    st.sampled_from(["max_steps", "batch_size", "learning_rate", "num_csx", "preset", "", "="]),
    st.sampled_from([".", "", ".."]),
    st.one_of(
        st.text(max_size=12), st.sampled_from(["-1", "0", "1e999", "nan", "[1, 2]", "{a: 1"])
    ),
)


@settings(max_examples=80)
@given(overrides=st.lists(st.one_of(OVERRIDE, st.text(max_size=20)), min_size=1, max_size=3))
def test_params_overrides(overrides):
    from wse_trainer.config import load_config, shipped_config
    from wse_trainer.config_check import check_config

    try:
        check_config(load_config(shipped_config("tiny"), overrides))
    except WseError as e:
        assert one_line_error(e), repr(str(e))


# --- hpc md: funcfl, setfl, fs, extended XYZ -------------------------------------------------
@functools.cache
def _funcfl() -> bytes:
    r = np.linspace(0, 5.0, 60)
    rho = np.linspace(0, 2.0, 50)
    lines = ["fuzz funcfl", "29 63.55 3.615 fcc", f"50 {rho[1]:.6g} 60 {r[1]:.6g} 4.9"]
    for values in (-np.sqrt(rho), 10 * np.exp(-r), np.exp(-r)):
        lines += [" ".join(f"{v:.8g}" for v in values[i : i + 5]) for i in range(0, len(values), 5)]
    return ("\n".join(lines) + "\n").encode()


@functools.cache
def _setfl(elements: tuple[str, ...] = ("Cu", "Ni")) -> bytes:
    from wse_hpc.md import write_setfl, zhou04

    path = WORK / f"valid-{len(elements)}.eam.alloy"
    write_setfl(zhou04(list(elements), knots=100), path, ["fuzz", "setfl"])
    return path.read_bytes()


@settings(max_examples=60)
@given(ops=OPS, kind=st.sampled_from(["eam", "eam.alloy", "eam.fs"]))
def test_potentials(ops, kind):
    from wse_hpc.md import read_potential

    # an fs file of one element has the setfl layout
    data = {"eam": _funcfl, "eam.alloy": _setfl, "eam.fs": lambda: _setfl(("Cu",))}[kind]()
    _accepts(read_potential, WORK / f"fuzz.{kind}", mutate(data, ops))


@functools.cache
def _xyz() -> bytes:
    from wse_hpc.md import crystal, write_xyz

    s = crystal("fcc", "Cu", 3.615, (2, 2, 1))
    s.velocities_A_ps = np.full_like(s.positions_A, 0.5)
    path = WORK / "valid.xyz"
    write_xyz(path, [s, s], info={"step": 0})
    return path.read_bytes()


@settings(max_examples=60)
@given(ops=OPS)
def test_extended_xyz(ops):
    from wse_hpc.md import read_xyz
    from wse_hpc.md.lattice import check_structure

    def parse(path):
        for s in read_xyz(path):
            check_structure(s)

    _accepts(parse, WORK / "fuzz.xyz", mutate(_xyz(), ops))


# --- TLR operator files (.npz) --------------------------------------------------------------
@functools.cache
def _operator() -> bytes:
    from wse_hpc.tlrmvm import compress, save_operator

    rng = np.random.default_rng(0)
    a = rng.standard_normal((24, 3)) @ rng.standard_normal((3, 24))
    path = save_operator(compress(a.astype(np.float32), nb=8, threshold=1e-3), WORK / "op.npz")
    return path.read_bytes()


@settings(max_examples=40)
@given(ops=OPS)
def test_tlr_operator(ops):
    from wse_hpc.tlrmvm import load_operator

    _accepts(load_operator, WORK / "fuzz.npz", mutate(_operator(), ops))


# --- models: HF config.json, tokenizer.json, safetensors headers -----------------------------
@pytest.fixture(scope="module")
def hf_dir():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from wse_inference.testing import save_tiny_model

    path = WORK / "hf"
    save_tiny_model(path, n_layers=1)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.save(str(path / "tokenizer.json"))
    return path


def _mutated_copy(src: Path, name: str, ops) -> Path:
    import shutil

    dst = WORK / f"hf-{name}"
    if not dst.exists():
        shutil.copytree(src, dst)
    (dst / name).write_bytes(mutate((src / name).read_bytes(), ops))
    return dst


@settings(max_examples=50)
@given(ops=OPS, name=st.sampled_from(["config.json", "tokenizer.json"]))
def test_hf_config_and_tokenizer(hf_dir, ops, name):
    from wse_inference.model_dir import load_model, read_config

    folder = _mutated_copy(hf_dir, name, ops)
    for parse in (read_config, load_model):
        try:
            parse(folder)
        except WseError as e:
            assert one_line_error(e), repr(str(e))


@settings(max_examples=50)
@given(ops=OPS, header_only=st.booleans())
def test_safetensors_header(hf_dir, ops, header_only):
    import wse_models

    name = next(p.name for p in hf_dir.glob("*.safetensors"))
    data = (hf_dir / name).read_bytes()
    n = int.from_bytes(data[:8], "little")
    if header_only:  # corrupt the JSON header only, keep its length field and the tensors
        header = mutate(data[8 : 8 + n], ops)
        data = len(header).to_bytes(8, "little") + header + data[8 + n :]
    else:
        data = mutate(data, ops)
    folder = WORK / "hf-st"
    if not folder.exists():
        import shutil

        shutil.copytree(hf_dir, folder)
    (folder / name).write_bytes(data)
    try:
        wse_models.from_pretrained(folder)
    except WseError as e:
        assert one_line_error(e), repr(str(e))


# --- the same corruptions through the `wse` command: exit 2 and one line ------------------
@settings(max_examples=15)
@given(ops=OPS)
def test_wafer_info_spec_through_the_cli(ops):
    from wse_cli.app import app

    path, data = SPEC
    path = path.with_name("cli-spec.yaml")
    path.write_bytes(mutate(data, ops))
    r = CliRunner().invoke(app, ["wafer", "info", "--spec", str(path), "--json"])
    if r.exit_code == 0:
        json.loads(r.stdout)
    else:
        assert r.exit_code == 2 and r.exception is None or isinstance(r.exception, SystemExit)
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), r.output


# --- wse_core: per-PE trace files (wse view) ----------------------------------------------
@functools.cache
def _trace_file() -> tuple[Path, bytes]:
    """A small valid trace (tiny wafer, defects, an SRAM ledger) and its bytes."""
    from wse_core.testing import tiny_trace

    path = tiny_trace()[0].save(WORK / "trace.npz")
    return path, path.read_bytes()


def _view(path: Path) -> None:
    """`wse view` through the CLI: a page, or exit 2 with one line (never a traceback)."""
    from wse_cli.app import app

    r = CliRunner().invoke(app, ["view", str(path), "--out", str(path.with_suffix(".html"))])
    if r.exit_code != 0:
        assert r.exit_code == 2 and isinstance(r.exception, SystemExit | None), r.output
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), r.output


@settings(max_examples=40)
@given(ops=OPS)
def test_trace_bytes(ops):
    from wse_core.trace import load

    path, data = _trace_file()
    bad = path.with_name("trace-bytes.npz")
    _accepts(load, bad, mutate(data, ops))


JSONISH = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=6),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


HEADER_PATHS = [
    "layers", "rows", "cols", "block", "physical_shape", "phases", "regions", "meta",
    "allocations", "name", "schema_version", "layers.0.key", "phases.0.path",
    "phases.0.cycles", "phases.0.critical_pe", "allocations.0.region", "allocations.0.name",
    "allocations.0.bytes_per_pe", "meta.predicted_s", "meta.units", "physical_shape.0",
]  # fmt: skip


def _set(head: dict, path: str, value, drop: bool) -> None:
    """Replace (or drop) the value at a dotted path of the header, where it exists."""
    *parents, last = path.split(".")
    node = head
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.get(part)
        if not isinstance(node, dict | list) or not node:
            return
    if isinstance(node, list):
        node[int(last) % len(node)] = value
    elif drop:
        node.pop(last, None)
    else:
        node[last] = value


@settings(max_examples=30)
@given(
    key=st.sampled_from(HEADER_PATHS),
    value=JSONISH,
    drop=st.booleans(),
    array=st.sampled_from(["none", "shape", "nan", "inf", "negative", "dead", "missing"]),
)  # fmt: skip
def test_trace_header_and_arrays(key, value, drop, array):
    """Valid archives with a wrong header field or a wrong array: a trace that `wse view`
    draws, or one line."""
    import io

    import numpy as np
    from wse_core.trace import load

    path, _ = _trace_file()
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    head = json.loads(bytes(arrays["header"]).decode())
    _set(head, key, value, drop)
    layer = "busy_cycles"
    if array == "shape":
        arrays[layer] = np.zeros((3, 5))
    elif array in ("nan", "inf", "negative"):
        arrays[layer] = np.full_like(arrays[layer], {"nan": np.nan, "inf": np.inf}.get(array, -1))
    elif array == "dead":
        arrays["dead"] = np.array([[10**6, 0]])
    elif array == "missing":
        del arrays[layer]
    arrays["header"] = np.frombuffer(json.dumps(head).encode(), np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    bad = path.with_name("trace-head.npz")
    bad.write_bytes(buf.getvalue())
    try:
        load(bad)
    except WseError as e:
        assert one_line_error(e), repr(str(e))
    _view(bad)


@pytest.mark.parametrize("case", ["empty", "truncated", "text", "npy"])
def test_view_of_a_broken_file_is_one_line(case):
    import numpy as np

    path, data = _trace_file()
    bad = path.with_name(f"view-{case}.npz")
    if case == "npy":
        np.save(bad.with_suffix(".npy"), np.zeros(3))
        bad.write_bytes(bad.with_suffix(".npy").read_bytes())
    else:
        bad.write_bytes({"empty": b"", "truncated": data[: len(data) // 2], "text": b"a,b\n"}[case])
    from wse_cli.app import app

    r = CliRunner().invoke(app, ["view", str(bad)])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "allow_pickle" not in r.output


# --- hostile shapes in every file the stack reads: alias bombs, deep nesting, NaN ----------
def _alias_bomb(fanout: int, levels: int) -> str:
    lines = [f"b0: &b0 [{', '.join(['x'] * fanout)}]"]
    lines += [f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * fanout)}]" for i in range(1, levels)]
    return "".join(f"  {line}\n" for line in lines)


HOSTILE = st.one_of(
    st.builds(lambda f, n: ("bomb", _alias_bomb(f, n)), st.integers(2, 40), st.integers(2, 12)),
    st.builds(lambda d: ("deep", "[" * d + "]" * d), st.integers(60, 200_000)),
    st.builds(lambda v: ("nan", v), st.sampled_from([".nan", ".inf", "-.inf", "1e400"])),
)


def _hostile_yaml(kind: str, text: str, key: str) -> str:
    if kind == "bomb":
        return f"{key}:\n{text}"
    return f"{key}: {text}\n"


def _refused_quickly(parse, path: Path, data: str) -> None:
    """parse(path): a result or a one-line WseError, within 2 s (no expansion, no recursion)."""
    import time

    t0 = time.perf_counter()
    _accepts(parse, path, data.encode())
    assert time.perf_counter() - t0 < 2.0


@settings(max_examples=30, deadline=None)
@given(hostile=HOSTILE)
def test_spec_params_and_speculative_files_refuse_hostile_shapes(hostile):
    from wse_core import load_spec
    from wse_inference.speculative.config import parse_speculative_config
    from wse_trainer.config import load_config
    from wse_trainer.config_check import check_config

    kind, text = hostile
    spec = "base: wse2\n" + _hostile_yaml(kind, text, "clock_hz")
    _refused_quickly(load_spec, WORK / "hostile-spec.yaml", spec)
    params = _params_text().replace("optimizer:", "optimizer:\n  eps: 1.0e-8", 1)
    params += "\n" + _hostile_yaml(kind, text, "extra") if kind != "nan" else ""
    if kind == "nan":
        params = _params_text() + f"\noptimizer:\n  learning_rate: {text}\n"
    _refused_quickly(lambda p: check_config(load_config(p)), WORK / "hostile-params.yaml", params)
    spec_cfg = _hostile_yaml(kind, text, "num_speculative_tokens")
    _refused_quickly(parse_speculative_config, WORK / "hostile-spec-cfg.yaml", spec_cfg)


@settings(max_examples=15, deadline=None)
@given(depth=st.integers(65, 200_000))
def test_a_deep_hf_config_is_one_line(hf_dir, depth):
    from wse_inference.model_dir import read_config

    folder = WORK / "hf-deep"
    if not folder.exists():
        import shutil

        shutil.copytree(hf_dir, folder)
    (folder / "config.json").write_text('{"a":' * depth + "1" + "}" * depth)
    with pytest.raises(WseError, match="WSE_LIMIT_JSON_DEPTH") as e:
        read_config(folder)
    assert one_line_error(e.value)
