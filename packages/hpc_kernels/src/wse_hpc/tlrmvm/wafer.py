"""TLR-MVM on the wafer, banded layout: the bases in PE SRAM and the three phases as pure
functions. (`packed` is the bucketed layout, which needs fewer PEs when ranks vary.)

Placement (host-side, static; `plan_placement`, then `place_plan`, which places any layout's
plan). Tile column j of the operator is PE column j. Tile row i owns a band of p_i
consecutive PE rows; PE (r, j) of the band holds rank slice q (w columns, w = the rank
chunk) of tile (i, j):
- `vh[r, j]` = V_ij[:, q*w:(q+1)*w]^H, (w, nb): the phase-1 stack (tile column order);
- `u[r, j, :, s*w:(s+1)*w]` = U_it[j*ch:(j+1)*ch, q*w:(q+1)*w] for t = (j - s) mod nt,
  (ch, nt*w) with ch = ceil(nb / nt): the phase-3 stack, rows chunk j of tile row i, its
  slices side by side in the order the reshuffle delivers them (one contiguous GEMV).
Bases are zero-padded to w columns per PE (zero columns act as the rank masks), so
p_i = max_j ceil(k_ij / w). The SRAM ledger picks w: the largest rank chunk whose bases and
vector buffers fit one PE, which gives the fewest PEs; a plan that needs more PEs than a
program gets (`budget.program_rectangle`) or more SRAM than a PE has is refused. Every
planner takes `real_split`: the PEs hold each complex tile as the real (2m x 2n) tile
[[Re, -Im], [Im, Re]] (16 mn bytes, twice complex64; `bases_itemsize`), as the SDK's
single-tile-matvec would store it, so the ledger picks a smaller w (`perf`'s real-split
convention is priced on that plan); the product and its fields are the same.

The product y = A x (`TlrFns.matvec_fn(bases, x)`, x: (N, b)):
0. x enters at the north edge (PE row 0, tile j in column j) and is broadcast down columns;
1. phase 1: every PE computes its slice yv = V^H x_j (a local GEMV);
2. phase 2, the reshuffle into tile-row order: a periodic multicast east along each PE row
   (a ring allgather) gives every PE of band i all nt slices of its rank slice q;
3. phase 3: every PE computes its rows chunk of U_i yu_i for slice q (a local GEMV); the
   p_i slices of a band are summed with a multicast north; y leaves from each band's first row.
The adjoint A^H y (`rmatvec_fn`) runs the same placement backwards: U^H y partials, a ring
reduce-scatter east (nt - 1 periodic shifts), V z, and a reduction along PE columns.

Every layout's dots (here, `packed`, `grouped_phases`) ask for `FP32_PRODUCTS`, float32
products on every backend, as the PEs compute them: with DEFAULT precision XLA runs float32
dots on NVIDIA GPUs in TF32 (a 10-bit mantissa, ~1e-3 relative), including the one-hot
selections that only move values.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple, Protocol, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from wse_core import fabric
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import SramLedger
from wse_core.hw.wafer import Wafer, build_wafer

from wse_hpc.tlrmvm.budget import ChunkFit, fits_program, least_chunk, refuse_grid, refuse_sram
from wse_hpc.tlrmvm.compress import TlrError, TlrOperator

__all__ = [
    "FP32_PRODUCTS",
    "TlrPlan",
    "bases_itemsize",
    "TlrBases",
    "TlrFns",
    "plan_placement",
    "place_plan",
    "tlrmvm",
]

FP32_PRODUCTS = lax.Precision.HIGHEST  # float32 products on GPUs too (no TF32)


@dataclasses.dataclass(frozen=True, eq=False)
class PlanBase:
    """What every layout's plan holds about the operator and the buffers (the fields below),
    with `padded_bases_bytes` and `describe()`; each layout adds its placement fields, a
    `layout` name, `grid`, `bytes_per_pe()` and `_details()` (its own describe entries)."""

    shape: tuple[int, int]
    nb: int
    tiles: tuple[int, int]  # (mt, nt)
    rank_chunk: int  # w
    batch: int  # vectors per product the buffers are sized for
    itemsize: int
    dtype: str
    # a PE holds each complex tile as its real (2m x 2n) block (`bases_itemsize`)
    real_split: bool = dataclasses.field(default=False, kw_only=True)

    @property
    def bases_itemsize(self) -> int:
        return bases_itemsize(self.dtype, self.itemsize, self.real_split)

    @property
    def padded_bases_bytes(self: LayoutPlan) -> int:
        """Bytes of bases on the wafer including the zero padding."""
        b = self.bytes_per_pe()
        r, c = self.grid
        return r * c * (b["tlrmvm.vh"] + b["tlrmvm.u"])

    def describe(self) -> dict[str, object]:
        plan = cast("LayoutPlan", self)
        return {
            "layout": plan.layout,
            "grid": list(plan.grid),
            "rank_chunk": plan.rank_chunk,
            **plan._details(),
            **({"real_split": True} if plan.real_split else {}),
            "bytes_per_pe": plan.bytes_per_pe(),
            "padded_bases_bytes": plan.padded_bases_bytes,
        }


@dataclasses.dataclass(frozen=True)
class TlrPlan(PlanBase):
    """Where the bases go: rank chunk, bands of PE rows, grid, bytes per PE."""

    band_rows: tuple[int, ...]  # p_i
    layout: ClassVar[str] = "banded"

    @property
    def grid(self) -> tuple[int, int]:
        return sum(self.band_rows), self.tiles[1]

    @property
    def chunk(self) -> int:
        """Rows of y_i each PE of a band computes."""
        return -(-self.nb // self.tiles[1])

    @property
    def band_starts(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.band_rows)[:-1]]).astype(np.int64)

    @property
    def max_band(self) -> int:
        return max(self.band_rows)

    def bytes_per_pe(self) -> dict[str, int]:
        nb, nt, w, isz = self.nb, self.tiles[1], self.rank_chunk, self.itemsize
        return _bytes_per_pe(nb, nt, w, self.max_band, self.batch, isz, self.bases_itemsize)

    def fields(self, op: TlrOperator) -> tuple[np.ndarray, np.ndarray]:
        """The placed (vh, u) fields of `op` (see the module doc)."""
        return _vh_field(op, self), _u_field(op, self)

    def _details(self) -> dict[str, object]:
        return {"max_band_rows": self.max_band, "chunk_rows": self.chunk}


class LayoutPlan(Protocol):
    """What every layout's plan (banded, packed, grouped) gives the wafer builder."""

    layout: str
    rank_chunk: int

    @property
    def grid(self) -> tuple[int, int]: ...

    @property
    def padded_bases_bytes(self) -> int: ...

    def _details(self) -> dict[str, object]: ...

    def bytes_per_pe(self) -> dict[str, int]: ...

    def fields(self, op: TlrOperator) -> tuple[np.ndarray, np.ndarray]: ...


