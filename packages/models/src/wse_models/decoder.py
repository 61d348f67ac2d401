"""The functional decoder: pure functions of (config, params, arrays), one layer at a time.

    h = embed(config, params, tokens, positions)                 # [b, s, d]
    h, cache = apply_layers(config, params["layers"], h, positions, cache)   # lax.scan
    logits = unembed(config, params, h)                          # [b, s, vocab] float32

`apply_layer` runs ONE layer (weight streaming: the trainer takes `jax.vjp` through it);
`apply_layers` scans any contiguous stack of layers (a pipeline stage); `forward` is the three
above and equals applying the layers one by one. All three take `segment_ids` (documents
packed in a row attend within themselves) and `count_zeros` (also return the number of exact
zeros of the MLP's hidden activation, per layer: `wse_models.sparsity`).

Tokens are int32 [b, s]; positions int32 [b, s] (absolute, per row; default 0..s-1).
Compute runs in `config.dtype` with parameters cast at use (they may be stored in fp32 or
bf16); norms, softmax and RoPE angles run in fp32 as in HF, and logits come back in float32.
fp32 compute uses HIGHEST matmul precision (no TF32 on GPUs), so fp32 logits match the
reference implementation to ~1e-6.
The projections and the attention core carry hand-written VJPs (`_matmul`, `_sdpa`): the
same math as autodiff's, arranged so XLA:CPU runs every backward dot in its fast form
(autodiff's weight and key/value gradients hit its slow generic kernel, and the backward
took ~5x the forward); gradients equal autodiff's (and torch's) to float round-off.
Nothing here jits: the shell decides.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from wse_models.cache import KVCache, LayerCache, read_cache, write_cache
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


@partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _matmul(x: jax.Array, w: jax.Array, precision: lax.Precision, out_dtype: Any) -> jax.Array:
    """x [..., K] @ w [K, N] -> [..., N] (out_dtype or x's), with a CPU-friendly backward.

    The value is `jnp.matmul`'s; only the backward is written by hand. Autodiff's weight
    gradient x^T g contracts both operands over their leading (token) axes, a dot form that
    XLA:CPU leaves to its slow generic kernel (2-3x the forward's time here); its fast kernel
    wants the left operand's contracted axis last. So `_matmul_bwd` lays the smaller of x
    and g out transposed in memory and takes the fast form (g^T x, then a small [N, K]
    transpose, when g is the smaller: this also keeps XLA from re-fusing x's producer,
    e.g. GELU's tanh, into a strided transpose). Optimization barriers stop XLA from
    folding the transposes back into the dot. Same products and sums: the gradients differ
    from autodiff's by float round-off only.
    """
    return jnp.matmul(x, w, precision=precision, preferred_element_type=out_dtype)


def _matmul_fwd(x, w, precision, out_dtype):
    return _matmul(x, w, precision, out_dtype), (x, w)


def _sharding_of(x: jax.Array, reverse: bool = False) -> NamedSharding | None:
    """x's sharding (axes reversed if asked) as a dot's out_sharding; None off a mesh.

    Gradient dots contract the (possibly data-sharded) token axes, so on a mesh with
    Explicit axes their output sharding must be given: the primal's, as autodiff does."""
    sharding = jax.typeof(x).sharding
    if not isinstance(sharding, NamedSharding) or sharding.mesh.empty:
        return None
    spec = tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))
    return sharding.update(spec=P(*(spec[::-1] if reverse else spec)))


def _matmul_bwd(precision, out_dtype, res, g):
    x, w = res
    n = x.ndim - 1  # leading (token) axes
    acc = None if out_dtype is None else jnp.float32
    dx = lax.dot_general(g, w, (((n,), (1,)), ((), ())), precision=precision,
                         preferred_element_type=acc, out_sharding=_sharding_of(x))  # fmt: skip
    lead, lead1 = tuple(range(n)), tuple(range(1, n + 1))
    if w.shape[0] > w.shape[1]:  # K > N: transpose g, dw^T [N, K] = g^T x
        g_t = lax.optimization_barrier(jnp.moveaxis(g, -1, 0))
        dw_t = lax.dot_general(g_t, x, ((lead1, lead), ((), ())), precision=precision,
                               preferred_element_type=acc,
                               out_sharding=_sharding_of(w, reverse=True))  # fmt: skip
        dw = lax.optimization_barrier(dw_t).T
    else:  # transpose x, dw [K, N] = x^T g
        x_t = lax.optimization_barrier(jnp.moveaxis(x, -1, 0))
        dw = lax.dot_general(x_t, g, ((lead1, lead), ((), ())), precision=precision,
                             preferred_element_type=acc, out_sharding=_sharding_of(w))  # fmt: skip
    # the barrier keeps a caller's transpose of w (tied head: w = tok.T) out of the dot
    return dx.astype(x.dtype), lax.optimization_barrier(dw.astype(w.dtype))


_matmul.defvjp(_matmul_fwd, _matmul_bwd)


def _proj(config: ModelConfig, x: jax.Array, p: dict, w: str, b: str) -> jax.Array:
    y = _matmul(x, _w(p[w], config), _prec(config), None)
    return y + _w(p[b], config) if b in p else y


def _dg(a, b, contract, batch=((0, 1), (0, 1)), **kw) -> jax.Array:
    return lax.dot_general(a, b, (contract, batch), **kw)


@partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _sdpa(q, k, v, mask, precision: lax.Precision, dtype: Any) -> jax.Array:
    """Masked softmax attention, head-major: q [b, KV, G, t, hd]; k, v [b, KV, s, hd];
    mask [b, t, s] -> [b, KV, G, t, hd]. Scores and softmax in fp32, probs cast to `dtype`.

    The value is the plain formula; the backward is written by hand (flash-attention style
    algebra: dS = P * (dP - rowsum(dO * O))), so every dot keeps its contracted axis last on
    the left, the form XLA:CPU's fast kernel takes, and only small [.., t, hd] operands are
    transposed, never the [t, s] score matrices. Masked entries get zero gradient, as
    autodiff of the `where` gives. Float round-off apart, equal to autodiff's gradients.
    """
    return _sdpa_fwd(q, k, v, mask, precision, dtype)[0]


def _sdpa_fwd(q, k, v, mask, precision, dtype):
    hd = q.shape[-1]
    scores = _dg(q, k, ((4,), (3,)), precision=precision, preferred_element_type=jnp.float32)
    scores = jnp.where(mask[:, None, None], scores / math.sqrt(hd), _MASKED)
    probs = jax.nn.softmax(scores, axis=-1).astype(dtype)  # [b, KV, G, t, s]
    out = _dg(probs, v, ((4,), (2,)), precision=precision)
    return out, (q, k, v, mask, probs, out)


def _sdpa_bwd(precision, dtype, res, d_out):
    q, k, v, mask, probs, out = res
    b, kv, g, t, hd = q.shape
    f32 = jnp.float32
    d_probs = _dg(d_out, v, ((4,), (3,)), precision=precision, preferred_element_type=f32)
    delta = jnp.sum(d_out.astype(f32) * out.astype(f32), axis=-1, keepdims=True)
    d_scores = probs.astype(f32) * (d_probs - delta)
    d_scores = jnp.where(mask[:, None, None], d_scores / math.sqrt(hd), 0.0).astype(dtype)
    dq = _dg(d_scores, k, ((4,), (2,)), precision=precision)
    # dk^T [b, KV, hd, s] = q^T dS and dv^T = dO^T P, summed over (G, t); then transposed
    # (barriers: XLA would fold these transposes back into the dots, to the slow form)
    q_t, do_t = (lax.optimization_barrier(x.transpose(0, 1, 4, 2, 3).reshape(b, kv, hd, g * t))
                 for x in (q, d_out))  # fmt: skip
    rows = (b, kv, g * t, -1)
    dk_t = _dg(q_t, d_scores.reshape(rows), ((3,), (2,)), precision=precision)
    dv_t = _dg(do_t, probs.reshape(rows), ((3,), (2,)), precision=precision)
    dk, dv = (jnp.swapaxes(lax.optimization_barrier(x), -1, -2) for x in (dk_t, dv_t))
    return dq, dk.astype(k.dtype), dv.astype(v.dtype), None


_sdpa.defvjp(_sdpa_fwd, _sdpa_bwd)


def _attend(config: ModelConfig, q, keys, vals, mask) -> jax.Array:
    """q [b, t, H, hd]; keys/vals [b, s, KV, hd]; mask [b, t, s] -> [b, t, H * hd]."""
    b, t, h, hd = q.shape
    kv = keys.shape[2]
    q = q.reshape(b, t, kv, h // kv, hd).transpose(0, 2, 3, 1, 4)  # [b, KV, G, t, hd]
    keys, vals = (_w(x, config).transpose(0, 2, 1, 3) for x in (keys, vals))  # [b, KV, s, hd]
    out = _sdpa(q, keys, vals, mask, _prec(config), config.dtype)
    return out.transpose(0, 3, 1, 2, 4).reshape(b, t, h * hd)


def _attention(config, p, x, positions, cache: LayerCache | None, segment_ids=None):
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
        keys, vals = read_cache(cache, q)
        kpos = jnp.broadcast_to(jnp.arange(keys.shape[1]), (b, keys.shape[1]))
    mask = (kpos[:, None, :] <= positions[:, :, None]) & (kpos[:, None, :] >= 0)
    if segment_ids is not None:  # within a segment positions rise with the index: causal
        mask = mask & (segment_ids[:, None, :] == segment_ids[:, :, None])
    out = _attend(config, q, keys, vals, mask)
    return _proj(config, out, p, "wo", "bo"), cache


_ACTIVATIONS = {
    "gelu": partial(jax.nn.gelu, approximate=True),  # HF "gelu_new"
    "silu": jax.nn.silu,
    "relu": jax.nn.relu,
    "relu2": lambda x: jnp.square(jax.nn.relu(x)),  # Primer's squared ReLU (HF "relu2")
}


def _mlp(config: ModelConfig, p: dict, x: jax.Array, valid: jax.Array | None):
    """-> (MLP output, number of exact zeros in the hidden activation over the tokens where
    `valid` [b, t] holds; None when `valid` is None: nothing is counted)."""
    up = _proj(config, x, p, "w_up", "b_up")
    act = _ACTIVATIONS[config.mlp_activation]
    if config.arch == "gpt2":
        hidden = act(up)
    else:
        gate = _matmul(x, _w(p["w_gate"], config), _prec(config), None)
        hidden = act(gate) * up
    zeros = None
    if valid is not None:
        zeros = jnp.sum((hidden == 0) & valid[..., None], dtype=jnp.int32)
    return _proj(config, hidden, p, "w_down", "b_down"), zeros


def apply_layer(
    config: ModelConfig,
    layer_params: Params,
    h: jax.Array,
    positions: jax.Array,
    cache: LayerCache | None = None,
    *,
    segment_ids: jax.Array | None = None,
    count_zeros: bool = False,
):
    """One pre-norm transformer layer: h [b, t, d] -> (h, that layer's updated cache).

    `segment_ids` int32 [b, t] (no cache): packed documents, a token attends only to earlier
    tokens of its own segment. `count_zeros`: also return the int32 number of exact zeros in
    the MLP's hidden activation [b, t, d_ff] over tokens with position >= 0 (padding left
    out) -> (h, cache, zeros); callers ask only for `config.relu_like` models, so the dense
    path compiles exactly as without it.
    """
    if cache is not None and not isinstance(cache, LayerCache):
        cache = LayerCache(*cache)
    if segment_ids is not None and cache is not None:
        raise ModelError("segment_ids (packed documents) cannot be used with a KV cache")
    x = _norm(config, layer_params["attn_norm"], h)
    a, cache = _attention(config, layer_params["attn"], x, positions, cache, segment_ids)
    h = h + a
    valid = positions >= 0 if count_zeros else None
    m, zeros = _mlp(config, layer_params["mlp"], _norm(config, layer_params["mlp_norm"], h), valid)
    h = h + m
    return (h, cache, zeros) if count_zeros else (h, cache)


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
    x = _norm(config, params["final"]["norm"], h)
    head = params["embed"]["tok"].T if config.tie_embeddings else params["final"]["head"]
    return _matmul(x, _w(head, config), _prec(config), jnp.float32)


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
    if positions is None:
        _check_tokens(config, tokens, tokens)
        positions = default_positions(tokens)
    h = embed(config, params, tokens, positions)
    out = apply_layers(config, params["layers"], h, positions, cache,
                       segment_ids=segment_ids, count_zeros=count_zeros)  # fmt: skip
    return (unembed(config, params, out[0]), *out[1:])


def _check_tokens(config: ModelConfig, tokens: Any, positions: Any) -> None:
    if tokens.ndim != 2:
        raise ModelError(f"tokens must be [batch, seq], got shape {tuple(tokens.shape)}")
    if not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise ModelError(f"tokens must be integer ids, got dtype {tokens.dtype}")
    if tuple(positions.shape) != tuple(tokens.shape):
        raise ModelError(
            f"positions shape {tuple(positions.shape)} != tokens shape {tuple(tokens.shape)}"
        )
