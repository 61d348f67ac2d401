"""The MD step's prediction as the released PE program runs it (`wse_hpc.md.pe_program`),
counted by hand on a tiny plan per phase, per hit and per atom on WSE-2 and WSE-3, and moved
by the plan it prices (window, hits, placement, swap cadence) through the same `EamPlan`."""

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
from wse_hpc.md.perf import Lists, fabric_counts, fold, predict, step_phases
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
    """The published program (Cerebras's Tungsten EAM source, `pe_program`) on WSE-2, fp32,
    a 3 x 3 window (N_c = 8 candidates), N_h = 4 hits; 3 issue cycles per DSD, 1 cycle per
    scalar instruction, 10 per task activation (the spec's own values, nothing fitted).

    candidates: r0[d] - c[i][d], d = x, y, z: 3 DSDs of 8 at the payload's stride of 4
                words (bank rule: stride % 8 == 4 -> 1 a cycle): 3 (8 + 3) = 33
    hits, DSDs: r = r2 r^-1 (mul 1-wide), rho's two FMACs (1-wide), its sum (one
                accumulator: 1), rho' and phi' (2 mul, 2 fmac 1-wide; 2 scale 2-wide):
                (4 + 3) + 2 (4 + 3) + (4 + 3) + 2 (4 + 3) + 2 (4 + 3) + 2 (2 + 3) = 66
    scalar:     per candidate 3 fmac, compare, branch (5); per hit detect's 5 copies and
                its count (6), invsqrt with 2 Newton iterations (12), the spline
                coordinate (4), 5 coefficient words: 8 * 5 + 4 * (6 + 12 + 4 + 5) = 148
    tasks:      the phase and each fabric op received (multicast E, W; one march S, N)"""
    w = _wafer()
    phases = step_phases(w, POT, PLAN, rebuild_every=10, hits=4)
    density = _leaf(phases, "density").work
    assert not any(op.kind in ("sqrt", "div") for op in density.ops)
    cost = PerfModel(preset("wse2"), EXACT).cost(density)
    assert cost.mechanisms["scalar"] == 148
    assert cost.compute_cycles == 33 + 66 + 148 + 10 * (1 + 4) == 297
    # the positions' window: X stage 1 PE E and W of 3 words, Y stage 1 marching step N
    # and S of the 3-PE row windows (9 words); the fold puts E + W on each physical link;
    # the core takes every word off its ramp
    assert dict(density.links) == {"E": 6.0, "W": 6.0, "N": 18.0, "S": 18.0, "ramp": 24.0}
    assert cost.fabric_cycles == 24.0  # 4-byte words, 4 bytes per link per cycle
    force = _leaf(phases, "force").work
    assert force.links["N"] == 6.0  # F': 1 word per PE
    # f <- phi' (move 2-wide), f <-+ rho' F'_i, f <- f / r (1-wide), the 3 force sums (one
    # accumulator each); per hit the neighbour's F' by its slot (3 scalar), per atom 4
    by_hand = (2 + 3) + (4 + 3) + (4 + 3) + 3 * (4 + 3) + 4 * 3 + 4 + 10 * (1 + 4)
    assert PerfModel(preset("wse2"), EXACT).cost(force).compute_cycles == by_hand == 106


