"""Hunt 81: `wafer-yield`'s measured fraction is what `defects.remap` repairs.

Broken before: `simulate` drew Binomial dead counts per row and applied the closed form's own
rule to them (`dead <= spare_cols`, enough good rows), so its dots were a Monte Carlo of the
formula the lines draw: a regression in `remap` left the experiment green. Now every wafer's
map is drawn by `defect_map` and repaired, or refused, by `remap`.

Oracles: the closed form (`repair.predicted_repairable`, itself checked against SciPy by the
hunt) within 4 binomial standard errors, and a `remap` broken on purpose (a row retired one
dead PE later than the spares allow) that the measurement must catch.
"""

import math

import numpy as np
import pytest
from wse_core import preset
from wse_core.hw import defects
from wse_core.hw.repair import predicted_repairable
from wse_core.studies import wafer_yield

SPEC = preset("small").replace(spare_rows=2, spare_cols=3)  # 32 x 32 PEs and their spares
RATE, WAFERS = 0.04, 400  # P(repair) 0.76 in closed form


def _sigma(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)


def test_the_measured_fraction_is_remaps_and_meets_the_closed_form():
    calls = []

    def counted(spec, dead):
        calls.append(dead.dead.shape)
        return defects.remap(spec, dead)

    mp = pytest.MonkeyPatch()
    mp.setattr(wafer_yield, "remap", counted)
    try:
        frac, usable = wafer_yield.simulate(SPEC, RATE, WAFERS, np.random.default_rng(0))
    finally:
        mp.undo()
    assert calls == [(34, 35)] * WAFERS  # every wafer's physical map went through remap
    p = predicted_repairable(32, 32, 2, 3, RATE)
    assert abs(frac - p) <= 4 * _sigma(p, WAFERS), (frac, p)
    assert usable == frac * SPEC.num_pes  # the logical grid where it repairs, none elsewhere


def test_a_broken_remap_is_caught():
    def lax(spec, dead):  # retires a row only past spare_cols + 1 dead PEs: repairs too often
        return defects.remap(spec.replace(spare_cols=spec.spare_cols + 1), _trimmed(dead))

    def _trimmed(dead):  # the map one spare column wider, that column alive
        wide = np.concatenate([dead.dead, np.zeros((dead.dead.shape[0], 1), bool)], axis=1)
        return defects.DefectMap(dead=wide, seed=dead.seed, rate=dead.rate)

    mp = pytest.MonkeyPatch()
    mp.setattr(wafer_yield, "remap", lax)
    try:
        frac, _ = wafer_yield.simulate(SPEC, RATE, WAFERS, np.random.default_rng(0))
    finally:
        mp.undo()
    p = predicted_repairable(32, 32, 2, 3, RATE)
    assert frac - p > 4 * _sigma(p, WAFERS), (frac, p)  # the dots leave the line


def test_the_experiment_reports_remaps_fractions_with_their_error():
    res = wafer_yield.run(quick=True, seed=1)
    for m, p in zip(res.measurements, res.predictions, strict=True):
        n = m["wafers"]
        assert m["standard_error"] == pytest.approx(
            math.sqrt(m["repairable_fraction"] * (1 - m["repairable_fraction"]) / n)
        )
        assert m["usable_fraction"] == pytest.approx(m["repairable_fraction"])  # grid or none
        assert abs(m["repairable_fraction"] - p.value) <= 5 * math.sqrt(
            max(p.value * (1 - p.value), 1 / n) / n
        )
