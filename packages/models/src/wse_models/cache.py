"""The KV cache: per-layer keys and values by absolute position, one row per user.

`LayerCache(k, v)` holds one layer, k and v of shape [batch, max_len, n_kv_heads, head_dim];
`KVCache(k, v)` stacks them on a leading n_layers axis (slice it with `layer_slice` /
`layer_range` like the parameters). The cache keeps no lengths: the caller's positions are
the state. A token at position p is written into slot p of its row and attends to every slot
<= p of that row, so rows may sit at different lengths in one step, several tokens may be
written per step (speculative verification), and rolling a row back is just reusing smaller
positions (stale slots beyond are masked, then overwritten). A negative position marks a
padding token: it is not written and its output is unspecified (finite).
Positions >= max_len are dropped (not written) under `jit`, so size the cache for the longest
row; `forward` refuses them where it sees their values (`decoder.check_inputs`).

On a device mesh with Explicit axes, create the cache under `jax.set_mesh(mesh)` and, for
data-parallel rows, place it with its batch axis over the data axis
(`jax.device_put(cache, NamedSharding(mesh, P(None, "data")))`); writes follow the cache's
batch sharding.
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from wse_models.config import ModelConfig
from wse_models.errors import ModelError

__all__ = [
    "KVCache",
    "LayerCache",
    "cache_bytes",
    "floating_dtype",
    "init_cache",
    "read_cache",
    "write_cache",
]


class LayerCache(NamedTuple):
    """One layer's cache: k, v [batch, max_len, n_kv_heads, head_dim]."""

    k: jax.Array
    v: jax.Array


class KVCache(NamedTuple):
    """All layers' caches: k, v [n_layers, batch, max_len, n_kv_heads, head_dim]."""

    k: jax.Array
    v: jax.Array

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    @property
    def batch(self) -> int:
        return self.k.shape[1]


def init_cache(config: ModelConfig, batch: int, max_len: int, dtype: str | None = None) -> KVCache:
    """An all-zero cache for `batch` rows of up to `max_len` positions (dtype: config.dtype,
    or a floating `dtype`)."""
    for name, n in (("batch", batch), ("max_len", max_len)):  # hunt 65: 1.5 failed in jnp.zeros
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise ModelError(
                f"cache {name} must be a whole number, got {type(n).__name__} {n!r:.40}"
            )
    if batch <= 0 or max_len <= 0:
        raise ModelError(f"cache needs batch > 0 and max_len > 0, got {batch} and {max_len}")
    if config.arch == "gpt2" and max_len > config.max_seq_len:
        raise ModelError(
            f"cache max_len={max_len} exceeds the gpt2 position table ({config.max_seq_len})"
        )
    shape = (config.n_layers, batch, max_len, config.n_kv_heads, config.hd)
    dt = jnp.dtype(config.dtype) if dtype is None else floating_dtype(dtype, "init_cache")
    return KVCache(k=jnp.zeros(shape, dt), v=jnp.zeros(shape, dt))


def floating_dtype(dtype: Any, what: str) -> jnp.dtype:
    """`dtype` as a NumPy dtype, or a `ModelError` naming `what` unless it is floating."""
    try:
        dt = None if dtype is None else jnp.dtype(dtype)  # jnp.dtype(None) is float64
    except TypeError:
        dt = None
    if dt is None or not jnp.issubdtype(dt, jnp.floating):
        raise ModelError(
            f"{what} needs a floating dtype (float32, bfloat16, float16), got {dtype!r:.60}"
        )
    return dt


def cache_bytes(config: ModelConfig, batch: int, max_len: int, dtype: str | None = None) -> int:
    """Bytes of `init_cache(config, batch, max_len, dtype)` (k and v), without allocating."""
    return batch * max_len * config.kv_bytes_per_token(dtype)


def write_cache(cache: LayerCache, k: jax.Array, v: jax.Array, positions: jax.Array) -> LayerCache:
    """Write k, v [b, t, kv, hd] into slots `positions` [b, t] of each row (negatives dropped)."""
    b, s = cache.k.shape[:2]
    if k.shape[0] != b:
        raise ModelError(f"cache has batch {b} but the tokens have batch {k.shape[0]}")
    slots = jnp.where(positions < 0, s, positions)  # out of bounds: dropped by mode="drop"
    rows = jnp.broadcast_to(jnp.arange(b)[:, None], slots.shape)
    batch_axis = _batch_axis(cache.k)
    k, v = (_reshard(x.astype(cache.k.dtype), batch_axis) for x in (k, v))
    rows, slots = _reshard(rows, batch_axis), _reshard(slots, batch_axis)
    out = _mesh_sharding(cache.k)
    new_k = cache.k.at[rows, slots].set(k, mode="drop", out_sharding=out)
    new_v = cache.v.at[rows, slots].set(v, mode="drop", out_sharding=out)
    return LayerCache(k=new_k, v=new_v)


def read_cache(cache: LayerCache, like: jax.Array) -> tuple[jax.Array, jax.Array]:
    """k, v with their batch laid out as `like`'s (the queries [b, ...]) on a mesh with
    Explicit axes: a dot's batch dimensions must be sharded alike there, which JAX 0.12
    enforces (a replicated cache read by batch-sharded queries was a ShardingTypeError)."""
    axis = _batch_axis(like)
    return _reshard(cache.k, axis), _reshard(cache.v, axis)


def _mesh_sharding(x: jax.Array) -> object:
    """x's sharding when it lives on a mesh with named axes (else None: no annotation)."""
    sharding = jax.typeof(x).sharding
    return sharding if getattr(sharding.mesh, "axis_names", ()) else None


def _batch_axis(x: jax.Array) -> object:
    """The mesh axis of x's leading (batch) dimension on Explicit meshes, else None."""
    spec = getattr(jax.typeof(x).sharding, "spec", None)
    return spec[0] if spec else None


def _reshard(x: jax.Array, batch_axis: object) -> jax.Array:
    """On a mesh with Explicit axes, lay x out with its batch over `batch_axis`, rest whole.

    A scatter needs its updates and indices sharded alike and like the cache rows.
    """
    sharding = jax.typeof(x).sharding
    spec = getattr(sharding, "spec", None)
    if spec is None or not getattr(sharding.mesh, "axis_names", ()):
        return x
    want = P(batch_axis, *([None] * (x.ndim - 1)))
    return x if tuple(spec) == tuple(want) else jax.sharding.reshard(x, want)
