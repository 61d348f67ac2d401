"""TLR-MVM on the wafer, bucketed by rank: each PE column holds its tile column's stack of
rank slices packed end to end, so a tile of rank k takes ceil(k / w) PEs instead of the band
height its tile row's largest rank sets (`wafer`'s banded layout). Same contract and
`TlrFns` as `wafer.tlrmvm`; `TlrEngine.build(..., layout="packed")` picks it.

Placement: column j lists the slices (i, q) of tiles (0, j), (1, j), ... in order; PE (r, j)
holds slice r of that list (`vh[r, j]` = V_ij[:, q*w:(q+1)*w]^H) or zeros. A PE row thus mixes
a few consecutive tile rows (its "windows", at most T). Phases: x broadcast down columns;
phase 1 local GEMVs; phase 2 the same ring allgather east as the banded layout; phase 3 each
PE multiplies every received slice by its rows chunk of the matching U block and adds the
products per window; the windows are scattered into a per-PE (mt, ch) buffer and summed
down each PE column (one column allreduce), which delivers y. The adjoint mirrors it.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from wse_core import fabric
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import SramLedger
from wse_core.hw.wafer import Wafer

from wse_hpc.tlrmvm.budget import ChunkFit, fits_program, least_chunk, refuse_grid, refuse_sram
from wse_hpc.tlrmvm.compress import TlrError, TlrOperator
from wse_hpc.tlrmvm.wafer import (
    FP32_PRODUCTS,
    PlanBase,
    TlrBases,
    TlrFns,
    bases_itemsize,
    ceil_div,
    check_vector,
    pad_grid,
    ring_reduce_scatter,
)

__all__ = ["PackedPlan", "plan_packed", "tlrmvm_packed"]


@dataclasses.dataclass(frozen=True, eq=False)
class PackedPlan(PlanBase):
    slot_tile: np.ndarray  # (R, nt): tile row of the slice PE (r, j) holds, -1 if none
    slot_q: np.ndarray  # (R, nt): which rank slice of that tile
    win_of: np.ndarray  # (R, nt): window index of slot_tile[r, j] within row r
    win_tile: np.ndarray  # (R, T): tile row of window t of row r, -1 if unused
    layout: ClassVar[str] = "packed"

    @property
    def grid(self) -> tuple[int, int]:
        return self.slot_tile.shape  # type: ignore[return-value]

    @property
    def chunk(self) -> int:
        return ceil_div(self.nb, self.tiles[1])

    @property
    def windows(self) -> int:
        return self.win_tile.shape[1]

    def bytes_per_pe(self) -> dict[str, int]:
        w, isz = self.rank_chunk, self.itemsize
        return _bytes(self.nb, self.tiles, w, self.batch, isz, self.bases_itemsize)

    def fields(self, op: TlrOperator) -> tuple[np.ndarray, np.ndarray]:
        """The placed (vh, u) fields of `op` (see the module doc)."""
        return _fields(op, self)

    def _details(self) -> dict[str, object]:
        return {"windows": self.windows, "chunk_rows": self.chunk}


def _bytes(
    nb: int, tiles: tuple[int, int], w: int, batch: int, isz: int, bsz: int
) -> dict[str, int]:
    """Bases at `bsz` bytes per value (`wafer.bases_itemsize`), vectors at `isz`."""
    mt, nt = tiles
    ch = ceil_div(nb, nt)
    vectors = (nb + w + nt * w + 2 * mt * ch) * batch  # x_j, yv, yu, window + column buffers
    return {
        "tlrmvm.vh": w * nb * bsz,
        "tlrmvm.u": nt * ch * w * bsz,
        "tlrmvm.vectors": vectors * isz,
    }


def _slots(ranks: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray]:
    mt, nt = ranks.shape
    lists = [
        [(i, q) for i in range(mt) for q in range(ceil_div(int(ranks[i, j]), w))] for j in range(nt)
    ]
    rows = max(1, max(len(lst) for lst in lists))
    tile = np.full((rows, nt), -1, np.int64)
    q = np.zeros((rows, nt), np.int64)
    for j, lst in enumerate(lists):
        for r, (i, qq) in enumerate(lst):
            tile[r, j], q[r, j] = i, qq
    return tile, q


def _windows(slot_tile: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    present = [sorted({int(i) for i in row if i >= 0}) for row in slot_tile]
    t = max(1, max(len(p) for p in present))
    win_tile = np.full((slot_tile.shape[0], t), -1, np.int64)
    win_of = np.zeros(slot_tile.shape, np.int64)
    for r, p in enumerate(present):
        win_tile[r, : len(p)] = p
        for j, i in enumerate(slot_tile[r]):
            win_of[r, j] = p.index(int(i)) if i >= 0 else 0
    return win_of, win_tile


def plan_packed(
    op: TlrOperator,
    spec: WaferSpec,
    *,
    rank_chunk: int | None = None,
    batch: int = 1,
    real_split: bool = False,
) -> PackedPlan:
    """The packed plan: the ledger's largest rank chunk (or `rank_chunk`), refused if the
    PEs or their SRAM do not suffice. `real_split`: the PEs hold complex tiles as real
    (2m x 2n) tiles (`wafer`)."""
    kmax = max(int(op.ranks.max()), 1)
    isz = op.dtype.itemsize
    bsz = bases_itemsize(str(op.dtype), isz, real_split)
    if batch <= 0:
        raise TlrError(f"batch must be a positive number of vectors, got {batch}")
    ledger = SramLedger.for_spec(spec)

    def total(w: int, b: int = batch) -> int:
        return sum(_bytes(op.nb, op.tiles, w, b, isz, bsz).values())

    asked = rank_chunk
    if rank_chunk is None:
        rank_chunk = max(ledger.largest(total, 1, kmax), 1)
    elif rank_chunk <= 0:
        raise TlrError(f"rank_chunk must be a positive integer, got {rank_chunk}")

    def grid(w: int) -> tuple[int, int]:  # a tile column's slices, end to end
        return max(1, int(ceil_div(op.ranks, w).sum(0).max())), op.tiles[1]

    fits = (ChunkFit(least_chunk(grid, spec, kmax), total, kmax),)  # hunt 77: --batch too
    if total(rank_chunk) > ledger.free_bytes():  # hunt 69: the option and what fits
        refuse_sram(ledger, total, spec.name, rank_chunk=asked, batch=batch, nb=op.nb, fits=fits)
    slot_tile, slot_q = _slots(op.ranks, rank_chunk)
    win_of, win_tile = _windows(slot_tile)
    plan = PackedPlan(
        op.shape,
        op.nb,
        op.tiles,
        int(rank_chunk),
        batch,
        op.dtype.itemsize,
        str(op.dtype),
        slot_tile,
        slot_q,
        win_of,
        win_tile,
        real_split=real_split,
    )
    if not fits_program(plan.grid, spec):  # the program's PEs, not the wafer's (hunt 76)
        refuse_grid("packed", plan.grid, rank_chunk, spec, asked=asked, batch=batch, fits=fits)
    return plan


def _fields(op: TlrOperator, plan: PackedPlan) -> tuple[np.ndarray, np.ndarray]:
    (rows, nt), w, nb, ch = plan.grid, plan.rank_chunk, plan.nb, plan.chunk
    vh = np.zeros((rows, nt, w, nb), op.dtype)
    u = np.zeros((rows, nt, ch, nt, w), op.dtype)
    cs = np.arange(nt)
    for r in range(rows):
        for t in range(nt):
            i, q = int(plan.slot_tile[r, t]), int(plan.slot_q[r, t])
            if i < 0:
                continue
            v = op.v(i, t)[:, q * w : (q + 1) * w].conj().T  # (<= w, n_t)
            vh[r, t, : v.shape[0], : v.shape[1]] = v
            blk = np.zeros((nt * ch, w), op.dtype)
            ub = op.u(i, t)[:, q * w : (q + 1) * w]
            blk[: ub.shape[0], : ub.shape[1]] = ub
            u[r, cs, :, (cs - t) % nt, :] = blk.reshape(nt, ch, w)  # slot s = c - t
    return vh, u


def _slot_windows(plan: PackedPlan, padded: tuple[int, int]) -> np.ndarray:
    """(PR, PC, nt, T) float: 1 where slot s of PE (r, c) belongs to window t."""
    nt, t = plan.grid[1], plan.windows
    m = np.zeros((padded[0], padded[1], nt, t), np.float32)
    for c in range(nt):
        src = (c - np.arange(nt)) % nt  # slot s came from PE column c - s
        ok = plan.slot_tile[:, src] >= 0  # (rows, nt)
        r_idx, s_idx = np.nonzero(ok)
        m[r_idx, c, s_idx, plan.win_of[r_idx, src[s_idx]]] = 1.0
    return m


def _slot_rows(plan: PackedPlan, padded: tuple[int, int]) -> np.ndarray:
    """(PR, PC, nt) int32: the tile row of slot s at PE (r, c); mt for none (a spare row)."""
    (rows, nt), mt = plan.grid, plan.tiles[0]
    out = np.full((padded[0], padded[1], nt), mt, np.int32)
    for c in range(nt):
        tile = plan.slot_tile[:, (c - np.arange(nt)) % nt]  # (rows, nt)
        out[:rows, c] = np.where(tile >= 0, tile, mt)
    return out


def _add_by_tile_row(z: jax.Array, rows: jax.Array, mt: int) -> jax.Array:
    """buf[r, c, i] = sum of z[r, c, :, s] over the slots s whose tile row is i (local)."""
    pr, pc, ch, nt, b = z.shape
    zz = jnp.transpose(z, (0, 1, 3, 2, 4))  # (R, C, nt, ch, b)
    buf = jnp.zeros((pr, pc, mt + 1, ch, b), z.dtype)
    r = jnp.arange(pr)[:, None, None]
    c = jnp.arange(pc)[None, :, None]
    return buf.at[r, c, rows].add(zz)[:, :, :mt]


def tlrmvm_packed(wafer: Wafer, plan: PackedPlan) -> TlrFns:
    """Pure functions for A x and A^H y on the packed bases; the caller decides `jit`."""
    (m, n), nb, (mt, nt), ch = plan.shape, plan.nb, plan.tiles, plan.chunk
    slot_win = _slot_windows(plan, wafer.padded_shape)
    slot_rows = jnp.asarray(_slot_rows(plan, wafer.padded_shape))
    win_tile = np.where(plan.win_tile >= 0, plan.win_tile, mt)  # mt: a zero row

    def matvec_fn(bases: TlrBases, x: jax.Array) -> jax.Array:
        check_vector(x, n, plan, "x")  # type: ignore[arg-type]
        x = x.astype(bases.vh.dtype)
        xt = jnp.pad(x, ((0, nt * nb - n), (0, 0))).reshape(1, nt, nb, -1)
        xf = fabric.broadcast(wafer, pad_grid(wafer, xt), "col", 0)
        yv = jnp.einsum("rcwn,rcnb->rcwb", bases.vh, xf, precision=FP32_PRODUCTS)  # phase 1
        if nt > 1:  # phase 2: ring allgather east
            yv = jnp.concatenate(
                [yv[:, :, None], fabric.multicast(wafer, yv, "E", nt - 1, boundary="periodic")],
                axis=2,
            )
        else:
            yv = yv[:, :, None]
        # phase 3: every slot's product (a multiply-and-sum over w: on XLA:CPU ~3x faster
        # than a dot here), added into the PE's buffer row of that slot's tile row
        z = jnp.sum(bases.u[..., None] * yv[:, :, None], axis=-2)  # (R, C, ch, nt, b)
        buf = _add_by_tile_row(z, slot_rows, mt)
        ys = fabric.allreduce(wafer, buf, "sum", axis="col")[0, :nt]  # (nt, mt, ch, b)
        y = jnp.transpose(ys, (1, 0, 2, 3)).reshape(mt, nt * ch, -1)[:, :nb]
        return y.reshape(mt * nb, -1)[:m]

    def rmatvec_fn(bases: TlrBases, y: jax.Array) -> jax.Array:
        check_vector(y, m, plan, "y")  # type: ignore[arg-type]
        y = y.astype(bases.u.dtype)
        yt = jnp.pad(y, ((0, mt * nb - m), (0, 0))).reshape(mt, nb, -1)
        yt = jnp.pad(yt, ((0, 1), (0, nt * ch - nb), (0, 0))).reshape(mt + 1, nt, ch, -1)
        yw = jnp.take(yt, jnp.asarray(win_tile), axis=0)  # (R, T, nt, ch, b): host -> PEs
        yf = pad_grid(wafer, jnp.transpose(yw, (0, 2, 1, 3, 4)))
        ys = jnp.einsum(
            "rctmb,rcst->rcsmb", yf, jnp.asarray(slot_win, yf.real.dtype), precision=FP32_PRODUCTS
        )
        part = jnp.einsum(
            "rcmsw,rcsmb->rcswb", jnp.conj(bases.u), ys, precision=FP32_PRODUCTS
        )  # phase 1 (adjoint)
        z = ring_reduce_scatter(wafer, part, nt)  # phase 2 (adjoint)
        xp = jnp.einsum(
            "rcwn,rcwb->rcnb", jnp.conj(bases.vh), z, precision=FP32_PRODUCTS
        )  # phase 3 (adjoint)
        xs = fabric.allreduce(wafer, xp, "sum", axis="col")[0, :nt]
        return xs.reshape(nt * nb, -1)[:n]

    return TlrFns(matvec_fn, rmatvec_fn)
