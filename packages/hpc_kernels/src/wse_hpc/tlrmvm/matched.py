"""TLR-MVM on the wafer, matched layout: each PE column holds a matching of rank slices, so
a PE's V slice and U slice belong to the same tile and phase 3 needs no per-tile-row scatter.
Same contract and `TlrFns` as `wafer.tlrmvm`; `TlrEngine.build(..., layout="matched")` (the
default) picks it.

Placement. Tile (i, j) of rank k is cut into ceil(k / w) rank slices of w columns (w = the
rank chunk, the ledger's largest). The slices are the edges of a bipartite multigraph between
tile rows and tile columns; an edge colouring (Koenig: as many colours as the largest degree,
the most slices any tile row or tile column has) gives each slice a PE column r such that no
two slices in a PE column share a tile row or a tile column. With L = max(mt, nt) PE rows,
PE row c is tile column c in phases 1-2 and tile row c in phase 3:
- `vh[j, r]` = V_ij[:, q*w:(q+1)*w]^H, (w, nb), for the slice (i, j, q) of colour r at
  tile column j (zeros if none);
- `u[i, r]` = U_ij[:, q*w:(q+1)*w]^T, (w, nb), for the slice of colour r at tile row i.
Complex bases are stored as float32 pairs (w, 2 nb), real and imaginary parts interleaved
(the same bytes): phase 1 then runs as one real dot against [[x_re, x_im], [-x_im, x_re]],
which reads each real entry once (XLA:CPU's complex dot is 2-3x slower here).
The grid is L x (largest degree); every PE holds at most one V and one U slice, so the only
padding is the last partial slice of each tile and the idle PEs of each row.

The product y = A x (`matvec_fn(bases, x)`, x: (N, b)):
0. x_j enters at the west edge of PE row j and is broadcast along the row;
1. phase 1: yv = V^H x_j on every PE (a local GEMV). The broadcast leaves identical copies of
   x_j on the PEs of row j; the emulator reads one copy per row, so a row's GEMVs run as one
   stacked GEMV (the same arithmetic, one XLA dot per tile column instead of one per PE);
2. phase 2, the reshuffle into tile-row order: a periodic multicast south along each PE
   column (a ring allgather); PE (i, r) keeps the slot of row j, its U slice's tile column;
3. phase 3: the U slice times that slot gives a partial y_i on each PE of row i; a sum along
   the PE row (row allreduce) delivers y_i.
The adjoint A^H y runs the same placement backwards: y_i broadcast along row i, U^H y_i,
the ring allgather south (PE (j, r) keeps the slot of its V slice's tile row), V times it and
a sum along row j.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from wse_core import fabric
from wse_core.errors import PlacementError
from wse_core.spec import WaferSpec
from wse_core.sram import SramLedger
from wse_core.wafer import Wafer

from wse_hpc.tlrmvm.compress import TlrError, TlrOperator
from wse_hpc.tlrmvm.wafer import (
    PaddedBases,
    TlrBases,
    TlrFns,
    _ceil,
    _check_vector,
    _pad_grid,
    build_planned_wafer,
)

__all__ = ["MatchedPlan", "colour_slices", "plan_matched", "place_matched", "tlrmvm_matched"]


@dataclasses.dataclass(frozen=True, eq=False)
class MatchedPlan(PaddedBases):
    shape: tuple[int, int]
    nb: int
    tiles: tuple[int, int]
    rank_chunk: int
    batch: int
    itemsize: int
    dtype: str
    v_slice: np.ndarray  # (L, D, 3): (i, j, q) of the slice whose V sits at PE (c, r); -1
    u_slice: np.ndarray  # (L, D, 3): (i, j, q) of the slice whose U sits at PE (c, r); -1
    layout: str = "matched"

    @property
    def grid(self) -> tuple[int, int]:
        return self.v_slice.shape[:2]  # type: ignore[return-value]

    @property
    def ring(self) -> int:
        """PE rows of the ring allgather: max(mt, nt)."""
        return self.grid[0]

    def bytes_per_pe(self) -> dict[str, int]:
        return _bytes(self.nb, self.ring, self.rank_chunk, self.batch, self.itemsize)

    def describe(self) -> dict[str, object]:
        return {
            "layout": self.layout,
            "grid": list(self.grid),
            "rank_chunk": self.rank_chunk,
            "slices": int((self.v_slice[..., 0] >= 0).sum()),
            "bytes_per_pe": self.bytes_per_pe(),
            "padded_bases_bytes": self.padded_bases_bytes,
        }


def _bytes(nb: int, ring: int, w: int, batch: int, isz: int) -> dict[str, int]:
    vectors = (nb + w + ring * w + nb) * batch  # x_j, yv, the ring's slots, the y_i partial
    return {
        "tlrmvm.vh": w * nb * isz,
        "tlrmvm.u": nb * w * isz,
        "tlrmvm.vectors": vectors * isz,
    }


def colour_slices(slices: np.ndarray, mt: int, nt: int) -> np.ndarray:
    """A proper edge colouring of the bipartite multigraph whose edges are `slices[e] =
    (i, j)` (tile row, tile column): colour[e] in 0..D-1, D the largest degree, and no two
    edges of one colour share a tile row or a tile column (Koenig's alternating paths)."""
    deg = np.bincount(slices[:, 0], minlength=mt).max(initial=0)
    deg = max(deg, np.bincount(slices[:, 1], minlength=nt).max(initial=0), 1)
    at_row = np.full((mt, deg), -1, np.int64)  # edge of colour c at tile row i
    at_col = np.full((nt, deg), -1, np.int64)
    colour = np.full(len(slices), -1, np.int64)
    for e, (i, j) in enumerate(slices):
        a = int(np.argmax(at_row[i] < 0))  # free at the row
        b = int(np.argmax(at_col[j] < 0))  # free at the column
        if at_col[j, a] >= 0:  # a is taken at the column: swap a/b along the path from j
            path, side, node, c = [], 1, j, a
            while True:
                f = at_col[node, c] if side else at_row[node, c]
                if f < 0:
                    break
                path.append(f)
                node = slices[f, 0] if side else slices[f, 1]
                side, c = 1 - side, (b if c == a else a)
            for f in path:  # uncolour, then recolour with the other colour
                fi, fj = slices[f]
                at_row[fi, colour[f]] = at_col[fj, colour[f]] = -1
            for f in path:
                new = b if colour[f] == a else a
                colour[f] = new
                fi, fj = slices[f]
                at_row[fi, new] = at_col[fj, new] = f
        colour[e] = a
        at_row[i, a] = at_col[j, a] = e
    return colour


def plan_matched(
    op: TlrOperator, spec: WaferSpec, *, rank_chunk: int | None = None, batch: int = 1
) -> MatchedPlan:
    """The matched plan: the ledger's largest rank chunk (or `rank_chunk`), refused if the
    PEs or their SRAM do not suffice."""
    (mt, nt), kmax = op.tiles, max(int(op.ranks.max()), 1)
    ring = max(mt, nt)
    if batch <= 0:
        raise TlrError(f"batch must be a positive number of vectors, got {batch}")
    ledger = SramLedger(spec.pe_rows, spec.pe_cols, spec.sram_bytes_per_pe)

    def total(w: int) -> int:
        return sum(_bytes(op.nb, ring, w, batch, op.dtype.itemsize).values())

    if rank_chunk is None:
        rank_chunk = max(ledger.largest(total, 1, kmax), 1)
    elif rank_chunk <= 0:
        raise TlrError(f"rank_chunk must be a positive integer, got {rank_chunk}")
    for name, nbytes in _bytes(op.nb, ring, rank_chunk, batch, op.dtype.itemsize).items():
        ledger.allocate(name, nbytes)  # SramBudgetError when even this chunk does not fit
    w = int(rank_chunk)
    edges = np.array(
        [(i, j, q) for i in range(mt) for j in range(nt) for q in range(_ceil(op.ranks[i, j], w))],
        np.int64,
    ).reshape(-1, 3)
    colour = colour_slices(edges[:, :2], mt, nt)
    cols = int(colour.max(initial=0)) + 1
    if ring > spec.pe_rows or cols > spec.pe_cols:
        raise PlacementError(
            f"TLR-MVM (matched) needs {ring} x {cols} PEs (rank chunk {w}) but {spec.name} has "
            f"{spec.pe_rows} x {spec.pe_cols}; use a larger nb or wafer"
        )
    v_slice = np.full((ring, cols, 3), -1, np.int64)
    u_slice = np.full((ring, cols, 3), -1, np.int64)
    v_slice[edges[:, 1], colour] = edges
    u_slice[edges[:, 0], colour] = edges
    return MatchedPlan(
        op.shape, op.nb, op.tiles, w, batch, op.dtype.itemsize, str(op.dtype), v_slice, u_slice
    )


def _fields(op: TlrOperator, plan: MatchedPlan) -> tuple[np.ndarray, np.ndarray]:
    (rows, cols), w, nb = plan.grid, plan.rank_chunk, plan.nb
    vh = np.zeros((rows, cols, w, nb), op.dtype)
    ut = np.zeros((rows, cols, w, nb), op.dtype)
    for c, r in zip(*np.nonzero(plan.v_slice[..., 0] >= 0), strict=True):
        i, j, q = plan.v_slice[c, r]
        v = op.v(i, j)[:, q * w : (q + 1) * w].conj().T  # (<= w, n_j), at PE (j, r)
        vh[c, r, : v.shape[0], : v.shape[1]] = v
        ub = op.u(i, j)[:, q * w : (q + 1) * w].T  # (<= w, m_i), at PE (i, r)
        ut[i, r, : ub.shape[0], : ub.shape[1]] = ub
    return _stored(vh), _stored(ut)


def _stored(a: np.ndarray) -> np.ndarray:
    """Complex (..., nb) as float32 (..., 2 nb), real and imaginary parts interleaved."""
    if not np.iscomplexobj(a):
        return a
    return np.stack([a.real, a.imag], axis=-1).reshape(*a.shape[:-1], -1).astype(np.float32)


def _as_complex(v: jax.Array) -> jax.Array:
    pairs = v.reshape(*v.shape[:-1], -1, 2)
    return lax.complex(pairs[..., 0], pairs[..., 1])


def _stacked_gemv(v: jax.Array, x: jax.Array, cplx: bool) -> jax.Array:
    """Per PE row c: the stacked slices v[c] (D, w, nb) times x[c] (nb, b) -> (PR, D, w, b),
    one dot per row; complex as one real dot over the interleaved pairs."""
    if not cplx:
        return jnp.einsum("crwn,cnb->crwb", v, x)
    xr, xi = jnp.real(x), jnp.imag(x)
    xx = jnp.stack([jnp.stack([xr, -xi], 2), jnp.stack([xi, xr], 2)], 3)  # (PR, nb, 2, 2, b)
    o = jnp.einsum("crwk,ckpb->crwpb", v, xx.reshape(x.shape[0], -1, 2, x.shape[-1]))
    return lax.complex(o[..., 0, :], o[..., 1, :])


def place_matched(
    op: TlrOperator,
    spec: WaferSpec,
    *,
    rank_chunk: int | None = None,
    batch: int = 1,
    mesh_shape: tuple[int, int] | None = None,
    defect_seed: int | None = None,
) -> tuple[Wafer, MatchedPlan, TlrBases]:
    plan = plan_matched(op, spec, rank_chunk=rank_chunk, batch=batch)
    wafer = build_planned_wafer(spec, plan, mesh_shape=mesh_shape, defect_seed=defect_seed)
    vh, u = _fields(op, plan)
    return wafer, plan, TlrBases(wafer.place(vh), wafer.place(u))


def _slot_index(plan: MatchedPlan, padded: tuple[int, int], adjoint: bool) -> np.ndarray:
    """(PR, PC) int32: which ring slot a PE keeps. Slot s at row c holds row c - s (mod L);
    slot 0 is the PE's own value. Forward: PE (i, r) keeps the slot of its U slice's tile
    column; adjoint: PE (j, r) keeps the slot of its V slice's tile row."""
    out = np.zeros(padded, np.int32)
    src = plan.v_slice if adjoint else plan.u_slice
    here, there = (1, 0) if adjoint else (0, 1)
    c, r = np.nonzero(src[..., 0] >= 0)
    out[c, r] = (src[c, r, here] - src[c, r, there]) % plan.ring
    return out


def _ring_pick(wafer: Wafer, v: jax.Array, slot: jax.Array, ring: int) -> jax.Array:
    """Every PE's value travels south round its column (a ring allgather); each PE keeps
    `slot`."""
    if ring == 1:
        return v
    got = fabric.multicast(wafer, v, "S", ring - 1, boundary="periodic")
    allg = jnp.concatenate([v[:, :, None], got], axis=2)  # (L, D, ring, w, b)
    idx = slot.reshape(*slot.shape, 1, 1, 1)
    return jnp.take_along_axis(allg, idx, axis=2)[:, :, 0]


def tlrmvm_matched(wafer: Wafer, plan: MatchedPlan) -> TlrFns:
    """Pure functions for A x and A^H y on the matched bases; the caller decides `jit`."""
    (m, n), nb, (mt, nt), ring = plan.shape, plan.nb, plan.tiles, plan.ring
    dtype, cplx = np.dtype(plan.dtype), plan.dtype.startswith("complex")
    as_c = _as_complex if cplx else (lambda v: v)
    fwd = jnp.asarray(_slot_index(plan, wafer.padded_shape, adjoint=False))
    adj = jnp.asarray(_slot_index(plan, wafer.padded_shape, adjoint=True))

    def west_in(v: jax.Array, length: int) -> jax.Array:
        """(length, b) -> piece c at the west edge of PE row c, broadcast along the row;
        returns the copy each row's PEs hold, (PR, 1, nb, b) (all copies are equal)."""
        vt = jnp.pad(v, ((0, ring * nb - length), (0, 0))).reshape(ring, 1, nb, -1)
        return fabric.broadcast(wafer, _pad_grid(wafer, vt), "row", 0)[:, :1]

    def row_out(p: jax.Array, tiles: int, length: int) -> jax.Array:
        """Sum the (PR, PC, nb, b) partials along each PE row; row c holds piece c."""
        s = fabric.allreduce(wafer, p, "sum", axis="row")[:tiles, 0]
        return s.reshape(tiles * nb, -1)[:length]

    def matvec_fn(bases: TlrBases, x: jax.Array) -> jax.Array:
        _check_vector(x, n, plan, "x")  # type: ignore[arg-type]
        xr = west_in(x.astype(dtype), n)
        yv = _stacked_gemv(bases.vh, xr[:, 0], cplx)  # phase 1, one dot per PE row
        yu = _ring_pick(wafer, yv, fwd, ring)  # phase 2
        yp = jnp.sum(as_c(bases.u)[..., None] * yu[:, :, :, None, :], axis=2)  # phase 3
        return row_out(yp, mt, m)

    def rmatvec_fn(bases: TlrBases, y: jax.Array) -> jax.Array:
        _check_vector(y, m, plan, "y")  # type: ignore[arg-type]
        yr = west_in(y.astype(dtype), m)
        t = jnp.conj(_stacked_gemv(bases.u, jnp.conj(yr[:, 0]), cplx))  # phase 1 (adjoint)
        tv = _ring_pick(wafer, t, adj, ring)  # phase 2 (adjoint)
        vc = jnp.conj(as_c(bases.vh))
        xp = jnp.sum(vc[..., None] * tv[:, :, :, None, :], axis=2)  # phase 3 (adjoint)
        return row_out(xp, nt, n)

    return TlrFns(matvec_fn, rmatvec_fn)
