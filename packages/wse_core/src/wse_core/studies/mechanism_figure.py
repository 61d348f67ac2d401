"""An experiment's predicted rows by mechanism: `mechanism_figure` draws them as stacked shares
of their cycles (`mechanisms.png` beside its tables), `mechanism_text` writes one row's shares
for the tables' column (`wse_core.studies.experiment` writes both); `row_labels` names the
bars, each row apart from the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wse_core.studies.experiment import PredictionRow

__all__ = ["mechanism_figure", "mechanism_text", "row_labels"]

LABEL_CHARS = 40  # a bar's label wraps past this many characters a line


def mechanism_figure(predictions: list[PredictionRow]):
    """Stacked bars: each row's share of predicted cycles by mechanism (None if no row has
    mechanisms)."""
    from wse_core.cost.mechanisms import MECHANISMS

    rows = [p for p in predictions if p.mechanisms]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # labels wrapped and upright, the figure sized to them, laid out by constrained layout
    # (hunt 76: labels of 110 characters at 40 degrees in 4.2 in: "Tight layout not applied")
    labels = [_wrapped(text) for text in row_labels(rows)]
    per_bar = max(0.45, 0.15 * max(text.count("\n") + 1 for text in labels) + 0.1)
    fig, ax = plt.subplots(figsize=(max(6.0, per_bar * len(rows) + 3), 4.2), layout="constrained")
    bottom = [0.0] * len(rows)
    for key in MECHANISMS:
        shares = [
            (p.mechanisms or {}).get(key, 0.0) / sum((p.mechanisms or {}).values() or [1])
            for p in rows
        ]
        if any(shares):
            ax.bar(range(len(rows)), shares, bottom=bottom, label=key)
            bottom = [b + v for b, v in zip(bottom, shares, strict=True)]
    ax.set_xticks(range(len(rows)), labels, rotation=90, fontsize=7)
    ax.set(ylabel="share of predicted cycles", ylim=(0, 1), title="Cycles by mechanism")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _fit_labels(fig, ax)
    return fig


def _wrapped(label: str, width: int = LABEL_CHARS) -> str:
    """`label` on lines of at most `width` characters (broken at spaces)."""
    import textwrap

    return "\n".join(textwrap.wrap(label, width, break_on_hyphens=False)) or label


def _fit_labels(fig, ax) -> None:
    """Grow `fig` by the height its tick labels take below the axes (measured), so that the
    axes keep their height above them."""
    renderer = fig.canvas.get_renderer()
    heights = [t.get_window_extent(renderer).height for t in ax.get_xticklabels()]
    fig.set_figheight(fig.get_figheight() + max(heights, default=0.0) / fig.dpi)


_FIRST = ("case", "grid", "model", "layout", "kernel", "nz", "systems")  # shown as bare values


def row_labels(rows: list[PredictionRow]) -> list[str]:
    """One distinct label a row: its name and the params whose values differ between `rows`
    (`_FIRST`'s as bare values, first; the others as key=value, in the order rows give
    them); rows alike in all of them numbered (hunt 73: fabric-collectives' four ops on a
    grid were each "wafer_cycles 8x8", the op left out)."""
    keys: list[str] = []
    for p in rows:
        keys += [k for k in p.params if k not in keys]
    missing = object()
    varying = [k for k in keys if len({repr(p.params.get(k, missing)) for p in rows}) > 1]
    varying.sort(key=lambda k: _FIRST.index(k) if k in _FIRST else len(_FIRST))

    def label(p: PredictionRow) -> str:
        bits = [
            str(p.params[k]) if k in _FIRST else f"{k}={p.params[k]}"
            for k in varying
            if k in p.params
        ]
        return " ".join([p.name, *bits])

    labels = [label(p) for p in rows]
    seen: dict[str, int] = {}
    out = []
    for text in labels:
        if labels.count(text) > 1:
            seen[text] = seen.get(text, 0) + 1
            text = f"{text} #{seen[text]}"
        out.append(text)
    return out


def mechanism_text(mech: dict[str, float] | None) -> str:
    """ "simd 61% (1.2e+04), ...": each mechanism's share of the row's cycles, largest first."""
    if not mech:
        return ""
    total = sum(mech.values()) or 1.0
    order = sorted(mech.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v / total:.0%} ({v:.3g})" for k, v in order if v > 0)
