"""The phases of the grouped TLR-MVM (`grouped`) as pure functions on the emulator's device
blocks; `grouped.tlrmvm_grouped` chains them into A x and A^H y.

`PhaseSpec` holds the static layout they close over (wafer, nb, group size s, ring length L,
complex or real, which kernel), `Side` one side of the operator (its columns or its rows).
`west_in` brings the x (or y) pieces in at the west edges, `rows_times_pieces` is phase 1,
`ring_pick` (at the host-side `ring_at` positions) phase 2, `row_out` phase 3 and the sum
along each PE row.

The emulator computes each phase over a device block with one large operation, so the
bases are streamed once per product (the ledgers record what the wafer does, as `grouped`
describes), in one of two forms (`kernel`):
- "pe" (the default on a CPU): phases 1 and 3 are the PEs' own kernels (`pe_kernels`, numba
  through XLA's FFI, one call per block, on the cores): each stored row times its own piece
  only, and each row's values times its row into its piece, reading only the row's own
  floats (`grouped.row_lengths`: the operator's bases, not the placement's padding).
  Benchmark, 2 cores, one device, one vector (bench_tlrmvm, 2026-11-23): 0.12 / 0.19 /
  1.42 ms at n = 2500 / 4900 / 9801 against 0.34 / 0.82 / 4.08 with "xla", 1.20 / 1.63 /
  1.47x the plain NumPy TLR-MVM (before both of the above);
- "xla" (any backend; the fallback where numba or a CPU is missing): phase 1 is one dot
  per PE row, its V rows (PEs x w, 2 nb) against all s pieces at once (N = 2 s b), each row
  then keeping its piece; phase 3 one dot per PE row, a one-hot-times-values matrix
  (s P b, PEs x w) @ U (PEs x w, 2 nb), which also sums the row's partial pieces. XLA:CPU
  lowers both to YNNPACK at ~45-75 GB/s of bases on one core (N or M = 4) and multiplies
  every row by all s pieces.
Phase 2 is `fabric.multicast_apply` in both, each block gathering every PE's slot from the
rows upstream (no per-PE copies of the ring), and phase 3 runs inside
`fabric.allreduce_apply` (which adds the blocks' sums across devices). The colouring is
Koenig's (D colours): phase 3 handles PEs whose U rows mix tile rows at no extra cost.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from wse_core import fabric
from wse_core.hw.wafer import Wafer

from wse_hpc.tlrmvm import pe_kernels
from wse_hpc.tlrmvm.wafer import FP32_PRODUCTS, pad_grid

__all__ = ["PhaseSpec", "Side", "ring_at", "ring_pick", "row_out", "rows_times_pieces", "west_in"]


class PhaseSpec(NamedTuple):
    """The static things the grouped product's phases close over."""

    wafer: Wafer
    nb: int
    s: int  # group size: x pieces and partial y pieces per PE
    ring: int  # PE rows of the ring allgather (the number of groups L)
    cplx: bool  # complex bases, stored as interleaved float32 pairs
    use_pe: bool  # phases 1 and 3 as `pe_kernels` (else one XLA dot per PE row)
    cores: bool  # the PE kernels spread a block over the cores (one device)


class Side(NamedTuple):
    """One side of the operator: its columns (x's side) or its rows (y's), `length` entries
    in `tiles` tiles of nb; `groups` the plan's tiles of each group (-1 padded) and, per
    tile, its group `grp` and its position `pos` in it (`grouped_plan.group_position`)."""

    length: int
    tiles: int
    groups: np.ndarray
    grp: np.ndarray
    pos: np.ndarray


def _rhs(p: jax.Array, conj: bool, cplx: bool) -> jax.Array:
    """Pieces (PR, s, nb, b) as the right-hand side (PR, P nb, s P b) of one dot with the
    stored rows (P nb: complex rows as interleaved float32 pairs, P = 2; real rows, P = 1)
    that gives every row times every piece (conj(row) . piece with `conj`) as P-pairs: the
    PE kernels' vectors (`pe_kernels.pair_vectors`, (PR, s, b, P, P nb)) laid out for it."""
    pr = p.shape[0]
    e = pe_kernels.pair_vectors(p, conj, cplx)
    return jnp.transpose(e, (0, 4, 1, 3, 2)).reshape(pr, e.shape[-1], -1)


