"""Hunt 67's holes in the core's result files (hole 8 of hunt67_api2). Before:
- `write_experiment` wrote NaN and Infinity into results.json, which strict JSON readers
  (jq, JavaScript, `json.loads(parse_constant=...)`) refuse, and table.csv showed a NaN value
  as an empty cell, as if it were missing;
- `RunReport.build(extra={"predicted_s": 5.0, "bound": "fabric"})` replaced the report's
  prediction and bound in `to_dict()` while `report.predicted_s` said otherwise.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math

import numpy as np
import pytest
from wse_core import (
    ExperimentResult,
    Op,
    Phase,
    PredictionRow,
    RunReport,
    Work,
    WseError,
    preset,
    write_experiment,
)
from wse_core.cost.report import REPORT_KEYS

NAN, INF = float("nan"), float("inf")


def _strict(text: str):
    """json.loads refusing NaN / Infinity / -Infinity, as jq and JavaScript do."""

    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _result(value_a=NAN, value_b=INF) -> ExperimentResult:
    rows = [
        PredictionRow("a", value_a, "s", {}, published=1.0),
        PredictionRow("b", value_b, "s", {"ratio": -INF}, published=2.0),
        PredictionRow("c", 3.0, "s", {}),
    ]
    measured = [{"t": np.float32("nan"), "n": 4, "missing": None}]
    return ExperimentResult("exp", 0, {"lr": INF, "steps": 2}, measured, rows)


def test_results_json_is_strict_json_with_each_non_finite_number_null_and_named(tmp_path):
    data = _strict((write_experiment(_result(), tmp_path) / "results.json").read_text())
    assert data["predictions"][0]["value"] is None and data["predictions"][1]["value"] is None
    assert data["predictions"][1]["params"]["ratio"] is None
    assert data["config"] == {"lr": None, "steps": 2}
    assert data["measurements"] == [{"t": None, "n": 4, "missing": None}]
    assert data["non_finite"] == {
        "config.lr": "inf",
        "measurements[0].t": "nan",
        "predictions[0].value": "nan",
        "predictions[1].value": "inf",
        "predictions[0].ratio": "nan",
        "predictions[1].ratio": "inf",
        "predictions[1].params.ratio": "-inf",
    }
    assert data["predictions"][2]["value"] == 3.0  # finite values as they were


def test_a_finite_result_is_written_as_before_with_the_five_keys(tmp_path):
    result = _result(1.5, 2.5)
    result.measurements = [{"t": 0.25}]
    result.predictions[1].params["ratio"] = 0.5
    result.config["lr"] = 1e-3
    text = (write_experiment(result, tmp_path) / "results.json").read_text()
    assert text == json.dumps(result.to_dict(), indent=2)  # the writer's old text
    assert set(_strict(text)) == {"experiment", "seed", "config", "measurements", "predictions"}


def test_the_tables_show_nan_and_inf_not_an_empty_cell(tmp_path):
    folder = write_experiment(_result(), tmp_path)
    rows = list(csv.reader((folder / "table.csv").read_text().splitlines()))
    header, a, b, c = rows
    value, published, source = header.index("value"), header.index("published"), -1
    assert (a[value], b[value], c[value]) == ("nan", "inf", "3")
    assert a[published] == "1" and c[published] == "" and a[source] == ""  # None stays empty
    assert "| t | n | missing |" in (folder / "table.md").read_text()
    assert "| nan | 4 |  |" in (folder / "table.md").read_text()


def _report(**kw) -> RunReport:
    phase = Phase("p", Work(ops=(Op("add", "fp32", 8),)))
    return RunReport.build("k", preset("tiny"), phase, **kw)


@pytest.mark.parametrize("key", REPORT_KEYS)
def test_an_extra_key_that_is_the_reports_own_is_refused(key):
    with pytest.raises(WseError, match=f"extra key '{key}' is one of the report's own keys"):
        _report(extra={key: 5.0})
    with pytest.raises(WseError, match=f"extra key '{key}'"):
        _report(extra=lambda t: {"rate": t.per_s, key: 5.0})  # figures from the timing too


def test_a_copy_with_a_shadowing_extra_is_refused_too():
    with pytest.raises(WseError, match="extra key 'bound'"):
        dataclasses.replace(_report(), extra={"bound": "fabric"})


def test_to_dict_is_the_reports_keys_then_extras_and_its_own_figures():
    report = _report(extra={"kernel_predicted_s": 5.0, "rate": 1.0})
    d = report.to_dict()
    assert list(d) == [*REPORT_KEYS, "kernel_predicted_s", "rate"]
    assert d["predicted_s"] == report.predicted_s == report.predicted.seconds
    assert d["bound"] == report.bound and d["wafer"] == "tiny"
    assert math.isfinite(d["predicted_s"]) and d["kernel_predicted_s"] == 5.0
