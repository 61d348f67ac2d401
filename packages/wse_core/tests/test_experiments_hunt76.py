"""Hunt 76 on the experiment writer. Broken before:

- results.json's rows had no `ratio`, though table.md and table.csv did.
- a constant read at two values that agree to 1e-14 (two refits of the calibration) was
  listed twice: router_switch_cycles "302.3, 302.3".
- `mechanisms.png`: rows with labels of ~110 characters (cost-model-calibration) gave
  "UserWarning: Tight layout not applied" on stderr, the labels past the figure.

Oracles: value / published by hand and table.csv read back with `csv`; the values given; the
labels' drawn boxes inside the figure's.
"""

from __future__ import annotations

import csv
import itertools
import json
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from wse_core.cost.reads import Reads  # noqa: E402
from wse_core.studies.experiment import (  # noqa: E402
    ExperimentResult,
    PredictionRow,
    read_by,
    row_assumed,
    write_experiment,
)
from wse_core.studies.mechanism_figure import mechanism_figure  # noqa: E402

ROWS = [
    PredictionRow("a", 3.0, "s", {"case": "x"}, published=4.0),
    PredictionRow("b", 2.5, "s", {"case": "y"}),  # no published figure
    PredictionRow("c", 1e-3, "s", {"case": "z"}, published=2e-3),
]


def test_each_json_row_carries_its_ratio_as_the_tables_do(tmp_path):
    folder = write_experiment(ExperimentResult("hunt76", 0, {}, [], ROWS), tmp_path)
    rows = json.loads((folder / "results.json").read_text())["predictions"]
    assert [r["ratio"] for r in rows] == [3.0 / 4.0, None, 1e-3 / 2e-3]
    with open(folder / "table.csv", newline="") as f:
        table = list(csv.DictReader(f))
    for row, line in zip(rows, table, strict=True):
        assert line["ratio"] == ("" if row["ratio"] is None else repr(row["ratio"]))


def test_values_that_differ_by_float_noise_are_listed_once():
    reads = Reads()
    for v in (302.29583333332545, 302.2958333333269, 305.5642857142773):
        reads.add("router_switch_cycles", v)
    reads.add("clock_hz", 8.5e8)
    reads.add("clock_hz", 1.1e9)
    result = ExperimentResult("hunt76", 0, {}, [], read_by(reads, ROWS[0]))
    got = {e["name"]: e["value"] for e in row_assumed(result.predictions[0], result)}
    assert got["router_switch_cycles"] == [302.29583333332545, 305.5642857142773]  # the lower kept
    assert got["clock_hz"] == [8.5e8, 1.1e9]  # distinct values stay


def _long_rows(n: int) -> list[PredictionRow]:
    """Rows whose labels run to ~110 characters, as cost-model-calibration's."""
    mech = {"simd": 60.0, "link": 25.0, "router_switch": 15.0}
    return [
        PredictionRow("gcells_per_s", 1.0, "Gcell/s", {"case": f"stencil25 {i}00x{i}00",
                      "grid": f"{i}00x{i}00", "role": f"fits router_switch_cycles {i}",
                      "bound": "compute", "wafer": f"wse{i}", "per": "step"}, mechanisms=mech)
        for i in range(1, n + 1)
    ]  # fmt: skip


def test_long_labels_are_laid_out_inside_the_figure_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Tight layout not applied" was a UserWarning
        fig = mechanism_figure(_long_rows(11))
        fig.canvas.draw()
    try:
        inside = fig.bbox
        renderer = fig.canvas.get_renderer()
        for label in fig.axes[0].get_xticklabels():
            box = label.get_window_extent(renderer)
            assert inside.x0 <= box.x0 and box.x1 <= inside.x1, (label.get_text(), box, inside)
            assert inside.y0 <= box.y0 and box.y1 <= inside.y1, (label.get_text(), box, inside)
        boxes = sorted((t.get_window_extent(renderer) for t in fig.axes[0].get_xticklabels()),
                       key=lambda b: b.x0)  # fmt: skip
        for left, right in itertools.pairwise(boxes):  # side by side, none over another
            assert left.x1 <= right.x0
    finally:
        plt.close(fig)
