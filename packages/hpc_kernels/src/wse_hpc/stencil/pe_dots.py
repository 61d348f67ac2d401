"""Each PE's local half of BiCGSTAB's fp32 dot products as a CPU kernel (numba, through XLA's
typed FFI): the sums over the PE's Z column of one or two products, one kernel call per
device block (`fabric.local_apply`: compute inside the PEs, nothing recorded); the
wafer-wide half stays `fabric.reduce` (`bicgstab.fused_dot`).

Why: XLA:CPU lowers `jnp.sum(a * b, axis=2)` on a 48^3 fp32 block to a YNNPACK reduction
at ~35 us a product on one core (2-core EPYC VM, 2026-12-02, min of 15 x 200 in a
fori_loop), and a pair of them stacked (what `fused_dot` asks for) to two such passes and
a select; the column loop here, vectorized by LLVM, reads each field once for both sums of
a pair. The solver's per-iteration dot products were about a third of its time (fp32 48^3,
one core: 0.55 -> 0.33 ms an iteration; mixed, two cores: 0.54 -> 0.46). A mixed solve's
fields are fp16: XLA's widening of each to an fp32 copy before the call cost ~60 us a field
(five a mixed iteration, a third of its kernel time; jax.profiler, 48^3, Xeon VM,
2026-12-02), so the kernel reads them as fp16 itself (42 us for a pair of products against
94-216 us with XLA's converts; the same sums bit for bit).

Accuracy (why the sums are plain fp32, as the PE's FMACs give them): BiCGSTAB's fp32
iteration count moves with the last bits of every operation, and correctly rounded dots
(the fp32 fields' products summed in fp64, rounded once; an experiment, not the wafer's
arithmetic) did not bring it nearer SciPy's: over 9 right-hand sides at 48^3 (mesh 1x1)
the ratio to SciPy's fp64 count spanned 0.84-1.14 (median 0.93) against 0.85-1.12
(median 0.97) with these sums. A compensated (Dot2) sum would cost the PE about 10 fp32
instructions an element instead of one FMAC for no measured gain, so the PE program (and
`perf`'s price of one FMAC a product) stays as it is.

Contract: `available(wafer, pairs)` says whether the kernel can run: numba installed,
every device a CPU, 3-d fp32 or fp16 fields, one or two pairs. `local_dots(wafer, pairs)`
returns the (rows, cols, len(pairs)) placed fp32 field of per-PE sums of the products in
fp32 (fp16 fields widened to fp32 exactly: inside the kernel, element by element, when every
field is fp16 — what a mixed solve asks for — else by XLA first); each sum
accumulates in the order LLVM's vectorized loop gives (not the sequential order, nor
YNNPACK's: the last bits differ, and BiCGSTAB's iteration count moves with them).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from wse_core.host.pe_ffi import available as _numba_available
from wse_core.host.pe_ffi import register

__all__ = ["available", "local_dots"]

MAX_PAIRS = 2  # the kernels: dots1 and dots2


@functools.cache
def _target(pairs: int, fp16: bool = False) -> str:
    """The FFI target for `pairs` products of fp32 (or, `fp16`, fp16) fields, compiled
    (numba; a few seconds the first time, then from its cache) and registered with XLA on
    first use."""
    from wse_hpc.stencil import _dots_numba

    name = f"dots{pairs}" + ("_f16" if fp16 else "")
    return register(f"wse_stencil_{name}", _dots_numba.handler(name))


def available(wafer, pairs: list[tuple[jax.Array, jax.Array]]) -> bool:
    """The kernel can compute these pairs' local sums (see the module doc)."""
    return (
        0 < len(pairs) <= MAX_PAIRS
        and all(f.dtype in (jnp.float32, jnp.float16) for pair in pairs for f in pair)
        and all(a.ndim == 3 and b.ndim == 3 for a, b in pairs)
        and all(d.platform == "cpu" for d in wafer.mesh.devices.flat)
        and _numba_available()
    )


def local_dots(wafer, pairs: list[tuple[jax.Array, jax.Array]]) -> jax.Array:
    """(rows, cols, k) fp32: each PE's sums over its column of the k products."""
    from wse_core import fabric

    k = len(pairs)
    fields = [f for pair in pairs for f in pair]
    fp16 = all(f.dtype == jnp.float16 for f in fields)  # read as fp16 by the kernel
    target = _target(k, fp16)

    def on_block(*blocks):
        bx, by, nz = blocks[0].shape
        flat = [b.reshape(bx * by, nz) for b in blocks]
        flat = flat if fp16 else [b.astype(jnp.float32) for b in flat]
        out = jax.ShapeDtypeStruct((bx * by, k), jnp.float32)
        return jax.ffi.ffi_call(target, out, vmap_method="sequential")(*flat).reshape(bx, by, k)

    return fabric.local_apply(wafer, on_block, *fields)
