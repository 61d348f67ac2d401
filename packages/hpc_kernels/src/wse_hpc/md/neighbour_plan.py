"""Host-side sizing of the per-PE neighbour lists (`wse_hpc.md.neighbours`): the pairs within a
reach (a periodic k-d tree), the candidate capacity per row offset of the window and in all
(`list_caps`, what `EamPlan.caps` holds), the most atoms any device block holds
(`active_per_block`, `EamPlan.active`), and the whole plan of a mapped state (`plan_window`:
the window for cutoff + skin + WINDOW_MARGIN_A and its capacities, lists over
LIST_BUDGET_BYTES of host memory dropped for the full-window kernel), which the shell
(`simulate.run_md`) runs and `perf` prices. NumPy, and the counts per row offset in one numba
loop (`reach_counts_numba`); nothing here is placed or traced.
The window a state needs and its per-offset counts are stored on disk by the state
(`plan_cache`: a warm `wse hpc md` at 32,000 atoms skipped ~0.4 s of k-d tree and counting,
and scipy's imports, which are made where they are used).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from wse_core.hw.wafer import Wafer

from wse_hpc.md import plan_cache
from wse_hpc.md.config import MdConfig
from wse_hpc.md.eam import EamPlan
from wse_hpc.md.mapping import ATOM_ID, SPECIES, window_needed
from wse_hpc.md.potentials import EamPotential

__all__ = [
    "HEADROOM",
    "TOTAL_HEADROOM",
    "WINDOW_MARGIN_A",
    "LIST_BUDGET_BYTES",
    "Margins",
    "list_caps",
    "list_bytes_per_pe",
    "reach_pairs",
    "active_per_block",
    "plan_window",
]

HEADROOM, TOTAL_HEADROOM = 1.25, 1.1  # list capacities over the counts (see list_caps)
WINDOW_MARGIN_A = 0.5  # plan the window for cutoff + this, so thermal motion rarely re-plans
LIST_BUDGET_BYTES = 4 * 2**30  # host memory for the emulated neighbour lists (all PEs)


def reach_pairs(positions_A: np.ndarray, box_A, reach_A: float) -> np.ndarray:
    """The pairs (P, 2) of rows i < j of `positions_A` (n, 3) within `reach_A` (A) of each
    other in the periodic box: host side, a periodic k-d tree over the positions in float64
    wrapped into the box. `list_caps` takes them in atom-id order, so a crystal mapped onto
    several grids finds its pairs once."""
    from scipy.spatial import cKDTree  # here: ~0.25 s of import a warm start skips (module doc)

    box = np.asarray(box_A, dtype=np.float64)
    pos = np.mod(np.asarray(positions_A, dtype=np.float64), box)
    pos = np.where(pos >= box, 0.0, pos)
    return cKDTree(pos, boxsize=box).query_pairs(reach_A, output_type="ndarray")


def _offset_counts(row_of: np.ndarray, pairs: np.ndarray, rows: int, k_rows: int) -> np.ndarray:
    """(n, 2 k_rows + 1) int64: per atom (row_of: its PE row), how many of its pair partners
    sit at each row offset -k_rows .. k_rows (periodic over `rows`); both atoms of a pair
    count it, each at its own offset (beyond k_rows: not counted). One pass over the pairs
    in numba (`reach_counts_numba`: a NumPy bincount over twice the pairs took 14-40 s of
    each 801,792-atom crystal santos24-md plans, hunt 76)."""
    from wse_hpc.md.reach_counts_numba import offset_counts  # numba: imported where used

    counts = np.zeros((row_of.size, 2 * k_rows + 1), np.int64)
    row = np.ascontiguousarray(row_of, dtype=np.int64)
    offset_counts(row, np.ascontiguousarray(pairs, dtype=np.int64), int(rows), int(k_rows), counts)
    return counts


class Margins(NamedTuple):
    """What a plan leaves beyond the counts of its state (the defaults: nothing).

    `at_least`: the window's smallest (k_rows, k_cols). `more`: added to each row offset's
    HEADROOM (a re-plan's extra), `more_total` to the total's TOTAL_HEADROOM (None: `more`).
    `spare_rows`: row offsets past the farthest in use that keep a list's base capacity (2):
    swaps carry atoms between rows, so in a run a neighbour can come a row further than any
    is at the start; with no capacity there a build overflows, and a re-plan planned again
    from the same start state overflowed again (Cu, Zhou 2004, 32,000 atoms at 1600 K: the
    window widened at every re-plan, offsets +-20 kept 0 each time).

    `seen`: mapped states the run reached (a re-plan's: the states that overflowed, each on
    its own map): the window covers each of them as it covers the plan's state, and each
    capacity holds the most any of them counts there, with the same headroom. A hot start
    from a crystal's sites counts fewer than the run soon does (Cu fcc at 1600 K: 86 atoms
    within cutoff + skin on the sites, 115 twenty steps later: the 48 of the shell at
    6.76 A, 0.05 A beyond the reach, come in), so the counts a run measured size its
    re-plan, not the start state's alone."""

    at_least: tuple[int, int] = (0, 0)
    more: float = 0.0
    more_total: float | None = None
    spare_rows: int = 0
    seen: tuple[np.ndarray, ...] = ()


