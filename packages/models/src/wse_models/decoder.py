"""The functional decoder: pure functions of (config, params, arrays), one layer at a time.

    h = embed(config, params, tokens, positions)                 # [b, s, d]
    h, cache = apply_layers(config, params["layers"], h, positions, cache)   # lax.scan
    logits = unembed(config, params, h)                          # [b, s, vocab] float32

`apply_layer` runs ONE layer (weight streaming: the trainer takes `jax.vjp` through it; the
layer and the stages between its matrix products live in `wse_models.layer`, re-exported
here); `apply_layers` scans any contiguous stack of layers (a pipeline stage); `forward` is
the three above and equals applying the layers one by one. All three take `segment_ids` (documents
packed in a row attend within themselves) and `count_zeros` (also return the number of exact
zeros of the MLP's hidden activation, per layer: `wse_models.sparsity`).

Tokens are int32 [b, s]; positions int32 [b, s] (absolute, per row; default 0..s-1).
Compute runs in `config.dtype` with parameters cast at use (they may be stored in fp32 or
bf16); norms, softmax and RoPE angles run in fp32 as in HF, and logits come back in float32.
fp32 compute uses HIGHEST matmul precision (no TF32 on GPUs), so fp32 logits match the
reference implementation to ~1e-6.
The projections and the attention core carry hand-written VJPs (`wse_models.layer`): the
same math as autodiff's, arranged so XLA:CPU runs every backward dot in its fast form
(autodiff's weight and key/value gradients hit its slow generic kernel, and the backward
took ~5x the forward); gradients equal autodiff's (and torch's) to float round-off.
Nothing here jits: the shell decides.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from wse_models.cache import KVCache, LayerCache
from wse_models.config import ModelConfig
from wse_models.errors import ModelError
from wse_models.layer import apply_layer, norm, product, rope_inv_freq
from wse_models.params import Params

__all__ = [
    "apply_layer",
    "apply_layers",
    "check_inputs",
    "default_positions",
    "embed",
    "forward",
    "rope_inv_freq",
    "unembed",
]


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
    check_inputs(config, tokens, positions)
    return _embed(config, params, tokens, positions)


def _embed(config: ModelConfig, params: Params, tokens: jax.Array, positions: jax.Array):
    h = _gather(params["embed"]["tok"], tokens)
    if config.arch == "gpt2":
        h = h + _gather(params["embed"]["pos"], jnp.maximum(positions, 0))
    return h.astype(config.dtype)


def apply_layers(
    config: ModelConfig,
    stacked_layer_params: Params,
    h: jax.Array,
    positions: jax.Array,
    cache: KVCache | None = None,
    *,
    segment_ids: jax.Array | None = None,
    count_zeros: bool = False,
):
    """`apply_layer` over a stack of layers with `lax.scan` (cache: the same layers' KVCache).

    -> (h, cache), or (h, cache, zeros int32 [layers]) with `count_zeros`."""
    kw = dict(segment_ids=segment_ids, count_zeros=count_zeros)
    if cache is None:

        def body(x, lp):
            out = apply_layer(config, lp, x, positions, **kw)
            return out[0], out[2] if count_zeros else None

        h, zeros = lax.scan(body, h, stacked_layer_params)
        return (h, None, zeros) if count_zeros else (h, None)

    def body_cached(x, xs):
        lp, k, v = xs
        out = apply_layer(config, lp, x, positions, LayerCache(k=k, v=v), **kw)
        return out[0], (out[1].k, out[1].v, out[2] if count_zeros else None)

    h, (k, v, zeros) = lax.scan(body_cached, h, (stacked_layer_params, cache.k, cache.v))
    return (h, KVCache(k=k, v=v), zeros) if count_zeros else (h, KVCache(k=k, v=v))


def unembed(config: ModelConfig, params: Params, h: jax.Array) -> jax.Array:
    """Final norm and output head: h [b, s, d] -> logits [b, s, vocab] float32."""
    x = norm(config, params["final"]["norm"], h)
    head = params["embed"]["tok"].T if config.tie_embeddings else params["final"]["head"]
    return product(config, x, head, jnp.float32)


def forward(
    config: ModelConfig,
    params: Params,
    tokens: jax.Array,
    positions: jax.Array | None = None,
    cache: KVCache | None = None,
    *,
    segment_ids: jax.Array | None = None,
    count_zeros: bool = False,
):
    """Tokens int32 [b, s] -> (logits float32 [b, s, vocab], updated cache or None), plus
    the MLP zero counts int32 [n_layers] with `count_zeros` (see `apply_layer`).

    `segment_ids` int32 [b, s]: documents packed in a row attend within themselves only
    (give `positions` restarting at 0 in each document)."""
    check_inputs(config, tokens, positions, cache)
    if positions is None:
        positions = default_positions(tokens)
    h = _embed(config, params, tokens, positions)
    out = apply_layers(config, params["layers"], h, positions, cache,
                       segment_ids=segment_ids, count_zeros=count_zeros)  # fmt: skip
    return (unembed(config, params, out[0]), *out[1:])


def check_inputs(
    config: ModelConfig, tokens: Any, positions: Any = None, cache: KVCache | None = None
) -> None:
    """Raise `ModelError` for tokens / positions the model cannot run: shapes and dtypes
    always; ids outside 0..vocab_size-1 and positions past the gpt2 position table or the
    cache (negatives are padding) when their values are known, i.e. not under `jit`, where
    the callers (the decoders) check prompts on the host once per request.

    Hunt 65: such ids and gpt2 positions gave NaN logits (`_gather` fills with NaN), and a
    position past the cache was silently not written."""
    for name, x in (("tokens", tokens), ("positions", positions)):
        if x is not None and not (hasattr(x, "shape") and hasattr(x, "dtype")):
            got = type(x).__name__
            raise ModelError(f"{name} must be a 2-D integer array [batch, seq], got {got}")
    if tokens.ndim != 2:
        raise ModelError(f"tokens must be [batch, seq], got shape {tuple(tokens.shape)}")
    for name, x in (("tokens", tokens), ("positions", positions)):
        if x is not None and not jnp.issubdtype(x.dtype, jnp.integer):
            raise ModelError(f"{name} must be integers, got dtype {x.dtype}")
    if positions is not None and tuple(positions.shape) != tuple(tokens.shape):
        raise ModelError(
            f"positions shape {tuple(positions.shape)} != tokens shape {tuple(tokens.shape)}"
        )
    ids = _host(tokens)
    if ids is not None and ids.size and not 0 <= ids.min() <= ids.max() < config.vocab_size:
        bad = ids.min() if ids.min() < 0 else ids.max()
        raise ModelError(f"token id {bad} is outside the vocabulary 0..{config.vocab_size - 1}")
    _check_positions(config, tokens, positions, cache)


def _check_positions(config: ModelConfig, tokens: Any, positions: Any, cache: Any) -> None:
    """The largest position (0..s-1 by default) within the gpt2 table and the cache."""
    limits = []
    if config.arch == "gpt2":
        limits.append((config.max_seq_len, "gpt2 position table (max_seq_len)"))
    if cache is not None:
        limits.append((cache.max_len, "cache max_len"))
    if not limits or not tokens.size:
        return
    limit, what = min(limits)
    if positions is None:  # 0..s-1: known from the shape, also under jit
        top = tokens.shape[-1] - 1
    elif (values := _host(positions)) is not None:
        top = int(values.max())
    else:
        return
    if top >= limit:
        raise ModelError(f"position {top} is past the {what} of {limit}")


def _host(x: Any) -> np.ndarray | None:
    """x's values on the host, or None where they are unknown (a tracer under jit / grad /
    vmap) or not all here (an array spread over other processes)."""
    if isinstance(x, jax.core.Tracer):
        return None
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return None
    return np.asarray(x)
