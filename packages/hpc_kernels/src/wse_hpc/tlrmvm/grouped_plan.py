"""Placement of the grouped TLR-MVM layout (`grouped`): which PE holds each rank row of a
`TlrOperator`, and the group size s. `plan_grouped` builds the `GroupedPlan` (the ledger
sizes it), `GroupedPlan.fields` places the bases (complex ones as float32 pairs, real and
imaginary parts interleaved); `grouped.tlrmvm_grouped` runs the product on them.

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
at the same row k of two PEs of one PE column. The grid is L x ceil(D / w); the padding is
the unused rows of the PEs. The group size s (1-4) is the plan's choice: the one whose
product the caller's price says is fastest (`perf.product_s`: the PE programs and traced
fabric of that very plan), ties to the least padding, then the smaller s. Larger groups
balance the loads better and pad less (SC23's case, n 9801: padded bases 1.58 / 1.05 /
1.03 / 1.04 x the operator's at s = 1 / 2 / 3 / 4) but split each PE's rank rows into s
pieces, and the published phase 1 (single-tile-matvec's column AXPY, `pe_programs`) issues
2 nb FMAC DSDs per piece: 512 at s = 1, up to 2,048 at s = 4. There s = 1 wins on every
wafer and byte convention: one product on WSE-2 34.2 us against 40.1 / 46.4 / 52.8 (phase
1 19.0 against 36.1 us at s = 4; its larger rank chunk, w 10 against 7, costs phase 3 12.3
against 8.6 us; x in and the y sum carry one piece instead of four).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

import numpy as np
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import SramLedger

from wse_hpc.tlrmvm.budget import (
    ChunkFit,
    fits_program,
    program_rectangle,
    refuse_grid,
    refuse_sram,
)
from wse_hpc.tlrmvm.compress import TlrError, TlrOperator
from wse_hpc.tlrmvm.wafer import PlanBase, bases_itemsize, ceil_div

__all__ = [
    "GroupedPlan",
    "PlanPrice",
    "colour_slices",
    "deal_groups",
    "plan_grouped",
]

GROUP_SIZES = (1, 2, 3, 4)


@dataclasses.dataclass(frozen=True, eq=False)
class GroupedPlan(PlanBase):
    col_group: np.ndarray  # (L, s): tile columns PE row g serves (its x pieces), -1 none
    row_group: np.ndarray  # (L, s): tile rows PE row g serves (its y pieces), -1 none
    v_rank: np.ndarray  # (L, C, w, 3): (i, j, q) of the V row at PE (g, r), row k; -1 none
    u_rank: np.ndarray  # (L, C, w, 3): (i, j, q) of the U row at PE (g, r), row k; -1 none
    layout: ClassVar[str] = "grouped"

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

    def bytes_per_pe(self) -> dict[str, int]:
        w, s, isz = self.rank_chunk, self.windows, self.itemsize
        return _bytes(self.nb, self.ring, w, s, self.batch, isz, self.bases_itemsize)

    def fields(self, op: TlrOperator) -> tuple[np.ndarray, np.ndarray]:
        """The placed (vh, u) fields of `op` (see the module doc)."""
        return _fields(op, self)

    def _details(self) -> dict[str, object]:
        return {"group_size": self.windows, "rank_rows": int((self.v_rank[..., 0] >= 0).sum())}


def _bytes(nb: int, ring: int, w: int, s: int, batch: int, isz: int, bsz: int) -> dict[str, int]:
    """Bases at `bsz` bytes per value (`wafer.bases_itemsize`), vectors at `isz`."""
    vectors = (s * nb + w + ring * w + s * nb) * batch  # x pieces, yv, ring slots, y partials
    return {
        "tlrmvm.vh": w * nb * bsz,
        "tlrmvm.u": w * nb * bsz,
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
    edges of one colour share a tile row or a tile column. Each edge takes the first colour
    free at both ends where there is one, else the row's first free colour a, swapped with
    the column's first free colour b along the a/b path from the column (Koenig).

    Hunt 69: taking the row's first free colour every time walked a path for most edges, in
    NumPy, 48 s for the 65,536 edges of a 256 x 256 operator (0.05 s now). The free colours
    of each row and column are bits of a Python integer, the colours' edges a dict each."""
    deg = np.bincount(slices[:, 0], minlength=mt).max(initial=0)
    deg = max(deg, np.bincount(slices[:, 1], minlength=nt).max(initial=0), 1)
    ends = (slices[:, 0].tolist(), slices[:, 1].tolist())
    full = (1 << int(deg)) - 1
    free = ([full] * mt, [full] * nt)  # bit c set: colour c is free at that row / column
    at: tuple[list[dict], list[dict]] = ([{} for _ in range(mt)], [{} for _ in range(nt)])
    colour = [-1] * len(ends[0])
    for e, (i, j) in enumerate(zip(*ends, strict=True)):
        both = free[0][i] & free[1][j]
        a = _lowest(both) if both else _lowest(free[0][i])
        if not both:  # a is taken at the column
            _swap_path(ends, free, at, colour, j, a, _lowest(free[1][j]))
        colour[e] = a
        at[0][i][a] = at[1][j][a] = e
        free[0][i] &= ~(1 << a)
        free[1][j] &= ~(1 << a)
    return np.asarray(colour, np.int64)


