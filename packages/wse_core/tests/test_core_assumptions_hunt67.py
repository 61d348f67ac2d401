"""Hunt 67: every `RunReport`'s assumptions block listed the fitted constants at the presets'
priors (dsd_issue_cycles 3, task_activation_cycles 10, router_switch_cycles 0) while the
prediction priced the calibration's fitted values (11.49, 32.25, 302.3 on the rows in
force): a reader rerunning by hand from the list got another figure. Now each is listed at
the value the model priced, said to be fitted (on which rows, beside the prior); a held
assumption and an uncalibrated model list their own values.

Oracle: the value each report's own priced mechanism cycles give back (cycles over the
instructions, activations or switches counted), and the model's `rates`.
"""

from __future__ import annotations

import re

import pytest
from wse_core import preset
from wse_core.cost.assumptions import assume, assumed_spec, listed
from wse_core.cost.calibration import UNCALIBRATED
from wse_core.cost.mechanisms import CONSTANTS
from wse_core.cost.perf import Op, PerfModel, Phase, Work
from wse_core.cost.report import RunReport

FITTED = [k for k, c in CONSTANTS.items() if c.basis == "fitted"]
PRIORS = {"dsd_issue_cycles": 3.0, "task_activation_cycles": 10.0, "router_switch_cycles": 0.0}
STEP = Phase(
    "leaf",
    Work(ops=(Op("add", "fp32", 16, count=5),), task_activations=3.0, router_switches=2.0),
)


def _value(report: RunReport, key: str) -> float:
    return float(re.match(r"[-+0-9.e]+", report.assumptions[key]).group())


def _priced(report: RunReport) -> dict[str, float]:
    """The constants the one-leaf report's priced cycles give back."""
    (mech,) = [n.cost.mechanisms for _, n in report.predicted.rows() if n.cost is not None]
    return {
        "dsd_issue_cycles": mech["dsd_issue"] / 5,
        "task_activation_cycles": mech["task_activation"] / 3,
        "router_switch_cycles": mech["router_switch"] / 2,
    }


@pytest.mark.parametrize("name", ["wse2", "wse3"])
def test_fitted_constants_are_listed_at_the_values_priced(name):
    spec = preset(name)
    report = RunReport.build("t", spec, STEP)
    rates = PerfModel(spec).rates
    priced = _priced(report)
    assert set(FITTED) == set(priced)
    for key in FITTED:
        # six significant digits are printed
        assert _value(report, key) == pytest.approx(priced[key], rel=1e-5), key
        assert _value(report, key) == pytest.approx(getattr(rates, key), rel=1e-5), key
        assert _value(report, key) != PRIORS[key], key  # hunt 67 listed the prior
        # issue 41: a CS-3 prices its own DSD issue, fitted on WaferLLM's MeshGEMV rows
        cal = report.calibration
        own = key in cal.by_system.get(spec.system, {})
        rows = cal.system_fitted_on[key] if own else cal.fitted_on[key]
        assert f"(fitted on {rows}; prior {PRIORS[key]:g})" in report.assumptions[key]


def test_a_held_constant_is_listed_as_assumed():
    with assume(dsd_issue_cycles=20):
        report = RunReport.build("t", assumed_spec("wse2"), STEP)
    assert _priced(report)["dsd_issue_cycles"] == 20
    assert report.assumptions["dsd_issue_cycles"].startswith("20 (changed by --assume): ")
    # the other two are still the fit's (refitted under the held one)
    for key in ("task_activation_cycles", "router_switch_cycles"):
        assert _value(report, key) == pytest.approx(_priced(report)[key], rel=1e-5)


def test_an_uncalibrated_model_lists_the_specs_own_values():
    spec = preset("wse2")
    report = RunReport.build("t", spec, STEP, model=PerfModel(spec, UNCALIBRATED))
    for key in FITTED:
        assert _value(report, key) == _priced(report)[key] == PRIORS[key]
    assert listed(spec) == listed(spec, UNCALIBRATED)  # no calibration: the spec's values


def test_the_training_report_lists_what_it_priced():
    wse_models = pytest.importorskip("wse_models")
    from wse_systems.training.performance import predict_step

    model = wse_models.preset_config("gpt2-124m", dtype="bfloat16")
    report = predict_step(model, preset("wse3"), num_csx=1, batch_per_system=1, seq_len=512)
    rates = PerfModel(preset("wse3")).rates
    for key in FITTED:
        assert _value(report, key) == pytest.approx(getattr(rates, key), rel=1e-5), key
        assert "fitted on" in report.assumptions[key]
    timed = [n for _, n in report.predicted.rows() if n.cost is not None]
    pairs = zip(timed, report.phases.leaves(), strict=True)
    issued = [(n.cost.mechanisms["dsd_issue"], p.work.instructions) for n, (p, _) in pairs]
    cycles, count = next((c, i) for c, i in issued if i)
    assert _value(report, "dsd_issue_cycles") == pytest.approx(cycles / count, rel=1e-5)
