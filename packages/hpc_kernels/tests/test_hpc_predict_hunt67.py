"""Hunt 67 (predict2): the HPC predictions, whole-job sanity. Broken before:

- `wse hpc stencil`'s `predicted_flops_per_s` was one PE's flops over the run's seconds:
  the same 2.434e8 FLOP/s on an 8 x 8 and a 32 x 32 grid, "0.000 TFLOP/s" beside 5.1
  Gcell/s for Jacobi; now the grid's flops (every PE's column) over the predicted seconds.
- Detours around dead PEs (`--defect-seed`) never reached the 25-point, allreduce or
  shallow-water predictions, and no report said how they were priced (the wafer's
  `detour_hops` counted the whole wafer, not the grid's links).
- Every report listed the fitted constants at the presets' priors (dsd_issue 3,
  task_activation 10, router_switch 0) while it priced the calibration's values.
- `wse hpc md --precision fp64` printed the fp32 program's figure as if it were fp64's,
  with no word in the report.
- The stencil report's `traffic` said 0 words and 0 word-hops beside 80 words a link.

Oracles: flops counted by hand from the kernels' published op counts; the detours' extra
hops counted by hand from the remapped wafer's link hops (NumPy); the fitted constants
read back from each report's own priced mechanism cycles; the traffic from the halo's
words by hand.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import jax
import numpy as np
import pytest
from wse_core import PRESETS
from wse_core.cost.mechanisms import CONSTANTS
from wse_hpc.stencil.runs import StencilConfig, run_stencil

WSE2 = PRESETS["wse2"]
FITTED = [k for k, c in CONSTANTS.items() if c.basis == "fitted"]


def _stencil(kind, grid, steps, **kw):
    cfg = StencilConfig(kind=kind, grid=grid, spec=WSE2, steps=steps, chunks=1, **kw)
    return run_stencil(cfg).report


# --- 1. the grid's FLOP/s ------------------------------------------------------------------
# Jacquelin et al.'s 25-point step: 17 FMUL, 17 FADD, 8 FMA (2 flop), 1 FSUB per cell.
WAVE_FLOP_PER_CELL = 17 + 17 + 2 * 8 + 1
JACOBI_FLOP_PER_CELL = 6 + 4  # kernels.jacobi: 6 adds and 4 multiplies per cell


@pytest.mark.parametrize(
    ("kind", "grid", "per_cell"),
    [
        ("wave25", (8, 8, 16), WAVE_FLOP_PER_CELL),
        ("wave25", (32, 32, 16), WAVE_FLOP_PER_CELL),
        ("jacobi", (16, 16, 8), JACOBI_FLOP_PER_CELL),
    ],
)
def test_flops_per_s_is_the_whole_grids(kind, grid, per_cell):
    steps = 2
    r = _stencil(kind, grid, steps)
    cells = math.prod(grid)
    assert r.extra["predicted_flops_per_s"] == pytest.approx(
        per_cell * cells * steps / r.predicted_s, rel=1e-12
    )
    gcells = r.extra["predicted_gcells_per_s"]
    assert r.extra["predicted_flops_per_s"] == pytest.approx(gcells * 1e9 * per_cell, rel=1e-12)
    assert "flops" in r.assumptions


# --- 2. detours around dead PEs ------------------------------------------------------------
SEED, SIDE = 3, 64  # seed 3 leaves detours within wse2's first 64 x 64 PEs (none in 32 x 32)


def _links(report_wafer_remap, rows, cols):
    """Extra physical hops of each N-S and E-W logical link of the grid (hand count)."""
    ns = report_wafer_remap.link_hops(0)[: rows - 1, :cols] - 1
    ew = report_wafer_remap.link_hops(1)[:rows, : cols - 1] - 1
    return ns, ew


def _remap(seed):
    from wse_core.hw.wafer import build_wafer

    w = build_wafer(WSE2, grid=(SIDE, SIDE), mesh_shape=(1, 1), devices=jax.devices()[:1],
                    defect_seed=seed)  # fmt: skip
    return w.remap


def _seconds(hops: float) -> float:
    return hops * WSE2.hop_latency_cycles / WSE2.clock_hz


def test_jacobi_pays_each_halo_shifts_longest_detour():
    steps, grid = 2, (SIDE, SIDE, 4)
    plain = _stencil("jacobi", grid, steps)
    dead = _stencil("jacobi", grid, steps, defect_seed=SEED)
    ns, ew = _links(_remap(SEED), SIDE, SIDE)
    assert ns.max() > 0 and ew.max() > 0  # the seed puts detours on this grid
    per_sweep = 2 * ns.max() + 2 * ew.max()  # N and S shifts, then W and E, in series
    assert dead.predicted_s - plain.predicted_s == pytest.approx(
        _seconds(steps * per_sweep), rel=1e-9
    )
    assert dead.extra["grid_detour_hops"]["ns_total"] == int(ns.sum())
    assert "extra hops" in dead.assumptions["detours"]


def test_wave25_pays_its_slowest_r_link_chain_per_block():
    steps, grid, block_z = 2, (SIDE, SIDE, 16), 8  # two Z blocks a step
    plain = _stencil("wave25", grid, steps, block_z=block_z)
    dead = _stencil("wave25", grid, steps, block_z=block_z, defect_seed=SEED)
    ns, ew = _links(_remap(SEED), SIDE, SIDE)
    chains = [ns[i : i + 4].sum(axis=0).max() for i in range(ns.shape[0] - 3)]
    chains += [ew[:, i : i + 4].sum(axis=1).max() for i in range(ew.shape[1] - 3)]
    per_block = max(chains)
    assert per_block > 0
    extra = steps * (16 // block_z) * per_block
    assert dead.predicted_s - plain.predicted_s == pytest.approx(_seconds(extra), rel=1e-9)


def _placed(seed):
    from wse_hpc.stencil.placement import grid_wafer
    from wse_hpc.stencil.problems import place_jacobi

    shape = (SIDE, SIDE, 4)
    wafer = grid_wafer(WSE2, shape, mesh_shape=(1, 1), defect_seed=seed)
    return place_jacobi(wafer, shape, "fp32", "dirichlet")


def test_an_allreduce_pays_the_detours_of_its_slowest_path():
    from wse_hpc.stencil.perf import allreduce_work

    ns, ew = _links(_remap(SEED), SIDE, SIDE)
    mr = mc = SIDE // 2 - 1  # the centre PE (allreduce_2d: ceil(p / 2) - 1 from each end)

    def along(line, a, b):  # extra hops between PEs a and b of a line of links
        return int(line[min(a, b) : max(a, b)].sum())

    rows = max(along(ew[r], c, mc) for r in range(SIDE) for c in range(SIDE))
    column = max(along(ns[:, mc], r, mr) for r in range(SIDE))
    flood = max(along(ns[:, mc], mr, r) + along(ew[r], mc, c)
                for r in range(SIDE) for c in range(SIDE))  # fmt: skip
    extra = (
        allreduce_work(_placed(SEED), 2).latency_hops
        - allreduce_work(_placed(None), 2).latency_hops
    )
    assert extra == rows + column + flood > 0


def test_swe_pays_each_exchanges_slowest_shift():
    from wse_hpc.fields.grid import traced_program
    from wse_hpc.fields.swe import SweConfig, run_swe

    steps = 1
    plain = run_swe(WSE2, SweConfig(n=SIDE, steps=steps)).report
    dead = run_swe(WSE2, SweConfig(n=SIDE, steps=steps, defect_seed=SEED)).report
    ns, ew = _links(_remap(SEED), SIDE, SIDE)

    # both axes periodic, folded on the mesh (hunt 70): each ring cut in two, the second half
    # reversed, the two laid alternately, so ring neighbours sit 1-2 links apart; an exchange
    # waits for the most extra hops between ring neighbours on any line (hunt 73: was twice
    # the axis' longest link, a lone detour paid on both links of a pair)
    def slowest_pair(extra):  # extra (n - 1, lines): links along the ring's axis
        n = extra.shape[0] + 1
        first, second = list(range(-(-n // 2))), list(range(-(-n // 2), n))[::-1]
        order = [p for q in zip(first, second + [None], strict=False) for p in q if p is not None]
        place = {pe: i for i, pe in enumerate(order)}
        pairs = [sorted((place[i], place[(i + 1) % n])) for i in range(n)]
        return max(extra[a:b, c].sum() for a, b in pairs for c in range(extra.shape[1]))

    longest = {d: slowest_pair(ns if d in "NS" else ew.T) for d in "NSEW"}
    shifts = [d for _, d, _ in _swe_program(traced_program).shifts]
    extra = sum(max(longest[d] for d in shifts[i : i + 4]) for i in range(0, len(shifts), 4))
    assert extra > 0
    assert dead.predicted_s - plain.predicted_s == pytest.approx(_seconds(steps * extra), rel=1e-9)
    assert "detours" in dead.assumptions and "detours" in plain.assumptions


def _swe_program(traced_program):
    """The shallow-water step's recorded program (its shifts, in order)."""
    from wse_hpc.fields.grid import field_grid
    from wse_hpc.fields.swe import shallow_water, swe_state

    grid = field_grid(WSE2, (SIDE, SIDE, 1), periodic=(True, True, True), mesh_shape=(1, 1))
    zero = np.zeros((SIDE, SIDE, 1))
    s0 = swe_state(grid, zero + 1.0, zero, zero)
    return traced_program(shallow_water(grid, g=9.81, dt=1e-3), s0)


