"""The functional decoder: pure functions of (config, params, arrays), one layer at a time.

    h = embed(config, params, tokens, positions)                 # [b, s, d]
    h, cache = apply_layers(config, params["layers"], h, positions, cache)   # lax.scan
    logits = unembed(config, params, h)                          # [b, s, vocab] float32

`apply_layer` runs ONE layer (weight streaming: the trainer takes `jax.vjp` through it);
`apply_layers` scans any contiguous stack of layers (a pipeline stage); `forward` is the three
above and equals applying the layers one by one. Tokens are int32 [b, s]; positions int32
[b, s] (absolute, per row; default 0..s-1). Compute runs in `config.dtype` with parameters
cast at use (they may be stored in fp32 or bf16); norms, softmax and RoPE angles run in fp32
as in HF, and logits come back in float32. fp32 compute uses HIGHEST matmul precision (no
TF32 on GPUs), so fp32 logits match the reference implementation to ~1e-6.
Nothing here jits: the shell decides.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from wse_models.cache import KVCache, LayerCache, write_cache
from wse_models.config import ModelConfig
from wse_models.errors import ModelError
from wse_models.params import Params

__all__ = [
    "apply_layer",
    "apply_layers",
    "default_positions",
    "embed",
    "forward",
    "rope_inv_freq",
    "unembed",
]

_MASKED = -1e30  # finite, so a fully masked (padding) row gives a uniform mix, not NaN


def _w(x: jax.Array, config: ModelConfig) -> jax.Array:
    return x.astype(config.dtype)


def _prec(config: ModelConfig) -> lax.Precision:
    """fp32 compute means true fp32 matmuls (no TF32 on GPUs); bf16 takes the default."""
    return lax.Precision.HIGHEST if config.dtype == "float32" else lax.Precision.DEFAULT


def _norm(config: ModelConfig, p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    if config.arch == "gpt2":
        mean = x32.mean(-1, keepdims=True)
        var = jnp.square(x32 - mean).mean(-1, keepdims=True)
        y = (x32 - mean) * lax.rsqrt(var + config.norm_eps)
        y = y * p["scale"].astype(jnp.float32) + p["bias"].astype(jnp.float32)
        return y.astype(config.dtype)
    y = x32 * lax.rsqrt(jnp.square(x32).mean(-1, keepdims=True) + config.norm_eps)
    return y.astype(config.dtype) * _w(p["scale"], config)


def rope_inv_freq(config: ModelConfig) -> jax.Array:
    """RoPE inverse frequencies [head_dim / 2] (with Llama 3.1 "llama3" scaling if set)."""
    hd = config.hd
    inv = 1.0 / (config.rope_theta ** (jnp.arange(0, hd, 2, dtype=jnp.float32) / hd))
    sc = config.rope_scaling
    if sc is None:
        return inv
    old = sc.original_max_position_embeddings
    wavelen = 2 * math.pi / inv
    scaled = jnp.where(wavelen > old / sc.low_freq_factor, inv / sc.factor, inv)
    smooth = (old / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor)
    smoothed = (1 - smooth) * scaled / sc.factor + smooth * scaled
    medium = (wavelen >= old / sc.high_freq_factor) & (wavelen <= old / sc.low_freq_factor)
    return jnp.where(medium, smoothed, scaled)


def _rope(config: ModelConfig, x: jax.Array, positions: jax.Array) -> jax.Array:
    """Rotate x [b, t, heads, hd] by angle position * inv_freq, HF rotate-half layout."""
    ang = positions.astype(jnp.float32)[..., None] * rope_inv_freq(config)  # [b, t, hd/2]
    cos, sin = jnp.cos(ang)[:, :, None, :], jnp.sin(ang)[:, :, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


def default_positions(tokens: jax.Array) -> jax.Array:
    """Positions 0..s-1 for every row of tokens [b, s]."""
    b, s = tokens.shape
    return jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))


def _gather(table: jax.Array, ids: jax.Array) -> jax.Array:
    """Rows of `table` [n, d] at `ids` [b, s] -> [b, s, d]; out of range gives NaN.

    On a mesh with Explicit axes the output sharding of a gather is ambiguous, so the rows
    follow the ids' sharding (e.g. batch over "data"), with d unsharded.
    """
    sharding = jax.typeof(ids).sharding
    spec = getattr(sharding, "spec", None)
    out = None
    if spec is not None and any(s is not None for s in spec):
        out = NamedSharding(sharding.mesh, P(*spec, None))
    return table.at[ids].get(out_sharding=out, mode="fill", fill_value=jnp.nan)


def embed(config: ModelConfig, params: Params, tokens: jax.Array, positions: jax.Array):
    """Token (and GPT-2 position) embedding: int32 [b, s] -> h [b, s, d] in config.dtype."""
    _check_tokens(config, tokens, positions)
    h = _gather(params["embed"]["tok"], tokens)
    if config.arch == "gpt2":
        h = h + _gather(params["embed"]["pos"], jnp.maximum(positions, 0))
    return _w(h, config)


def _proj(config: ModelConfig, x: jax.Array, p: dict, w: str, b: str) -> jax.Array:
    y = jnp.matmul(x, _w(p[w], config), precision=_prec(config))
    return y + _w(p[b], config) if b in p else y


def _attend(config: ModelConfig, q, keys, vals, mask) -> jax.Array:
    """q [b, t, H, hd]; keys/vals [b, s, KV, hd]; mask [b, t, s] -> [b, t, H * hd]."""
    b, t, h, hd = q.shape
    kv = keys.shape[2]
    q = q.reshape(b, t, kv, h // kv, hd)
    scores = jnp.einsum(
        "btkgd,bskd->bkgts", q, _w(keys, config), preferred_element_type=jnp.float32,
        precision=_prec(config),
    )  # fmt: skip
    scores = jnp.where(mask[:, None, None], scores / math.sqrt(hd), _MASKED)
    probs = jax.nn.softmax(scores, axis=-1).astype(config.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, _w(vals, config), precision=_prec(config))
    return out.reshape(b, t, h * hd)


def _attention(config, p, x, positions, cache: LayerCache | None):
    b, t, _ = x.shape
    q = _proj(config, x, p, "wq", "bq").reshape(b, t, config.n_heads, config.hd)
    k = _proj(config, x, p, "wk", "bk").reshape(b, t, config.n_kv_heads, config.hd)
    v = _proj(config, x, p, "wv", "bv").reshape(b, t, config.n_kv_heads, config.hd)
    if config.arch == "llama":
        q, k = _rope(config, q, positions), _rope(config, k, positions)
    if cache is None:
        keys, vals, kpos = k, v, positions
    else:
        cache = write_cache(cache, k, v, positions)
        keys, vals = cache.k, cache.v
        kpos = jnp.broadcast_to(jnp.arange(keys.shape[1]), (b, keys.shape[1]))
    mask = (kpos[:, None, :] <= positions[:, :, None]) & (kpos[:, None, :] >= 0)
    out = _attend(config, q, keys, vals, mask)
    return _proj(config, out, p, "wo", "bo"), cache


def _mlp(config: ModelConfig, p: dict, x: jax.Array) -> jax.Array:
    up = _proj(config, x, p, "w_up", "b_up")
    if config.arch == "gpt2":
        hidden = jax.nn.gelu(up, approximate=True)  # HF "gelu_new"
    else:
        gate = jnp.matmul(x, _w(p["w_gate"], config), precision=_prec(config))
        hidden = jax.nn.silu(gate) * up
    return _proj(config, hidden, p, "w_down", "b_down")


def apply_layer(
    config: ModelConfig,
    layer_params: Params,
    h: jax.Array,
    positions: jax.Array,
    cache: LayerCache | None = None,
) -> tuple[jax.Array, LayerCache | None]:
    """One pre-norm transformer layer: h [b, t, d] -> (h, that layer's updated cache)."""
    if cache is not None and not isinstance(cache, LayerCache):
        cache = LayerCache(*cache)
    a, cache = _attention(config, layer_params["attn"], _norm(config, layer_params["attn_norm"], h),
                          positions, cache)  # fmt: skip
    h = h + a
    h = h + _mlp(config, layer_params["mlp"], _norm(config, layer_params["mlp_norm"], h))
    return h, cache


def apply_layers(
    config: ModelConfig,
    stacked_layer_params: Params,
    h: jax.Array,
    positions: jax.Array,
    cache: KVCache | None = None,
) -> tuple[jax.Array, KVCache | None]:
    """`apply_layer` over a stack of layers with `lax.scan` (cache: the same layers' KVCache)."""
    if cache is None:

        def body(x, lp):
            return apply_layer(config, lp, x, positions)[0], None

        return lax.scan(body, h, stacked_layer_params)[0], None

    def body_cached(x, xs):
        lp, k, v = xs
        x, lc = apply_layer(config, lp, x, positions, LayerCache(k=k, v=v))
        return x, (lc.k, lc.v)

    h, (k, v) = lax.scan(body_cached, h, (stacked_layer_params, cache.k, cache.v))
    return h, KVCache(k=k, v=v)


def unembed(config: ModelConfig, params: Params, h: jax.Array) -> jax.Array:
    """Final norm and output head: h [b, s, d] -> logits [b, s, vocab] float32."""
    x = _norm(config, params["final"]["norm"], h)
    head = params["embed"]["tok"].T if config.tie_embeddings else params["final"]["head"]
    return jnp.matmul(
        x, _w(head, config), preferred_element_type=jnp.float32, precision=_prec(config)
    )


def forward(
    config: ModelConfig,
    params: Params,
    tokens: jax.Array,
    positions: jax.Array | None = None,
    cache: KVCache | None = None,
) -> tuple[jax.Array, KVCache | None]:
    """Tokens int32 [b, s] -> (logits float32 [b, s, vocab], updated cache or None)."""
    if positions is None:
        _check_tokens(config, tokens, tokens)
        positions = default_positions(tokens)
    h = embed(config, params, tokens, positions)
    h, cache = apply_layers(config, params["layers"], h, positions, cache)
    return unembed(config, params, h), cache


def _check_tokens(config: ModelConfig, tokens: Any, positions: Any) -> None:
    if tokens.ndim != 2:
        raise ModelError(f"tokens must be [batch, seq], got shape {tuple(tokens.shape)}")
    if not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise ModelError(f"tokens must be integer ids, got dtype {tokens.dtype}")
    if tuple(positions.shape) != tuple(tokens.shape):
        raise ModelError(
            f"positions shape {tuple(positions.shape)} != tokens shape {tuple(tokens.shape)}"
        )
