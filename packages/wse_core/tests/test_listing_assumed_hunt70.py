"""Hunt 70: under the Python API's `with assume(dsd_issue_cycles=30): ...` a report priced on
a preset (not `assumed_spec`) listed "3 (changed by --assume)", the preset's prior, and its
`assumed` entry "dsd_issue_cycles = 3, 30": the wafer priced the prior, 3, while the
calibration was refitted around the held 30 (a stencil step came out faster for a DSD ten
times dearer: 1.40e-06 -> 7.82e-07 s). A held fitted constant is now priced on every wafer,
whatever spec it was given (`assumptions.held`, `Pricing.rates`), and every surface lists the
value the pricing read: the report's assumptions (`assumptions.listed`, from `model.rates`),
its `assumed` entries and `wse_core.cost.listing` (from the recorded reads). A wafer field
assumed on a wafer built outside the block is listed at the value priced, not as changed.

Oracle: the report's own priced mechanism cycles over the instructions counted (5 DSDs), and
the figure on `assumed_spec`, the edge `--assume` prices through.
"""

from __future__ import annotations

import pytest
from wse_core import preset
from wse_core.cost.assumptions import assume, assumed_spec, held
from wse_core.cost.listing import listed
from wse_core.cost.perf import Op, PerfModel, Phase, Work
from wse_core.cost.reads import recording
from wse_core.cost.report import RunReport

STEP = Phase("leaf", Work(ops=(Op("add", "fp32", 16, count=5),), task_activations=3.0))
DSDS = 5  # the instructions STEP issues


def _issue_priced(report: RunReport) -> float:
    """dsd_issue_cycles as the one-leaf report's priced cycles give it back."""
    (mech,) = [n.cost.mechanisms for _, n in report.predicted.rows() if n.cost is not None]
    return mech["dsd_issue"] / DSDS


def _entry(report: RunReport, key: str):
    (entry,) = [e for e in report.assumed if e.key == key]
    return entry


def test_a_held_constant_is_priced_and_listed_on_a_preset():
    plain = RunReport.build("t", preset("wse2"), STEP)
    with assume(dsd_issue_cycles=30):
        assert held() == {"dsd_issue_cycles": 30.0}
        report = RunReport.build("t", preset("wse2"), STEP)  # a preset: no assumed_spec
        edge = RunReport.build("t", assumed_spec("wse2"), STEP)  # what --assume prices
    assert _issue_priced(report) == 30.0  # the value priced
    assert report.assumptions["dsd_issue_cycles"].startswith("30 (changed by --assume): ")
    entry = _entry(report, "dsd_issue_cycles")
    assert entry.values == (30.0,) and entry.assumed
    assert report.predicted_s != plain.predicted_s  # the figure moved
    assert report.predicted_s == edge.predicted_s  # as the --assume edge prices it
    assert report.assumptions == edge.assumptions


def test_the_listing_of_reads_gives_the_value_priced():
    with assume(dsd_issue_cycles=30), recording() as got:
        PerfModel(preset("wse3")).evaluate(STEP)
        lines = [e.line() for e in listed(got)]
    (line,) = [x for x in lines if x.startswith("dsd_issue_cycles")]
    assert line.startswith("dsd_issue_cycles = 30 cycles/DSD ") and "--assume" in line


def test_a_wafer_field_on_a_wafer_built_outside_is_not_said_changed():
    with assume(clock_hz=1e9):
        outside = RunReport.build("t", preset("wse2"), STEP)
        edge = RunReport.build("t", assumed_spec("wse2"), STEP)
    line = outside.assumptions["clock_hz"]
    assert line.startswith("8.5e+08 (not the assumed 1e+09: this wafer was not built under")
    assert not _entry(outside, "clock_hz").assumed
    assert _entry(outside, "clock_hz").values == (8.5e8,)
    assert edge.assumptions["clock_hz"].startswith("1e+09 (changed by --assume): ")
    assert _entry(edge, "clock_hz").assumed and edge.predicted_s < outside.predicted_s


def test_no_assumption_leaves_the_listing_as_it_was():
    assert held() == {}
    report = RunReport.build("t", preset("wse2"), STEP)
    assert "(changed by --assume)" not in "".join(report.assumptions.values())
    assert not any(e.assumed for e in report.assumed)
    rates = PerfModel(preset("wse2")).rates
    assert _issue_priced(report) == pytest.approx(rates.dsd_issue_cycles, rel=1e-12)
