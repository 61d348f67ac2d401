"""Hunt 75: the cavity's PNG said "Nu 1.0000" (it solves no temperature; its JSON's nusselt
is null), its axes were cell indices ("x (PE row)", "vertical") and its time had no unit.
Now the cavity shows no Nusselt number, the axes span the domain in the case's unit of length
(rayleigh-benard: the layer height H, the domain aspect x 1 in 2D, the x-z plane in 3D; the
cavity: the unit square of side L) and the time carries its unit. Oracles: the domain as
the cases define it (`convection`: height 1, width `aspect`; `cavity`: the unit square or
cube), the figure read back before it is written."""

from __future__ import annotations

import pytest
from wse_core import PRESETS
from wse_hpc.fields import plots
from wse_hpc.fields.runs import CfdConfig, run_cfd


def _figure(monkeypatch, tmp_path, case, grid, **kw):
    seen = {}

    def keep(fig, path, **_):
        seen["fig"] = fig
        return path

    monkeypatch.setattr(plots, "save_png", keep)
    cfg = CfdConfig(case=case, grid=grid, spec=PRESETS["tiny"], steps=2, **kw)
    run = run_cfd(cfg)
    plots.plot_temperature(run, tmp_path / "f.png")
    return run, seen["fig"].axes[0]


@pytest.mark.parametrize(
    ("case", "grid", "kw", "extent", "labels", "time_unit"),
    [
        ("cavity", (8, 8, 1), {}, (0, 1, 0, 1), ("x / L", "y / L"), "L/U_lid"),
        ("rayleigh-benard", (8, 4, 1), {"aspect": 2.0}, (0, 2, 0, 1), ("x / H", "y / H"),
         "H/U_ff"),
        ("rayleigh-benard", (6, 6, 3), {"aspect": 3.0}, (0, 3, 0, 1), ("x / H", "z / H"),
         "H/U_ff"),
    ],
)  # fmt: skip
def test_axes_in_the_domain_and_nusselt_only_with_temperature(
    monkeypatch, tmp_path, case, grid, kw, extent, labels, time_unit
):
    run, ax = _figure(monkeypatch, tmp_path, case, grid, **kw)
    assert ax.get_images()[0].get_extent() == pytest.approx(list(extent))
    assert (ax.get_xlabel(), ax.get_ylabel()) == labels
    title = ax.get_title()
    step, t, _, _ = run.history[-1]
    assert title.startswith(f"{case}: step {step}, t {t:.3g} {time_unit}")
    assert ("Nu" in title) == (case != "cavity")
    assert (run.report.extra["nusselt"] is None) == (case == "cavity")
