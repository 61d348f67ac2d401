"""Review 79 (L6): the line that refuses an unknown `model.` key was written twice, in the
file's read (`config_read._model_keys`) and in `session.model_config`; it is one function now
(`config.unknown_model_key`). Oracle: the line written out by hand, and both paths give it."""

from __future__ import annotations

import dataclasses
import types

import pytest
from wse_trainer.config import ConfigError, config_from_dict, unknown_model_key
from wse_trainer.session import model_config

FIELDS = (
    "arch, d_ff, d_model, dtype, head_dim, max_seq_len, mlp_activation, n_heads, "
    "n_kv_heads, n_layers, norm_eps, param_dtype, rope_scaling, rope_theta, "
    "tie_embeddings, vocab_size"
)  # fmt: skip (wse_models.ModelConfig's, name aside)


@pytest.mark.parametrize("key", ["d_modle", "colour"])
def test_the_file_and_the_session_refuse_an_unknown_model_key_in_one_line(key):
    line = unknown_model_key(key)
    if key == "d_modle":
        assert line == (f"unknown key model.d_modle (did you mean 'd_model'?); valid keys: "
                        f"preset, {FIELDS}")  # fmt: skip
    with pytest.raises(ConfigError) as read:
        config_from_dict({"model": {key: 3}})
    assert str(read.value) == line
    cfg = config_from_dict({})
    cfg = dataclasses.replace(cfg, model=types.MappingProxyType({"preset": "tiny-gpt2", key: 3}))
    with pytest.raises(ConfigError) as run:
        model_config(cfg)
    assert str(run.value) == line