class TlrBases(NamedTuple):
    """The placed bases: vh (R, C, w, nb) and u (R, C, ch, nt * w), padded and sharded."""

    vh: jax.Array
    u: jax.Array


class TlrFns(NamedTuple):
    """`matvec_fn(bases, x (N, b)) -> (M, b)`, `rmatvec_fn(bases, y (M, b)) -> (N, b)`, and
    what computes inside the PEs: "pe" (the PEs' numba kernels, grouped layout) or "xla".
    `store_fn(placed) -> bases`: the placed bases (`place_plan`) in the order the products
    read them, once (the grouped PE kernels', `grouped_storage`); None: as placed."""

    matvec_fn: object
    rmatvec_fn: object
    kernel: str = "xla"
    store_fn: object = None


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def bases_itemsize(dtype: str, itemsize: int, real_split: bool) -> int:
    """Bytes a PE stores per basis value: the value as held (complex64: 8), or with
    `real_split` a complex value's share of the real (2m x 2n) tile [[Re, -Im], [Im, Re]]
    the SDK's single-tile-matvec would store: 4 fp32 (16 B, twice complex64). Vectors stay
    (re, im) pairs either way. A real operator's tile is its real tile: the same bytes."""
    return 2 * itemsize if real_split and dtype.startswith("complex") else itemsize


