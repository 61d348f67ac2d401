"""The wafer view as a PNG (matplotlib): the page's main layers side by side, for papers and
terminals.

Contract. `trace_figure(trace)` draws four panels of a `wse_core.trace.PeTrace` (a
matplotlib Figure, e.g. an experiment's extra figure) and `figure_png(trace, path)` writes
them (`wse view --png`): SRAM
in use per PE, busy cycles per PE with each phase's critical PE circled, link traffic (the
four directions' wavelets per PE) and defects and regions (detour hops, dead PEs at their
physical position, the first MAX_REGIONS regions outlined, the first MAX_LABELS named in at
most LABEL_CHARS characters: a PNG of any trace takes seconds). The trace's names are drawn
as typed (`wse_core.figures.plain`: a `$` is no mathtext). Sum layers in blocks are
drawn per PE (the block's mean), as on the page; each colour bar names its unit. Here, in
wse_core, so that the packages' experiments draw the same view as the CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from wse_core.figures import plain, save_png
from wse_core.trace.fields import sram_capacity

if TYPE_CHECKING:  # PeTrace.plot / _repr_html_ import this module
    from wse_core.trace.schema import PeTrace

__all__ = ["trace_figure", "figure_png", "per_pe"]


def per_pe(trace: PeTrace, key: str) -> np.ndarray:
    """The layer as shown: per PE (sum layers divided by the PEs in each block)."""
    a = trace.layers[key]
    spec = next(s for s in trace.header()["layers"] if s["key"] == key)
    if spec["reduction"] != "sum" or trace.block == 1:
        return a
    b = trace.block
    rows = np.minimum(b, trace.rows - b * np.arange(a.shape[0]))
    cols = np.minimum(b, trace.cols - b * np.arange(a.shape[1]))
    return a / np.outer(rows, cols)


def trace_figure(trace: PeTrace, title: str | None = None) -> Any:
    """The four panels as a pyplot Figure (`title` replaces the run's one-line summary)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    heading, b = title, trace.block
    skinny = max(trace.rows, trace.cols) > 4 * min(trace.rows, trace.cols)  # stretch a strip
    links = sum(per_pe(trace, f"link_{d}") for d in "NSEW")
    panels = [
        (
            "\n".join(filter(None, ("SRAM in use", sram_capacity(trace.meta)))),  # hunt 82 L2
            per_pe(trace, "sram_bytes"),
            "B per PE",
        ),
        ("busy cycles", per_pe(trace, "busy_cycles"), "cycles"),
        ("link traffic N+S+E+W", links, "wavelets per PE"),
        ("defects and regions", per_pe(trace, "detour_hops"), "detour hops per PE"),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), constrained_layout=True)
    extent = (-0.5, trace.cols - 0.5, trace.rows - 0.5, -0.5)
    for ax, (title, data, unit) in zip(axes.flat, panels, strict=True):
        im = ax.imshow(data, cmap="viridis", extent=extent, interpolation="nearest",
                       aspect="auto" if skinny else "equal")  # fmt: skip
        fig.colorbar(im, ax=ax, shrink=0.85, label=unit)
        ax.set_title(title)
        ax.set_xlabel("PE column")
        ax.set_ylabel("PE row")
    crit = sorted({tuple(p["critical_pe"]) for p in trace.phases if p["critical_pe"]})
    if crit:  # one marker per distinct PE, in one call (a header may list 10^5 phases)
        ys, xs = zip(*crit, strict=True)
        axes[0, 1].plot(xs, ys, "o", ls="none", mfc="none", mec="#ff4fd8")
        axes[0, 1].plot([], [], "o", mfc="none", mec="#ff4fd8", label="critical PE of a phase")
        axes[0, 1].legend(loc="lower right", fontsize=7)
    ax = axes[1, 1]
    if len(trace.dead):
        ax.plot(trace.dead[:, 1], trace.dead[:, 0], "s", ms=2.5, color="#ff3030", label="dead PE")
    colors = [plt.get_cmap("tab20")(k % 20) for k in range(MAX_REGIONS)]
    shown = trace.regions[:MAX_REGIONS]  # beyond: unreadable, and slow
    rects = (g["rect"] for g in shown)
    boxes = [Rectangle((c0 - 0.5, r0 - 0.5), nc, nr) for r0, c0, nr, nc in rects]
    ax.add_collection(  # one artist, clipped to the wafer (the view keeps the wafer's extent)
        PatchCollection(boxes, facecolor="none", edgecolor=colors[: len(boxes)], lw=1.2),
        autolim=False,
    )
    for n, g in enumerate(shown[:MAX_LABELS]):  # text is matplotlib's slow part: 1,000
        r0, c0 = g["rect"][:2]  # labels of 1,000 characters took 25 s
        ax.text(c0, r0, plain(_label(g["name"])), color=colors[n], fontsize=7, va="top",
                clip_on=True, in_layout=False)  # fmt: skip
    if len(trace.regions) > MAX_REGIONS:
        ax.plot([], [], " ", label=f"first {MAX_REGIONS} of {len(trace.regions):,} regions")
    if len(trace.dead) or len(trace.regions) > MAX_REGIONS:
        ax.legend(loc="lower right", fontsize=7)
    grid = f"{trace.rows} x {trace.cols} PEs" + (f", {b} x {b} blocks" if b > 1 else "")
    meta = trace.meta
    fig.suptitle(  # the trace's names as typed; the caller's heading as given
        heading
        or plain(
            f"{trace.name} on {trace.wafer} ({grid}): {meta.get('predicted_s', 0) * 1e6:.3g} "
            f"µs per {meta.get('units', 'run')}, {meta.get('bound', '-')}-bound"
        )
    )
    return fig


MAX_REGIONS = 200  # regions outlined on the PNG
MAX_LABELS = 40  # of those, the first ones named (at most LABEL_CHARS characters each)
LABEL_CHARS = 24


def _label(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"


def figure_png(trace: PeTrace, path: str | Path) -> Path:
    """Write `trace_figure(trace)` as a PNG; returns the path."""
    return save_png(trace_figure(trace), path, dpi=110)
