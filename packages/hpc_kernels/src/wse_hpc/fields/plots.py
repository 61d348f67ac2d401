"""The temperature of a CFD run as a PNG (matplotlib, Agg): the mid-plane of T (the cavity:
the speed |u| at cell centres), with the last Nusselt number and kinetic energy ("-" where
the run has none, as its JSON's null: `--steps 0`; hunt 68 drew "Nu nan, KE 0"). The axes
are the domain's, in the case's unit of length (rayleigh-benard: the layer height H; the
cavity: its side L), and the time is in the case's unit (H / U_ff, the free-fall time; L /
U_lid); the cavity, which solves no temperature, shows no Nusselt number (hunt 75: it drew
"Nu 1.0000" over axes in cells and a time without a unit)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from wse_core.figures import save_png  # noqa: E402

from wse_hpc.fields.vtk import to_centres  # noqa: E402

__all__ = ["plot_temperature"]


# case -> (unit of length, of time, of the plotted value)
UNITS = {
    "rayleigh-benard": ("H", "H/U_ff", "T / ΔT"),
    "cavity": ("L", "L/U_lid", "|u| / U_lid"),
}


def plot_temperature(run, path: str | Path) -> Path:
    """Write the PNG of a `run_cfd(...)` result; returns the path."""
    f, case = run.fields, run.config.case
    length, time_unit, label = UNITS[case]
    k = f["T"].shape[2] // 2
    three_d = f["T"].shape[2] > 1
    sides = run.report.extra["lengths"]  # the domain's sides in `length`
    if case == "cavity":  # the lid at y = 1, 2D and 3D: the x-y plane through the middle of z
        speed = sum(to_centres(f[n], a) ** 2 for a, n in enumerate("uvw"))
        image, cmap, up = np.sqrt(speed)[:, :, k], "viridis", 1
    elif three_d:  # rayleigh-benard 3D: the vertical x-z plane through the middle of y
        image, cmap, up = f["T"][:, f["T"].shape[1] // 2, :], "RdBu_r", 2
    else:
        image, cmap, up = f["T"][:, :, k], "RdBu_r", 1
    size = (8, 8 * sides[up] / sides[0] + 1)
    fig, ax = plt.subplots(figsize=size, layout="tight")  # laid out in save_png
    extent = (0.0, sides[0], 0.0, sides[up])
    im = ax.imshow(image.T, origin="lower", cmap=cmap, aspect="equal", extent=extent)
    fig.colorbar(im, ax=ax, label=label, shrink=0.8)
    step, t, nu, ke = run.history[-1] if run.history else (0, 0.0, None, None)
    heat = "" if case == "cavity" else f", Nu {_shown(nu, '.4f')}"  # no T: no Nusselt
    ax.set(title=f"{case}: step {step}, t {t:.3g} {time_unit}{heat}, KE {_shown(ke, '.3g')}",
           xlabel=f"x / {length}", ylabel=f"{'yz'[up - 1]} / {length}")  # fmt: skip
    return save_png(fig, path, dpi=100)  # the CLI checked the nearest folder


def _shown(value: float | None, spec: str) -> str:
    """`value` in `spec`, or "-" for none or a non-finite one (the house's missing value)."""
    return format(value, spec) if value is not None and np.isfinite(value) else "-"
