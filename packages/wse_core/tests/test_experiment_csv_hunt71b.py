"""Hunt 71: `wse experiments run`'s table.csv did not match results.json number for number:
every float went through `.6g`, so wafer-yield's predicted 0.99999995679834 was `1` (and
`1 - value` 0 instead of 4.3e-8), and its 32 measured rows (what the predictions are compared
with) were in table.md and results.json only. Now the CSVs hold `repr` floats and the
measurements have their own measurements.csv; table.md keeps its 6 digits.

Oracles: results.json read with `json`, the CSVs with `csv` + `float` and with pandas.
"""

from __future__ import annotations

import csv
import json
import math

import pandas as pd
import pytest
from wse_core.studies.experiment import ExperimentResult, PredictionRow, write_experiment

# pandas 3 reads floats as round trips by default (and deprecates the option); 2.x needs it
ROUND_TRIP = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}
VALUES = [0.99999995679834, 1 / 3, 1e-300, 123456789.123456789, float("nan"), float("inf"), 2.0]


def _result(measurements=None) -> ExperimentResult:
    rows = [PredictionRow(f"r{i}", v, "s", {"grid": 8, "rate": 1 / 7}, published=2 / 3)
            for i, v in enumerate(VALUES)]  # fmt: skip
    if measurements is None:
        measurements = [{"rate": 1 / 7, "measured": v, "n": i} for i, v in enumerate(VALUES)]
        measurements.append({"rate": 0.1, "extra": "a, b"})  # a key the others lack
    return ExperimentResult("hunt71-csv", 0, {}, measurements, rows)


def _same(text: str, number: float | None, written_as: str | None = None) -> bool:
    """The CSV cell `text` is results.json's `number` (null where not finite: `written_as`)."""
    got = float(text)
    if number is None:
        return repr(got) == written_as
    return got == number or (math.isnan(got) and math.isnan(number))


def test_table_csv_holds_results_json_number_for_number(tmp_path):
    folder = write_experiment(_result(), tmp_path)
    data = json.loads((folder / "results.json").read_text())
    with open(folder / "table.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for i, (row, p) in enumerate(zip(rows, data["predictions"], strict=True)):
        nan_name = data.get("non_finite", {}).get(f"predictions[{i}].value")
        assert _same(row["value"], p["value"], nan_name), (row["value"], p["value"])
        assert float(row["published"]) == p["published"]
        assert float(row["ratio"]) == VALUES[i] / (2 / 3) or not math.isfinite(VALUES[i])
        assert row["params"] == f"grid=8, rate={1 / 7!r}"
    assert rows[0]["value"] == "0.99999995679834"  # was 1
    assert rows[6]["value"] == "2"  # a whole number as before (results.json: 2.0)
    assert 1 - float(rows[0]["value"]) == pytest.approx(4.320166e-8, rel=1e-6)  # was 0
    df = pd.read_csv(folder / "table.csv", **ROUND_TRIP)
    assert df["value"].tolist()[:4] == VALUES[:4] and math.isnan(df["value"][4])
    assert df["value"][5] == math.inf and df["value"][6] == 2.0 and df["value"].dtype == "float64"
    # table.md keeps its 6 significant digits, for people
    assert "| r0 | check | 1 | s | grid=8, rate=0.142857 |" in (folder / "table.md").read_text()


def test_the_measurements_have_their_own_csv(tmp_path):
    folder = write_experiment(_result(), tmp_path)
    measured = json.loads((folder / "results.json").read_text())["measurements"]
    df = pd.read_csv(folder / "measurements.csv", **ROUND_TRIP)
    want = pd.DataFrame(measured)  # None (null) of a non-finite number: NaN to pandas
    assert list(df.columns) == ["rate", "measured", "n", "extra"]
    pd.testing.assert_frame_equal(df.iloc[:4], want.iloc[:4].astype(df.dtypes.to_dict()))
    assert df["measured"][5] == math.inf and df["extra"][7] == "a, b"
    assert df["rate"].tolist() == [1 / 7] * 7 + [0.1]


def test_a_rerun_without_measurements_leaves_no_older_csv(tmp_path):
    folder = write_experiment(_result(), tmp_path)
    (folder / "sweep_clock_hz.csv").write_text("a sweep")  # a sweep's file stays
    write_experiment(_result(measurements=[]), tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == [
        "results.json", "sweep_clock_hz.csv", "table.csv", "table.md"]  # fmt: skip


def test_wafer_yield_csvs_match_its_results_json(tmp_path):
    from wse_core.studies.wafer_yield import run

    folder = write_experiment(run(quick=True, seed=0), tmp_path)
    data = json.loads((folder / "results.json").read_text())
    table = pd.read_csv(folder / "table.csv", **ROUND_TRIP)
    assert table["value"].tolist() == [p["value"] for p in data["predictions"]]
    measured = pd.read_csv(folder / "measurements.csv", **ROUND_TRIP)
    assert len(measured) == len(data["measurements"]) == 32
    for column in ("repairable_fraction", "usable_fraction", "defect_rate"):
        assert measured[column].tolist() == [m[column] for m in data["measurements"]], column