def _lowest(bits: int) -> int:
    return (bits & -bits).bit_length() - 1


def _swap_path(ends, free, at, colour, j: int, a: int, b: int) -> None:
    """Swap colours a and b along the path from tile column j that alternates them (it never
    reaches the row that has a free: Koenig), so that a is free at j."""
    side, node, c, nodes = 1, j, a, []
    while True:
        nodes.append((side, node))
        f = at[side][node].get(c)
        if f is None:
            break
        colour[f] = b if c == a else a
        node, side, c = ends[1 - side][f], 1 - side, (b if c == a else a)
    ab = (1 << a) | (1 << b)
    for side, node in nodes:  # each node's a and b edges trade colours
        here = at[side][node]
        fa, fb = here.pop(a, None), here.pop(b, None)
        if fa is not None:
            here[b] = fa
        if fb is not None:
            here[a] = fb
        bits = free[side][node]
        if ((bits >> a) ^ (bits >> b)) & 1:  # an end of the path: one of them was free
            free[side][node] = bits ^ ab


def _stored(a: np.ndarray) -> np.ndarray:
    """Complex (..., nb) as float32 (..., 2 nb), real and imaginary parts interleaved."""
    if not np.iscomplexobj(a):
        return a
    return np.stack([a.real, a.imag], axis=-1).reshape(*a.shape[:-1], -1).astype(np.float32)


def _largest_load(load: np.ndarray, groups: np.ndarray) -> int:
    return int(np.where(groups >= 0, load[groups], 0).sum(axis=1).max(initial=0))