# --- 3. the fitted constants listed at the values in force ------------------------------------
def priced_constants(report) -> dict[str, float]:
    """Each fitted constant as the report's own priced cycles give it back: a leaf's
    mechanism cycles over its counted instructions, activations or switches."""
    per = {"dsd_issue_cycles": ("dsd_issue", "instructions"),
           "task_activation_cycles": ("task_activation", "task_activations"),
           "router_switch_cycles": ("router_switch", "router_switches")}  # fmt: skip
    timed = [node for _, node in report.predicted.rows() if node.cost is not None]
    out: dict[str, float] = {}
    for node, (phase, _) in zip(timed, report.phases.leaves(), strict=True):
        for key, (mech, count) in per.items():
            n = getattr(phase.work, count)
            if n and key not in out:
                out[key] = node.cost.mechanisms[mech] / n
    return out


def listed_value(report, key: str) -> float:
    return float(re.match(r"[-+0-9.e]+", report.assumptions[key]).group())


def check_fitted_listed(report) -> None:
    """The listed value of every fitted constant is the calibration's, the one each priced
    mechanism used (6 significant digits are printed: rel 1e-5), and it says it is fitted."""
    for key in FITTED:
        in_force = report.calibration.values[key]
        assert listed_value(report, key) == pytest.approx(in_force, rel=1e-5), key
        assert report.assumptions[key].split(":")[0].find("fitted on") > 0, key
    for key, value in priced_constants(report).items():
        assert listed_value(report, key) == pytest.approx(value, rel=1e-5), key


