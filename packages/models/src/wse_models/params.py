"""The parameter pytree: nested dicts of arrays, layers stacked on a leading n_layers axis.

Layout (D = d_model, V = vocab, T = max_seq_len, Q = n_heads * head_dim,
K = n_kv_heads * head_dim, F = d_ff, L = n_layers; matrices are [in, out]):

    {"embed":  {"tok": [V, D], "pos": [T, D] (gpt2)},
     "layers": {"attn_norm": {"scale": [L, D], "bias": [L, D] (gpt2)},
                "attn": {"wq": [L, D, Q], "wk": [L, D, K], "wv": [L, D, K], "wo": [L, Q, D],
                         "bq": [L, Q], "bk": [L, K], "bv": [L, K], "bo": [L, D] (gpt2)},
                "mlp_norm": like attn_norm,
                "mlp": {"w_up": [L, D, F], "w_down": [L, F, D],
                        "w_gate": [L, D, F] (llama), "b_up": [L, F], "b_down": [L, D] (gpt2)}},
     "final":  {"norm": {"scale": [D], "bias": [D] (gpt2)}, "head": [D, V] (untied only)}}

Heads are contiguous blocks of head_dim in Q and K (query head h uses kv head h // group),
and q/k use HF's rotate-half RoPE layout, so HF tensors load by transpose alone.
`layer_slice` / `layer_range` cut one layer or a contiguous range out of any stacked tree.
"""

from __future__ import annotations

import itertools
import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from wse_models.cache import KVCache, LayerCache, floating_dtype
from wse_models.config import ModelConfig
from wse_models.errors import ModelError

__all__ = [
    "Params",
    "cast_params",
    "init_params",
    "layer_range",
    "layer_slice",
    "layer_update",
    "param_shapes",
    "tree_num_params",
]

Params = dict[str, Any]


def _norm_shapes(config: ModelConfig, lead: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    shapes = {"scale": (*lead, config.d_model)}
    if config.arch == "gpt2":
        shapes["bias"] = (*lead, config.d_model)
    return shapes


def _layer_shapes(config: ModelConfig) -> dict[str, Any]:
    L, d, f = config.n_layers, config.d_model, config.d_ff
    q, k = config.n_heads * config.hd, config.n_kv_heads * config.hd
    attn = {"wq": (L, d, q), "wk": (L, d, k), "wv": (L, d, k), "wo": (L, q, d)}
    mlp = {"w_up": (L, d, f), "w_down": (L, f, d)}
    if config.arch == "gpt2":
        attn.update(bq=(L, q), bk=(L, k), bv=(L, k), bo=(L, d))
        mlp.update(b_up=(L, f), b_down=(L, d))
    else:
        mlp["w_gate"] = (L, d, f)
    return {
        "attn_norm": _norm_shapes(config, (L,)),
        "attn": attn,
        "mlp_norm": _norm_shapes(config, (L,)),
        "mlp": mlp,
    }


def _shape_tree(config: ModelConfig) -> Params:
    embed = {"tok": (config.vocab_size, config.d_model)}
    if config.arch == "gpt2":
        embed["pos"] = (config.max_seq_len, config.d_model)
    final: dict[str, Any] = {"norm": _norm_shapes(config, ())}
    if not config.tie_embeddings:
        final["head"] = (config.d_model, config.vocab_size)
    return {"embed": embed, "layers": _layer_shapes(config), "final": final}


def _is_shape(x: object) -> bool:
    return isinstance(x, tuple)


def param_shapes(config: ModelConfig) -> Params:
    """The parameter tree as `jax.ShapeDtypeStruct`s in param_dtype (nothing allocated)."""
    dt = jnp.dtype(config.param_dtype)
    return jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s, dt), _shape_tree(config), is_leaf=_is_shape
    )


def _init_leaf(name: str, shape: tuple[int, ...], noise: jax.Array, config: ModelConfig):
    dt = jnp.dtype(config.param_dtype)
    if name == "scale":
        return jnp.ones(shape, dt)
    if name.startswith("b"):  # biases: bq, bk, bv, bo, b_up, b_down, norm "bias"
        return jnp.zeros(shape, dt)
    std = 0.02
    if name in ("wo", "w_down"):  # residual projections (GPT-2 paper): 1 / sqrt(2 L)
        std = 0.02 / math.sqrt(2 * config.n_layers)
    return (std * noise.reshape(shape)).astype(dt)


