"""`RunReport` is frozen: no field, and no entry of its mappings, can be set after `build`;
figures derived from the predicted time are computed inside `build` (checked against a hand
count of cycles), and the JSON a report writes round-trips unchanged."""

import dataclasses
import json

import pytest
from wse_core import Op, PerfModel, Phase, RunReport, Timing, Work, preset, serial
from wse_core.cost.calibration import UNCALIBRATED

NO_ISSUE = {"dsd_issue_cycles": 0.0}


def _report(**kwargs) -> RunReport:
    spec = preset("wse2").replace(**NO_ISSUE)
    # 400 fp16 FMACs at 4 a cycle on WSE-2: 100 cycles, 10 times
    phases = serial(Phase("x", Work(ops=(Op("fmac", "fp16", 400),), links={"E": 7})), repeat=10)
    model = PerfModel(spec, UNCALIBRATED)
    return RunReport.build("k", spec, phases, model=model, units="step", **kwargs)


def test_a_report_and_its_mappings_cannot_be_assigned():
    sram = {"used_bytes_per_pe": 128}
    report = _report(sram=sram, extra={"steps": 3}, measured_wall_s=0.5)
    for name, value in [("measured_wall_s", 1.0), ("sram", {}), ("extra", {}), ("units", "x")]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(report, name, value)
    with pytest.raises(TypeError):
        report.extra["tokens"] = 4  # type: ignore[index]
    with pytest.raises(TypeError):
        report.sram["used_bytes_per_pe"] = 0  # type: ignore[index]
    with pytest.raises(TypeError):
        report.assumptions["overlap rule"] = "none"  # type: ignore[index]
    sram["used_bytes_per_pe"] = 0  # the caller's dict is not the report's
    assert report.sram["used_bytes_per_pe"] == 128
    assert not hasattr(report, "with_measured")


def test_rates_come_from_the_evaluated_timing_inside_build():
    seen: list[Timing] = []

    def figures(t: Timing) -> dict[str, float]:
        seen.append(t)
        return {"cycles": t.seconds * clock_hz, "steps_per_s": 1.0 / t.seconds}

    clock_hz = preset("wse2").clock_hz
    report = _report(extra=figures)
    assert seen == [report.predicted]  # called once, on the report's own prediction
    assert report.extra["cycles"] == pytest.approx(1000)  # 10 x ceil(400 / 4), by hand
    assert report.units_per_s == pytest.approx(clock_hz / 1000)
    assert report.extra["steps_per_s"] == report.units_per_s


def test_with_trace_copies_and_leaves_the_report_as_it_was():
    report = _report(extra={"a": 1})
    traced = report.with_trace("a trace")
    assert traced.trace == "a trace" and report.trace is None
    assert traced.extra == report.extra and traced.predicted is report.predicted


@pytest.mark.smoke
def test_the_json_a_report_writes_round_trips():
    report = _report(
        sram={"used_bytes_per_pe": 128, "regions": [{"name": "r", "bytes": 64}]},
        extra=lambda t: {"z_first": 1, "plan": {"stages": [1, 2]}, "a_last": t.seconds},
        measured_wall_s=0.25,
    )
    d = report.to_dict()
    text = json.dumps(d)
    assert json.loads(text) == d
    assert json.dumps(json.loads(text)) == text  # the same text, key order included
    assert list(d)[-3:] == ["z_first", "plan", "a_last"]  # extras after the fields, as given
    assert d["sram"]["regions"] == [{"name": "r", "bytes": 64}]
    assert d["work"]["links"] == {"E": 70} and d["a_last"] == d["predicted_s"]