def _md_report(dtype="float32"):
    from wse_core.hw.wafer import build_wafer
    from wse_hpc.md.eam import EamPlan
    from wse_hpc.md.perf import Lists, predict
    from wse_hpc.md.zhou04 import zhou04

    wafer = build_wafer(WSE2, grid=(7, 7), mesh_shape=(1, 1), devices=jax.devices()[:1])
    plan = EamPlan(1, 1, (12.0, 12.0, 12.0), dtype, 1.0, (1, 1, 1, 4), 0)
    with jax.enable_x64(dtype == "float64"):  # an fp64 run's words are traced in fp64
        return predict(WSE2, wafer, zhou04(["Cu"], knots=100), plan, lists=Lists(10, 4))


def _tlrmvm_report():
    from wse_hpc.tlrmvm import compress
    from wse_hpc.tlrmvm.engine import TlrEngine
    from wse_hpc.tlrmvm.testing import smooth_kernel

    op = compress(smooth_kernel(70, 53), nb=12, threshold=1e-3)
    return TlrEngine.build(op, PRESETS["small"], layout="banded").report()


def _cfd_report():
    from wse_hpc.fields.runs import CfdConfig, run_cfd

    return run_cfd(CfdConfig(case="cavity", grid=(8, 8, 1), spec=PRESETS["tiny"], steps=2)).report


