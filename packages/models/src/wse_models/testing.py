"""Test helpers: tiny random `transformers` models as oracles, and cache-equivalence drivers.

Importing this module does not import torch or transformers; the `hf_*` functions do (tests
skip when they are missing). Nothing is downloaded: models are built from configs with random
weights.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from wse_models.config import ModelConfig
from wse_models.hf_config import config_to_hf

__all__ = ["hf_model", "hf_logits", "random_tokens", "tiny_config"]


def tiny_config(arch: str, **overrides: Any) -> ModelConfig:
    """A tiny config (d_model 32-64, 2-3 layers, odd vocab) for fast tests."""
    if arch == "gpt2":
        base = dict(arch="gpt2", vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4,
                    d_ff=128, max_seq_len=64)  # fmt: skip
    else:
        base = dict(arch="llama", vocab_size=101, d_model=64, n_layers=3, n_heads=4,
                    n_kv_heads=2, d_ff=96, max_seq_len=64, rope_theta=10000.0)  # fmt: skip
    base.update(overrides)
    return ModelConfig(**base)


def random_tokens(config: ModelConfig, batch: int, seq: int, seed: int = 0) -> jax.Array:
    """Int32 token ids [batch, seq] uniform over the vocabulary."""
    return jax.random.randint(jax.random.key(seed), (batch, seq), 0, config.vocab_size, jnp.int32)


def hf_model(config: ModelConfig, seed: int = 0) -> Any:
    """A random-weight transformers model (eval mode, fp32) with the same architecture."""
    import torch
    import transformers

    torch.manual_seed(seed)
    d = {k: v for k, v in config_to_hf(config).items() if k not in ("dtype", "torch_dtype")}
    d.update(bos_token_id=None, eos_token_id=None)  # GPT-2's 50256 is outside a tiny vocab
    d["initializer_range"] = 0.1  # logits of order 1-10, so a wrong detail shows
    if config.arch == "gpt2":
        hf_cfg = transformers.GPT2Config(**d)
        model = transformers.GPT2LMHeadModel(hf_cfg)
    else:
        hf_cfg = transformers.LlamaConfig(**d)
        model = transformers.LlamaForCausalLM(hf_cfg)
    with torch.no_grad():  # non-trivial norms and biases, so a swapped tensor shows
        for name, p in model.named_parameters():
            if "norm" in name or "ln_" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model.float().eval()


def hf_logits(model: Any, tokens: Any) -> np.ndarray:
    """Logits [b, s, vocab] of a transformers model for int token ids, as float32 numpy."""
    import torch

    with torch.no_grad():
        ids = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
        return model(input_ids=ids).logits.float().numpy()
