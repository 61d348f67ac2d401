"""The core's experiments: reproducible, in DESIGN.md's format, measured against closed form."""

import json

import numpy as np
from wse_core import write_experiment
from wse_core.studies import fabric_collectives, wafer_yield


def test_wafer_yield_monte_carlo_matches_closed_form_and_is_seeded(tmp_path):
    a = wafer_yield.run(quick=True, seed=3)
    b = wafer_yield.run(quick=True, seed=3)
    assert a.to_dict() == b.to_dict()
    for m, p in zip(a.measurements, a.predictions, strict=True):
        n = m["wafers"]
        # Binomial standard error of the measured fraction, 5 sigma plus the finite-n floor.
        tol = 5 * np.sqrt(max(p.value * (1 - p.value), 1 / n) / n)
        assert abs(m["repairable_fraction"] - p.value) <= tol, (m, p)
    folder = write_experiment(a, tmp_path)
    data = json.loads((folder / "results.json").read_text())
    assert set(data) == {"experiment", "seed", "config", "measurements", "predictions"}
    keys = {"name", "value", "unit", "params", "published", "source", "role", "ratio"}
    assert set(data["predictions"][0]) == keys
    # No published figure and no role given: a prediction; the table says so per row.
    assert data["predictions"][0]["role"] == "prediction"
    assert "| name | role |" in (folder / "table.md").read_text()
    for f in ("table.md", "table.csv", "figure.png"):
        assert (folder / f).stat().st_size > 0


def test_fabric_collectives_predictions_do_not_depend_on_quick(monkeypatch):
    monkeypatch.setattr(fabric_collectives, "GRIDS", ((8, 8), (16, 24)))
    quick = fabric_collectives.run(quick=True, seed=0)
    assert all("run_ms" in m for m in quick.measurements)
    monkeypatch.setattr(fabric_collectives, "_measure", lambda *a, **k: {})
    full = fabric_collectives.run(quick=False, seed=0)
    assert [p.to_dict() for p in quick.predictions] == [p.to_dict() for p in full.predictions]
    # Allreduce latency grows with the grid; a shift's does not.
    us = {
        (p.params["grid"], p.params["op"]): p.value
        for p in full.predictions
        if p.name == "wafer_us"
    }
    assert us[("16x24", "allreduce")] > us[("8x8", "allreduce")]
    assert us[("16x24", "shift")] == us[("8x8", "shift")]