def init_params(config: ModelConfig, key: jax.Array) -> Params:
    """Random parameters: normal(0.02) matrices, residual outputs scaled, norms 1, biases 0.

    One compiled program per config (eager per-leaf sampling compiles a kernel per shape).
    """
    _check_key(key)
    return _init_params_jit(config, key)


def _check_key(key: Any) -> None:
    """One PRNG key: `jax.random.key(seed)` or a raw `jax.random.PRNGKey(seed)` (hunt 65: an
    int seed was JAX's "invalid PRNG key data" from inside the compiled program)."""
    dtype, shape = getattr(key, "dtype", None), getattr(key, "shape", None)
    typed = dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    raw = dtype == jnp.uint32 and shape is not None and len(shape) == 1
    if not ((typed and shape == ()) or raw):
        got = f"{dtype} array of shape {tuple(shape)}" if shape is not None else None
        got = got or f"{type(key).__name__} {key!r:.40}"
        raise ModelError(f"key must be one jax.random.key(seed), got {got}")


@partial(jax.jit, static_argnums=0)
def _init_params_jit(config: ModelConfig, key: jax.Array) -> Params:
    shapes = _shape_tree(config)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(shapes, is_leaf=_is_shape)
    sizes = [math.prod(s) for _, s in leaves]
    noise = jax.random.normal(key, (sum(sizes),), jnp.float32)  # one draw: one RNG kernel
    starts = [0, *itertools.accumulate(sizes)]
    out = [
        _init_leaf(path[-1].key, shape, noise[a : a + n], config)
        for (path, shape), a, n in zip(leaves, starts, sizes, strict=False)
    ]
    return jax.tree.unflatten(treedef, out)


def cast_params(params: Params, dtype: Any) -> Params:
    """Every floating leaf cast to `dtype`, a floating dtype (e.g. to store bf16 parameters);
    an integer dtype is refused (hunt 65: "int8" turned every weight into 0)."""
    dt = floating_dtype(dtype, "cast_params")
    return jax.tree.map(
        lambda x: x.astype(dt) if jnp.issubdtype(x.dtype, jnp.floating) else x, params
    )


def tree_num_params(tree: Any) -> int:
    """Number of scalars in a pytree of arrays (or ShapeDtypeStructs)."""
    return sum(math.prod(x.shape) for x in jax.tree.leaves(tree))


def _n_layers(tree: Any) -> int:
    leaves = jax.tree.leaves(tree)
    if not leaves:
        raise ModelError("empty layer tree: nothing to slice")
    return leaves[0].shape[0]


def layer_slice(stacked: Any, i: int) -> Any:
    """Layer `i` of a stacked tree (params["layers"] or a `KVCache`): leading axis removed."""
    n = _n_layers(stacked)
    if not 0 <= i < n:
        raise ModelError(f"layer index {i} out of range: the tree holds {n} layers")
    if isinstance(stacked, KVCache):
        return LayerCache(k=stacked.k[i], v=stacked.v[i])
    return jax.tree.map(lambda x: x[i], stacked)


def layer_range(stacked: Any, start: int, stop: int) -> Any:
    """Layers start..stop-1 of a stacked tree, still stacked (a pipeline stage's share)."""
    n = _n_layers(stacked)
    if not 0 <= start < stop <= n:
        raise ModelError(f"layer range [{start}, {stop}) is empty or outside 0..{n}")
    return jax.tree.map(lambda x: x[start:stop], stacked)


def layer_update(stacked: Any, i: int, layer: Any) -> Any:
    """A stacked tree with layer `i` replaced by `layer` (e.g. a `LayerCache` after a step)."""
    if isinstance(stacked, KVCache) and isinstance(layer, LayerCache):
        layer = KVCache(k=layer.k, v=layer.v)
    return jax.tree.map(lambda x, y: x.at[i].set(y.astype(x.dtype)), stacked, layer)