def list_caps(
    state_np: np.ndarray,
    box_A,
    reach_A: float,
    k_rows: int,
    k_cols: int,
    margins: Margins = Margins(),
    *,
    pairs: np.ndarray | None = None,
) -> tuple[int, ...]:
    """Capacities for a mapped state: one per row offset (-k_rows .. k_rows), then the total
    M: the most atoms within `reach_A` any PE has at that offset (in all), times HEADROOM
    (TOTAL_HEADROOM) + the margins' extra, plus 2, at most the window's 2 k_cols + 1
    columns per offset; 0 beyond the farthest offset in use but the margins' spare rows
    (within the window), which keep the 2. Host side: the pairs within `reach_A`
    (`reach_pairs`) counted per PE and row offset in NumPy; `pairs`, when given, are those
    of the state's atoms in atom-id order (`reach_pairs` of the positions by id, as the
    state holds them) and must be for `reach_A`.

    M sets the work of every force evaluation (M candidates per PE), the per-offset caps
    only a build's; an atom's count within the reach fluctuates less than its count at one
    row offset (Cu fcc started at 1600 K: 78 in the crystal, at most 81 later over 32,000
    atoms), hence the smaller total headroom. A count over a cap is an overflow: re-planned
    with more headroom, never dropped."""
    n_off = 2 * k_rows + 1
    most, most_total = _stored_most(state_np, box_A, reach_A, k_rows, pairs)
    for seen in margins.seen:  # the states the run reached, each on its own map
        seen_most, seen_total = _stored_most(seen, box_A, reach_A, k_rows, None)
        most, most_total = np.maximum(most, seen_most), max(most_total, seen_total)
    more = margins.more
    caps = np.minimum(np.ceil(most * (HEADROOM + more)).astype(np.int64) + 2, 2 * k_cols + 1)
    used = np.nonzero(most > 0)[0]
    reach = int(np.abs(used - k_rows).max()) + margins.spare_rows if used.size else 0
    caps[np.abs(np.arange(n_off) - k_rows) > reach] = 0
    more_total = more if margins.more_total is None else margins.more_total
    total = int(np.ceil(most_total * (TOTAL_HEADROOM + more_total))) + 2
    return tuple(int(c) for c in caps) + (min(total, int(caps.sum())),)


def _stored_most(state_np, box_A, reach_A: float, k_rows: int, pairs):
    """`_most_in_reach`, stored on disk by the state without `pairs` (given pairs: a
    crystal's prediction, not a run; `santos24_md` stores each crystal's plans whole)."""
    count = functools.partial(_most_in_reach, state_np, box_A, reach_A, k_rows, pairs)
    if pairs is not None:
        return count()
    inputs = (state_np, np.asarray(box_A, np.float64), reach_A, k_rows)
    return plan_cache.cached("reach counts", inputs, count)


