"""Issue 41 (fix85-ctrl): CS-3's `control_instruction_cycles` is fitted on WaferLLM's MeshGEMV
rows, whose only non-DSD instructions are a call's control flow (calls, returns, branches,
role tests, DSR loads). MD's scalar work (per-pair and per-atom steps) is a different
instruction class, `scalar_instruction_cycles`, assumed 1 on every system: an MD step on
WSE-3 prices the same whatever the control constant is, and moves with the scalar one.

Oracle: the same step priced twice with one constant changed (nothing else differs)."""

import jax
import pytest
from wse_core import preset
from wse_core.cost.assumptions import assume
from wse_core.cost.calibration import current
from wse_core.cost.perf import PerfModel
from wse_core.hw.wafer import build_wafer
from wse_hpc.md.eam import EamPlan
from wse_hpc.md.perf import Lists, predict
from wse_hpc.md.zhou04 import zhou04

POT = zhou04(["Cu"], knots=100)
PLAN = EamPlan(1, 1, (12.0, 12.0, 12.0), "float32", 1.0, (1, 1, 1, 4), 0)


def _step(spec):
    w = build_wafer(spec, grid=(7, 7), mesh_shape=(1, 1), devices=jax.devices()[:1])
    return predict(spec, w, POT, PLAN, lists=Lists(10.0, 4))


def test_md_on_wse3_does_not_pay_the_cs3_control_constant():
    wse3 = preset("wse3")
    fitted = current().by_system["CS-3"]["control_instruction_cycles"]
    assert 3.0 < fitted < 3.2  # the MeshGEMV rows' 3.09
    rates = PerfModel(wse3).rates
    assert rates.control_instruction_cycles == fitted and rates.scalar_instruction_cycles == 1.0
    at_fit = _step(wse3)
    with assume(control_instruction_cycles=1.0):  # held over the fit (a spec's 1.0 is the preset's)
        assert PerfModel(wse3).rates.control_instruction_cycles == 1.0
        at_one = _step(wse3)
    mech = at_fit.predicted.by_mechanism()
    assert mech["scalar"] > 0 and mech.get("control", 0.0) == 0.0
    assert at_fit.predicted_s == at_one.predicted_s  # identical, not merely close
    # the step does move with its own scalar constant (the comparison can fail)
    slower = _step(wse3.replace(scalar_instruction_cycles=fitted))
    assert slower.predicted_s > at_fit.predicted_s * 1.05
    assert slower.predicted.by_mechanism()["scalar"] == pytest.approx(mech["scalar"] * fitted)
