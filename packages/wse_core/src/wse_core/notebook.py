"""How the stack's results draw themselves in a notebook: HTML for `_repr_html_`, figures
for `.plot()`.

Contract. A leaf: it imports no result type (each class's `_repr_html_` / `.plot()` imports
it on first use and passes what it needs), and returns self-contained HTML (no CDN, no
network: figures as base64 PNG, the per-PE page in an `<iframe srcdoc>` so its script runs
inline) or a matplotlib `Figure`:

- `report_html(report)` / `report_figure(report)`: a `RunReport`'s predicted time, bound,
  measured wall time and rate, its mechanism breakdown (each mechanism's share of the
  predicted cycles as a bar) and phases; the figure is the breakdown as horizontal bars.
- `iframe_html(page)`: a whole page (a `PeTrace`'s, as `wse view` writes it) inline.
- `experiment_html(...)`: an `ExperimentResult`'s prediction and measurement tables (as
  `table.md` has them) and its figure.
- `frontier_html(frontier, fig)`: a serving `Frontier`'s points, the Pareto ones marked, and
  its chart.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "table_html",
    "figure_html",
    "iframe_html",
    "report_html",
    "report_figure",
    "experiment_html",
    "frontier_html",
]

_STYLE = "border-collapse:collapse;font:12px sans-serif"
_CELL = "border:1px solid #ccc;padding:2px 6px;text-align:left"


class _Html(str):
    """A table cell that is already HTML (not escaped)."""


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def _cell(v: Any) -> str:
    return v if isinstance(v, _Html) else html.escape(_fmt(v))


def table_html(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An HTML table of `rows` under `header`, every cell escaped."""
    head = "".join(f'<th style="{_CELL}">{html.escape(h)}</th>' for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td style="{_CELL}">{_cell(c)}</td>' for c in r) + "</tr>" for r in rows
    )
    return f'<table style="{_STYLE}"><tr>{head}</tr>{body}</table>'


def figure_html(fig: Any, *, dpi: int = 90) -> str:
    """A matplotlib figure as an `<img>` with its PNG inline (the figure is closed)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="figure" src="data:image/png;base64,{data}"/>'


def _bar(share: float) -> _Html:
    width = max(0.0, min(1.0, share)) * 160
    return _Html(
        f'<span style="display:inline-block;height:9px;width:{width:.0f}px;'
        f'background:#4c72b0"></span> {share:.0%}'
    )


def report_html(report: Any) -> str:
    """The `RunReport` as a summary line, its mechanism breakdown and its phases."""
    measured = report.measured_wall_s
    units = html.escape(report.units)  # hunt 68: units and bound went in raw (markup ran)
    head = (
        f"<b>{html.escape(report.name)}</b> on {html.escape(report.wafer)}"
        f" (x{report.systems}): predicted {report.predicted_s:.4g} s per {units}"
        f" ({report.units_per_s:.4g} {units}/s), {html.escape(report.bound)}-bound"
        + (f"; measured {measured:.4g} s on this machine" if measured is not None else "")
    )
    mech = sorted(report.cycles_by_mechanism().items(), key=lambda kv: -kv[1])
    total = sum(v for _, v in mech) or 1.0
    mech_table = table_html(
        ["mechanism", "cycles", "share"], [(k, v, _bar(v / total)) for k, v in mech]
    )
    phases = table_html(
        ["phase", "repeat", "seconds", "share", "bound"],
        [
            (
                "\u00a0\u00a0" * int(r["depth"]) + str(r["phase"]),
                r["repeat"],
                r["seconds"],
                f"{float(r['share']):.0%}",
                r["bound"],
            )  # fmt: skip
            for r in report.phase_rows()
        ],
    )
    return (
        f'<div class="wse-report"><p>{head}</p><p>Predicted cycles by mechanism</p>'
        f"{mech_table}<p>Phases</p>{phases}</div>"
    )


def report_figure(report: Any) -> Any:
    """The mechanism breakdown as horizontal bars (a matplotlib Figure)."""
    import matplotlib.pyplot as plt

    from wse_core.figures import plain

    mech = sorted(report.cycles_by_mechanism().items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(6.5, 0.35 * len(mech) + 1.2), constrained_layout=True)
    ax.barh([k for k, _ in mech], [v for _, v in mech], color="#4c72b0")
    ax.set(xlabel=plain(f"predicted cycles per {report.units}"),  # names as typed (hunt 68)
           title=plain(f"{report.name} on {report.wafer}: {report.bound}-bound"))  # fmt: skip
    return fig


def iframe_html(page: str) -> str:
    """A whole HTML page shown inline: an iframe whose document is the page."""
    doc = html.escape(page, quote=True)
    return (
        f'<iframe class="wse-trace" srcdoc="{doc}" style="width:100%;height:640px;border:0">'
        "</iframe>"
    )


def experiment_html(
    title: str,
    header: Sequence[str],
    rows: Sequence[Sequence[Any]],
    measurements: Sequence[Mapping[str, Any]],
    fig: Any,
) -> str:
    """An experiment's prediction table, its measurements and its figure (None: none)."""
    parts = [f"<p><b>{html.escape(title)}</b></p>", table_html(header, rows)]
    if measurements:
        keys = list(dict.fromkeys(k for m in measurements for k in m))
        parts.append("<p>Measurements</p>")
        parts.append(table_html(keys, [[m.get(k) for k in keys] for m in measurements]))
    if fig is not None:
        parts.append(figure_html(fig))
    return '<div class="wse-experiment">' + "".join(parts) + "</div>"


def frontier_html(frontier: Any, fig: Any) -> str:
    """The frontier's points (the Pareto ones marked) and its chart `fig`."""
    pareto = {p.users for p in frontier.pareto()}
    rows = [
        (
            p.users,
            "n/a" if p.user_tokens_per_s is None else p.user_tokens_per_s,  # one output token
            p.aggregate_tokens_per_s,
            p.ttft_s,
            p.bound,
            "yes" if p.users in pareto else "",
        )  # fmt: skip
        for p in sorted(frontier.points, key=lambda p: p.users)
    ]
    header = ["users", "tokens/s per user", "output tokens/s in all", "TTFT s", "bound", "Pareto"]
    return (
        f'<div class="wse-frontier"><p><b>{html.escape(frontier.system)}</b>, '
        f"{frontier.units} units, up to {frontier.max_users:,} users</p>"
        + table_html(header, rows)
        + figure_html(fig)
        + "</div>"
    )