REPORTS = {
    "stencil wave25": lambda: _stencil("wave25", (8, 8, 16), 2),
    "stencil jacobi": lambda: _stencil("jacobi", (8, 8, 8), 2),
    "swe": lambda: _swe_report(),
    "cfd": _cfd_report,
    "md": _md_report,
    "tlrmvm": _tlrmvm_report,
}


def _swe_report():
    from wse_hpc.fields.swe import SweConfig, run_swe

    return run_swe(PRESETS["small"], SweConfig(n=8, steps=2)).report


@functools.cache
def _report(name: str):
    """`REPORTS[name]()`, built once: reports are frozen, and the field reports' two tests
    read the same run."""
    return REPORTS[name]()


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_every_report_lists_the_fitted_constants_it_priced(name):
    report = _report(name)
    check_fitted_listed(report)
    assert priced_constants(report)  # each report prices at least one fitted constant


@pytest.mark.parametrize("name", ["swe", "cfd"])
def test_field_reports_say_how_detours_are_priced(name):
    # the CFD report had no halo / detour lines while its step priced them (fields/perf.py)
    report = _report(name)
    assert "dead PEs' detours priced" in report.assumptions["detours"]
    assert "halo" in report.assumptions


# --- 4. md --precision fp64: the fp32 program's figure, said so -------------------------------
def test_md_fp64_figure_is_the_fp32_programs_and_says_so():
    single, double = _md_report("float32"), _md_report("float64")
    assert double.predicted_s == single.predicted_s  # the fp32 program, exactly
    assert double.phases == single.phases  # its instructions and fp32 words priced
    assert double.extra["wafer_precision"] == "fp32" and double.extra["run_precision"] == "fp64"
    assert "not an fp64 wafer figure" in double.assumptions["md.precision"]
    assert "host emulator only" in double.assumptions["md.precision"]
    assert single.assumptions["md.precision"].startswith("fp32")
    # what the emulated fp64 run moved is still reported in its dtype (hunt 62)
    assert double.extra["words_per_step"] == 2 * single.extra["words_per_step"]


# --- 5. the stencil traffic summary ---------------------------------------------------------
def test_stencil_traffic_counts_the_halo_words():
    steps, (nx, ny, nz) = 10, (16, 16, 8)
    t = _stencil("jacobi", (nx, ny, nz), steps).traffic
    # every PE with a neighbour that way sends its nz-word column one hop, in each of 4
    # directions every sweep (hunt 82: the edge lines, which send nothing, were counted)
    assert t.links == {d: nz * steps for d in "NSWE"}
    senders = 2 * (nx - 1) * ny + 2 * nx * (ny - 1)
    assert t.words == senders * nz * steps == t.word_hops  # one hop each, no detour
    assert t.max_words_per_pe == sum(t.links.values()) == 4 * nz * steps
    assert t.count == 4 * steps


def test_wafer_plan_changes_only_the_dtype():
    from wse_hpc.md.eam import EamPlan
    from wse_hpc.md.perf import wafer_plan

    plan = EamPlan(1, 2, (12.0, 12.0, 12.0), "float64", 1.0, (1, 1, 1, 4), 3)
    assert wafer_plan(plan) == dataclasses.replace(plan, dtype="float32")
    single = dataclasses.replace(plan, dtype="float32")
    assert wafer_plan(single) is single
