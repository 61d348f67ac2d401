"""TLR-MVM on the wafer, grouped layout: each PE row serves a group of tile columns (phase 1)
and a group of tile rows (phase 3); every PE column is a set of rank rows that meets each PE
row at most w times, so the bases fill the PEs with almost no padding. Same contract and
`TlrFns` as `wafer.tlrmvm`; the default layout of `TlrEngine.build`.

Placement. A rank row is one column q of one tile (i, j): V_ij[:, q] and U_ij[:, q]. The
tile columns are dealt into L groups of at most s (heaviest first, to the group with the
fewest rank rows: the groups carry nearly equal loads), and so are the tile rows; PE row g
serves tile-column group g in phases 1-2 and tile-row group g in phase 3. The rank rows are
the edges of a bipartite multigraph between the tile-row groups and the tile-column groups;
an edge colouring with D colours (Koenig: D = the largest group load) gives rank row e a
colour c, hence a PE column r = c // w and a row k = c % w inside the PE (w = the rank chunk,
the ledger's largest):
- `vh[g, r, k]` = conj(V_ij[:, q]) (nb), g the group of tile column j;
- `u[g, r, k]` = U_ij[:, q] (nb), g the group of tile row i;
so no PE holds two V rows, or two U rows, of one colour, and the V and U of a rank row sit
at the same row k of two PEs of one PE column. The plan first tries `colour_by_rows`, a
colouring in which every PE's U rows belong to one tile row (runs of at most w rank rows of
a tile row per PE; up to ~10% more PE columns, padding within PAD_OK): phase 3 then computes
one partial y piece per PE instead of s (on the benchmark's seismic operators 5-10% more PE
columns, 9801^2: 20 x 120 instead of 20 x 110, and 4-30% less time per product on XLA:CPU
at 2500-9801, A/B in one process); Koenig's colouring is the fallback.
The group size s (1-4) is the plan's choice:
the smallest whose bases pad by at most PAD_OK, else the least padded (larger groups
balance the loads better but give each PE s partial sums). The grid is L x ceil(D / w)
(Koenig's colouring) or a few columns more (`colour_by_rows`); the padding is the unused
rows of the PEs, a few percent at s = 2-4 (5-10% more by rows).

Complex bases are stored as float32 pairs (w, 2 nb), real and imaginary parts interleaved:
phase 1 then runs as one real dot per PE row against [[x_re, x_im], [-x_im, x_re]] (XLA:CPU's
complex dot is 2-3x slower here).

The product y = A x (`matvec_fn(bases, x)`, x: (N, b)):
0. the s pieces x_j of PE row g's tile columns enter at its west edge and are broadcast
   along the row (the emulator reads one copy per row and runs a row's GEMVs as one dot);
1. phase 1: every PE multiplies each of its V rows by the x piece of that row's tile column;
2. phase 2, the reshuffle: a periodic multicast south along each PE column (a ring
   allgather of the w values per PE); the PE of U row (g', r, k) keeps row k of the slot of
   PE row g, the group of its tile column;
3. phase 3: each PE adds its U rows times those values into one partial y piece per tile row
   of its group (s pieces; one, the others zero, when its U rows are of one tile row); a sum
   along the PE row (row allreduce of the s pieces) delivers the y_i.
The adjoint A^H y runs the same placement backwards: the y pieces along the rows, U^H y_i per
U row, the ring allgather south (the V row keeps the slot of its tile row's group), V times
it into partial x pieces and a sum along the row.
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
)

__all__ = [
    "GroupedPlan",
    "colour_slices",
    "deal_groups",
    "plan_grouped",
    "tlrmvm_grouped",
]

GROUP_SIZES = (1, 2, 3, 4)
PAD_OK = 1.25  # padded over real bases bytes a plan accepts before trying a larger group
SUM_ROWS = 10  # most rank rows per multiply-and-sum in phase 3 (see piece_sums)


@dataclasses.dataclass(frozen=True, eq=False)
class GroupedPlan(PaddedBases):
    shape: tuple[int, int]
    nb: int
    tiles: tuple[int, int]
    rank_chunk: int
    batch: int
    itemsize: int
    dtype: str
    col_group: np.ndarray  # (L, s): tile columns PE row g serves (its x pieces), -1 none
    row_group: np.ndarray  # (L, s): tile rows PE row g serves (its y pieces), -1 none
    v_rank: np.ndarray  # (L, C, w, 3): (i, j, q) of the V row at PE (g, r), row k; -1 none
    u_rank: np.ndarray  # (L, C, w, 3): (i, j, q) of the U row at PE (g, r), row k; -1 none
    layout: str = "grouped"

    @property
    def grid(self) -> tuple[int, int]:
        return self.v_rank.shape[:2]  # type: ignore[return-value]

    @property
    def ring(self) -> int:
        """PE rows of the ring allgather: the number of groups L."""
        return self.grid[0]

    @property
    def windows(self) -> int:
        """Group size s: x pieces and partial y pieces per PE."""
        return self.col_group.shape[1]

    @property
    def u_single_row(self) -> bool:
        """Whether every PE's U rows belong to one tile row (phase 3 then computes one
        partial y piece per PE instead of s; see `colour_by_rows`)."""
        i = self.u_rank[..., 0]
        lo = np.where(i >= 0, i, np.iinfo(np.int64).max).min(axis=2)
        return bool(((i < 0) | (i == lo[..., None])).all())

    def bytes_per_pe(self) -> dict[str, int]:
        return _bytes(self.nb, self.ring, self.rank_chunk, self.windows, self.batch, self.itemsize)

    def fields(self, op: TlrOperator) -> tuple[np.ndarray, np.ndarray]:
        """The placed (vh, u) fields of `op` (see the module doc)."""
        return _fields(op, self)

    def describe(self) -> dict[str, object]:
        return {
            "layout": self.layout,
            "grid": list(self.grid),
            "rank_chunk": self.rank_chunk,
            "group_size": self.windows,
            "u_single_row": self.u_single_row,
            "rank_rows": int((self.v_rank[..., 0] >= 0).sum()),
            "bytes_per_pe": self.bytes_per_pe(),
            "padded_bases_bytes": self.padded_bases_bytes,
        }


def _bytes(nb: int, ring: int, w: int, s: int, batch: int, isz: int) -> dict[str, int]:
    vectors = (s * nb + w + ring * w + s * nb) * batch  # x pieces, yv, ring slots, y partials
    return {
        "tlrmvm.vh": w * nb * isz,
        "tlrmvm.u": w * nb * isz,
        "tlrmvm.vectors": vectors * isz,
    }


def deal_groups(load: np.ndarray, groups: int, size: int) -> np.ndarray:
    """(groups, size) indices into `load`, -1 where empty: the heaviest first, each to the
    group with the least load that has room (longest-processing-time with a size cap)."""
    out = np.full((groups, size), -1, np.int64)
    total = np.zeros(groups, np.int64)
    count = np.zeros(groups, np.int64)
    for t in np.argsort(-load, kind="stable"):
        room = np.nonzero(count < size)[0]
        g = room[np.argmin(total[room])]
        out[g, count[g]] = t
        total[g] += load[t]
        count[g] += 1
    return out


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


def colour_by_rows(
    edges: np.ndarray, row_grp: np.ndarray, col_grp: np.ndarray, ring: int, w: int, width: int
) -> np.ndarray | None:
    """A proper colouring of the rank rows `edges[e] = (i, j)` (D = width * w colours) in
    which the w colours c // w = r of every PE column r hold, at each tile-row group, the U
    rows of one tile row only; None if the greedy fill below does not find one.

    Each tile row (heaviest first) is cut into runs of at most w rank rows, each run into
    a PE column its group does not use yet, the one with the most room for the run's V
    rows (at most w V rows of a tile-column group per PE column); then each PE column's
    rows are coloured with its w colours (`colour_slices`: its degrees are at most w)."""
    gi, gj = row_grp[edges[:, 0]], col_grp[edges[:, 1]]
    room = np.full((width, ring), w, np.int64)  # V rows a column still takes per col group
    used = np.zeros((ring, width), bool)  # PE columns a row group already uses
    column = np.full(len(edges), -1, np.int64)
    load = np.bincount(edges[:, 0])
    for i in np.argsort(-load, kind="stable"):
        mine = np.nonzero(edges[:, 0] == i)[0]
        g = row_grp[i]
        while len(mine):
            need = np.bincount(gj[mine], minlength=ring)
            fit = np.minimum(np.minimum(room, need).sum(1), w)
            fit[used[g]] = -1
            r = int(np.argmax(fit))
            if fit[r] <= 0:
                return None
            take = []
            for e in mine:  # up to w rows whose col group still has room in column r
                if len(take) < w and room[r, gj[e]] > 0:
                    room[r, gj[e]] -= 1
                    take.append(e)
            column[take] = r
            used[g, r] = True
            mine = np.setdiff1d(mine, take, assume_unique=True)
    colour = np.empty(len(edges), np.int64)
    for r in range(width):
        at = np.nonzero(column == r)[0]
        if len(at):
            colour[at] = r * w + colour_slices(np.stack([gi[at], gj[at]], 1), ring, ring)
    return colour


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


def _largest_load(load: np.ndarray, groups: np.ndarray) -> int:
    return int(np.where(groups >= 0, load[groups], 0).sum(axis=1).max(initial=0))


def _position(groups: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(group, slot in the group) of each of `count` members."""
    g, t = np.nonzero(groups >= 0)
    grp, pos = np.zeros(count, np.int64), np.zeros(count, np.int64)
    grp[groups[g, t]], pos[groups[g, t]] = g, t
    return grp, pos