def _rows_dot(a: jax.Array, p: jax.Array, win: jax.Array, conj: bool, cplx: bool) -> jax.Array:
    """Phase 1: each stored row of `a` (PR, PC, w, P nb) times the piece of `p` (PR, s, nb,
    b) its `win` (PR, PC, w) names -> (PR, PC, w, P, b) pairs. One dot per PE row against all
    s pieces (XLA:CPU's dot streams the bases once; N = s P b costs little more than N = 2
    there), then each row keeps its piece."""
    o = jnp.einsum("gckn,gnq->gckq", a, _rhs(p, conj, cplx), precision=FP32_PRODUCTS)
    s = p.shape[1]
    o = o.reshape(*o.shape[:3], s, 2 if cplx else 1, p.shape[-1])
    out = o[:, :, :, 0]
    for j in range(1, s):  # a chain of selects: one elementwise loop on XLA:CPU
        out = jnp.where(win[..., None, None] == j, o[:, :, :, j], out)
    return out


def _sum_rows(a: jax.Array, t: jax.Array, win: jax.Array, s: int, conj: bool, cplx: bool):
    """Phase 3 on a block: sum over its PEs' rows k of t[k] (pairs) times row a[k] (conj(a[k])
    with `conj`), into the piece win[k] -> (block rows, s, P, b, nb). One dot per PE row: a
    one-hot-times-t matrix (s P b, PEs x w) @ a (PEs x w, P nb), which also adds the row's
    PEs' partial pieces; complex as t's (re, im) rows against the interleaved pairs."""
    hot = (win[..., None] == jnp.arange(s)).astype(t.dtype)  # (br, bc, w, s)
    h = hot[..., None, None] * t[..., None, :, :]  # (br, bc, w, s, P, b)
    o = jnp.einsum("gckspb,gckn->gspbn", h, a, precision=FP32_PRODUCTS)
    if not cplx:
        return o
    br, _, _, b, _ = o.shape
    o = o.reshape(br, s, 2, b, -1, 2)  # (.., t re/im, b, nb, a re/im)
    sg = -1.0 if conj else 1.0
    re = o[:, :, 0, :, :, 0] - sg * o[:, :, 1, :, :, 1]
    im = sg * o[:, :, 0, :, :, 1] + o[:, :, 1, :, :, 0]
    return jnp.stack([re, im], axis=2)


def whole_column(ps: PhaseSpec) -> bool:
    """Phase 2 picks from the block itself: the PE kernels' pick, on a block that spans the
    whole PE column without padding, where the periodic region is the block repeated (see
    `ring_pick`)."""
    w = ps.wafer
    return ps.use_pe and w.block_shape[0] == w.padded_shape[0] == w.rows


def ring_at(ps: PhaseSpec, slot: np.ndarray) -> np.ndarray:
    """Where each PE's row k finds its value in phase 2 (flattened over the block's rows, PEs
    and w): the PE `slot` steps north, k rows of its PE, in the block's region (`ring_pick`)
    or, where `whole_column`, in the block itself (computed on the host: XLA:CPU's gather
    runs ~2x slower with the index arithmetic fused in)."""
    (br, bc), w = ps.wafer.block_shape, slot.shape[2]
    g = np.arange(slot.shape[0])[:, None, None] % br
    c = np.arange(slot.shape[1])[None, :, None] % bc
    row = (g - slot) % br if whole_column(ps) else g + ps.ring - 1 - slot
    return (row * (bc * w) + c * w + np.arange(w)).astype(np.int32)


def ring_pick(ps: PhaseSpec, v: jax.Array, at: jax.Array) -> jax.Array:
    """Phase 2: every PE's (w, P, b) values travel south round its column (a ring allgather,
    consumed where it lands); each PE keeps, for each of its rows k, row k of the PE
    `slot[..., k]` steps north: one gather per block at `ring_at` (with the PE kernels, a
    numba gather, `pe_kernels.gather_rows`: ~20 us against XLA:CPU's ~90 at n = 9801).
    Where `whole_column` (one device down the columns, the default mesh), the region the
    multicast delivers is the block's own values, wrapped round, and the pick reads them
    there: XLA then never lays the region out (at n = 9801 a 431 KB copy that XLA:CPU split
    over its threads, ~70 us a product, whose pool then spun beside phase 3's threads).
    Phase 3's kernel picking each row's value itself as it reads (no gather, one call fewer)
    ran ~40 us a product slower at n = 9801 (2026-12-04): the pick stays its own call."""
    if ps.ring == 1:
        return v

    def gather(rows: jax.Array, at_block: jax.Array) -> jax.Array:
        rows = rows.reshape(-1, *rows.shape[3:])
        if ps.use_pe:
            flat = pe_kernels.gather_rows(rows.reshape(rows.shape[0], -1), at_block.reshape(-1))
            got = flat.reshape(-1, *rows.shape[1:])
        else:
            got = jnp.take(rows, at_block.reshape(-1), axis=0)
        return got.reshape(*at_block.shape, *rows.shape[1:])

    if whole_column(ps):
        fields, pick = (at, v), lambda _region, at_block, v_block: gather(v_block, at_block)
    else:
        fields, pick = (at,), gather
    return fabric.multicast_apply(ps.wafer, v, "S", ps.ring - 1, pick, *fields, boundary="periodic")


