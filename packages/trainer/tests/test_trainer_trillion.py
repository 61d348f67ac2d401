"""Trillion-parameter plans: the shipped 1T and 24T configs, the SwarmX tree, the
`trillion-scaling` experiment's rows, the knobs' bad values."""

import pytest
from wse_core import SpecError, preset
from wse_systems.training.stream_cost import tree_levels
from wse_trainer.config import ConfigError, load_config
from wse_trainer.run import validate


@pytest.mark.parametrize(("name", "n_params"), [("llama_1t", 1.198e12), ("llama_24t", 24.14e12)])
def test_the_shipped_trillion_configs_plan_below_the_layer(name, n_params):
    cfg = load_config(name)
    model, plan = validate(cfg, preset(cfg.runconfig.wafer))
    assert model.num_params() == pytest.approx(n_params, rel=1e-3)
    s = plan.streaming
    assert s is not None and s.chunked and "a whole layer needs" in s.chunks.reason
    # SRAM: every allocation of the plan fits a WSE-3 PE
    assert s.sram["used_bytes_per_pe"] <= preset("wse3").sram_bytes_per_pe
    # MemoryX: fp32 masters and two Adam slots, within the 1.2 PB of the wse3 preset
    assert plan.memoryx_bytes == 12 * model.num_params() <= 1.2e15


def test_swarmx_tree_levels_follow_the_fanout():
    assert [tree_levels(n) for n in (1, 2, 3, 4, 16, 2048)] == [0, 1, 2, 2, 4, 11]
    assert [tree_levels(n, 4.0) for n in (1, 4, 5, 16, 2048)] == [0, 1, 2, 2, 6]
    with pytest.raises(SpecError, match="swarmx_fanout must be >= 2"):
        preset("wse3").replace(swarmx_fanout=1)
    with pytest.raises(SpecError, match="memoryx_capacity_bytes must be a positive number"):
        preset("wse3").replace(memoryx_capacity_bytes=0)


@pytest.mark.parametrize("key", ["weight_chunks", "activation_stride"])
def test_negative_plan_knobs_are_config_errors(key):
    with pytest.raises(ConfigError, match=f"runconfig.{key} must be >= 0"):
        validate(load_config("tiny", [f"runconfig.{key}=-1"]), preset("small"))


def test_trillion_scaling_rows_are_the_ratios_of_their_own_predictions():
    from wse_trainer.studies.trillion_scaling import SYSTEMS, _predictions

    rows, reports, assumptions = _predictions()
    by = {(r.name, r.params["systems"]): r.value for r in rows}
    one = by[("tokens_per_s", 1)]
    for n in SYSTEMS:
        assert by[("tokens_per_s", n)] == pytest.approx(n * 3 * 8192 / by[("step_s", n)])
        assert by[("speedup", n)] == pytest.approx(by[("tokens_per_s", n)] / one)
        assert by[("scaling_efficiency", n)] == pytest.approx(by[("speedup", n)] / n)
        assert 0.99 < by[("scaling_efficiency", n)] <= 1.0
    assert all(r.published is None for r in rows)  # no calibration-set figure to compare
    assert {"memoryx_capacity_bytes", "swarmx_fanout", "below the layer"} <= set(assumptions)
    assert [r.systems for r in reports] == list(SYSTEMS)
