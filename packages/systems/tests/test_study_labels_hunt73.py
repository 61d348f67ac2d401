"""Hunt 73, the labels of wse_systems' experiments. Broken before:

- `trtllm-h100`'s 46 rows the GPU fractions are fitted on had role "fitted", outside the
  documented vocabulary ("fits K", "check", "prediction": docs/experiments.md,
  `wse_core.studies.experiment.row_role`); now "fits FITTED_MFU, FITTED_HBM_FRACTION".
- `cost-model-calibration`'s ratio column was model / published in Gcell/s (200 x 200: 0.985,
  the model slow) while its leave-one-out error was model / published - 1 in seconds (+1.6%
  for the same grid, slow too): one table and figure, opposite senses. Both are now in the
  prediction row's unit, model / published.
- its busy-share row's source said "(calibration, check)" beside its role "fits
  dsd_issue_cycles".

Oracles: the documented vocabulary as a regular expression, the rows' own inputs (a row is
fitted on where input <= output length: docs/references/calibration-rows.md), Table II's
cells over the run's seconds (Gcell/s by definition), and a property of any fit: a row left
out is predicted at least as far from its figure, on the same side, as with it in.
"""

from __future__ import annotations

import json
import re

import pytest
from wse_core.cost.calibration import STENCIL_NZ, STENCIL_STEPS, leave_one_out
from wse_core.studies.experiment import results_json, row_role
from wse_systems.serving import gpu_step as gs
from wse_systems.serving import trtllm_h100 as tr
from wse_systems.studies import calibration_check as cc
from wse_systems.studies import trtllm_h100 as study

# docs/experiments.md: "fits K" (K a constant's name; several together, comma-separated),
# "check" or "prediction"
ROLE = re.compile(r"fits (?P<keys>[A-Za-z_][\w.]*(?:, [A-Za-z_][\w.]*)*)|check|prediction")


def _fitted_constants(role: str) -> list[str]:
    m = ROLE.fullmatch(role)
    assert m, f"role {role!r} is outside the documented vocabulary"
    return m["keys"].split(", ") if m["keys"] else []


@pytest.fixture
def cheap_fit(monkeypatch):
    """The fit (about 4 s a kernel cost) as a stand-in: the labels are what is checked."""
    monkeypatch.setattr(tr, "fit", lambda kernel_s=None: (0.3, 0.7, 0.2))
    sweep = [{"kernel_s": gs.KERNEL_S, "mfu": 0.3, "hbm_fraction": 0.7, "rms_fitted": 0.2,
              "rms_checks": 0.3}]  # fmt: skip
    monkeypatch.setattr(tr, "fit_over_floor", lambda: sweep)


def test_trtllm_roles_are_the_documented_vocabulary(cheap_fit):
    result = study.run(quick=True, seed=0)
    rows = json.loads(results_json(result))["predictions"]
    assert len(rows) == len(tr.ROWS) == 63
    for r in rows:
        keys = _fitted_constants(r["role"])
        assert r["role"] == r["params"]["role"]  # one label, in the table's column and params
        # the documented rule: fitted on a row whose input is at most its output length
        assert bool(keys) == (r["params"]["input_tokens"] <= r["params"]["output_tokens"])
        assert all(isinstance(getattr(gs, k), float) for k in keys)  # constants that exist
    fits = [r for r in rows if r["role"].startswith("fits ")]
    assert len(fits) == 46 and {r["role"] for r in fits} == {study.FITS}
    assert _fitted_constants(study.FITS) == ["FITTED_MFU", "FITTED_HBM_FRACTION"]
    counted = {m["role"]: m["rows"] for m in result.measurements if "role" in m}
    assert counted == {study.FITS: 46, "check": 17}


def _ratio(p) -> float:
    return p.value / p.published


def test_calibration_leave_one_out_reads_in_the_ratio_s_sense():
    result = cc.run(quick=True, seed=0)
    preds = {p.params["case"]: p for p in result.predictions}
    loo = [m for m in result.measurements if m["kind"] == "leave_one_out"]
    seconds = {r["case"]: r for r in leave_one_out()}  # the fit's own table, in seconds
    # 10 WSE-2 rows and 10 of WaferLLM's MeshGEMV on a CS-3 (session 83); 12 of them since
    # issue 41 (two Mt = 8 rows fit CS-3's DSD issue)
    assert len(loo) == len(seconds) == 22
    for m in loo:
        p = preds[m["case"]]
        assert m["quantity"] == (p.unit or "busy share")  # the prediction row's unit
        assert m["published"] == pytest.approx(p.published, rel=1e-12)
        assert m["error_without_row"] == pytest.approx(
            m["model_without_row"] / m["published"] - 1, rel=1e-12, abs=1e-15
        )
    stencil = [m for m in loo if m["quantity"] == "Gcell/s"]
    assert len(stencil) == 8
    for m in stencil:
        nx, ny = map(int, m["case"].split()[1].split("x"))
        cells = nx * ny * STENCIL_NZ * STENCIL_STEPS  # Gcell/s = cells / s / 1e9
        gcells = cells / float(seconds[m["case"]]["model_without_row"]) / 1e9
        assert m["model_without_row"] == pytest.approx(gcells, rel=1e-12)
        # a row left out is predicted at least as far off as with it in, on the same side:
        # the ratio's sense and the leave-one-out's agree (in seconds they disagreed)
        with_row = _ratio(preds[m["case"]]) - 1
        assert m["error_without_row"] * with_row > 0
        assert abs(m["error_without_row"]) >= abs(with_row)
    worst = min(stencil, key=lambda m: m["error_without_row"])  # 200 x 200, the model slow
    assert worst["case"] == "stencil25 200x200" and _ratio(preds[worst["case"]]) < 1
    left = result.figure.axes[1].get_ylabel()
    assert "model / published - 1" in left and "%" in left


def test_calibration_sources_say_no_role_of_their_own():
    for p in cc.run_predictions():
        role = row_role(p)
        _fitted_constants(role)
        # the source says where the figure comes from; the role alone says what it is to the
        # calibration (the busy share's said "check" beside "fits dsd_issue_cycles")
        assert "calibration set" in p.source
        assert not re.search(r"\bcheck\b|\bfits?\b", p.source), (role, p.source)
    busy = next(p for p in cc.run_predictions() if p.name == "busy_share")
    assert row_role(busy) == "fits dsd_issue_cycles"
