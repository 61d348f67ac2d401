"""Hunt 68 (predict4) hole 2: `wse hpc md --thermostat nose-hoover|langevin` was priced
exactly as NVE. Broken before:

- all three thermostats gave 129,853.1 timesteps/s with identical cycles by mechanism
  (4 x 4 x 4 Cu cells on wse3), although the emulated Nosé–Hoover step sums the kinetic
  energy over the PEs in each half step (`integrate._nose_hoover_fn`: `fabric.reduce`) and
  scales every velocity, and Langevin draws 3 uniform numbers per atom per step;
- no assumption of the report named the thermostat; `perf.predict` took none and
  `MdResult` did not carry the run's to its report.

Oracles: the NVE step priced without any thermostat phase (`step_phases` as before, and
the report's own seconds); each thermostat's extra seconds counted by hand: the
allreduce of one word priced alone by the same model (`allreduce_2d`, its hops counted by
hand on the grid), the scalar instructions per half step / per atom counted by hand from
the emulator's statements, at the calibration's scalar and task constants.
"""

from __future__ import annotations

import jax
import pytest
from wse_core import PRESETS
from wse_core.cost.collectives import allreduce_2d
from wse_core.cost.perf import PerfModel
from wse_core.hw.wafer import build_wafer
from wse_hpc.md.eam import EamPlan
from wse_hpc.md.integrate import Thermostat
from wse_hpc.md.perf import Lists, predict, step_phases
from wse_hpc.md.zhou04 import zhou04

WSE2 = PRESETS["wse2"]
POT = zhou04(["Cu"], knots=100)
PLAN = EamPlan(1, 1, (12.0, 12.0, 12.0), "float32", 1.0, (1, 1, 1, 4), 0)
NH = Thermostat("nose-hoover", 300.0, chain=1)  # one element: the hand count below (hunt 74)
LANGEVIN = Thermostat("langevin", 300.0)

# By hand from integrate._nose_hoover_fn, per half step on a PE: m v.v (mul, 2 fmac, mul);
# 2 KE = mvv2e sum (mul); xi's quarter step (sub, fmac); -dt/2 xi (mul); exp (x / ln 2,
# 2 converts, the reduction's fmac, 6 Horner fmacs, shift, add: 12); v *= s (3 mul);
# 2 KE *= s s (2 mul); eta (fmac); xi's second quarter step (sub, fmac)
NH_HALF_SCALAR = 4 + 1 + 2 + 1 + 12 + 3 + 2 + 1 + 2
# By hand from integrate._langevin_fn, per atom a step: 3 uniforms at xorshift32 (3 shifts,
# 3 xors) and the conversion (shift, convert, mul); per component u - 1/2 (sub) and two fmacs
LANGEVIN_SCALAR = 3 * (6 + 3) + 3 * 3


def _wafer(grid=(7, 7), defect_seed=None):
    return build_wafer(WSE2, grid=grid, mesh_shape=(1, 1), devices=jax.devices()[:1],
                       defect_seed=defect_seed)  # fmt: skip


def _report(wafer, thermostat=None):
    kw = {} if thermostat is None else {"thermostat": thermostat}
    return predict(WSE2, wafer, POT, PLAN, lists=Lists(10, 4), **kw)


def _s(cycles: float) -> float:
    return cycles / PerfModel(WSE2).rates.clock_hz


def test_nve_is_priced_as_before():
    """NVE (the default and an explicit "none") is the published step, no phase added."""
    w = _wafer()
    plain, none = _report(w), _report(w, Thermostat())
    before = PerfModel(WSE2).seconds(step_phases(w, POT, PLAN, rebuild_every=10, hits=4))
    assert plain.predicted_s == none.predicted_s == before
    assert plain.phases == none.phases
    assert {p.name for p, _ in plain.phases.leaves()} == {
        "integrate", "density", "embed", "force", "swaps"
    }  # fmt: skip
    assert plain.extra["thermostat"] == "none"
    assert plain.assumptions["md.thermostat"].startswith("none (NVE")


