"""Hunt 70: the 8B decode check's plan was cached by the wafer spec alone, so a plan chosen
under an assumed calibration clock (`calibration.clock_hz`, which refits the calibration
that chooses the layout) was kept for the plain check afterwards: 5.27e-4 s a token where the
check prices 3.32e-4 (three decode-perf tests failed after one CLI test, by order alone). The
oracle: the plain check priced from an empty cache."""

from __future__ import annotations

from wse_core.cost.assumptions import assume
from wse_systems import published


def test_a_check_after_an_assumed_calibration_is_the_plain_check(monkeypatch):
    monkeypatch.setattr(published, "_CASES", {})
    fresh = published.decode_check_row()["model"]
    monkeypatch.setattr(published, "_CASES", {})  # the assumed plan chosen first
    with assume(**{"calibration.clock_hz": 1e9}):
        published.decode_check_row()
    assert published.decode_check_row()["model"] == fresh
