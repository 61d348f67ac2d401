"""`wse_systems.transformer.layer_matrices` (the formula the training predictor and the chunk
plan read) against `wse_models`' own parameter tree (the oracle): every matrix's group, name,
forward order and [n_in, n_out] for GPT-2 and Llama (grouped-query attention, own head_dim)."""

from __future__ import annotations

import pytest
import wse_models
from wse_systems.training.chunks import layer_shapes
from wse_systems.transformer import layer_matrices


@pytest.mark.parametrize(
    "name, overrides",
    [("gpt2-124m", {}), ("llama3-8b", {}), ("llama3-8b", {"head_dim": 96, "n_kv_heads": 4})],
)
def test_layer_matrices_are_the_models_parameter_tree(name, overrides):
    cfg = wse_models.preset_config(name, **overrides)
    shapes = wse_models.param_shapes(cfg)["layers"]
    want = [(g, n, *shapes[g][n].shape[1:]) for g, n in wse_models.layer_matrices(cfg)]
    assert [tuple(m) for m in layer_matrices(cfg)] == want
    mats, vectors = layer_shapes(cfg)
    assert sum(m.params for m in mats) + vectors == cfg.layer_params()
