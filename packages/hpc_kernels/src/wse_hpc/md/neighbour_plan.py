"""Host-side sizing of the per-PE neighbour lists (`wse_hpc.md.neighbours`): the pairs within a
reach (a periodic k-d tree), the candidate capacity per row offset of the window and in all
(`list_caps`, what `EamPlan.caps` holds), and the most atoms any device block holds
(`active_per_block`, `EamPlan.active`). NumPy only; nothing here is placed or traced.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree
from wse_core.hw.wafer import Wafer

from wse_hpc.md.mapping import ATOM_ID, SPECIES

__all__ = [
    "HEADROOM",
    "TOTAL_HEADROOM",
    "list_caps",
    "reach_pairs",
    "active_per_block",
]

HEADROOM, TOTAL_HEADROOM = 1.25, 1.1  # list capacities over the counts (see list_caps)


def reach_pairs(positions_A: np.ndarray, box_A, reach_A: float) -> np.ndarray:
    """The pairs (P, 2) of rows i < j of `positions_A` (n, 3) within `reach_A` (A) of each
    other in the periodic box: host side, a periodic k-d tree over the positions in float64
    wrapped into the box. `list_caps` takes them in atom-id order, so a crystal mapped onto
    several grids finds its pairs once."""
    box = np.asarray(box_A, dtype=np.float64)
    pos = np.mod(np.asarray(positions_A, dtype=np.float64), box)
    pos = np.where(pos >= box, 0.0, pos)
    return cKDTree(pos, boxsize=box).query_pairs(reach_A, output_type="ndarray")


def _offset_counts(row_of: np.ndarray, pairs: np.ndarray, rows: int, k_rows: int) -> np.ndarray:
    """(n, 2 k_rows + 1) int64: per atom (row_of: its PE row), how many of its pair partners
    sit at each row offset -k_rows .. k_rows (periodic over `rows`); both atoms of a pair
    count it, each at its own offset (beyond k_rows: not counted)."""
    n, n_off = row_of.size, 2 * k_rows + 1
    idx_t = np.int32 if (n + 1) * n_off < 2**31 else np.int64
    row = row_of.astype(np.int32)
    ra, rb = row[pairs[:, 0]], row[pairs[:, 1]]
    flat = []
    half = rows // 2
    for atom, d in ((pairs[:, 0], rb - ra), (pairs[:, 1], ra - rb)):
        # (d + half) % rows - half for d in -(rows - 1) .. rows - 1, without a division
        d = d - np.int32(rows) * (d > rows - 1 - half) + np.int32(rows) * (d < -half)
        spare = n * n_off  # one bin past the counts for the pairs outside the window
        at = atom.astype(idx_t) * idx_t(n_off) + (d + k_rows).astype(idx_t)
        flat.append(np.where(np.abs(d) <= k_rows, at, idx_t(spare)))
    counts = np.bincount(np.concatenate(flat), minlength=n * n_off + 1)[:-1]
    return counts.reshape(n, n_off)


def list_caps(
    state_np: np.ndarray,
    box_A,
    reach_A: float,
    k_rows: int,
    k_cols: int,
    more: float = 0.0,
    *,
    pairs: np.ndarray | None = None,
) -> tuple[int, ...]:
    """Capacities for a mapped state: one per row offset (-k_rows .. k_rows), then the total
    M: the most atoms within `reach_A` any PE has at that offset (in all), times HEADROOM
    (TOTAL_HEADROOM) + `more` (a re-plan's extra), plus 2, at most the window's 2 k_cols + 1
    columns per offset; 0 beyond the farthest offset in use. Host side: the pairs within
    `reach_A` (`reach_pairs`) counted per PE and row offset in NumPy; `pairs`, when given,
    are those of the state's atoms in atom-id order (`reach_pairs` of the positions by id,
    as the state holds them) and must be for `reach_A`.

    M sets the work of every force evaluation (M candidates per PE), the per-offset caps
    only a build's; an atom's count within the reach fluctuates less than its count at one
    row offset (Cu fcc started at 1600 K: 78 in the crystal, at most 81 later over 32,000
    atoms), hence the smaller total headroom. A count over a cap is an overflow: re-planned
    with more headroom, never dropped."""
    held = state_np[..., SPECIES] >= 0
    rr, _ = np.nonzero(held)
    if pairs is None:  # over the held PEs in row-major order
        pairs, row_of = reach_pairs(state_np[held][:, :3], box_A, reach_A), rr
    else:  # over atom ids
        ids = np.rint(state_np[held][:, ATOM_ID]).astype(np.int64)
        row_of = np.empty(rr.size, np.int64)
        row_of[ids] = rr
    n_off = 2 * k_rows + 1
    counts = _offset_counts(row_of, pairs, state_np.shape[0], k_rows)
    most = counts.max(axis=0) if rr.size else np.zeros(n_off, np.int64)
    caps = np.minimum(np.ceil(most * (HEADROOM + more)).astype(np.int64) + 2, 2 * k_cols + 1)
    used = np.nonzero(most > 0)[0]
    reach = int(np.abs(used - k_rows).max()) if used.size else 0
    caps[np.abs(np.arange(n_off) - k_rows) > reach] = 0
    total = int(np.ceil(counts.sum(axis=1).max(initial=0) * (TOTAL_HEADROOM + more))) + 2
    return tuple(int(c) for c in caps) + (min(total, int(caps.sum())),)


def active_per_block(state_np: np.ndarray, wafer: Wafer) -> int:
    """The most atoms any device block of `wafer` holds for a mapped (rows, cols, ...)
    state: the rows of each block the list kernel evaluates (`EamPlan.active`)."""
    held = state_np[..., SPECIES] >= 0
    (pr, pc), (br, bc) = wafer.padded_shape, wafer.block_shape
    padded = np.zeros((pr, pc), dtype=np.int64)
    padded[: held.shape[0], : held.shape[1]] = held
    return int(padded.reshape(pr // br, br, pc // bc, bc).sum(axis=(1, 3)).max())
