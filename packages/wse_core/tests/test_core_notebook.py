"""Reports that draw themselves: each result type through IPython's own display formatter
(what a notebook cell ending in the object shows), its HTML checked against the object's
figures, and `.plot()` against the same figures."""

from __future__ import annotations

import base64
import html
import re

import matplotlib
import pytest
from wse_core import (
    ExperimentResult,
    Op,
    PerfModel,
    Phase,
    PredictionRow,
    RunReport,
    Work,
    overlap,
    preset,
    serial,
)
from wse_core.cost.calibration import UNCALIBRATED
from wse_core.trace import trace_from
from wse_core.trace.page import page_html
from wse_systems.serving.frontier import Frontier, OperatingPoint

matplotlib.use("Agg")
IPython = pytest.importorskip("IPython")
PNG = b"\x89PNG\r\n\x1a\n"


def _shown(obj) -> str:
    """The text/html a notebook cell ending in `obj` displays."""
    from IPython.core.interactiveshell import InteractiveShell

    data, _ = InteractiveShell.instance().display_formatter.format(obj)
    assert "text/html" in data
    return data["text/html"]


def _report() -> RunReport:
    spec = preset("tiny")
    add = Phase("add", Work(ops=(Op("add", "fp32", 64),), links={"E": 10.0}), repeat=3)
    halo = Phase("halo", Work(links={"N": 5.0, "W": 7.0}, latency_hops=4))
    phases = serial(add, overlap(halo, Phase("read", Work(sram_read_bytes=1600))), name="step")
    model = PerfModel(spec, UNCALIBRATED)
    return RunReport.build("t", spec, phases, model=model, units="step", measured_wall_s=0.25)


def _pngs(text: str) -> list[bytes]:
    return [
        base64.b64decode(m) for m in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", text)
    ]


def test_a_run_report_shows_its_mechanisms_and_phases():
    report = _report()
    out = _shown(report)
    mech = report.cycles_by_mechanism()
    total = sum(mech.values())
    assert f"{report.predicted_s:.4g} s per step" in out and "measured 0.25 s" in out
    for name, cycles in mech.items():  # each mechanism with its share of the cycles
        assert re.search(rf">{re.escape(name)}</td><td[^>]*>{cycles:.4g}</td>", out), name
        assert f"{cycles / total:.0%}</td>" in out
    for row in report.phase_rows():
        assert str(row["phase"]) in out
    fig = report.plot()
    bars = {p.get_y(): p.get_width() for p in fig.axes[0].patches}
    assert sorted(bars.values()) == sorted(mech.values())


def test_a_trace_shows_the_page_wse_view_writes():
    report = _report()
    trace = trace_from(preset("tiny"), report)
    out = _shown(trace)
    doc = re.fullmatch(r'<iframe class="wse-trace" srcdoc="(.*)" style=[^>]*></iframe>', out, re.S)
    assert doc is not None and html.unescape(doc.group(1)) == page_html(trace)
    fig = trace.plot()
    assert len(fig.axes) >= 4  # four panels (and their colour bars)


def test_an_experiment_shows_its_tables_and_figure():
    report = _report()
    rows = [
        PredictionRow(
            "step time",
            report.predicted_s,
            "s",
            {"case": "a"},
            2e-6,
            "REFERENCES.md",
            mechanisms=report.cycles_by_mechanism(),
        ),  # fmt: skip
        PredictionRow("rate", 123.5, "steps/s", {"case": "b"}),
    ]
    result = ExperimentResult("demo-exp", 0, {}, [{"grid": 8, "wall_s": 0.5}], rows)
    out = _shown(result)
    for p in rows:
        assert f">{p.name}</td><td" in out and f"{p.value:.6g}" in out
    assert f"{report.predicted_s / 2e-6:.6g}" in out  # the ratio to the published figure
    assert ">wall_s</th>" in out and ">0.5</td>" in out
    pngs = _pngs(out)
    assert len(pngs) == 1 and pngs[0].startswith(PNG)  # the mechanism shares of the rows
    assert len(result.plot().axes[0].get_xticklabels()) == 1  # one row has mechanisms


def _point(users: int, per_user: float) -> OperatingPoint:
    agg = users * per_user
    return OperatingPoint(
        users=users, user_tokens_per_s=per_user, aggregate_tokens_per_s=agg, ttft_s=0.1, bound="s"
    )


def test_a_frontier_shows_its_points_pareto_and_chart():
    points = (_point(1, 900.0), _point(4, 400.0), _point(8, 90.0), _point(16, 100.0))
    front = Frontier("wafer", 4, 16, points)
    out = _shown(front)

    # by hand: 8 users give 720 tokens/s in all at 90 per user, fewer than 4 users' 1,600 at
    # 400 each; 16 users' 1,600 at 100 each is no more than 4 users give: both dominated
    def beats(q, p):
        ge = (q.user_tokens_per_s >= p.user_tokens_per_s
              and q.aggregate_tokens_per_s >= p.aggregate_tokens_per_s)  # fmt: skip
        return ge and q != p and (q.user_tokens_per_s, q.aggregate_tokens_per_s) != (
            p.user_tokens_per_s, p.aggregate_tokens_per_s)  # fmt: skip

    dominated = {p.users for p in points if any(beats(q, p) for q in points)}
    assert dominated == {8, 16}
    table = out.split("<table", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table)[1:]
    assert len(rows) == len(points)
    for row, p in zip(rows, points, strict=True):
        assert row.startswith(
            f'<td style="border:1px solid #ccc;padding:2px 6px;text-align:left">{p.users}</td>'
        )
        assert row.endswith(">yes</td>") == (p.users not in dominated)
    assert all(png.startswith(PNG) for png in _pngs(out)) and len(_pngs(out)) == 1
    line = front.plot().axes[0].lines[0]
    assert list(line.get_xdata()) == [p.user_tokens_per_s for p in points]
