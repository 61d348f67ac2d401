"""Hunt 72 on the wafer: traces and repairs that grew with the wafer, and three messages.

1. `--trace` built every layer at full wafer size before `downsample` (a 12,000 x 12,000 spec:
   9.2 GB, then a MemoryError): the trace is now built per rectangle of equal values. The
   oracle is the old build kept here (`_reference`: every layer per PE, then
   `schema.downsample`), on small wafers with regions, per-PE arrays, a ledger, dead PEs
   and blocks; and a 12,000 x 12,000 spec traced within a small memory bound.
2. A run with no defects built and checked a defect map of the whole wafer (a 30,000 x 30,000
   spec refused a 10 x 10 grid for a 40.3 GiB map): `remap(spec, None)` is the identity,
   equal to the repair of an all-live map, built from nothing of the wafer's size.
3. `quoted_number` told `clock_hz: 1.1 GHz` to "write it unquoted (clock_hz: 1.1 GHz)": the
   advice is checked by loading it back (YAML and JSON parsers), text with a unit by name.
5. A trace's `"schema_version": "1"` read "has 1; this wse reads 1" (and true / 1.0
   passed); `wse wafer check -p tiny` refused a 13 x 21 grid never given.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from typing import Any

import numpy as np
import pytest
from wse_core import Op, PerfModel, Phase, RunReport, Work, overlap, preset, serial
from wse_core.cost.calibration import UNCALIBRATED
from wse_core.errors import DefectError, SpecError, quoted_number
from wse_core.hw.defects import DefectMap, defect_map, remap
from wse_core.hw.presets import load_spec
from wse_core.hw.sram import Region, SramLedger
from wse_core.trace import TraceError, downsample, load, trace_from, trace_uniform
from wse_core.trace.schema import DIRECTIONS, PARTS, PeTrace


# -- 1. the trace, against the old full-size build ---------------------------------------------
def _ref_tree(node, timing, k, weight_of):
    """Per-PE (busy, parts, links) of a phase subtree: the phase tree evaluated on every PE
    (serial adds, overlap takes the max), each leaf scaled by its weight and repeats."""
    if isinstance(node, Phase):
        c = timing.cost
        n = k * node.repeat * weight_of(node)
        parts = {p: getattr(c, f"{p}_cycles") * n for p in PARTS}
        return c.cycles * n, parts, {d: node.work.links.get(d, 0.0) * n for d in DIRECTIONS}
    kids = [
        _ref_tree(p, t, k * node.repeat, weight_of)
        for p, t in zip(node.parts, timing.children, strict=True)
    ]
    join = np.add if node.mode == "serial" else np.maximum
    busy = kids[0][0]
    for kid in kids[1:]:
        busy = join(busy, kid[0])
    parts = {p: sum(kid[1][p] for kid in kids) for p in PARTS}
    links = {d: sum(kid[2][d] for kid in kids) for d in DIRECTIONS}
    return busy, parts, links


def _ref_leaves(node, path=()):
    if isinstance(node, Phase):
        yield node, path
        return
    for p in node.parts:
        yield from _ref_leaves(p, path + ((node.name,) if node.name else ()))


def _reference(spec, report, per_pe_work, sram, defects, max_cells) -> PeTrace:
    """The trace as it was built before hunt 72: every layer a (rows, cols) array, the
    critical PE by np.argmax over the PEs, then `downsample` to the block `trace_from` chose."""
    shape = (spec.pe_rows, spec.pe_cols)
    weights: dict[int, Any] = {}
    for leaf, path in _ref_leaves(report.phases):
        name = next((n for n in (leaf.name, *reversed(path)) if n in per_pe_work), None)
        w = 1.0 if name is None else per_pe_work[name]
        if isinstance(w, Region):
            w = np.zeros(shape)
            r = per_pe_work[name]
            w[r.row0 : r.row0 + r.rows, r.col0 : r.col0 + r.cols] = 1.0
        weights[id(leaf)] = w
    busy, parts, links = _ref_tree(report.phases, report.predicted, 1.0, lambda p: weights[id(p)])
    full = lambda x: np.broadcast_to(np.asarray(x, float), shape).copy()  # noqa: E731
    sram_layer = np.zeros(shape)
    for a in sram.allocations if sram is not None else ():
        r = a.region
        sram_layer[r.row0 : r.row0 + r.rows, r.col0 : r.col0 + r.cols] += a.bytes_per_pe
    layers = {"sram_bytes": sram_layer, "busy_cycles": full(busy)}
    layers |= {f"{p}_cycles": full(parts[p]) for p in PARTS}
    layers |= {f"link_{d}": full(links[d]) for d in DIRECTIONS}
    det = np.zeros(shape)
    if defects is not None:
        rm = remap(spec, defects)
        det[:, :-1] += rm.link_hops(1) - 1
        det[:-1, :] += rm.link_hops(0) - 1
    layers["detour_hops"] = det
    crit = []
    for leaf, _ in _ref_leaves(report.phases):
        w = np.broadcast_to(np.asarray(weights[id(leaf)], float), shape)
        if w.max() <= 0:
            crit.append(None)
            continue
        score = np.where(w >= w.max(), layers["busy_cycles"], -np.inf)
        crit.append([int(i) for i in np.unravel_index(int(np.argmax(score)), shape)])
    block = 1
    while -(-shape[0] // block) * -(-shape[1] // block) > max_cells:
        block += 1
    trace = PeTrace(
        "r", spec.name, *shape, 1, layers, np.zeros((0, 2), np.int64), shape, [], [], []
    )
    return downsample(trace, block), crit


def _random_case(rng: np.random.Generator):
    rows, cols = int(rng.integers(3, 41)), int(rng.integers(3, 41))
    spec = preset("tiny").replace(pe_rows=rows, pe_cols=cols)

    def rect(name):
        r0, c0 = int(rng.integers(0, rows)), int(rng.integers(0, cols))
        return Region(name, r0, c0, int(rng.integers(1, rows - r0 + 1)),
                      int(rng.integers(1, cols - c0 + 1)))  # fmt: skip

    def leaf(name):
        ops = (Op("add", "fp32", int(rng.integers(1, 200))),)
        links = {d: float(rng.integers(0, 50)) for d in DIRECTIONS if rng.random() < 0.6}
        work = Work(ops=ops, links=links, latency_hops=int(rng.integers(0, 5)),
                    sram_read_bytes=int(rng.integers(0, 3000)))  # fmt: skip
        return Phase(name, work, repeat=int(rng.integers(1, 4)))

    inner = overlap(leaf("a"), leaf("b"), name="g")
    phases = serial(inner, leaf("c"), serial(leaf("d"), leaf("e"), name="h"), name="step")
    report = RunReport.build("t", spec, phases, model=PerfModel(spec, UNCALIBRATED), units="s")
    piecewise = np.zeros((rows, cols))
    piecewise[: rows // 2, cols // 3 :] = 0.5
    piecewise[rows // 2 :, : cols // 2] = 1.0
    noisy = rng.random((rows, cols))
    noisy /= noisy.max()
    choices = [rect("r1"), rect("r2"), piecewise, noisy]
    work = {n: choices[int(rng.integers(0, 4))] for n in ("a", "c", "h") if rng.random() < 0.8}
    ledger = SramLedger(rows, cols, spec.sram_bytes_per_pe)
    for i in range(int(rng.integers(0, 4))):
        ledger.allocate(f"m{i}", int(rng.integers(1, 500)), rect(f"m{i}"))
    dm = defect_map(spec, int(rng.integers(0, 1000)), 0.02) if rng.random() < 0.5 else None
    try:
        remap(spec, dm)
    except DefectError:  # past the spares: a wafer without dead PEs instead
        dm = None
    return spec, report, work, ledger, dm


@pytest.mark.parametrize("seed", range(40))
def test_block_built_trace_equals_the_full_size_build_then_downsample(seed):
    rng = np.random.default_rng(seed)
    spec, report, work, ledger, dm = _random_case(rng)
    max_cells = int(rng.choice([10_000, 200, 37, 9]))  # block 1 and several block sizes
    got = trace_from(spec, report, per_pe_work=work, sram=ledger, defects=dm, max_cells=max_cells)
    want, crit = _reference(spec, report, work, ledger, dm, max_cells)
    assert got.block == want.block and got.shape == want.shape
    assert list(got.layers) == list(want.layers)
    for key, a in want.layers.items():
        # maxima exactly; sums as value x PEs against a sum of PEs (rounding only)
        np.testing.assert_allclose(got.layers[key], a, rtol=1e-12, atol=0, err_msg=key)
    assert [p["critical_pe"] for p in got.phases] == crit
    assert got.layers["busy_cycles"].max() == pytest.approx(want.layers["busy_cycles"].max())


def test_a_12000_square_spec_traces_in_bounded_memory_and_time():
    spec = preset("wse3").replace(pe_rows=12_000, pe_cols=12_000)
    phases = serial(Phase("add", Work(ops=(Op("add", "fp32", 64),), links={"E": 3.0})),
                    Phase("halo", Work(links={"N": 1.0}, latency_hops=2)), name="step")  # fmt: skip
    report = RunReport.build("t", spec, phases, model=PerfModel(spec, UNCALIBRATED), units="s")
    one_layer = 12_000 * 12_000 * 8  # bytes of one full-size float64 layer: 1.15 GB
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        tr = trace_uniform(spec, report, region=Region("grid", 0, 0, 100, 7_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < one_layer / 20  # the old build held a dozen such layers (9.2 GB)
    assert time.perf_counter() - t0 < 30  # the old build took 57 s before its MemoryError
    assert tr.block == 34 and tr.shape == (353, 353)
    # the sums survive: every PE of the region with a neighbour inside it that way sends 3
    # words east, one north (hunt 82: the edge lines, which send nothing, were counted)
    assert tr.layers["link_E"].sum() == pytest.approx(3.0 * 100 * 6_999)
    assert tr.layers["link_N"].sum() == pytest.approx(99 * 7_000)
    assert tr.layers["busy_cycles"][3:].max() == 0.0  # rows 102 and on run nothing


# -- 2. no defects: the identity repair ---------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (6, 1), (8, 8), (13, 21)])
def test_no_defects_remap_is_the_repair_of_an_all_live_map(shape):
    spec = preset("tiny").replace(pe_rows=shape[0], pe_cols=shape[1])
    live = DefectMap(np.zeros((spec.physical_rows, spec.physical_cols), bool), None, 0.0)
    want, got = remap(spec, live), remap(spec, None)
    np.testing.assert_array_equal(got.phys_row, want.phys_row)
    np.testing.assert_array_equal(got.phys_col, want.phys_col)
    for axis in (0, 1):
        np.testing.assert_array_equal(got.link_hops(axis), want.link_hops(axis))
    assert (got.retired_rows, got.spare_rows_used, got.spare_cols_used) == (
        want.retired_rows, want.spare_rows_used, want.spare_cols_used)  # fmt: skip
    assert got.extra_hops == want.extra_hops
    assert got.extra_hops_within(max(shape[0] - 1, 1), shape[1]) == want.extra_hops_within(
        max(shape[0] - 1, 1), shape[1]
    )


def test_a_30000_square_wafer_without_defects_builds_small_grids_in_little_memory():
    from wse_core.hw.wafer import build_wafer

    spec = preset("wse3").replace(pe_rows=30_000, pe_cols=30_000)
    tracemalloc.start()
    try:
        rm = remap(spec, None)
        hops = rm.extra_hops
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # the old map alone was 30,060 x 30,060 bools (0.9 GB) and its sort
    assert hops == {"ns_total": 0, "ew_total": 0, "ns_max": 1, "ew_max": 1}
    wafer = build_wafer(spec, grid=(10, 10))  # was refused: "the defect map ... needs 40.3 GiB"
    assert wafer.describe()["detour_hops"] == hops
    assert wafer.describe()["retired_rows"] == []


# -- 3. quoted numbers: the advice loads ----------------------------------------------------------
@pytest.mark.parametrize("value", ["1.1e9", " 850000000 ", "+5e8", "1_000_000_000", ".5e9"])
def test_a_quoted_number_is_told_an_unquoted_spelling_that_loads(tmp_path, value):
    path = tmp_path / "s.yaml"
    path.write_text(f"base: wse3\nclock_hz: '{value}'\n")
    with pytest.raises(SpecError, match="write it unquoted") as e:
        load_spec(path)
    advice = str(e.value).rsplit("(", 1)[1].rstrip(")")
    path.write_text(f"base: wse3\n{advice}\n")
    assert load_spec(path).clock_hz == float(value)  # the advice, as YAML reads it
    said = quoted_number("x", "clock_hz", value, json=True).rsplit("(", 1)[1].rstrip(")")
    assert json.loads("{" + said + "}") == {"clock_hz": float(value)}  # and as JSON does


@pytest.mark.parametrize(
    ("key", "value", "unit"),
    [
        ("clock_hz", "1.1 GHz", "clock_hz is in Hz"),
        ("sram_bytes_per_pe", "48 kB", "sram_bytes_per_pe is in bytes per PE"),
        ("system_latency_s", "2 us", "system_latency_s is in seconds"),
        ("hop_latency_cycles", "one", "hop_latency_cycles is in cycles"),
        ("pe_rows", "100 rows", "a bare number"),
    ],
)
def test_text_that_is_no_number_is_not_told_to_be_unquoted(tmp_path, key, value, unit):
    path = tmp_path / "s.yaml"
    path.write_text(f"base: wse3\n{key}: {value}\n")
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert "unquoted" not in str(e.value)
    assert f"must be a number without a unit ({unit})" in str(e.value)
    with pytest.raises(ValueError):
        float(value)  # the premise: Python reads no number there
    assert "unquoted" not in quoted_number("hidden_size in config.json", "hidden_size", "64 x",
                                           json=True)  # fmt: skip


# -- 5. a trace's schema_version, and wse wafer check's default grid -----------------------------
@pytest.mark.parametrize("version", ["1", True, 1.0, None])
def test_a_schema_version_that_is_not_the_integer_is_refused_as_given(tmp_path, version):
    from wse_core.testing import tiny_trace

    path = tiny_trace()[0].save(tmp_path / "t.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    head = json.loads(bytes(arrays["header"]))
    head["schema_version"] = version
    arrays["header"] = np.frombuffer(json.dumps(head).encode(), np.uint8)
    np.savez(path, **arrays)
    with pytest.raises(TraceError) as e:
        load(path)
    assert f"schema_version {version!r};" in str(e.value) and "the integer 1" in str(e.value)


def test_wafer_check_names_its_default_grid_and_the_option():
    pytest.importorskip("wse_cli")
    import typer
    from wse_cli.app import app
    from wse_cli.testing import invoke

    root = typer.main.get_command(app)
    code, out = invoke(root, ["wafer", "check", "-p", "tiny"])
    assert code == 2 and "the default --grid 13 21 does not fit" in out
    assert "give --grid ROWS COLS of at most 8 x 8" in out
    code, out = invoke(root, ["wafer", "check", "-p", "tiny", "--grid", "9", "4"])
    assert code == 2 and "--grid 9 4 does not fit" in out and "default" not in out