def west_in(ps: PhaseSpec, v: jax.Array, side: Side) -> jax.Array:
    """(side.length, b) -> PE row g's s pieces at its west edge, broadcast along the row;
    returns the copy each row's PEs hold, (PR, s, nb, b) (all copies are equal)."""
    wafer, nb, length, tiles, groups = ps.wafer, ps.nb, side.length, side.tiles, side.groups
    b = v.shape[-1]
    vt = jnp.pad(v, ((0, (tiles + 1) * nb - length), (0, 0))).reshape(tiles + 1, nb, b)
    pieces = jnp.take(vt, jnp.asarray(np.where(groups >= 0, groups, tiles)), axis=0)
    return fabric.broadcast(wafer, pad_grid(wafer, pieces[:, None]), "row", 0)[:, 0]


def rows_times_pieces(ps: PhaseSpec, a: jax.Array, p: jax.Array, idx: dict, win: str, conj: bool):
    """Phase 1: each stored row of `a` times its piece of `p` -> (PR, PC, w, P, b)."""
    wafer, cplx, use_pe, cores = ps.wafer, ps.cplx, ps.use_pe, ps.cores
    if not use_pe:
        return _rows_dot(a, p, idx[win], conj, cplx)

    def on_block(a_b, sel_b, len_b, p_b):
        e = pe_kernels.pair_vectors(p_b, conj, cplx)  # (br, s, b, P, P nb)
        e = e.reshape(-1, *e.shape[2:])
        rows = a_b.reshape(-1, a_b.shape[-1])
        out = pe_kernels.rows_dot(rows, e, sel_b.reshape(-1), len_b, parallel=cores)
        return out.reshape(*a_b.shape[:3], *out.shape[1:])

    return fabric.local_apply(wafer, on_block, a, idx["sel"], idx["len1"], row_data=(p,))


def row_out(
    ps: PhaseSpec, a: jax.Array, t: jax.Array, idx: dict, win: str, conj: bool, out: Side
) -> jax.Array:
    """Phase 3 and the sum of the partial pieces along each PE row (as float32 pairs) into
    the `out` side's vector (out.length, b); piece t of row g is its tile out.pos; `idx[win]`
    the piece of each row, `idx["len3"]` the floats of each row of `a` that the PE kernel
    reads."""
    wafer, nb, s, ring = ps.wafer, ps.nb, ps.s, ps.ring
    cplx, use_pe, cores = ps.cplx, ps.use_pe, ps.cores

    def block_sums(a_b, t_b, win_b, len_b):
        if not use_pe:
            return _sum_rows(a_b, t_b, win_b, s, conj, cplx)
        rows = a_b.shape[0]
        return pe_kernels.sum_rows(
            a_b.reshape(rows, -1, a_b.shape[-1]),
            t_b.reshape(rows, -1, *t_b.shape[-2:]),
            win_b.reshape(rows, -1),
            conj,
            s,
            len_b,
            parallel=cores,
        )

    fields = (a, t, idx[win], idx["len3"])
    got = fabric.allreduce_apply(wafer, block_sums, *fields, axis="row")[:ring, 0]
    # (L, s, P, b, nb)
    y = lax.complex(got[:, :, 0], got[:, :, 1]) if cplx else got[:, :, 0]
    y = jnp.take(y.reshape(ring * s, -1, nb), jnp.asarray(out.grp * s + out.pos), axis=0)
    return jnp.transpose(y, (0, 2, 1)).reshape(len(out.grp) * nb, -1)[: out.length]
