"""The PEs' own compute for TLR-MVM phases 1 and 3 as CPU kernels (numba), called from the
jitted product through XLA's typed FFI: what each PE's program does on the wafer, one kernel
call per device block.

Why: XLA:CPU lowers the phases' dots (N or M = 2-4, complex stored as float32 pairs) to
YNNPACK at 45-75 GB/s of bases on one core and never uses the second one; the grouped
layout's one-dot-per-PE-row form also multiplies every row by all s pieces of its row when
each row needs one. These kernels read each stored row once, multiply it by its own piece
only, and split the rows over the cores. Measured at n = 9801 (37.1 MB of rows in each of
phases 1 and 3) on the 2-core Xeon VM (KVM, Emerald Rapids, 2026-12-02): products back to
back 2.2-2.5 ms (phase 1 1.0-1.2 ms, phase 3 1.1-1.3, the rest 0.15 or less: 30-37 GB/s of
bases, against 41-55 GB/s for a plain read of as many bytes at its best); on one thread from
L3 19-20 GB/s against 24-25 for a plain read of the same rows, from memory ~10 GB/s, as the
plain read. bench_tlrmvm's bursts (9 products after other work) take 2.2-3.9 ms where
nothing else runs, 1.0-2.2x the NumPy TLR-MVM (2.3-8 ms), ~2.3x faster than the XLA dots;
a round where other processes hold a core loses (ours 8-11 ms, NumPy on one thread 8-11).

Contract (float32 everywhere; complex values as (re, im) pairs):
- `rows_dot(a, e, sel, lengths) -> (R, C, B)`: a (R, K) stored rows, e (G, B, C, K)
  right-hand vectors, sel (R,) int32 in [0, G): out[r, c, b] = a[r] . e[sel[r], b, c]. Complex rows
  (interleaved pairs) give their product's re and im as C = 2 real dots against vectors made
  by the caller (`pair_vectors`); real rows use C = 1.
- `sum_rows(a, t, win, sign, pieces, lengths) -> (BR, pieces, C, B, H)`: a (BR, RW, K) stored rows
  of each block row, t (BR, RW, C, B) their values, win (BR, RW) int32 in [0, pieces): each
  block row adds t[r] times row r (complex: interleaved pairs, times conj(row) when sign < 0)
  into its piece win[r]; H = K / C, the output planar (re, im).
- `lengths` (optional, int32, one per row: (R,) or (BR, RW)): row r is zero past its first
  lengths[r] floats, which are all the kernels read (the grouped layout's empty rows have 0,
  its edge tiles' rows 2 x the tile's width): the bases a product streams are then the
  operator's own (74.3 MB at n = 9801), not its padded placement (77.1 MB). None: all K.
- `gather_rows(src, at) -> (M, F)`: src (N, F), at (M,) int32 in [0, N): out[i] = src[at[i]]
  (phase 2's pick, on the calling thread: ~20 us for the 18,830 pairs at n = 9801 plus
  ~25 us for XLA to lay out the region it picks from, against ~90 us for XLA:CPU's gather
  of (1, 2, 1) slices; jax.profiler trace, minimum of 100 products, 2026-12-02).
Tried at n = 9801 without gain (2-core VM, 2026-12-04): `rows_dot`'s last 4,096 rows in claims
of 64 rows (0.68 ms either way, alternated in one process); phase 1 writing each value where
phase 3 reads it (instead of `gather_rows`: its scattered stores ~25 us slower than the two).
In a product (jax.profiler, 100 products): the kernels 0.68 + 0.67 ms, the pick 27 us, XLA's
four small fusions (x into pieces, the pieces' zero indices, y out) 34 us, the call ~35 us.
Both run on the cores (numba prange) when `parallel`, else on the calling thread (a mesh of
several devices already runs one block per thread). `available()` says whether numba is
there; the grouped kernel falls back to XLA dots where it is not or off the CPU. numba
compiles the kernels on first use (~6 s) and caches them beside the source (or in its user
cache); its threads are OpenMP's where libgomp is installed. Its fallback thread pool
(workqueue) aborts when two threads launch parallel kernels at once: run one-device products
from one Python thread at a time there.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from wse_core.host.pe_ffi import available, register, wait_policy

# a product is three parallel regions back to back, products come in bursts: the second
# core's threads spin between them (~0.1 s at most, as OpenBLAS's) instead of being woken
# each time (pe_ffi, which has the measurements). Quiet machines are the case served; on a
# shared one, OMP_WAIT_POLICY=passive in the environment wins over this.
wait_policy("spin")

__all__ = ["available", "rows_dot", "sum_rows", "gather_rows", "pair_vectors"]


@functools.cache
def _target(name: str, parallel: bool) -> str:
    """The FFI target of a kernel, compiled in a helper process (numba; ~6 s the first
    time, then from its cache) and loaded from numba's cache, registered with XLA on first
    use. Never compiled here, as the attention's handlers are not: a handler compiled in
    the process that runs it binds its kernels' own earlier compiles and can round apart
    from a warm run (`wse_core.host.compile_ahead`; a TLR recompile in-process differed by
    up to 2e-9, stop 61)."""
    from wse_core.host import compile_ahead

    kernel = f"{name}_{'cores' if parallel else 'thread'}"
    return register(f"wse_tlr_{kernel}", compile_ahead.load(_KERNELS, kernel))


_KERNELS = "wse_hpc.tlrmvm._pe_numba"  # their module, for compile_ahead


def _lengths(lengths: jax.Array | None, shape: tuple[int, ...], k: int) -> jax.Array:
    if lengths is None:
        return jnp.full(shape, k, jnp.int32)
    return jnp.asarray(lengths, jnp.int32).reshape(shape)


def rows_dot(
    a: jax.Array,
    e: jax.Array,
    sel: jax.Array,
    lengths: jax.Array | None = None,
    *,
    parallel: bool,
) -> jax.Array:
    """(R, K) rows . (G, B, C, K) vectors at sel (R,) -> (R, C, B); see the module doc."""
    (r, k), (_, b, c, _) = a.shape, e.shape
    call = jax.ffi.ffi_call(
        _target("rows_dot", parallel),
        jax.ShapeDtypeStruct((r, c, b), a.dtype),
        vmap_method="sequential",
    )
    return call(a, e, sel, _lengths(lengths, (r,), k))


def sum_rows(
    a: jax.Array,
    t: jax.Array,
    win: jax.Array,
    conj: bool,
    pieces: int,
    lengths: jax.Array | None = None,
    *,
    parallel: bool,
) -> jax.Array:
    """(BR, RW, K) rows times (BR, RW, C, B) values into (BR, pieces, C, B, K / C) pieces."""
    br, rw, k = a.shape
    c, b = t.shape[2], t.shape[3]
    out = jax.ShapeDtypeStruct((br, pieces, c, b, k // c), a.dtype)
    sign = jnp.full((1,), -1.0 if conj else 1.0, jnp.float32)
    nk = _lengths(lengths, (br, rw), k)
    return jax.ffi.ffi_call(_target("sum_rows", parallel), out, vmap_method="sequential")(
        a, t, win, nk, sign
    )


def gather_rows(src: jax.Array, at: jax.Array) -> jax.Array:
    """(N, F) rows at (M,) int32 positions -> (M, F); see the module doc."""
    out = jax.ShapeDtypeStruct((at.shape[0], src.shape[1]), src.dtype)
    return jax.ffi.ffi_call(_target("gather_rows", False), out, vmap_method="sequential")(src, at)


def pair_vectors(p: jax.Array, conj: bool, cplx: bool) -> jax.Array:
    """Pieces (..., nb, b) as `rows_dot`'s vectors (..., b, C, P nb): for complex stored rows
    (interleaved pairs) the two vectors whose real dots with a row give re and im of
    row . piece (conj(row) . piece with `conj`); for real rows the piece itself."""
    if not cplx:
        return jnp.swapaxes(p, -1, -2)[..., None, :]
    xr, xi = jnp.swapaxes(jnp.real(p), -1, -2), jnp.swapaxes(jnp.imag(p), -1, -2)
    sg = -1.0 if conj else 1.0
    re = jnp.stack([xr, -sg * xi], axis=-1)  # against (row re, row im)
    im = jnp.stack([xi, sg * xr], axis=-1)
    return jnp.stack([re, im], axis=-3).reshape(*re.shape[:-3], re.shape[-3], 2, -1)