def plan_grouped(
    op: TlrOperator, spec: WaferSpec, *, rank_chunk: int | None = None, batch: int = 1
) -> GroupedPlan:
    """The grouped plan: for each group size the ledger's largest rank chunk (or
    `rank_chunk`); the smallest size whose bases pad by at most `PAD_OK` wins (a larger
    group gives every PE more partial y pieces to compute and sum), else the least padded.
    Refused if no size fits a PE's SRAM or the PEs do not suffice."""
    (mt, nt), ranks, isz, nb = op.tiles, op.ranks, op.dtype.itemsize, op.nb
    if batch <= 0:
        raise TlrError(f"batch must be a positive number of vectors, got {batch}")
    if rank_chunk is not None and rank_chunk <= 0:
        raise TlrError(f"rank_chunk must be a positive integer, got {rank_chunk}")
    ledger = SramLedger(spec.pe_rows, spec.pe_cols, spec.sram_bytes_per_pe)
    best = None
    for s in sorted({min(s, max(mt, nt)) for s in GROUP_SIZES}):
        ring = _ceil(max(mt, nt), s)
        cols, rows = deal_groups(ranks.sum(0), ring, s), deal_groups(ranks.sum(1), ring, s)
        deg = max(1, _largest_load(ranks.sum(0), cols), _largest_load(ranks.sum(1), rows))

        def total(w: int, ring=ring, s=s) -> int:
            return sum(_bytes(nb, ring, w, s, batch, isz).values())

        w = rank_chunk if rank_chunk is not None else ledger.largest(total, 1, deg)
        if w < 1 or total(w) > ledger.free_bytes():
            continue
        pad = ring * _ceil(deg, w) * w / max(int(ranks.sum()), 1)
        if best is None or pad < best[0]:
            best = (pad, s, ring, w, cols, rows)
        if pad <= PAD_OK:
            break
    if best is None:  # even the smallest group size does not fit: say what is over budget
        for name, nbytes in _bytes(nb, max(mt, nt), rank_chunk or 1, 1, batch, isz).items():
            ledger.allocate(name, nbytes)  # raises SramBudgetError
    _, s, ring, w, cols, rows = best
    col_grp, _ = _position(cols, nt)
    row_grp, _ = _position(rows, mt)
    i, j = np.nonzero(ranks > 0)
    k = ranks[i, j]
    ei, ej = np.repeat(i, k), np.repeat(j, k)
    eq = np.arange(len(ei)) - np.repeat(np.cumsum(k) - k, k)  # rank row q within its tile
    colour = colour_slices(np.stack([row_grp[ei], col_grp[ej]], axis=1), ring, ring)
    width = _ceil(int(colour.max(initial=0)) + 1, w)
    for extra in range(_ceil(width, 10) + 1):  # up to ~10% more PE columns, within PAD_OK
        if ring * (width + extra) * w > PAD_OK * len(ei):
            break
        by_rows = colour_by_rows(np.stack([ei, ej], 1), row_grp, col_grp, ring, w, width + extra)
        if by_rows is not None:
            colour, width = by_rows, width + extra
            break
    if ring > spec.pe_rows or width > spec.pe_cols:
        raise PlacementError(
            f"TLR-MVM (grouped) needs {ring} x {width} PEs (rank chunk {w}) but {spec.name} "
            f"has {spec.pe_rows} x {spec.pe_cols}; use a larger nb or wafer"
        )
    v_rank = np.full((ring, width, w, 3), -1, np.int64)
    u_rank = np.full((ring, width, w, 3), -1, np.int64)
    edges = np.stack([ei, ej, eq], axis=1)
    v_rank[col_grp[ej], colour // w, colour % w] = edges
    u_rank[row_grp[ei], colour // w, colour % w] = edges
    return GroupedPlan(
        op.shape, nb, op.tiles, int(w), batch, isz, str(op.dtype), cols, rows, v_rank, u_rank
    )


def _fields(op: TlrOperator, plan: GroupedPlan) -> tuple[np.ndarray, np.ndarray]:
    (rows, cols), w, nb, ranks = plan.grid, plan.rank_chunk, plan.nb, op.ranks
    vh = np.zeros((rows, cols, w, nb), op.dtype)
    ut = np.zeros((rows, cols, w, nb), op.dtype)
    v_off = np.cumsum(ranks, axis=0) - ranks  # column of V_ij inside v_cols[j]
    u_off = np.cumsum(ranks, axis=1) - ranks  # column of U_ij inside u_rows[i]
    at = np.nonzero(plan.v_rank[..., 0] >= 0)
    i, j, q = plan.v_rank[at].T
    for t in np.unique(j):  # tile column t: its V rows, conjugated
        sel = j == t
        vh[tuple(a[sel] for a in at) + (slice(0, op.v_cols[t].shape[0]),)] = (
            op.v_cols[t][:, v_off[i[sel], t] + q[sel]].conj().T
        )
    at = np.nonzero(plan.u_rank[..., 0] >= 0)
    i, j, q = plan.u_rank[at].T
    for t in np.unique(i):  # tile row t: its U rows
        sel = i == t
        ut[tuple(a[sel] for a in at) + (slice(0, op.u_rows[t].shape[0]),)] = op.u_rows[t][
            :, u_off[t, j[sel]] + q[sel]
        ].T
    return _stored(vh), _stored(ut)


def _row_index(plan: GroupedPlan, padded: tuple[int, int], adjoint: bool) -> dict[str, np.ndarray]:
    """Per (PE, row k) int32 maps, padded to the grid: `win`, the x piece (V row) or y piece
    (U row) the row belongs to, and `slot`, the ring slot the row's PE keeps for it (slot d
    at PE row g holds PE row g - d's values, mod L). Forward: the V rows' pieces and the U
    rows' slots; adjoint: the U rows' pieces and the V rows' slots."""
    (mt, nt), ring = plan.tiles, plan.ring
    col_grp, col_pos = _position(plan.col_group, nt)
    row_grp, row_pos = _position(plan.row_group, mt)
    shape = (*padded, plan.rank_chunk)
    out = {name: np.zeros(shape, np.int32) for name in ("v_win", "u_win", "slot")}
    at = np.nonzero(plan.v_rank[..., 0] >= 0)
    i, j = plan.v_rank[at][:, 0], plan.v_rank[at][:, 1]
    out["v_win"][at] = col_pos[j]
    if adjoint:
        out["slot"][at] = (at[0] - row_grp[i]) % ring
    at = np.nonzero(plan.u_rank[..., 0] >= 0)
    i, j = plan.u_rank[at][:, 0], plan.u_rank[at][:, 1]
    out["u_win"][at] = row_pos[i]
    if not adjoint:
        out["slot"][at] = (at[0] - col_grp[j]) % ring
    return out


def _ring_pick(wafer: Wafer, v: jax.Array, slot: jax.Array, ring: int) -> jax.Array:
    """Every PE's (w, b) values travel south round its column (a ring allgather); each PE
    keeps, for each of its rows k, row k of slot `slot[..., k]`."""
    if ring == 1:
        return v
    got = fabric.multicast(wafer, v, "S", ring - 1, boundary="periodic")
    allg = jnp.concatenate([v[:, :, None], got], axis=2)  # (PR, PC, ring, w, b)
    return jnp.take_along_axis(allg, slot[:, :, None, :, None], axis=2)[:, :, 0]


def tlrmvm_grouped(wafer: Wafer, plan: GroupedPlan) -> TlrFns:
    """Pure functions for A x and A^H y on the grouped bases; the caller decides `jit`."""
    (m, n), nb, (mt, nt), ring, s = plan.shape, plan.nb, plan.tiles, plan.ring, plan.windows
    dtype, cplx = np.dtype(plan.dtype), plan.dtype.startswith("complex")
    as_c = _as_complex if cplx else (lambda v: v)
    fwd = {k: jnp.asarray(v) for k, v in _row_index(plan, wafer.padded_shape, False).items()}
    adj = {k: jnp.asarray(v) for k, v in _row_index(plan, wafer.padded_shape, True).items()}
    col_grp, col_pos = _position(plan.col_group, nt)
    row_grp, row_pos = _position(plan.row_group, mt)
    # one piece per PE when every PE's U rows are of one tile row (unused rows hold zeros)
    u_piece = fwd["u_win"].max(axis=2) if plan.u_single_row else fwd["u_win"]

    def west_in(v: jax.Array, length: int, tiles: int, groups: np.ndarray) -> jax.Array:
        """(length, b) -> PE row g's s pieces at its west edge, broadcast along the row;
        returns the copy each row's PEs hold, (PR, nb, s * b) (all copies are equal)."""
        b = v.shape[-1]
        vt = jnp.pad(v, ((0, (tiles + 1) * nb - length), (0, 0))).reshape(tiles + 1, nb, b)
        pieces = jnp.take(vt, jnp.asarray(np.where(groups >= 0, groups, tiles)), axis=0)
        pieces = jnp.transpose(pieces, (0, 2, 1, 3)).reshape(ring, 1, nb, s * b)
        return fabric.broadcast(wafer, _pad_grid(wafer, pieces), "row", 0)[:, 0]

    def gemv_rows(a: jax.Array, v: jax.Array, win: jax.Array) -> jax.Array:
        """Each stored row of `a` (PR, PC, w, nb) times the piece `win` names -> (.., w, b)."""
        out = _stacked_gemv(a, v, cplx)  # (PR, PC, w, s * b): every piece, one dot per row
        out = out.reshape(*out.shape[:3], s, -1)
        return jnp.take_along_axis(out, win[..., None, None], axis=3)[..., 0, :]

    def piece_sums(a: jax.Array, t: jax.Array, win: jax.Array) -> jax.Array:
        """sum_k a[.., k, :] t[.., k, b] into the piece win[.., k]: (PR, PC, s, b, nb), or,
        win (PR, PC) (the PE's one piece), the one sum (PR, PC, 1, b, nb); nb
        last (XLA:CPU's complex multiply-and-sum is 3x slower with a short last axis), in
        equal sums of at most SUM_ROWS rows (sums of 18-20 rows ran 5-10x slower there)."""
        if win.ndim == 2:  # one piece per PE (`u_single_row`)
            tw = t[..., None, :]  # (PR, PC, w, 1, b)
        else:
            tw = jnp.where(win[..., None, None] == jnp.arange(s)[:, None], t[..., None, :], 0)
        step = _ceil(a.shape[2], _ceil(a.shape[2], SUM_ROWS))
        parts = [
            jnp.sum(a[:, :, k : k + step, None, None, :] * tw[:, :, k : k + step, ..., None], 2)
            for k in range(0, a.shape[2], step)
        ]
        return sum(parts[1:], parts[0])  # (PR, PC, s|1, b, nb)

    def row_out(
        p: jax.Array, grp: np.ndarray, pos: np.ndarray, length: int, piece=None
    ) -> jax.Array:
        """Sum the partial pieces along each PE row; piece t of row g is its tile pos.
        Complex partials travel as float32 pairs (XLA:CPU sums complex 3-4x slower).
        `piece` (PR, PC): p holds one piece per PE, this one (spread after the conversion
        to pairs: 10% less time per product at 9801^2 than before it, measured)."""
        if cplx:
            p = jnp.stack([jnp.real(p), jnp.imag(p)], axis=-2)  # (PR, PC, s|1, b, 2, nb)
        if piece is not None:  # one piece per PE: into its slot, zeros in the others
            hot = piece[..., None] == jnp.arange(s)  # (PR, PC, s)
            p = jnp.where(hot.reshape(*hot.shape, *(1,) * (p.ndim - 3)), p, 0)
        got = fabric.allreduce(wafer, p, "sum", axis="row")[:ring, 0]
        if cplx:
            got = lax.complex(got[..., 0, :], got[..., 1, :])  # (L, s, b, nb)
        y = jnp.take(got.reshape(ring * s, -1, nb), jnp.asarray(grp * s + pos), axis=0)
        return jnp.transpose(y, (0, 2, 1)).reshape(len(grp) * nb, -1)[:length]

    def matvec_fn(bases: TlrBases, x: jax.Array) -> jax.Array:
        _check_vector(x, n, plan, "x")  # type: ignore[arg-type]
        xr = west_in(x.astype(dtype), n, nt, plan.col_group)
        yv = gemv_rows(bases.vh, xr, fwd["v_win"])  # phase 1
        yu = _ring_pick(wafer, yv, fwd["slot"], ring)  # phase 2
        yp = piece_sums(as_c(bases.u), yu, u_piece)  # phase 3
        return row_out(yp, row_grp, row_pos, m, u_piece if plan.u_single_row else None)

    def rmatvec_fn(bases: TlrBases, y: jax.Array) -> jax.Array:
        _check_vector(y, m, plan, "y")  # type: ignore[arg-type]
        yr = west_in(y.astype(dtype), m, mt, plan.row_group)
        t = jnp.conj(gemv_rows(bases.u, jnp.conj(yr), adj["u_win"]))  # phase 1 (adjoint)
        tv = _ring_pick(wafer, t, adj["slot"], ring)  # phase 2 (adjoint)
        xp = piece_sums(jnp.conj(as_c(bases.vh)), tv, adj["v_win"])  # phase 3 (adjoint)
        return row_out(xp, col_grp, col_pos, n)

    return TlrFns(matvec_fn, rmatvec_fn)