def _bytes_per_pe(
    nb: int, nt: int, w: int, pmax: int, batch: int, isz: int, bsz: int
) -> dict[str, int]:
    """Bytes per PE: bases at `bsz` per value (`bases_itemsize`), vectors at `isz`."""
    ch = ceil_div(nb, nt)
    vectors = (nb + w + nt * w + ch * max(pmax, 1)) * batch  # x_j, yv, yu, y chunk partials
    return {
        "tlrmvm.vh": w * nb * bsz,
        "tlrmvm.u": nt * ch * w * bsz,
        "tlrmvm.vectors": vectors * isz,
    }


def plan_placement(
    op: TlrOperator,
    spec: WaferSpec,
    *,
    rank_chunk: int | None = None,
    batch: int = 1,
    real_split: bool = False,
) -> TlrPlan:
    """The plan for `op` on `spec`: the ledger's largest rank chunk (or `rank_chunk`);
    `real_split`: each PE holds its complex tiles as real (2m x 2n) tiles (`bases_itemsize`)."""
    mt, nt = op.tiles
    kmax = max(int(op.ranks.max()), 1)
    isz = op.dtype.itemsize
    bsz = bases_itemsize(str(op.dtype), isz, real_split)
    if batch <= 0:
        raise TlrError(f"batch must be a positive number of vectors, got {batch}")
    ledger = SramLedger.for_spec(spec)

    def total(w: int, b: int = batch) -> int:
        return sum(_bytes_per_pe(op.nb, nt, w, ceil_div(kmax, w), b, isz, bsz).values())

    def grid(w: int) -> tuple[int, int]:  # each band as tall as its largest rank
        return int(np.maximum(1, ceil_div(op.ranks.max(1), w)).sum()), nt

    asked, fits = rank_chunk, (ChunkFit(least_chunk(grid, spec, kmax), total, kmax),)  # hunt 77
    if rank_chunk is None:  # the largest that fits; each band's partials shrink as w grows, so
        free = ledger.free_bytes()  # a larger w may fit where a smaller does not (hunt 77)
        rank_chunk = max((w for w in range(1, kmax + 1) if total(w) <= free), default=0)
        if rank_chunk < 1:  # hunt 69: say --batch and what fits, not the allocation
            refuse_sram(ledger, total, spec.name, rank_chunk=None, batch=batch, nb=op.nb, fits=fits)
    elif rank_chunk <= 0:
        raise TlrError(f"rank_chunk must be a positive integer, got {rank_chunk}")
    bands = tuple(max(1, ceil_div(int(op.ranks[i].max()), rank_chunk)) for i in range(mt))
    plan = TlrPlan(
        op.shape,
        op.nb,
        (mt, nt),
        int(rank_chunk),
        batch,
        isz,
        str(op.dtype),
        bands,
        real_split=real_split,
    )
    for name, nbytes in plan.bytes_per_pe().items():  # an explicit rank_chunk may not fit
        ledger.allocate(name, nbytes)
    if not fits_program(plan.grid, spec):  # the program's PEs, not the wafer's (hunt 76)
        refuse_grid("banded", plan.grid, rank_chunk, spec, asked=asked, batch=batch, fits=fits)
    return plan