def _most_in_reach(state_np, box_A, reach_A: float, k_rows: int, pairs) -> tuple[np.ndarray, int]:
    """The most atoms within `reach_A` any PE has at each row offset (2 k_rows + 1,), and in
    all: what `list_caps` sizes (stored on disk by `plan_cache`: a warm start counts nothing)."""
    counts = _reach_counts(state_np, box_A, reach_A, k_rows, pairs)
    most = counts.max(axis=0) if counts.size else np.zeros(2 * k_rows + 1, np.int64)
    return most, counts.sum(axis=1).max(initial=0)


def _reach_counts(
    state_np: np.ndarray, box_A, reach_A: float, k_rows: int, pairs: np.ndarray | None
) -> np.ndarray:
    """(held PEs, 2 k_rows + 1): each atom's atoms within `reach_A` per row offset."""
    held = state_np[..., SPECIES] >= 0
    rr, _ = np.nonzero(held)
    if pairs is None:  # over the held PEs in row-major order
        pairs, row_of = reach_pairs(state_np[held][:, :3], box_A, reach_A), rr
    else:  # over atom ids
        ids = np.rint(state_np[held][:, ATOM_ID]).astype(np.int64)
        row_of = np.empty(rr.size, np.int64)
        row_of[ids] = rr
    return _offset_counts(row_of, pairs, state_np.shape[0], k_rows)


def active_per_block(state_np: np.ndarray, wafer: Wafer) -> int:
    """The most atoms any device block of `wafer` holds for a mapped (rows, cols, ...)
    state: the rows of each block the list kernel evaluates (`EamPlan.active`)."""
    held = state_np[..., SPECIES] >= 0
    (pr, pc), (br, bc) = wafer.padded_shape, wafer.block_shape
    padded = np.zeros((pr, pc), dtype=np.int64)
    padded[: held.shape[0], : held.shape[1]] = held
    return int(padded.reshape(pr // br, br, pc // bc, bc).sum(axis=(1, 3)).max())


def list_bytes_per_pe(caps: tuple[int, ...]) -> int:
    """Host bytes per PE the neighbour-list path holds at once: a build's per-row-offset
    candidates (window column and species, `max(caps)` per offset, and a count) and the
    lists (index, species, valid flag per candidate); forces work on chunks of PEs."""
    offsets = len(caps) - 1
    return 4 * offsets * (2 * max(caps[:-1], default=0) + 1) + 9 * caps[-1]


def plan_window(
    state_np: np.ndarray,
    box,
    pot: EamPotential,
    config: MdConfig,
    wafer: Wafer,
    margins: Margins = Margins(),
    *,
    host_lists: bool = True,
    pairs: np.ndarray | None = None,
) -> EamPlan:
    """The window for cutoff + skin (+ margin, so thermal motion rarely re-plans) and the
    neighbour-list capacities of the map (host side; no field is placed). With `host_lists`
    (the emulator) lists over LIST_BUDGET_BYTES are dropped for the full-window kernel; a
    prediction plan (`host_lists=False`) keeps them: the wafer holds its lists in SRAM.
    `pairs`: the atoms' pairs within cutoff + skin by atom id (`reach_pairs`), when already known
    (one crystal planned on several grids)."""
    reach = pot.cutoff_A + config.skin_A
    inputs = (state_np, np.asarray(box, np.float64), reach + WINDOW_MARGIN_A)
    needed = functools.partial(window_needed, state_np, box, inputs[2])
    kr, kc = plan_cache.cached("window", inputs, needed)
    for seen in margins.seen:  # the window covers the states the run reached, too
        seen_kr, seen_kc = window_needed(seen, box, inputs[2])
        kr, kc = max(kr, seen_kr), max(kc, seen_kc)
    kr = min(max(kr, margins.at_least[0]), (wafer.rows - 1) // 2)
    kc = min(max(kc, margins.at_least[1]), (wafer.cols - 1) // 2)
    caps = list_caps(state_np, box, reach, kr, kc, margins, pairs=pairs)
    if host_lists and wafer.num_pes * list_bytes_per_pe(caps) > LIST_BUDGET_BYTES:
        caps = ()  # lists of this window would not fit the host: the full-window kernel
    box_t = tuple(float(b) for b in box)
    active = active_per_block(state_np, wafer)
    every = config.rebuild_every or 1
    return EamPlan(kr, kc, box_t, config.dtype, config.skin_A, caps, active, every)