def test_nose_hoover_adds_two_allreduces_and_its_half_steps():
    w = _wafer()
    nve, nh = _report(w), _report(w, NH)
    model = PerfModel(WSE2)
    rates = model.rates
    one = allreduce_2d(rates, 7, 7, 1)
    # 7 PEs a line: 3 hops to the centre along a row, 3 along the centre column, 3 + 3 back
    assert one.latency_hops == 12
    half = NH_HALF_SCALAR * rates.scalar_instruction_cycles + rates.task_activation_cycles
    extra = 2 * model.seconds(one) + 2 * _s(half)
    assert NH_HALF_SCALAR == 28
    assert nh.predicted_s - nve.predicted_s == pytest.approx(extra, rel=1e-9)
    assert nh.predicted_s > nve.predicted_s
    got, base = nh.cycles_by_mechanism(), nve.cycles_by_mechanism()
    assert got["hop"] - base.get("hop", 0.0) == pytest.approx(
        2 * 12 * rates.hop_latency_cycles, rel=1e-12
    )
    assert got["scalar"] - base["scalar"] == pytest.approx(
        2 * 28 * rates.scalar_instruction_cycles, rel=1e-12
    )
    line = nh.assumptions["md.thermostat"]
    assert "nose-hoover" in line and "allreduce" in line and "28 scalar" in line
    assert nh.extra["thermostat"] == "nose-hoover"


def test_nose_hoover_sums_pay_the_grids_detours():
    """On a grid with dead PEs each sum also pays its slowest path's extra hops."""
    from wse_hpc.stencil.detours import rectangle_allreduce_detour_hops

    side = 64  # seed 3 leaves detours within wse2's first 64 x 64 PEs (hunt 67)
    w = _wafer((side, side), defect_seed=3)
    detour = rectangle_allreduce_detour_hops(w.remap, side, side)
    assert detour > 0
    nve, nh = _report(w), _report(w, NH)
    model = PerfModel(WSE2)
    one = allreduce_2d(model.rates, side, side, 1)
    half = (
        NH_HALF_SCALAR * model.rates.scalar_instruction_cycles + model.rates.task_activation_cycles
    )
    extra = 2 * (model.seconds(one) + _s(detour * model.rates.hop_latency_cycles)) + 2 * _s(half)
    assert nh.predicted_s - nve.predicted_s == pytest.approx(extra, rel=1e-9)


def test_langevin_adds_its_random_numbers_and_force_terms():
    from wse_hpc.md.thermostat_perf import UNIFORM

    w = _wafer()
    nve, lv = _report(w), _report(w, LANGEVIN)
    rates = PerfModel(WSE2).rates
    assert LANGEVIN_SCALAR == 36
    extra = _s(LANGEVIN_SCALAR * rates.scalar_instruction_cycles)
    assert lv.predicted_s - nve.predicted_s == pytest.approx(extra, rel=1e-9)
    # no fabric, no task of its own: only the scalar mechanism moves
    got, base = lv.cycles_by_mechanism(), nve.cycles_by_mechanism()
    assert {k: v - base.get(k, 0.0) for k, v in got.items() if v != base.get(k, 0.0)} == {
        "scalar": pytest.approx(36 * rates.scalar_instruction_cycles)
    }
    # the generator is an assumed constant, swept beside the figure: 9 .. 28 a number
    assert UNIFORM.basis == "assumed" and (min(UNIFORM.sweep), max(UNIFORM.sweep)) == (9, 28)
    slow = 1.0 / (nve.predicted_s + _s((3 * 28 + 9) * rates.scalar_instruction_cycles))
    line = lv.assumptions["md.thermostat"]
    assert "ASSUMED" in line and "swept 9..28" in line
    assert f"{1.0 / lv.predicted_s:.6g}..{slow:.6g} timesteps/s" in line


def test_a_runs_report_prices_its_thermostat():
    """`run_md(...).report` of a Nosé–Hoover run: the run's plan priced with the bath (the
    same figure `predict` gives with it), above the NVE figure of that plan by the hand
    count; the thermostat travels on the result."""
    from wse_hpc.md.config import MdConfig
    from wse_hpc.md.lattice import crystal
    from wse_hpc.md.simulate import run_md

    pot, small = zhou04(["Cu"], knots=500), PRESETS["small"]
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    cfg = MdConfig(steps=2, thermo_every=2, temperature_K=300.0, spec=small, thermostat=NH)
    res = run_md(s, pot, cfg)
    rep = res.report
    assert res.thermostat == NH and rep.extra["thermostat"] == "nose-hoover"
    every = max(2 / res.list_builds if res.list_builds else 2.0, 1.0)
    nve = predict(small, res.wafer, pot, res.plan, lists=Lists(every))
    model = PerfModel(small)
    rows, cols = res.grid
    half = 28 * model.rates.scalar_instruction_cycles + model.rates.task_activation_cycles
    one = model.seconds(allreduce_2d(model.rates, rows, cols, 1))
    extra = 2 * one + 2 * half / model.rates.clock_hz
    assert rep.predicted_s - nve.predicted_s == pytest.approx(extra, rel=1e-9)
