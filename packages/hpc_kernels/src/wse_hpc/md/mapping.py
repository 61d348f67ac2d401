"""Atoms onto PEs, one atom per PE: a locality-preserving 3D -> 2D map (Santos et al. 2024).

Contract:
- `choose_grid(n)` gives a near-square PE grid (rows, cols), both odd, rows * cols >= n.
- `rewrap(positions, box)` moves positions by whole box lengths so that each periodic axis
  starts in the middle of its widest empty gap (between crystal planes, for a crystal): the
  map's sorted order then never splits a plane across the periodic boundary. The kernel
  keeps positions unwrapped, so any such shift is the same configuration.
- `initial_map(positions, grid, box, tile)` is the tile map: x, y -> PE column, row, with
  the third axis z folded into tiles of `tile` = (th, tw) PEs. Atoms sorted by x are cut
  into strips of tw PE columns (rows * tw atoms each, empty PEs spread evenly), each strip
  sorted by y is cut into tiles of th rows (th * tw atoms each), and each tile holds its
  atoms by z along a serpentine (z-neighbours are PE neighbours). A tile is then the
  column of atoms through the sample's thickness above one patch of its (x, y) plane, so a
  PE's window of rows and columns holds a compact 3D neighbourhood when the sample is a
  slab a few cutoffs thick; a crystal slab whose projected lattice sites each hold th * tw
  atoms, on a grid of th (tw) PE rows (columns) per site line, maps exactly (every tile one
  site). Ties (one crystal plane) keep a fixed order, so a strip cut from a plane samples
  all of it. Returns the atom index per PE, (rows, cols), -1 for empty.
- `choose_tile(positions, grid, box, reach)` tries the tiles of `TILES` and keeps the one
  whose window (`window_needed`) holds the fewest PEs for the positions displaced by
  TILE_JITTER_A (seeded): a perfect lattice's ties would otherwise favour a tile whose
  windows grow as soon as the atoms move (1 x 1 at 4,000 atoms: ten re-plans in 200 steps).
- Per-PE state is one packed float array `(rows, cols, NFIELDS)`: position (A), velocity
  (A/ps), force (eV/A), species index (-1 = empty PE) and atom id; `pack` / `unpack` convert.
  Empty PEs carry +BIG positions so that sorting keeps them at the end of rows and columns.
- `window_needed(...)` is the host-side version of the kernel's coverage test: the smallest
  window (k_rows, k_cols) of PEs around every atom that holds all its neighbours within
  `reach_A`; the shell plans with it and re-plans when the kernel reports an overflow.
  scipy.ndimage (its sliding extremes) is imported by the functions that use it: a warm
  `wse hpc md` loads its tile and window from disk (`plan_cache`) and never calls them.

The swap sweep (`eam.sort_fn`: rows by x, columns by y) keeps the map local as atoms move:
inside a tile atoms share their (x, y) patch, so its swaps only reorder a tile's z.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "NFIELDS",
    "POS",
    "VEL",
    "FORCE",
    "SPECIES",
    "ATOM_ID",
    "EMPTY_POS",
    "TILES",
    "TILE_JITTER_A",
    "choose_grid",
    "rewrap",
    "initial_map",
    "choose_tile",
    "pack",
    "unpack",
    "window_needed",
    "coverage_gap",
]

POS, VEL, FORCE = slice(0, 3), slice(3, 6), slice(6, 9)
SPECIES, ATOM_ID = 9, 10
NFIELDS = 11
EMPTY_POS = 1.0e6  # A; far beyond any box, so empty PEs sort last and never interact
# tiles (PE rows, PE columns) `choose_tile` tries; the first is the default: 1 x 4 gave the
# smallest windows for Cu crystals of 4k to 200k atoms at 300 K on near-square grids, 2 x 2
# fits fcc and bcc (001) slabs 4 cells thick on a grid of 2 PE rows and columns per site line
TILES = ((1, 4), (2, 2), (1, 2), (2, 4), (4, 4), (1, 1))
TILE_JITTER_A = 0.1  # A: the thermal displacements a tile is chosen for (a ~600 K crystal)


def choose_grid(
    n_atoms: int, max_rows: int | None = None, max_cols: int | None = None
) -> tuple[int, int]:
    """A near-square (rows, cols) with rows * cols >= n_atoms, both odd (an odd line count
    lets a +-k window cover a whole line, the fallback for small boxes), within the limits
    when given (a wafer's PE grid: rows are shortened and columns added)."""
    cols = max(1, math.ceil(math.sqrt(n_atoms))) | 1
    rows = max(1, math.ceil(n_atoms / cols)) | 1
    if max_rows is not None and rows > max_rows:
        rows = max_rows if max_rows % 2 else max_rows - 1
        cols = max(1, math.ceil(n_atoms / rows)) | 1
        if max_cols is not None and cols > max_cols:  # a full wafer: odd lines no longer fit
            rows = max_rows
            cols = max(1, math.ceil(n_atoms / rows))
    if max_cols is not None and cols > max_cols:
        raise ValueError(f"{n_atoms} atoms do not fit {max_rows} x {max_cols} PEs")
    return rows, cols


def rewrap(positions_A: np.ndarray, box_A) -> np.ndarray:
    """Positions (n, 3) shifted by whole box lengths into [o, o + box) per axis, o in the
    middle of the axis's widest gap between consecutive wrapped coordinates."""
    box = np.asarray(box_A, dtype=np.float64)
    pos = np.mod(np.asarray(positions_A, dtype=np.float64), box)
    out = np.empty_like(pos)
    for axis in range(3):
        v = np.sort(pos[:, axis])
        gaps = np.diff(np.concatenate([v, v[:1] + box[axis]]))
        i = int(np.argmax(gaps))
        origin = v[i] + 0.5 * gaps[i]
        out[:, axis] = origin + np.mod(pos[:, axis] - origin, box[axis])
    return out


def _spread(count: int, slots: int) -> np.ndarray:
    """Slot of each of `count` items over `slots` places, evenly (empties spread)."""
    return np.floor(np.arange(count) * slots / max(count, 1)).astype(np.int64)


def initial_map(
    positions_A: np.ndarray,
    grid: tuple[int, int],
    box_A: np.ndarray | None = None,
    tile: tuple[int, int] | None = None,
) -> np.ndarray:
    """Atom index held by each PE, (rows, cols) int64, -1 on empty PEs: the tile map of the
    module docstring (`tile` = (th, tw) PEs, default `TILES[0]`). Pass `rewrap`ped
    positions (and pack the same ones)."""
    rows, cols = grid
    n = positions_A.shape[0]
    if n > rows * cols:
        raise ValueError(f"{n} atoms do not fit a {rows} x {cols} PE grid")
    th, tw = TILES[0] if tile is None else tile
    th, tw = max(1, min(th, rows)), max(1, min(tw, cols))
    x, y, z = positions_A[:, 0], positions_A[:, 1], positions_A[:, 2]
    # ties in x (a crystal plane) broken by z: a strip that takes part of a plane takes a
    # z-slab of it, every y, so each strip's rows hold the same y (broken by y, a partial
    # plane's low-y half shifted a strip's rows by up to a tenth of the box: windows of 8,037
    # instead of 1,927 PEs for a 32,000-atom Cu cube)
    by_x = np.lexsort((y, z, x))
    firsts = np.arange(0, cols, tw)
    widths = np.minimum(tw, cols - firsts)
    # atoms per strip in proportion to its PEs (empty PEs spread over every strip)
    bounds = np.round(np.concatenate([[0], np.cumsum(widths)]) * n / cols).astype(np.int64)
    tops = np.arange(0, rows, th)
    heights = np.minimum(th, rows - tops)
    out = np.full((rows, cols), -1, dtype=np.int64)
    for c0, w, lo, hi in zip(firsts, widths, bounds[:-1], bounds[1:], strict=True):
        strip = by_x[lo:hi]
        strip = strip[np.lexsort((z[strip], x[strip], y[strip]))]
        # atoms per tile in proportion to its PEs; each tile's atoms by z
        ends = np.round(np.cumsum(heights * w) * strip.size / (rows * w)).astype(np.int64)
        tile_of = np.searchsorted(ends, np.arange(strip.size), side="right")
        strip = strip[np.lexsort((z[strip], tile_of))]
        first = np.concatenate([[0], ends[:-1]])[tile_of]
        count, pes = (ends - np.concatenate([[0], ends[:-1]]))[tile_of], heights[tile_of] * w
        slot = np.floor((np.arange(strip.size) - first) * pes / np.maximum(count, 1))
        r, c = np.divmod(slot.astype(np.int64), w)
        c = np.where(r % 2 == 1, w - 1 - c, c)  # serpentine: z-neighbours are PE neighbours
        out[tops[tile_of] + r, c0 + c] = strip
    return out


def choose_tile(
    positions_A: np.ndarray,
    grid: tuple[int, int],
    box_A: np.ndarray,
    reach_A: float,
    tiles: tuple[tuple[int, int], ...] | None = None,
) -> tuple[int, int]:
    """The tile of `tiles` (default TILES) whose map needs the fewest window PEs for
    `reach_A` (`rewrap`ped positions, displaced by TILE_JITTER_A); the first of equals."""
    species = np.zeros(positions_A.shape[0], np.int32)
    rng = np.random.default_rng(0)
    moved = positions_A + rng.normal(scale=TILE_JITTER_A, size=positions_A.shape)

    def pes(tile):
        state = pack(initial_map(moved, grid, box_A, tile), moved, species)
        kr, kc = window_needed(state, box_A, reach_A)
        return (2 * kr + 1) * (2 * kc + 1)

    return min(tiles or TILES, key=pes)


def pack(
    atom_of_pe: np.ndarray,
    positions_A: np.ndarray,
    species: np.ndarray,
    velocities_A_ps: np.ndarray | None = None,
    forces_eV_A: np.ndarray | None = None,
    dtype=np.float32,
) -> np.ndarray:
    """The packed per-PE state (rows, cols, NFIELDS) for a map."""
    rows, cols = atom_of_pe.shape
    state = np.zeros((rows, cols, NFIELDS), dtype=np.float64)
    held = atom_of_pe >= 0
    idx = atom_of_pe[held]
    state[..., POS] = EMPTY_POS
    state[..., SPECIES] = -1.0
    state[..., ATOM_ID] = -1.0
    state[held, POS] = positions_A[idx]
    if velocities_A_ps is not None:
        state[held, VEL] = velocities_A_ps[idx]
    if forces_eV_A is not None:
        state[held, FORCE] = forces_eV_A[idx]
    state[held, SPECIES] = species[idx]
    state[held, ATOM_ID] = idx
    return state.astype(dtype)


def unpack(state: np.ndarray, n_atoms: int) -> dict[str, np.ndarray]:
    """Per-atom arrays in atom-id order from a gathered (rows, cols, NFIELDS) state."""
    flat = np.asarray(state, dtype=np.float64).reshape(-1, NFIELDS)
    held = flat[:, SPECIES] >= 0
    ids = np.rint(flat[held, ATOM_ID]).astype(np.int64)
    order = np.argsort(ids)
    rows = flat[held][order]
    if ids.size != n_atoms or not np.array_equal(ids[order], np.arange(n_atoms)):
        raise RuntimeError("the wafer state lost or duplicated atoms")  # a kernel bug
    return {
        "positions_A": rows[:, POS],
        "velocities_A_ps": rows[:, VEL],
        "forces_eV_A": rows[:, FORCE],
        "species": rows[:, SPECIES].astype(np.int32),
        "pe_flat_index": np.nonzero(held)[0][order],
    }


def _periodic_sliding(values: np.ndarray, width: int, extreme, length: float) -> np.ndarray:
    """`extreme` (minimum_filter1d or maximum_filter1d) over the unrolled periodic
    values[s : s + width] for every start s (axis 0), O(n) per line: filter f's window at i
    is i - width // 2 .. i - width // 2 + width - 1, inside the unrolled 2 n values for the
    starts 0 .. n - 1 (width <= n), so no boundary mode is ever read."""
    n = values.shape[0]
    unrolled = np.concatenate([values, values + length], axis=0)
    return extreme(unrolled, width, axis=0)[width // 2 : width // 2 + n]


def _arc(lo: np.ndarray, hi: np.ndarray, k: int, length: float) -> tuple[np.ndarray, np.ndarray]:
    """Extremes over lines k + 1 .. n - k - 1 further along axis 0 (unrolled)."""
    from scipy.ndimage import maximum_filter1d, minimum_filter1d  # module doc: imported here

    n = lo.shape[0]
    width = n - 2 * k - 1
    starts = (np.arange(n) + k + 1) % n
    wrap = np.where(np.arange(n) + k + 1 >= n, length, 0.0)
    wrap = wrap.reshape((n,) + (1,) * (lo.ndim - 1))
    lo_a = _periodic_sliding(lo, width, minimum_filter1d, length)[starts] + wrap
    hi_a = _periodic_sliding(hi, width, maximum_filter1d, length)[starts] + wrap - length
    return lo_a, hi_a


def coverage_gap(state: np.ndarray, box_A: np.ndarray, k_rows: int, k_cols: int) -> np.ndarray:
    """The kernel's coverage test on the host: per PE, a lower bound on the distance to any
    atom outside the window (inf where the window covers the grid), shape (rows, cols)."""
    from scipy.ndimage import maximum_filter1d, minimum_filter1d  # module doc: imported here

    held = state[..., SPECIES] >= 0
    x, y = state[..., 0].astype(np.float64), state[..., 1].astype(np.float64)
    rows, cols = held.shape
    gap = np.full(held.shape, np.inf)
    if cols - 2 * k_cols - 1 > 0:
        lo = np.where(held, x, np.inf).min(axis=0)
        hi = np.where(held, x, -np.inf).max(axis=0)
        lo_a, hi_a = _arc(lo, hi, k_cols, box_A[0])
        gap = np.minimum(gap, np.minimum(lo_a[None, :] - x, x - hi_a[None, :]))
    if rows - 2 * k_rows - 1 > 0:
        lo_y, hi_y = np.where(held, y, np.inf), np.where(held, y, -np.inf)
        # extremes over the window's columns c - k_cols .. c + k_cols (periodic), sliding
        size = 2 * k_cols + 1
        lo_w = minimum_filter1d(lo_y, size, axis=1, mode="wrap")
        hi_w = maximum_filter1d(hi_y, size, axis=1, mode="wrap")
        lo_a, hi_a = _arc(lo_w, hi_w, k_rows, box_A[1])
        gap = np.minimum(gap, np.minimum(lo_a - y, y - hi_a))
    return np.where(held, gap, np.inf)


def window_needed(state: np.ndarray, box_A: np.ndarray, reach_A: float) -> tuple[int, int]:
    """The smallest k_cols whose column test passes, then the smallest k_rows whose row test
    passes with it (both tests are monotone in k: binary search). Falls back to the whole
    grid ((n - 1) // 2 on an odd line count covers every line)."""
    rows, cols = state.shape[:2]

    def smallest(n_max: int, ok) -> int:
        lo, hi = 0, n_max
        while lo < hi:
            mid = (lo + hi) // 2
            if ok(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    kmax_r, kmax_c = (rows - 1) // 2, (cols - 1) // 2
    kc = smallest(kmax_c, lambda k: bool(np.all(coverage_gap(state, box_A, kmax_r, k) > reach_A)))
    kr = smallest(kmax_r, lambda k: bool(np.all(coverage_gap(state, box_A, k, kc) > reach_A)))
    return kr, kc
