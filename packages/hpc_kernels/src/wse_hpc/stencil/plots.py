"""Figures of a stencil run: a Z slice of the solution beside its history (matplotlib, Agg).
The wafer's name is drawn as typed and the PNG written by `wse_core.figures` (hunt 68)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from wse_core import RunReport  # noqa: E402
from wse_core.figures import plain, save_png  # noqa: E402

__all__ = ["plot_run"]


def plot_run(run: RunReport, path: str | Path) -> Path:
    """Write a PNG of a stencil run's report (`run_stencil(...).report`): the z = nz/2
    slice and the history (log scale when positive; BiCGSTAB's true residual checks as
    points)."""
    x = run.extra
    cfg = x["config"]
    slice_xy = np.asarray(x["slice_xy"], np.float32)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4), layout="tight")  # laid out in save_png
    vmax = float(abs(slice_xy).max()) or 1.0  # symmetric colours: zero is white
    im = ax0.imshow(slice_xy.T, origin="lower", cmap="RdBu_r", aspect="auto", vmin=-vmax, vmax=vmax)
    fig.colorbar(im, ax=ax0)
    ax0.set(
        title=f"{cfg['kind']}: u at z = {cfg['grid'][2] // 2}",
        xlabel="x (PE row)",
        ylabel="y (PE column)",
    )
    steps = [s for s, _ in x["history"]]
    values = [v for _, v in x["history"]]
    ax1.plot(steps, values, marker="o", ms=3)
    if x.get("true_history"):
        checks = x["true_history"]
        ax1.plot([c[0] for c in checks], [c[1] for c in checks], "s", label="true residual")
        ax1.legend()
    if all(v > 0 for v in values):
        ax1.set_yscale("log")
    label = "iteration" if cfg["kind"] == "bicgstab" else "step"
    ax1.set(title=x["metric"], xlabel=label)
    ax1.grid(True, alpha=0.3)
    nx, ny, nz = cfg["grid"]
    fig.suptitle(plain(f"{nx} x {ny} x {nz} on {cfg['preset']}, {cfg['dtype']}"))
    return save_png(fig, path, dpi=110)  # the CLI checked the nearest folder
