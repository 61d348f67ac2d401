"""`layer._sdpa`'s forward and backward on a CPU in fp32 as numba kernels (`_sdpa_numba`)
called through XLA's typed FFI, where `usable` says they apply; elsewhere `_sdpa` runs its
XLA formula, unchanged.

Why: XLA:CPU runs the attention's batched dots (a 32-long contraction at GPT-2 d128's head
dim) at 24-64 GFLOP/s and makes several passes over the [b, h, t, s] scores; the kernels
take a block of query rows through scores, softmax and P V in L1, skip a causal mask's upper
triangle, and in the backward accumulate dK, dV per kv head in L1. Measured at [b, 4 heads,
128, 32], causal, one core of the 2-core Xeon VM (forward + backward through jit, median
of 15 interleaved rounds, 2026-12-03; `bench/attention_kernels.py`): batch 16 XLA 11.7 ms,
torch SDPA 9.8, these kernels 9.2; batch 8 XLA 5.7, torch 5.2, kernels 4.9.

Contract: `usable(q, k, v, dtype)` (at trace time): the default backend is the CPU, numba
is installed, q, k, v and the probs' dtype are float32, the head dim is a multiple of 4,
and no mesh with non-manual axes is in context (under `jax.set_mesh` the arrays are global
and sharded: an FFI call would have them gathered; inside `shard_map` or a per-device jit
each call has its own block). `forward(q, k, v, mask) -> (out, probs)` and
`backward(q, k, v, mask, probs, out, d_out) -> (dq, dk, dv)` are `layer._sdpa_fwd`'s and
`_sdpa_bwd`'s values (float round-off apart: the softmax's exp is a polynomial of relative
error ~2e-7) in the same layouts, mask broadcast to [b, t, s]. The handlers are always
compiled in a helper process (`wse_core.host.compile_ahead.load`: ~6.5 s of CPU cold,
forward 3.6 then backward 2.6, plus ~0.4 s a helper for its numba import; ~1 s from numba's
cache with numba's import) and loaded from numba's cache, so that a cold run rounds as a
warm one does, bit for bit (compiled in-process, 3-33% of the outputs came out a few ulps
apart: `compile_ahead`'s module doc). `compile_early(head_dim, dtype, backward=)` starts
that helper (where `applies`: `usable`'s predicate, mesh apart) when a shell learns its
model (the trainer's session, before its tokenizer, data and first trace; `wse infer
generate` and `serve`, beside the weights' load); otherwise the first use (`_target`)
starts it and waits.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["applies", "backward", "compile_early", "forward", "usable"]

_KERNELS = "wse_models._sdpa_numba"  # their module, for compile_ahead


@functools.cache
def _numba() -> bool:
    from wse_core.host import pe_ffi

    return pe_ffi.available()


@functools.cache
def _target(name: str) -> str:
    """The FFI target of `name`, its handler compiled by a helper (`compile_early`'s, or one
    started now) and loaded from numba's cache (module doc), registered."""
    from wse_core.host import compile_ahead, pe_ffi

    return pe_ffi.register(f"wse_models_{name}", compile_ahead.load(_KERNELS, name))


def applies(head_dim: int, *dtypes: Any) -> bool:
    """Whether the kernels stand for the XLA formula at this head dim and these dtypes (q's,
    k's, v's, the probs'), outside a mesh with non-manual axes (`usable`, module doc)."""
    if jax.default_backend() != "cpu" or head_dim % 4:
        return False
    return all(jnp.dtype(x) == jnp.float32 for x in dtypes) and _numba()


def usable(q: jax.Array, k: jax.Array, v: jax.Array, dtype: Any) -> bool:
    """Whether `forward` / `backward` stand for the XLA formula here (module doc)."""
    mesh = jax.sharding.get_abstract_mesh()
    if not (mesh.empty or mesh.are_all_axes_manual):
        return False
    return applies(q.shape[-1], q.dtype, k.dtype, v.dtype, dtype)


def compile_early(head_dim: int, dtype: Any, *, backward: bool) -> None:
    """Start compiling, in a helper process, the handlers a model of `head_dim` computing in
    `dtype` calls where `applies` (the forward's; the backward's too when `backward`), unless
    numba's cache holds them; their first use waits for it (module doc)."""
    if applies(head_dim, dtype):
        from wse_core.host import compile_ahead

        compile_ahead.start(_KERNELS, ["sdpa_fwd", "sdpa_bwd"][: 1 + backward])


def _call(name: str, outs, *args) -> Any:
    return jax.ffi.ffi_call(_target(name), outs, vmap_method="sequential")(*args)


def forward(q, k, v, mask) -> tuple[jax.Array, jax.Array]:
    """out [b, KV, G, t, hd], probs [b, KV, G, t, s] (module doc)."""
    b, kv, g, t, _ = q.shape
    s = k.shape[2]
    mask = jnp.broadcast_to(mask, (b, t, s))
    outs = (jax.ShapeDtypeStruct(q.shape, jnp.float32),
            jax.ShapeDtypeStruct((b, kv, g, t, s), jnp.float32))  # fmt: skip
    return _call("sdpa_fwd", outs, q, k, v, mask)


def backward(q, k, v, mask, probs, out, d_out) -> tuple[jax.Array, jax.Array, jax.Array]:
    """dq, dk, dv (module doc)."""
    b, _, _, t, _ = q.shape
    mask = jnp.broadcast_to(mask, (b, t, k.shape[2]))
    outs = tuple(jax.ShapeDtypeStruct(x.shape, jnp.float32) for x in (q, k, v))
    return _call("sdpa_bwd", outs, q, k, v, mask, probs, out, d_out.astype(jnp.float32))
