"""The MD step's prediction, counted by hand on a tiny plan, and moved by the plan it prices
(window, candidates, placement, rebuild cadence) through the same `EamPlan`."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import fabric, preset
from wse_core.cost.calibration import Calibration
from wse_core.cost.perf import PerfModel
from wse_core.hw.traffic import Traffic
from wse_core.hw.wafer import build_wafer
from wse_hpc.md.eam import EamPlan, eam, geometry
from wse_hpc.md.integrate import nve
from wse_hpc.md.mapping import NFIELDS
from wse_hpc.md.neighbours import neighbour_fns
from wse_hpc.md.perf import fabric_counts, fold, predict, step_phases
from wse_hpc.md.state import Atoms
from wse_hpc.md.zhou04 import zhou04

POT = zhou04(["Cu"], knots=100)
BOX = (12.0, 12.0, 12.0)  # A: every side over twice the 5.72 A cutoff
# a +-1 x +-1 window; one candidate allowed per row offset, M = 4 candidates in all
PLAN = EamPlan(1, 1, BOX, "float32", 1.0, (1, 1, 1, 4), 0)
EXACT = Calibration()  # no fitted constant: the spec's own values


def _wafer(grid=(5, 5)):
    return build_wafer(preset("wse2"), grid=grid, mesh_shape=(1, 1), devices=jax.devices()[:1])


def _leaf(phases, name):
    return next(p for p, _ in phases.leaves() if p.name == name)


def test_density_phase_counted_by_hand():
    """WSE-2, fp32, vectors of M = 4 candidates, 3 issue cycles per instruction: sub, add,
    move, scale 2-wide; mul, fmac, convert, max, shift 1-wide; an indexed load (gather) one
    element per cycle; no square root, no division; 10 cycles per task activation."""
    w = _wafer()
    phases = step_phases(w, POT, PLAN, rebuild_every=10)
    density = _leaf(phases, "density").work
    assert not any(op.kind in ("sqrt", "div") for op in density.ops)
    two, one = 3 + 2, 3 + 4  # one instruction over 4 elements 2-wide, 1-wide
    # geometry: 6 sub, 11 mul (3 minimum image, r^2, r, 6 Newton), 5 convert, 9 fmac (3
    # minimum image, 2 r^2, knot, 3 Newton), 1 move, 3 max, 1 shift, 1 scale, 3 gathers
    geometry_cycles = 6 * two + 11 * one + 5 * one + 9 * one + two + 3 * one + one + two
    geometry_cycles += 3 * one
    rho_cycles = 4 * one + 3 * one + two + two  # 4 coefficients, Horner, mask, sum
    slope_cycles = 3 * two + 2 * one
    # tasks: the phase and each fabric op received (multicast E, W; one march S, N)
    tasks = 10 * (1 + 4)
    cost = PerfModel(preset("wse2"), EXACT).cost(density)
    assert cost.compute_cycles == geometry_cycles + rho_cycles + slope_cycles + tasks == 402
    # the positions' window: X stage 1 PE E and W of 3 words, Y stage 1 marching step N
    # and S of the 3-PE row windows (9 words); the fold puts E + W on each physical link;
    # the core takes every word off its ramp
    assert dict(density.links) == {"E": 6.0, "W": 6.0, "N": 18.0, "S": 18.0, "ramp": 24.0}
    assert cost.fabric_cycles == 24.0  # 4-byte words, 4 bytes per link per cycle
    assert _leaf(phases, "force").work.links["N"] == 6.0  # F': 1 word per PE


@pytest.mark.parametrize(
    "wafer, ports, per_pair", [("wse2", None, 70.0), ("wse3", None, 65.5), ("wse3", 2, 57.75)]
)
def test_one_pair_counted_by_hand(wafer, ports, per_pair):
    """What one more candidate costs a step (density and force phases), element by
    element, without issue overheads (they do not grow with M):

    geometry, once:  6 sub, 11 mul, 5 convert, 9 fmac, 1 move, 3 max, 1 shift, 1 scale,
                     3 gathers
    density + slope: 4 gathers, 5 fmac (Horner 3, slope 2), 1 move, 1 add, 3 scale
    force:           5 gathers, 10 fmac, 3 mul, 4 scale, 1 sub, 2 add, 2 move

    WSE-2 fp32 widths: sub, add, move, scale 2; mul, fmac, convert, max, shift 1;
    WSE-3's SDK table: sub, add, move, scale, convert, max, shift 4; mul, fmac 1; but each
    instruction's own ports bound it: 4 fp32 results a cycle are 16 B for an 8 B write
    port (and two operands 32 B for a 16 B read port): 2 a cycle, unless the ports are
    twice as wide (`ports=2`: what the SDK's table leaves open). A gather is 1."""
    spec = preset(wafer)
    if ports:
        spec = spec.replace(sram_read_bytes_per_cycle=32.0, sram_write_bytes_per_cycle=16.0)
    w = build_wafer(spec, grid=(5, 5), mesh_shape=(1, 1), devices=jax.devices()[:1])
    model = PerfModel(spec, EXACT)

    def pair_phases(m):
        plan = dataclasses.replace(PLAN, caps=(1, 1, 1, m))
        ph = step_phases(w, POT, plan, rebuild_every=10)
        return sum(model.cost(_leaf(ph, n).work).compute_cycles for n in ("density", "force"))

    wide = 2.0 if wafer == "wse2" else 2.0 * (ports or 1)
    narrow = 1.0 if wafer == "wse2" else 2.0 * (ports or 1)  # convert, max, shift
    by_hand = (
        (6 + 1 + 1) / wide + 11 + (5 + 3 + 1) / narrow + 9 + 3  # geometry
        + 4 + 5 + (1 + 1 + 3) / wide  # density and slope
        + 5 + 10 + 3 + (4 + 1 + 2 + 2) / wide  # force
    )  # fmt: skip
    assert by_hand == per_pair
    assert pair_phases(128) - pair_phases(64) == 64 * per_pair


def test_integrate_phase_counted_by_hand():
    """Per atom, scalar instructions on each of 3 components (no DSD, no issue overhead):
    two half kicks and the drift (fmac with the PE's constants: no divide), the force store
    (move), the displacement check d = x - x_build (sub) and |d|^2 (fmac): 6 x 3; its
    running maximum (max): 1; one cycle each on WSE-2 and WSE-3 alike; and one task. No
    fabric: no reduction every step."""
    for name in ("wse2", "wse3"):
        phases = step_phases(_wafer(), POT, PLAN, rebuild_every=10)
        work = _leaf(phases, "integrate").work
        assert not work.ops and not work.links and work.scalar_instructions == 6 * 3 + 1
        cost = PerfModel(preset(name), EXACT).cost(work)
        assert cost.compute_cycles == 19 + 10 and cost.mechanisms["dsd_issue"] == 0
    # F(rho) and F'(rho): 23 scalar instructions per atom (7 fmac, 2 convert, 3 max, 2 sub,
    # 4 coefficient loads, 1 move, 4 scale)
    assert _leaf(phases, "embed").work.scalar_instructions == 23
    check = next((p, k) for p, k in phases.leaves() if p.name == "check")
    assert check[1] == pytest.approx(1 / 100) and check[0].work.latency_hops > 0


def test_fold_doubles_hops_and_shares_directions():
    t = Traffic("x", 10.0, 20.0, 4.0, 3.0, 2, {"E": 2.0, "W": 1.0, "S": 5.0})
    f = fold(t)
    assert dict(f.links) == {"E": 3.0, "W": 3.0, "N": 5.0, "S": 5.0, "ramp": 8.0}
    assert f.latency_hops == 6.0 and f.word_hops == 40.0 and f.words == 10.0


def test_parts_are_the_ledger_of_the_real_step():
    """The parts priced (every step: the two window multicasts and the displacement check;
    per rebuild: swaps and build) add up to what the real Verlet step records (its lax.cond
    traces the rebuild branch too)."""
    w = _wafer()
    counts = fabric_counts(w, POT, PLAN)
    lists = neighbour_fns(w, POT, PLAN)
    init_fn, step_fn = nve(eam(w, POT, PLAN), [63.5], 1.0, lists=lists)
    pr, pc = w.padded_shape
    atoms = jax.eval_shape(Atoms.of, jax.ShapeDtypeStruct((pr, pc, NFIELDS), jnp.float32))
    geo = jax.eval_shape(lambda: geometry(w))
    state = jax.eval_shape(init_fn, atoms, geo)
    key = jax.eval_shape(lambda: jax.random.key(0))
    whole = fabric.count(w, step_fn, state, geo, key)
    parts = sum(counts.values(), Traffic())
    assert dict(parts.links) == dict(whole.links)
    assert parts.words == whole.words


def test_the_plan_moves_the_prediction():
    """Through the same EamPlan: more candidates cost compute, a wider window costs link
    words, a rarer rebuild costs less, and each shows in the report."""
    w, spec = _wafer((7, 7)), preset("wse2")

    def report(plan, every=10.0):
        return predict(spec, w, POT, plan, rebuild_every=every)

    base = report(PLAN)
    more = report(dataclasses.replace(PLAN, caps=(1, 1, 1, 8)))
    wider = report(dataclasses.replace(PLAN, k_cols=2, caps=(2, 2, 2, 4)))
    rarer = report(PLAN, every=100.0)
    assert base.extra["candidates"] == 4 and more.extra["candidates"] == 8
    assert more.predicted_s > base.predicted_s
    assert base.predicted.leaf("density").seconds < more.predicted.leaf("density").seconds
    assert wider.extra["window"] == "3x5" and base.extra["window"] == "3x3"
    assert wider.extra["link_words_per_step"]["N"] > base.extra["link_words_per_step"]["N"]
    assert wider.predicted_s > base.predicted_s
    assert rarer.predicted_s < base.predicted_s
    assert base.units == "step" and "md.fold" in base.assumptions
    assert base.extra["timesteps_per_s"] == pytest.approx(1.0 / base.predicted_s)
    assert np.isfinite(base.to_dict()["predicted_s"])


def test_a_runs_report_prices_the_plan_it_ran():
    """`run_md(...).report`: the window, candidates, grid, SRAM and measured rebuild cadence
    of the run's own plan, priced again here from those alone (`predict`), with the measured
    wall time per step; built once (the same object on every read)."""
    import wse_hpc.md.perf as perf
    from wse_core import RunReport
    from wse_hpc.md.config import MdConfig
    from wse_hpc.md.lattice import crystal
    from wse_hpc.md.simulate import run_md

    pot = zhou04(["Cu"], knots=500)
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    cfg = MdConfig(steps=6, thermo_every=3, temperature_K=300.0, spec=preset("small"))
    res = run_md(s, pot, cfg)
    rep = res.report
    assert isinstance(rep, RunReport) and rep is res.report and res.potential is pot
    plan = res.plan
    assert plan.caps and rep.extra["candidates"] == plan.caps[-1]
    assert rep.extra["window"] == f"{2 * plan.k_rows + 1}x{2 * plan.k_cols + 1}"
    assert rep.extra["grid"] == f"{res.grid[0]}x{res.grid[1]}" and rep.wafer == "small"
    assert dict(rep.sram) == res.sram
    every = 6 / res.list_builds if res.list_builds else 6.0  # steps per list build, measured
    assert rep.extra["rebuild_every"] == max(every, 1.0)
    assert rep.measured_wall_s == pytest.approx(res.loop_wall_s / 6)
    again = perf.predict(preset("small"), res.wafer, pot, plan, rebuild_every=max(every, 1.0))
    assert rep.predicted_s == again.predicted_s and rep.phases == again.phases
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.steps = 0  # type: ignore[misc]
