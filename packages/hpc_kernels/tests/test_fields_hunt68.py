"""The CFD run's prediction (`wse_hpc.fields.runs.run_cfd(...).report`) against its per-step
price times the steps. Before hunt 68 the run was priced `repeat=max(steps, 1)`: `wse hpc cfd
--steps 0` predicted 3.686 µs "for the same run" of no step (and its energy), where `wse hpc
stencil --steps 0` predicted 0. Building the case and writing step files are host work, priced
for no step count, so a run of no step is 0 s; the per-step price stays in
`extra["predicted_s_per_step"]`. The oracle prices the case's step program directly
(`program_phases` at the run's measured CG iterations), as `test_fields_perf` does."""

from __future__ import annotations

import pytest
from wse_core import PRESETS, RunReport
from wse_hpc.fields.cavity import cavity_case
from wse_hpc.fields.convection import RbCase, rayleigh_benard
from wse_hpc.fields.perf import program_phases
from wse_hpc.fields.runs import CfdConfig, run_cfd

SPEC, GRID = PRESETS["wse2"], (16, 8, 1)  # a system's wafer: its energy is priced too


def _step_price(case: str, cg_iterations: float) -> float:
    """One step of `case` on GRID priced from its program, as `run_cfd` builds the case."""
    if case == "rayleigh-benard":
        rb = RbCase(ra=1e4, pr=1.0, aspect=2.0, dt=None, amplitude=1e-2, mesh_shape=None)
        grid, _, fns, state = rayleigh_benard(SPEC, GRID, rb)
    else:
        grid, _, fns, state = cavity_case(SPEC, GRID, re=100.0, dt=None, time_scheme="euler")
    phases = program_phases(grid, fns.step_fn, state, repeats={"cg_iteration": cg_iterations})
    return RunReport.build("step", SPEC, phases).predicted_s


def _report(case: str, steps: int) -> RunReport:
    return run_cfd(CfdConfig(case=case, grid=GRID, spec=SPEC, steps=steps)).report


@pytest.mark.parametrize("case", ["rayleigh-benard", "cavity"])
def test_a_run_of_no_step_is_predicted_0_s_and_keeps_its_step_price(case):
    report = _report(case, 0)
    assert report.extra["steps"] == 0 and report.extra["cg_iterations_per_step"] == 0
    assert report.predicted_s == 0.0 and report.energy_j == 0.0  # was one step's, 3.686 µs
    assert report.extra["predicted_s_per_step"] == pytest.approx(_step_price(case, 0), rel=1e-12)
    assert report.extra["predicted_s_per_step"] > 0


@pytest.mark.parametrize("steps", [1, 3])
def test_a_run_is_its_step_price_times_its_steps(steps):
    report = _report("rayleigh-benard", steps)
    its = report.extra["cg_iterations_per_step"]
    assert its > 0  # the pressure solve ran
    price = _step_price("rayleigh-benard", its)
    assert report.extra["predicted_s_per_step"] == pytest.approx(price, rel=1e-12)
    assert report.predicted_s == pytest.approx(steps * price, rel=1e-12)


def test_a_shallow_water_run_is_its_step_price_times_its_steps():
    """`wse hpc swe --steps 0` priced one step too (4.48 µs, 0.103 J in its JSON)."""
    from wse_hpc.fields.swe import SweConfig, run_swe

    none, two = (run_swe(SPEC, SweConfig(n=8, steps=k)).report for k in (0, 2))
    one = two.extra["predicted_s_per_step"]  # the same step program at any count
    assert none.extra["predicted_s_per_step"] == pytest.approx(one, rel=1e-12)
    assert two.predicted_s == pytest.approx(2 * one, rel=1e-12) and one > 0
    assert none.predicted_s == 0.0 and none.energy_j == 0.0 and two.energy_j > 0
