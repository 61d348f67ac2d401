"""Trillion-parameter plans: the shipped 1T and 24T configs, the SwarmX tree, the
`trillion-scaling` experiment's rows, the knobs' bad values."""

import numpy as np
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


def test_trillion_scaling_draws_strong_and_weak_curves_that_can_lose():
    """Both curves from 1 to 64 CS-3 (global batch 64 x 4096, or 64 per system): each row
    is the ratio of its own predictions, speedup <= N; under strong scaling one sequence per
    system at 64 systems streams more weight bytes than its compute hides, so the weight
    stream sets the step (hand floor: every layer's matrices streamed three times a
    micro-batch, forward, inner recompute and backward, 2 bytes each at 150 GB/s) and the
    efficiency falls well below one: no > 0.99 lock."""
    import wse_models
    from wse_trainer.studies.trillion_scaling import SYSTEMS, _rows, curves

    by = curves()
    for name, points in by.items():
        assert [p.systems for p in points] == list(SYSTEMS)
        one = points[0]
        for p in points:
            batch = 64 // p.systems if name == "strong" else 64
            assert p.batch_per_system == batch and batch % p.micro_batch == 0
            assert p.tokens_per_s == pytest.approx(p.systems * batch * 4096 / p.step_s)
            assert p.speedup == pytest.approx(p.tokens_per_s / one.tokens_per_s)
            assert p.efficiency == pytest.approx(p.speedup / p.systems)
            assert p.speedup <= p.systems and p.exposed_s == pytest.approx(p.step_s - p.compute_s)
            if p.systems > 1:
                assert p.speedup < p.systems  # the tree's latency rides on exposed streams
    from wse_trainer.run import model_config

    cfg = model_config(load_config("llama_1t"))
    mats = sum(int(np.prod(shape)) for shape in _matrix_shapes(cfg, wse_models))
    last = by["strong"][-1]
    assert last.micro_batch == 1 and last.bound == "weights_in"
    assert last.step_s >= last.weights_in_s >= 128 * 3 * mats * 2 / 150e9
    assert last.efficiency < 0.8 and by["weak"][-1].efficiency > 0.99
    rows = _rows(by)
    assert all(r.published is None for r in rows)  # no calibration-set figure to compare
    assert {r.params["scaling"] for r in rows} == {"strong", "weak"}


def _matrix_shapes(cfg, wse_models):
    """Each layer matrix's shape, from the model's own parameter tree (abstractly)."""
    import jax

    params = jax.eval_shape(lambda: wse_models.init_params(cfg, jax.random.key(0)))
    layers = params["layers"]
    return [layers[g][m].shape[1:] for g, m in wse_models.layer_matrices(cfg)]