@pytest.mark.parametrize(
    "wafer, mul_width, ports, per_hit",
    [("wse2", 1, 1, 44.5), ("wse3", 1, 1, 44.5), ("wse3", 2, 1, 40.5), ("wse3", 2, 2, 39.25)],
)
def test_one_pair_counted_by_hand(wafer, mul_width, ports, per_hit):
    """What one more neighbour within the cutoff costs a step (density and force phases),
    element by element, without issue overheads (they do not grow with N_h):

    DSDs:   mul (r), 2 fmac reading 3 vectors (rho), add into one accumulator (rho-bar),
            2 mul, 2 fmac, 2 scale (rho', phi'), move, fmac, mul (f), 3 fmac into one
            accumulator each (the force sums)
    scalar: 6 (detect's copies and count) + 12 (invsqrt) + 4 (spline coordinate) + 5
            (coefficient words) + 3 (the neighbour's F' by slot) = 30, 1 cycle each

    Widths: the SDK's table (WSE-2 / WSE-3: fp32 add, sub, move, scale 2 / 4), fp32 mul and
    FMAC `mul_width` (not in the table: 1, the WSE-2 simulator's figure, or 2), each
    instruction bounded by its own ports: reads 16 B (3 operands: 4/3 a cycle; 2: 2; 1: 4)
    and writes 8 B (2 a cycle), or twice both (`ports=2`, what WSE-3 leaves open); an
    accumulator takes 1 a cycle."""
    spec = preset(wafer).replace(
        fp32_mul_width=float(mul_width),
        sram_read_bytes_per_cycle=16.0 * ports,
        sram_write_bytes_per_cycle=8.0 * ports,
    )
    w = build_wafer(spec, grid=(5, 5), mesh_shape=(1, 1), devices=jax.devices()[:1])
    model = PerfModel(spec, EXACT)

    def pair_phases(n):
        plan = dataclasses.replace(PLAN, caps=(1, 1, 1, 128))
        ph = step_phases(w, POT, plan, rebuild_every=10, hits=n)
        return sum(model.cost(_leaf(ph, k).work).compute_cycles for k in ("density", "force"))

    table = 2.0 if wafer == "wse2" else 4.0  # fp32 add, sub, move, scale
    write = 2.0 * ports  # results a cycle through the write port
    mul = min(mul_width, write)  # two operands read: 2 (4 with ports=2) a cycle
    fmac3 = min(mul_width, 4.0 * ports / 3.0, write)  # three operands read
    unary = min(table, write)  # move, scale
    by_hand = (
        1 / mul + 2 / fmac3 + 1  # r, rho, rho-bar
        + 2 / mul + 2 / mul + 2 / unary  # rho', phi'
        + 1 / unary + 1 / mul + 1 / mul + 3  # f, f / r, the force sums
        + 30  # scalar
    )  # fmt: skip
    assert by_hand == per_hit
    assert pair_phases(128) - pair_phases(64) == pytest.approx(64 * per_hit)


def test_integrate_and_embed_counted_by_hand():
    """Per atom, scalar instructions (no DSD, no issue overhead): the drift r <-+ v dt (3
    fmac), the kick f * -1/m (3 mul) and v <-+ f dt (3 fmac): 9; F'(rho-bar) from one spline
    segment: the coordinate (mul, 2 convert, sub), 2 coefficient loads, (b + 2 x a) / drho
    (3 mul, add), rho-bar's reset (move): 11; one cycle each on WSE-2 and WSE-3 alike; one
    task each. No fabric, no displacement check, no reduction: the published step filters
    its window every step."""
    phases = step_phases(_wafer(), POT, PLAN, rebuild_every=10, hits=4)
    for name in ("wse2", "wse3"):
        model = PerfModel(preset(name), EXACT)
        work = _leaf(phases, "integrate").work
        assert not work.ops and not work.links and work.scalar_instructions == 9
        cost = model.cost(work)
        assert cost.compute_cycles == 9 + 10 and cost.mechanisms["dsd_issue"] == 0
        assert model.cost(_leaf(phases, "embed").work).compute_cycles == 11 + 10
    names = [p.name for p, _ in phases.leaves()]
    assert names == ["integrate", "density", "embed", "force", "swaps"]
    assert next(k for p, k in phases.leaves() if p.name == "swaps") == pytest.approx(1 / 10)


