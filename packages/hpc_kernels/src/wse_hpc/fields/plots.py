"""The temperature of a CFD run as a PNG (matplotlib, Agg): the mid-plane of T (the cavity:
the speed |u| at cell centres), with the last Nusselt number and kinetic energy ("-" where
the run has none, as its JSON's null: `--steps 0`; hunt 68 drew "Nu nan, KE 0")."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from wse_core.figures import save_png  # noqa: E402

from wse_hpc.fields.vtk import to_centres  # noqa: E402

__all__ = ["plot_temperature"]


def plot_temperature(run, path: str | Path) -> Path:
    """Write the PNG of a `run_cfd(...)` result; returns the path."""
    f, case = run.fields, run.config.case
    k = f["T"].shape[2] // 2
    if case == "cavity":
        speed = sum(to_centres(f[n], a) ** 2 for a, n in enumerate("uvw"))
        image, label, cmap = np.sqrt(speed)[:, :, k], "|u|", "viridis"
    else:
        image, label, cmap = f["T"][:, :, k], "T", "RdBu_r"
    if f["T"].shape[2] > 1:  # 3D: the vertical x-z plane through the middle of y
        image = f["T"][:, f["T"].shape[1] // 2, :] if case != "cavity" else image
    size = (8, 8 * image.shape[1] / image.shape[0] + 1)
    fig, ax = plt.subplots(figsize=size, layout="tight")  # laid out in save_png
    im = ax.imshow(image.T, origin="lower", cmap=cmap, aspect="equal")
    fig.colorbar(im, ax=ax, label=label, shrink=0.8)
    step, t, nu, ke = run.history[-1] if run.history else (0, 0.0, None, None)
    ax.set(title=f"{case}: step {step}, t {t:.3g}, Nu {_shown(nu, '.4f')}, KE {_shown(ke, '.3g')}",
           xlabel="x (PE row)", ylabel="vertical")  # fmt: skip
    return save_png(fig, path, dpi=100)  # the CLI checked the nearest folder


def _shown(value: float | None, spec: str) -> str:
    """`value` in `spec`, or "-" for none or a non-finite one (the house's missing value)."""
    return format(value, spec) if value is not None and np.isfinite(value) else "-"
