"""Hunt 66 hole 9: `wse_core.hw.repair`, the closed form of a spec's repair that the planners
now check (before, `defect_rate` moved no plan: a WSE-3 that `remap` cannot repair was priced
as a perfect grid). The oracle is the repair itself: `defect_map` + `remap` over seeds."""

from __future__ import annotations

import pytest
from wse_core import DefectError, defect_map, preset, remap
from wse_core.hw import repair
from wse_core.studies import wafer_yield

SMALL = preset("small")  # 32 x 32 PEs, 1 spare row, 2 spare columns, defect_rate 0.005


def _repaired(spec, rate: float, seeds: int = 400) -> float:
    """The fraction of seeded wafers `remap` repairs (what `wse wafer defects` runs)."""
    ok = 0
    for seed in range(seeds):
        try:
            remap(spec, defect_map(spec, seed, rate))
            ok += 1
        except DefectError:
            continue
    return ok / seeds


def test_the_largest_repairable_rate_repairs_the_median_wafer():
    rate = repair.max_repairable_rate(SMALL)
    assert repair.repair_probability(SMALL, rate) >= repair.REPAIR_PROBABILITY
    assert repair.repair_probability(SMALL, rate * 1.001) < repair.REPAIR_PROBABILITY
    # 400 seeded wafers: +-0.025 at one sigma; a third either side of the bound
    assert _repaired(SMALL, 0.7 * rate) > 0.75
    assert _repaired(SMALL, 1.4 * rate) < 0.25


def test_a_refusal_names_what_would_repair_it():
    broken = SMALL.replace(defect_rate=0.05)
    assert _repaired(broken, 0.05, seeds=100) == 0.0
    with pytest.raises(DefectError) as e:
        repair.check_repairable(broken)
    need = repair.spare_cols_needed(broken)
    assert need is not None and f"or spare_cols >= {need}" in str(e.value)
    assert repair.repair_probability(broken.replace(spare_cols=need)) >= 0.5
    assert repair.repair_probability(broken.replace(spare_cols=need - 1)) < 0.5
    assert "\n" not in str(e.value) and "defect_rate <= 0.0246" in str(e.value)


def test_presets_repair_and_one_closed_form_serves_the_experiment():
    for name in ("wse1", "wse2", "wse3", "tiny", "small", "demo"):
        assert repair.check_repairable(preset(name)) > 0.99
    assert repair.repair_probability(SMALL.replace(defect_rate=0.0)) == 1.0
    assert wafer_yield.predicted_repairable is repair.predicted_repairable