def group_position(groups: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(group, slot in the group) of each of `count` members."""
    g, t = np.nonzero(groups >= 0)
    grp, pos = np.zeros(count, np.int64), np.zeros(count, np.int64)
    grp[groups[g, t]], pos[groups[g, t]] = g, t
    return grp, pos


PlanPrice = Callable[[GroupedPlan, WaferSpec], float]  # seconds of one product


def plan_grouped(
    op: TlrOperator,
    spec: WaferSpec,
    *,
    price: PlanPrice,
    rank_chunk: int | None = None,
    batch: int = 1,
    real_split: bool = False,
) -> GroupedPlan:
    """The grouped plan whose product `price(plan, spec)` says is fastest (`perf.product_s`:
    the predicted seconds of one product, the PE programs and fabric of that very plan),
    among one plan per group size s in GROUP_SIZES, each with the ledger's largest rank
    chunk (or `rank_chunk`) that fits a PE's SRAM and on no more PEs than a program gets
    (`budget.program_rectangle`: 750 x 994 on a CS-2);
    ties to the one padding less, then the smaller s. Refused if no size fits a PE's SRAM
    or the PEs do not suffice. `real_split`: the PEs hold complex tiles as real (2m x 2n)
    tiles (`wafer`)."""
    (mt, nt), ranks, isz, nb = op.tiles, op.ranks, op.dtype.itemsize, op.nb
    bsz = bases_itemsize(str(op.dtype), isz, real_split)
    if batch <= 0:
        raise TlrError(f"batch must be a positive number of vectors, got {batch}")
    if rank_chunk is not None and rank_chunk <= 0:
        raise TlrError(f"rank_chunk must be a positive integer, got {rank_chunk}")
    ledger = SramLedger.for_spec(spec)
    fits, too_big, sizes = [], None, sorted({min(s, max(mt, nt)) for s in GROUP_SIZES})
    arrangements = []  # per size: the least rank chunk whose grid fits the PEs (hunt 76, 77)
    for s in sizes:
        ring = ceil_div(max(mt, nt), s)
        cols, rows = deal_groups(ranks.sum(0), ring, s), deal_groups(ranks.sum(1), ring, s)
        deg = max(1, _largest_load(ranks.sum(0), cols), _largest_load(ranks.sum(1), rows))

        def total(w: int, b: int = batch, ring=ring, s=s) -> int:
            return sum(_bytes(nb, ring, w, s, b, isz, bsz).values())

        k = ceil_div(deg, program_rectangle(spec)[1])  # Koenig: deg colours, w a PE column
        arrangements.append(ChunkFit(k if fits_program((ring, 1), spec) else None, total, deg))
        w = rank_chunk if rank_chunk is not None else ledger.largest(total, 1, deg)
        if w < 1 or total(w) > ledger.free_bytes():
            continue
        if not fits_program((ring, ceil_div(deg, w)), spec):  # the program's PEs (hunt 76)
            too_big = too_big or ((ring, ceil_div(deg, w)), w)  # the first (fewest PEs) misfit
            continue
        fits.append((cols, rows, w))
    if not fits and too_big:
        refuse_grid("grouped", *too_big, spec, asked=rank_chunk, batch=batch, fits=arrangements)
    if not fits:  # no group size fits a PE: the option to change and what fits (hunt 69)

        def least(w: int, b: int) -> int:  # the PE bytes of the size that needs the fewest
            return min(a.bytes_for(w, b) for a in arrangements)

        refuse_sram(ledger, least, spec.name, rank_chunk=rank_chunk, batch=batch, nb=nb,
                    fits=arrangements)  # fmt: skip
    plans = [_coloured(op, spec, *fit, batch, real_split) for fit in fits]
    return min(plans, key=lambda p: (price(p, spec), p.padded_bases_bytes, p.windows))


def _coloured(
    op: TlrOperator,
    spec: WaferSpec,
    cols: np.ndarray,
    rows: np.ndarray,
    w: int,
    batch: int,
    real_split: bool,
) -> GroupedPlan:
    """The plan of the tile-column groups `cols` and tile-row groups `rows` at rank chunk
    `w`: each rank row's PE column and row from its colour (see the module doc)."""
    (mt, nt), ranks, ring = op.tiles, op.ranks, len(cols)
    col_grp, _ = group_position(cols, nt)
    row_grp, _ = group_position(rows, mt)
    i, j = np.nonzero(ranks > 0)
    k = ranks[i, j]
    ei, ej = np.repeat(i, k), np.repeat(j, k)
    eq = np.arange(len(ei)) - np.repeat(np.cumsum(k) - k, k)  # rank row q within its tile
    colour = colour_slices(np.stack([row_grp[ei], col_grp[ej]], axis=1), ring, ring)
    width = ceil_div(int(colour.max(initial=0)) + 1, w)
    if not fits_program((ring, width), spec):  # never: the colours are the largest load
        refuse_grid("grouped", (ring, width), w, spec, asked=None, batch=batch, fits=())
    v_rank = np.full((ring, width, w, 3), -1, np.int64)
    u_rank = np.full((ring, width, w, 3), -1, np.int64)
    edges = np.stack([ei, ej, eq], axis=1)
    v_rank[col_grp[ej], colour // w, colour % w] = edges
    u_rank[row_grp[ei], colour // w, colour % w] = edges
    head = (op.shape, op.nb, op.tiles, int(w), batch, op.dtype.itemsize, str(op.dtype))
    return GroupedPlan(*head, cols, rows, v_rank, u_rank, real_split=real_split)


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
