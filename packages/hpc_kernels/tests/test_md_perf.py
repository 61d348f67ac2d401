"""The MD step's prediction, counted by hand on a tiny plan, and moved by the plan it prices
(window, candidates, placement, rebuild cadence) through the same `EamPlan`."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import fabric, preset
from wse_core.calibration import Calibration
from wse_core.perf import PerfModel
from wse_core.traffic import Traffic
from wse_core.wafer import build_wafer
from wse_hpc.md.eam import EamPlan, eam, geometry
from wse_hpc.md.integrate import nve
from wse_hpc.md.mapping import NFIELDS
from wse_hpc.md.nlist import neighbour_fns
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
    move, scale 2-wide; mul, fmac, convert, max 1-wide; sqrt 10 cycles per element."""
    w = _wafer()
    phases = step_phases(w, POT, PLAN, rebuild_every=10)
    density = _leaf(phases, "density").work
    geometry_cycles = 5 * (3 + 2) + 4 * (3 + 4) + 5 * (3 + 4) + 6 * (3 + 4) + 1 * (3 + 2)
    geometry_cycles += 1 * (3 + 40) + 3 * (3 + 4)  # sqrt, the clamps
    rho_cycles = 8 * (3 + 2) + 3 * (3 + 4) + 1 * (3 + 2)  # fetch x, 4 coeffs, mask; Horner; sum
    slope_cycles = 3 * (3 + 2) + 3 * (3 + 2) + 2 * (3 + 4)
    cost = PerfModel(preset("wse2"), EXACT).cost(density)
    assert cost.compute_cycles == geometry_cycles + rho_cycles + slope_cycles == 309
    # the positions' window: X stage 1 PE E and W of 3 words, Y stage 1 marching step N
    # and S of the 3-PE row windows (9 words); the fold puts E + W on each physical link
    assert dict(density.links) == {"E": 6.0, "W": 6.0, "N": 18.0, "S": 18.0}
    assert cost.fabric_cycles == 18.0  # 4-byte words, 4 bytes per link per cycle
    assert _leaf(phases, "force").work.links["N"] == 6.0  # F': 1 word per PE


def test_integrate_phase_counted_by_hand():
    """WSE-2, fp32, 3-element vectors, 3 issue cycles each: two half kicks (scale, multiply
    by the precomputed 1/m, add: no divide), drift (fmac), force store (move), |x - x_b|^2
    (sub, fmac) and one compare (sub, 1 element); 2-wide: 2 cycles, 1-wide: 3."""
    phases = step_phases(_wafer(), POT, PLAN, rebuild_every=10)
    work = _leaf(phases, "integrate").work
    assert not any(op.kind == "div" for op in work.ops)
    kicks = 2 * (3 + 2) + 2 * (3 + 3) + 2 * (3 + 2)
    rest = (3 + 3) + (3 + 2) + (3 + 2) + (3 + 3) + (3 + 1)
    cost = PerfModel(preset("wse2"), EXACT).cost(work)
    assert cost.compute_cycles == kicks + rest == 58


def test_fold_doubles_hops_and_shares_directions():
    t = Traffic("x", 10.0, 20.0, 4.0, 3.0, 2, {"E": 2.0, "W": 1.0, "S": 5.0})
    f = fold(t)
    assert dict(f.links) == {"E": 3.0, "W": 3.0, "N": 5.0, "S": 5.0}
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
