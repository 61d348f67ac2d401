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

__all__ = ["LLAMA3_8B_HF", "hf_model", "hf_logits", "np_mlp_preactivation", "random_tokens",
           "tiny_config"]  # fmt: skip

# Llama 3.1 8B's config.json (its shape; no weights): the base a test edits one field of
LLAMA3_8B_HF: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}  # fmt: skip


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


def _np_norm(config: ModelConfig, p: dict, x: np.ndarray) -> np.ndarray:
    if config.arch == "gpt2":
        x = x - x.mean(-1, keepdims=True)
        return (
            x / np.sqrt((x**2).mean(-1, keepdims=True) + config.norm_eps) * p["scale"] + p["bias"]
        )
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + config.norm_eps) * p["scale"]


def _np_rope(config: ModelConfig, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    hd = config.hd
    inv = 1.0 / config.rope_theta ** (np.arange(0, hd, 2) / hd)
    ang = positions[..., None, None] * inv  # [b, t, 1, hd/2]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    return np.concatenate(
        [x1 * np.cos(ang) - x2 * np.sin(ang), x2 * np.cos(ang) + x1 * np.sin(ang)], -1
    )


def np_mlp_preactivation(
    config: ModelConfig, layer_params: Any, h: Any, positions: Any, segment_ids: Any = None
) -> np.ndarray:
    """The pre-activation whose sign decides the MLP's zeros, in float64 NumPy from the
    weights: one layer's input h [b, t, d] -> gpt2's up projection, or llama's gate
    projection, [b, t, d_ff] (ReLU-like activations are 0 exactly where it is <= 0).
    Written independently of `wse_models.decoder` (no RoPE scaling): the sparsity oracle."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), layer_params)
    h, pos = np.asarray(h, np.float64), np.asarray(positions)
    b, t, _ = h.shape
    a, x = p["attn"], _np_norm(config, p["attn_norm"], h)
    q = (x @ a["wq"] + a.get("bq", 0)).reshape(b, t, config.n_heads, config.hd)
    k = (x @ a["wk"] + a.get("bk", 0)).reshape(b, t, config.n_kv_heads, config.hd)
    v = (x @ a["wv"] + a.get("bv", 0)).reshape(b, t, config.n_kv_heads, config.hd)
    if config.arch == "llama":
        q, k = _np_rope(config, q, pos), _np_rope(config, k, pos)
    group = config.n_heads // config.n_kv_heads
    k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(config.hd)
    mask = np.tril(np.ones((t, t), bool))[None]
    if segment_ids is not None:
        seg = np.asarray(segment_ids)
        mask = mask & (seg[:, :, None] == seg[:, None, :])
    scores = np.where(mask[:, None], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = np.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, -1)
    h = h + out @ a["wo"] + a.get("bo", 0)
    m, x = p["mlp"], _np_norm(config, p["mlp_norm"], h)
    return x @ m["w_up"] + m["b_up"] if config.arch == "gpt2" else x @ m["w_gate"]
