"""A `RunReport`'s notebook HTML (`wse_core.notebook.report_html`) with markup in its units and
bound. Before hunt 68 both went into the summary line raw (`per {units}`, `{bound}-bound`): a
report's `units="<img src=x onerror=alert(1)>"` ran in the notebook, while the same string a few
characters later (`{units}/s`) was escaped. Now every name and unit is text; the oracle is
Python's own HTML parser: the tags it finds and the text it reads back."""

from __future__ import annotations

import dataclasses
from html.parser import HTMLParser

from wse_core import Op, PerfModel, Phase, RunReport, Work, preset, serial
from wse_core.cost.calibration import UNCALIBRATED
from wse_core.cost.pricing import Timing


class _Read(HTMLParser):
    """The start tags of a document and the text of its first `<p>`."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.head = ""
        self._in_head = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "p" and self.tags.count("p") == 1:
            self._in_head = True

    def handle_endtag(self, tag):
        if tag == "p":
            self._in_head = False

    def handle_data(self, data):
        if self._in_head:
            self.head += data


def _report(units: str, bound: str | None = None) -> RunReport:
    spec = preset("tiny")
    phases = serial(Phase("a", Work(ops=(Op("add", "fp32", 64),))))
    report = RunReport.build("n", spec, phases, model=PerfModel(spec, UNCALIBRATED), units=units)
    if bound is None:
        return report
    # a phase tree whose one leaf is bound by `bound` (no pricing names a resource so)
    return dataclasses.replace(report, predicted=Timing("a", report.predicted_s, bound))


def _read(report: RunReport) -> _Read:
    doc = _Read()
    doc.feed(report._repr_html_())
    doc.close()
    return doc


def test_units_and_bound_holding_markup_are_shown_as_text():
    report = _report("<b>", bound="<b>")
    assert report.bound == "<b>"
    doc = _read(report)
    assert doc.tags.count("b") == 1  # the report's name only
    assert "img" not in doc.tags
    rate = f"{report.units_per_s:.4g}"
    assert f"per <b> ({rate} <b>/s), <b>-bound" in doc.head


def test_an_onerror_image_in_units_is_no_tag():
    doc = _read(_report("<img src=x onerror=alert(1)>"))
    assert "img" not in doc.tags
    assert "s per <img src=x onerror=alert(1)> (" in doc.head


def test_plain_units_and_bound_read_as_before():
    report = _report("step")
    doc = _read(report)
    assert f"per step ({report.units_per_s:.4g} step/s), {report.bound}-bound" in doc.head
    assert doc.tags.count("b") == 1