def _vh_field(op: TlrOperator, plan: TlrPlan) -> np.ndarray:
    (rows, cols), w, nb = plan.grid, plan.rank_chunk, plan.nb
    out = np.zeros((rows, cols, w, nb), op.dtype)
    for i, (r0, p) in enumerate(zip(plan.band_starts, plan.band_rows, strict=True)):
        for j in range(cols):
            vh = op.v(i, j).conj().T  # (k, n_j)
            blk = np.zeros((p * w, nb), op.dtype)
            blk[: vh.shape[0], : vh.shape[1]] = vh
            out[r0 : r0 + p, j] = blk.reshape(p, w, nb)
    return out


def _u_field(op: TlrOperator, plan: TlrPlan) -> np.ndarray:
    (rows, nt), w, ch = plan.grid, plan.rank_chunk, plan.chunk
    out = np.zeros((rows, nt, ch, nt, w), op.dtype)
    cs = np.arange(nt)
    for i, (r0, p) in enumerate(zip(plan.band_starts, plan.band_rows, strict=True)):
        for t in range(nt):
            u = op.u(i, t)  # (m_i, k)
            blk = np.zeros((nt * ch, p * w), op.dtype)
            blk[: u.shape[0], : u.shape[1]] = u
            # (c, p, ch, w): numpy puts the two index arrays' axis first
            out[r0 : r0 + p, cs, :, (cs - t) % nt] = blk.reshape(nt, ch, p, w).transpose(0, 2, 1, 3)
    return out.reshape(rows, nt, ch, nt * w)


def place_plan(
    op: TlrOperator,
    spec: WaferSpec,
    plan: LayoutPlan,
    *,
    mesh_shape: tuple[int, int] | None = None,
    defect_seed: int | None = None,
) -> tuple[Wafer, TlrBases]:
    """Any layout's plan on the wafer: build the wafer of the plan's grid, declare the
    plan's bytes per PE in its SRAM ledger, and place the plan's fields of `op`."""
    wafer = build_wafer(spec, grid=plan.grid, mesh_shape=mesh_shape, defect_seed=defect_seed)
    for name, nbytes in plan.bytes_per_pe().items():
        wafer.sram.allocate(name, nbytes)
    vh, u = plan.fields(op)
    return wafer, TlrBases(wafer.place(vh), wafer.place(u))


# -- the three phases -------------------------------------------------------------------
def _constrain(wafer: Wafer, x: jax.Array) -> jax.Array:
    return lax.with_sharding_constraint(x, wafer.sharding(x.ndim - 2))


