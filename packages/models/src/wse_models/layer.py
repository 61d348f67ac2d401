"""One decoder layer, cut at its matrix products: the stages between them and `apply_layer`.

    x = attention_input(config, p, h)                          # the attention's norm
    q, k, v = (product(config, x, p["attn"][w]) for w in ("wq", "wk", "wv"))
    a, cache = attention_mix(config, p, (q, k, v), positions, cache, segment_ids)
    h2, x2 = mlp_input(config, p, h, product(config, a, p["attn"]["wo"]))
    up, gate = product(config, x2, p["mlp"]["w_up"]), product(... "w_gate")  # gate: llama
    hidden, zeros = mlp_hidden(config, p, up, gate, valid)
    h = layer_output(config, p, h2, product(config, hidden, p["mlp"]["w_down"]))

is `apply_layer`. The stages read only the layer's vectors (norm scales and biases) from
`p`; every matrix enters through `product` (`layer_matrices(config)` lists them in order), so
a caller may run a matrix's product column block by column block (weight streaming below the
layer: `wse_trainer.chunked`) and feed the same stages. Biases of a product are added by the
stage that takes it. `product` and the attention core (`_sdpa`) carry hand-written VJPs (see
`_matmul`, `_sdpa`); norms, softmax and RoPE angles run in fp32 as in HF.
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

from wse_models import sdpa_cpu
from wse_models.cache import LayerCache, read_cache, write_cache
from wse_models.config import ModelConfig
from wse_models.errors import ModelError
from wse_models.params import Params

__all__ = [
    "ACTIVATIONS",
    "apply_layer",
    "attention_input",
    "attention_mix",
    "layer_matrices",
    "layer_output",
    "mlp_hidden",
    "mlp_input",
    "norm",
    "product",
    "rope_inv_freq",
]

_MASKED = -1e30  # finite, so a fully masked (padding) row gives a uniform mix, not NaN


def _w(x: jax.Array, config: ModelConfig) -> jax.Array:
    return x.astype(config.dtype)


def _prec(config: ModelConfig) -> lax.Precision:
    """fp32 compute means true fp32 matmuls (no TF32 on GPUs); bf16 takes the default."""
    return lax.Precision.HIGHEST if config.dtype == "float32" else lax.Precision.DEFAULT


def norm(config: ModelConfig, p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
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


def product(config: ModelConfig, x: jax.Array, w: jax.Array, out_dtype: Any = None) -> jax.Array:
    """x [..., K] @ w [K, N] in the compute dtype and precision (out_dtype: x's by default).

    A product of any column block of w is the same columns of the whole product: weight
    streaming below the layer (`wse_trainer`) runs a matrix this way, chunk by chunk."""
    return _matmul(x, _w(w, config), _prec(config), out_dtype)


def _bias(config: ModelConfig, y: jax.Array, p: dict, b: str) -> jax.Array:
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
    In fp32 on a CPU both directions are numba kernels instead (`sdpa_cpu`: the same values
    and residuals).
    """
    return _sdpa_fwd(q, k, v, mask, precision, dtype)[0]


def _sdpa_fwd(q, k, v, mask, precision, dtype):
    if sdpa_cpu.usable(q, k, v, dtype):  # fp32 on a CPU: numba kernels (`sdpa_cpu`)
        out, probs = sdpa_cpu.forward(q, k, v, mask)
        return out, (q, k, v, mask, probs, out)
    hd = q.shape[-1]
    scores = _dg(q, k, ((4,), (3,)), precision=precision, preferred_element_type=jnp.float32)
    scores = jnp.where(mask[:, None, None], scores / math.sqrt(hd), _MASKED)
    probs = jax.nn.softmax(scores, axis=-1).astype(dtype)  # [b, KV, G, t, s]
    out = _dg(probs, v, ((4,), (2,)), precision=precision)
    return out, (q, k, v, mask, probs, out)


def _sdpa_bwd(precision, dtype, res, d_out):
    q, k, v, mask, probs, out = res
    if sdpa_cpu.usable(q, k, v, dtype):
        return (*sdpa_cpu.backward(q, k, v, mask, probs, out, d_out), None)
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


def _keeps_input(f: Any) -> Any:
    """`f` (elementwise) whose VJP keeps only its input and reruns f's own VJP in the
    backward. Autodiff of GELU's tanh form keeps the tanh and four products of it
    ([tokens, d_ff] each: the forward writes them and the backward reads them back); this
    reads one array and recomputes them in the backward's fusion (bench_train's quick GPT-2
    layer, 1 core: forward with VJP 21.0 -> 19.1 ms, backward 35.5 -> 34.4 ms, the least of
    30 calls). The same operations: the gradient is bit for bit autodiff's."""

    @jax.custom_vjp
    def g(x):
        return f(x)

    g.defvjp(lambda x: (f(x), x), lambda x, ct: jax.vjp(f, x)[1](ct))
    return g


ACTIVATIONS = {
    "gelu": _keeps_input(partial(jax.nn.gelu, approximate=True)),  # HF "gelu_new"
    "silu": _keeps_input(jax.nn.silu),
    "relu": jax.nn.relu,
    "relu2": lambda x: jnp.square(jax.nn.relu(x)),  # Primer's squared ReLU (HF "relu2")
}


def layer_matrices(config: ModelConfig) -> tuple[tuple[str, str], ...]:
    """The layer's matrices as (group, name), in the order the forward multiplies by them."""
    mlp = ("w_up", "w_gate") if config.arch == "llama" else ("w_up",)
    return (("attn", "wq"), ("attn", "wk"), ("attn", "wv"), ("attn", "wo"),
            *(("mlp", m) for m in mlp), ("mlp", "w_down"))  # fmt: skip


def attention_input(config: ModelConfig, p: Params, h: jax.Array) -> jax.Array:
    """The attention's input: h [b, t, d] normed (compute dtype)."""
    return norm(config, p["attn_norm"], h)


def attention_mix(config, p: Params, qkv, positions, cache=None, segment_ids=None):
    """(x Wq, x Wk, x Wv) -> (the heads' mixed values [b, t, H * hd], the updated cache):
    biases, RoPE (llama), the cache write, the causal (and segment) mask, softmax attention."""
    a = p["attn"]
    b, t, _ = qkv[0].shape
    heads = (config.n_heads, config.n_kv_heads, config.n_kv_heads)
    q, k, v = (_bias(config, y, a, name).reshape(b, t, n, config.hd)
               for y, name, n in zip(qkv, ("bq", "bk", "bv"), heads, strict=True))  # fmt: skip
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
    return _attend(config, q, keys, vals, mask), cache


def mlp_input(config: ModelConfig, p: Params, h: jax.Array, o: jax.Array):
    """(h, the attention's output a Wo) -> (h2 = h + a Wo + bo, the MLP's normed input)."""
    h2 = h + _bias(config, o, p["attn"], "bo")
    return h2, norm(config, p["mlp_norm"], h2)


def mlp_hidden(config: ModelConfig, p: Params, up, gate, valid: jax.Array | None):
    """(x W_up, x W_gate or None) -> (the MLP's hidden activation, its exact zeros over the
    tokens where `valid` [b, t] holds, or None when `valid` is None: nothing counted)."""
    up = _bias(config, up, p["mlp"], "b_up")
    act = ACTIVATIONS[config.mlp_activation]
    hidden = act(up) if config.arch == "gpt2" else act(gate) * up
    zeros = None
    if valid is not None:
        zeros = jnp.sum((hidden == 0) & valid[..., None], dtype=jnp.int32)
    return hidden, zeros


def layer_output(config: ModelConfig, p: Params, h2: jax.Array, down: jax.Array) -> jax.Array:
    """(h2, hidden W_down) -> the layer's output h2 + hidden W_down + b_down."""
    return h2 + _bias(config, down, p["mlp"], "b_down")


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
    p, mat = layer_params, lambda x, g, w: product(config, x, layer_params[g][w])
    x = attention_input(config, p, h)
    qkv = tuple(mat(x, "attn", w) for w in ("wq", "wk", "wv"))
    a, cache = attention_mix(config, p, qkv, positions, cache, segment_ids)
    h2, x2 = mlp_input(config, p, h, mat(a, "attn", "wo"))
    gate = mat(x2, "mlp", "w_gate") if config.arch == "llama" else None
    valid = positions >= 0 if count_zeros else None
    hidden, zeros = mlp_hidden(config, p, mat(x2, "mlp", "w_up"), gate, valid)
    h = layer_output(config, p, h2, mat(hidden, "mlp", "w_down"))
    return (h, cache, zeros) if count_zeros else (h, cache)
