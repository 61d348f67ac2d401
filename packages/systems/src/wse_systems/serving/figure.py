"""The frontier chart a buyer compares: aggregate tokens/s against tokens/s per user.

Contract. `draw_frontiers(ax, curves, title=...)` draws on a matplotlib `Axes` one curve per
`Curve` (a `Frontier`: its sampled loads as dots joined in order of users, the chosen
`OperatingPoint` as a star labelled with its users), on log axes; at one output token
(no per-user speed) against the time to first token. `wse plan infer --png`
and the experiment `hc24-frontier` draw with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `Frontier.plot` imports this module
    from wse_systems.serving.frontier import Frontier, OperatingPoint

__all__ = ["Curve", "draw_frontiers"]


@dataclasses.dataclass(frozen=True)
class Curve:
    """One system's frontier, its chosen point (or None), colour, label and line style."""

    frontier: Frontier
    chosen: OperatingPoint | None
    color: str
    label: str
    style: str = "-"


def draw_frontiers(ax: Any, curves: Sequence[Curve], *, title: str = "") -> None:
    """The curves on `ax` (see the module contract). At one output token no point has a
    per-user speed (hunt 75: the chart then log-scaled empty axes and raised): the output
    is drawn against the time to first token instead, the axis labelled so."""
    by_ttft = all(p.user_tokens_per_s is None for c in curves for p in c.frontier.points)

    def x_of(p: OperatingPoint) -> float | None:
        return p.ttft_s if by_ttft else p.user_tokens_per_s

    for c in curves:
        # a point of one output token has no per-user speed (None): on the chart by TTFT
        every = [p for p in sorted(c.frontier.points, key=lambda p: p.users)
                 if x_of(p) is not None]  # fmt: skip
        xs = [x_of(p) for p in every]
        ys = [p.aggregate_tokens_per_s for p in every]
        ax.plot(xs, ys, c.style, color=c.color, label=c.label, lw=1.2)
        ax.plot(xs, ys, ".", color=c.color, ms=4)
        if c.chosen is not None and (x := x_of(c.chosen)) is not None:
            y = c.chosen.aggregate_tokens_per_s
            ax.plot(x, y, "*", color=c.color, ms=13, mec="black")
            ax.annotate(f"{c.chosen.users:,} users", (x, y), textcoords="offset points",
                        xytext=(6, 6), fontsize=7)  # fmt: skip
    xlabel = ("time to first token (s; one output token: no per-user speed)" if by_ttft
              else "tokens/s per user")  # fmt: skip
    ax.set(xscale="log", yscale="log", xlabel=xlabel,
           ylabel="output tokens/s in all (one replica)")  # fmt: skip
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