def pad_grid(wafer: Wafer, x: jax.Array) -> jax.Array:
    """Pad a logical (rows, cols, ...) array to the wafer's padded grid."""
    pr, pc = wafer.padded_shape
    pad = [(0, pr - x.shape[0]), (0, pc - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
    return _constrain(wafer, jnp.pad(x, pad))


def _band_mask(plan: TlrPlan, padded_rows: int) -> np.ndarray:
    """(padded_rows, max_band - 1): 1 where a band's first row adds the slice d + 1 below."""
    mask = np.zeros((padded_rows, max(plan.max_band - 1, 1)), np.float32)
    for r0, p in zip(plan.band_starts, plan.band_rows, strict=True):
        mask[r0, : p - 1] = 1.0
    return mask


def check_vector(x: jax.Array, n: int, plan: TlrPlan, what: str) -> None:
    if x.ndim != 2 or x.shape[0] != n:
        raise TlrError(f"{what} must have length {n} (shape ({n},) or ({n}, b)), got {x.shape}")
    if x.shape[1] > plan.batch:
        raise TlrError(
            f"a batch of {x.shape[1]} vectors exceeds the planned batch {plan.batch}; "
            f"place the operator with batch={x.shape[1]}"
        )


def tlrmvm(wafer: Wafer, plan: TlrPlan) -> TlrFns:
    """Pure functions for A x and A^H y on the placed bases; the caller decides `jit`."""
    (m, n), nb, (mt, nt), ch = plan.shape, plan.nb, plan.tiles, plan.chunk
    rows = plan.grid[0]
    starts = jnp.asarray(plan.band_starts)
    row_tile = np.repeat(np.arange(mt), plan.band_rows)
    mask = _band_mask(plan, wafer.padded_shape[0])

    def matvec_fn(bases: TlrBases, x: jax.Array) -> jax.Array:
        check_vector(x, n, plan, "x")
        x = x.astype(bases.vh.dtype)
        xt = jnp.pad(x, ((0, nt * nb - n), (0, 0))).reshape(1, nt, nb, -1)
        xf = fabric.broadcast(wafer, pad_grid(wafer, xt), "col", 0)  # north edge -> columns
        yv = _gemv(bases.vh, xf)  # phase 1
        if nt > 1:  # phase 2: ring allgather east; slot s holds PE (c - s)'s slice
            got = fabric.multicast(wafer, yv, "E", nt - 1, boundary="periodic")
            yv = jnp.concatenate([yv[:, :, None], got], axis=2)
        else:
            yv = yv[:, :, None]
        yp = _gemv(bases.u, yv.reshape(*yv.shape[:2], -1, yv.shape[-1]))  # phase 3
        if plan.max_band > 1:  # sum the rank slices of each band into its first row
            below = fabric.multicast(wafer, yp, "N", plan.max_band - 1)
            yp = yp + jnp.einsum(
                "rd,rcdmb->rcmb", jnp.asarray(mask, yp.real.dtype), below, precision=FP32_PRODUCTS
            )
        y = jnp.take(yp, starts, axis=0)[:, :nt].reshape(mt, nt * ch, -1)[:, :nb]
        return y.reshape(mt * nb, -1)[:m]

    def rmatvec_fn(bases: TlrBases, y: jax.Array) -> jax.Array:
        check_vector(y, m, plan, "y")
        y = y.astype(bases.u.dtype)
        yt = jnp.pad(y, ((0, mt * nb - m), (0, 0))).reshape(mt, nb, -1)
        yt = jnp.pad(yt, ((0, 0), (0, nt * ch - nb), (0, 0))).reshape(mt, nt, ch, -1)
        yf = pad_grid(wafer, jnp.take(yt, jnp.asarray(row_tile), axis=0))  # host -> bands
        part = jnp.einsum(
            "rcmk,rcmb->rckb", jnp.conj(bases.u), yf, precision=FP32_PRODUCTS
        )  # phase 1 (adjoint)
        part = part.reshape(*part.shape[:2], nt, -1, part.shape[-1])
        z = ring_reduce_scatter(wafer, part, nt)  # phase 2 (adjoint)
        xp = jnp.einsum(
            "rcwn,rcwb->rcnb", jnp.conj(bases.vh), z, precision=FP32_PRODUCTS
        )  # phase 3 (adjoint)
        xs = fabric.allreduce(wafer, xp, "sum", axis="col")[0, :nt]
        return xs.reshape(nt * nb, -1)[:n]

    del rows
    return TlrFns(matvec_fn, rmatvec_fn)


def _gemv(a: jax.Array, x: jax.Array) -> jax.Array:
    """Per-PE a @ x for a (R, C, m, k), x (R, C, k, b): one dot with (R, C) batch dims
    (on XLA:CPU 2-3x faster than a fused multiply-and-sum at 9801 x 9801)."""
    return jnp.einsum("rcmk,rckb->rcmb", a, x, precision=FP32_PRODUCTS)


def ring_reduce_scatter(wafer: Wafer, part: jax.Array, nt: int) -> jax.Array:
    """PE (r, c) ends with sum over the row's PEs c' of part[r, c', s] for s = c' - c: the
    partial for tile c travels east from PE c + 1 round the ring, each PE adding its own."""
    acc = part[:, :, 1 % nt]
    if nt == 1:
        return acc

    def step(k, acc):
        nxt = lax.dynamic_index_in_dim(part, (1 + k) % nt, axis=2, keepdims=False)
        return fabric.shift(wafer, acc, "E", boundary="periodic") + nxt

    return lax.fori_loop(1, nt, step, acc)
