"""The arithmetic of one pair shared by the MD pair kernels (`pe_pairs_numba`'s full lists,
`pe_pairs_half`'s each pair once): the minimum-image displacement, LAMMPS's knot interval
and cubic splines (`md.splines`' tables, float32, a knot's four coefficients (K, 4) in one
cache line), a pair's phi and psi', and a float32 FMA rounded once. All inline numba; the
kernels that call them fix the order of every sum. `Splines` carries a potential's tables
with their knot grid (a NamedTuple: inlined, its fields are the values it was built from).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

__all__ = [
    "F0",
    "F1",
    "F2",
    "F3",
    "Splines",
    "fma",
    "geometry",
    "knot",
    "locate",
    "minimum_image",
    "pair",
    "slope",
    "splines",
    "value",
]

F0, F1, F2, F3 = np.float32(0.0), np.float32(1.0), np.float32(2.0), np.float32(3.0)


class Splines(NamedTuple):
    """A potential's cubic tables as `pair` and `splines` read them: `md.splines`' (float32
    (K, 4), a knot's four coefficients in one cache line; the row `knot` picks) on their
    knot grid."""

    rhor: np.ndarray  # the density rho(r)
    z2r: np.ndarray  # r phi(r)
    inv_dr: np.float32  # 1 / knot spacing (1/A)
    nr: np.int32  # knots per table
    ne: np.int32  # elements


@njit(inline="always")
def minimum_image(dx, dy, dz, box):
    """The minimum-image displacement (dx, dy, dz) and its r^2, `box` (bx, by, bz, 1/bx,
    1/by, 1/bz) (a tuple, or the first six of a kernel's cf): every kernel's one form, the
    same float32 operations for (i, j) as for (j, i) (exact negatives), which the list
    build's each-pair-once test relies on."""
    dx = dx - box[0] * np.rint(dx * box[3])
    dy = dy - box[1] * np.rint(dy * box[4])
    dz = dz - box[2] * np.rint(dz * box[5])
    return dx, dy, dz, dx * dx + dy * dy + dz * dz


@njit(inline="always")
def geometry(xyz, j, xi, yi, zi, cf):
    """Minimum-image displacement from i to the candidate at j and its r^2."""
    return minimum_image(xyz[j, 0] - xi, xyz[j, 1] - yi, xyz[j, 2] - zi, cf)


@njit(inline="always")
def locate(r, inv_dr, nr):
    """LAMMPS: p = r / dr + 1, m = int(p) clamped to [1, nr - 1], p -= m, p <= 1."""
    p = r * inv_dr + F1
    m = min(max(np.floor(p), F1), np.float32(nr - 1))
    return np.int32(m) - np.int32(1), min(p - m, F1)  # int32: SIMD converts it


@njit(inline="always")
def knot(a, b, k, ne, nr, size):
    at = (a * ne + b) * nr + k if ne > 1 else k
    return min(max(at, 0), size - 1)


@njit(inline="always")
def value(t, at, p):  # t (K, 4): a knot's four coefficients share a cache line
    return ((t[at, 0] * p + t[at, 1]) * p + t[at, 2]) * p + t[at, 3]


@njit(inline="always")
def slope(t, at, p, inv_d):
    return ((F3 * t[at, 0] * p + F2 * t[at, 1]) * p + t[at, 2]) * inv_d


@njit(inline="always")
def pair(s, r2, si, sj, fpi, fpj):
    """One pair within the cutoff of `s` (`Splines`): 1/r, r, the pair energy phi and psi'
    (the force along the pair is psi' / r times the displacement)."""
    inv_r = F1 / np.sqrt(r2)
    r = r2 * inv_r
    k, p = locate(r, s.inv_dr, s.nr)
    return (inv_r, r) + splines(s, inv_r, k, p, si, sj, fpi, fpj)


@njit(inline="always")
def splines(s, inv_r, k, p, si, sj, fpi, fpj):
    """phi and psi' of a pair at 1/r in knot interval k, fraction p, of `s` (`Splines`)."""
    rhor, z2r, inv_dr, nr, ne, size = s.rhor, s.z2r, s.inv_dr, s.nr, s.ne, s.rhor.shape[0]
    rhojp = slope(rhor, knot(sj, si, k, ne, nr, size), p, inv_dr)
    rhoip = slope(rhor, knot(si, sj, k, ne, nr, size), p, inv_dr)
    at = knot(si, sj, k, ne, nr, size)
    phi = value(z2r, at, p) * inv_r
    phip = (slope(z2r, at, p, inv_dr) - phi) * inv_r
    return phi, fpi * rhojp + fpj * rhoip + phip


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c rounded once (float32)."""

    def codegen(context, builder, sig, args):
        return builder.fma(*args)

    return types.float32(types.float32, types.float32, types.float32), codegen