def test_max_hits_is_the_fcc_shell_count():
    """N_h of a perfect fcc Cu crystal (a = 3.615 A): the shells at a / sqrt 2, a,
    a sqrt(3/2), a sqrt 2 and a sqrt(5/2) (2.56, 3.62, 4.43, 5.11, 5.72 A) hold 12, 6, 24,
    12 and 24 atoms (Zhou's Cu cutoff, 5.7158 A, falls on the fifth shell: left out)."""
    from wse_hpc.md.lattice import crystal
    from wse_hpc.md.neighbour_plan import reach_pairs
    from wse_hpc.md.samples import Sample, max_hits

    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    pairs = reach_pairs(s.positions_A, s.box_A, 6.0)
    sample = Sample("Cu", "cube", s, pairs, None, (1, 1))
    assert max_hits(sample, 5.8) == 12 + 6 + 24 + 12 + 24
    assert max_hits(sample, 5.5) == 12 + 6 + 24 + 12
    assert max_hits(sample, 5.0) == 12 + 6 + 24
    assert max_hits(sample, 3.0) == 12


def test_fold_doubles_hops_and_shares_directions():
    t = Traffic("x", 10.0, 20.0, 4.0, 3.0, 2, {"E": 2.0, "W": 1.0, "S": 5.0})
    f = fold(t)
    assert dict(f.links) == {"E": 3.0, "W": 3.0, "N": 5.0, "S": 5.0, "ramp": 8.0}
    assert f.latency_hops == 6.0 and f.word_hops == 40.0 and f.words == 10.0


def test_parts_are_the_ledger_of_the_real_step():
    """The parts traced (every step: the two window multicasts; per rebuild: swaps and the
    emulator's list build, which the published step does not run) add up to what the real
    Verlet step records (its lax.cond
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
    """Through the same EamPlan: more hits cost compute, a wider window costs link words
    and candidates to filter, rarer swaps cost less, and each shows in the report."""
    w, spec = _wafer((7, 7)), preset("wse2")

    def report(plan, every=10.0, hits=4):
        return predict(spec, w, POT, plan, lists=Lists(every, hits))

    base = report(PLAN)
    more = report(PLAN, hits=8)
    wider = report(dataclasses.replace(PLAN, k_cols=2, caps=(2, 2, 2, 4)))
    rarer = report(PLAN, every=100.0)
    assert base.extra["candidates"] == 8 and wider.extra["candidates"] == 14
    assert base.extra["hits"] == 4 and more.extra["hits"] == 8
    assert more.predicted_s > base.predicted_s
    assert base.predicted.leaf("density").seconds < more.predicted.leaf("density").seconds
    assert wider.extra["window"] == "3x5" and base.extra["window"] == "3x3"
    assert wider.extra["link_words_per_step"]["N"] > base.extra["link_words_per_step"]["N"]
    assert wider.predicted_s > base.predicted_s
    assert rarer.predicted_s < base.predicted_s
    assert base.units == "step" and "md.fold" in base.assumptions
    assert "md.hits" in report(PLAN, hits=None).assumptions  # N_h defaulted to M
    assert base.extra["timesteps_per_s"] == pytest.approx(1.0 / base.predicted_s)
    assert np.isfinite(base.to_dict()["predicted_s"])
    with pytest.raises(ValueError, match="hits"):
        report(PLAN, hits=100)


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
    assert plan.caps and rep.extra["hits"] == plan.caps[-1]
    assert rep.extra["candidates"] == plan.window_pes - 1
    assert rep.extra["window"] == f"{2 * plan.k_rows + 1}x{2 * plan.k_cols + 1}"
    assert rep.extra["grid"] == f"{res.grid[0]}x{res.grid[1]}" and rep.wafer == "small"
    assert dict(rep.sram) == res.sram
    every = 6 / res.list_builds if res.list_builds else 6.0  # steps per list build, measured
    assert rep.extra["rebuild_every"] == max(every, 1.0)
    assert rep.measured_wall_s == pytest.approx(res.loop_wall_s / 6)
    again = perf.predict(preset("small"), res.wafer, pot, plan, lists=Lists(max(every, 1.0)))
    assert rep.predicted_s == again.predicted_s and rep.phases == again.phases
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.steps = 0  # type: ignore[misc]
