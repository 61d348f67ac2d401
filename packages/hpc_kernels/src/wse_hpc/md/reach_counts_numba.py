"""The numba side of the host's counts over a crystal's pairs: each atom's pair partners per
PE row offset (`neighbour_plan`) and within the cutoff (`samples.max_hits`).

Contract: `offset_counts(row, pairs, rows, k_rows, out)` adds to `out` (n, 2 k_rows + 1)
int64, for each pair (a, b) of `pairs` (P, 2), one at out[a, d + k_rows] with d the row of b
less the row of a (`row` (n,) int64, periodic over `rows`: d in -(rows // 2) ..
rows - 1 - rows // 2) and one at out[b, d' + k_rows] with d' the row of a less the row of b,
each only when within -k_rows .. k_rows: the counts `neighbour_plan._offset_counts` made with
NumPy, the same integers. `hits_within(pos, box, pairs, cutoff2, counts)` adds one to
counts[a] and counts[b] (n,) int64 for each pair whose minimum-image distance squared, in
float64 over `pos` (n, 3) float64 in the box `box` (3,), is below `cutoff2`: the arithmetic
`samples.max_hits` did in NumPy (d -= box * rint(d / box), the squares summed x, y, z), the
same counts. Tests compare both with the NumPy versions on small crystals.

Why: at Santos et al.'s 801,792 atoms (40.5 M pairs within cutoff + skin) the NumPy version
took 14-40 s of a crystal's plan (a bincount over 81 M flat indices into 16.8 M bins, and
the copies it needs) and `max_hits` 5-11 s; these loops take ~1 s and ~0.5 s. Each is
compiled on first use into numba's on-disk cache (`NUMBA_CACHE_DIR`, beside the PE
kernels'; ~1.5 s once), and loaded from it after.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["offset_counts", "hits_within"]


@njit(cache=True, nogil=True)
def _periodic(d, rows, half):
    """(d + half) % rows - half for d in -(rows - 1) .. rows - 1."""
    if d > rows - 1 - half:
        return d - rows
    if d < -half:
        return d + rows
    return d


@njit(cache=True, nogil=True)
def offset_counts(row, pairs, rows, k_rows, out):
    half = rows // 2
    for p in range(pairs.shape[0]):
        a, b = pairs[p, 0], pairs[p, 1]
        d = row[b] - row[a]
        e = _periodic(d, rows, half)  # b as a sees it
        if -k_rows <= e <= k_rows:
            out[a, e + k_rows] += 1
        e = _periodic(-d, rows, half)  # a as b sees it (not -e: rows // 2 wraps to itself)
        if -k_rows <= e <= k_rows:
            out[b, e + k_rows] += 1


@njit(cache=True, nogil=True)
def hits_within(pos, box, pairs, cutoff2, counts):
    for p in range(pairs.shape[0]):
        a, b = pairs[p, 0], pairs[p, 1]
        r2 = 0.0
        for k in range(3):  # summed in order, as NumPy's einsum over the 3 axes
            d = pos[a, k] - pos[b, k]
            d -= box[k] * np.rint(d / box[k])
            r2 += d * d
        if r2 < cutoff2:
            counts[a] += 1
            counts[b] += 1
