"""The numba side of `pe_pairs`: each PE's pair loops over its candidate list and their XLA
FFI handlers (`handler(name)`: each compiled or loaded from numba's cache only when a CPU
force evaluation first needs it; one device uses only the half pair). A handler reads
XLA's call frame as `wse_core.host.numba_ffi` says.
The kernels run on the calling thread (a mesh of several devices runs one block per
thread): full lists (each PE its own pairs) or, on one device, each pair once
(`density_half`, `force_half`: the PE of the larger block index takes the pair from the
other's list and adds its share to both).

XLA's arguments, float32 and int32 (`pe_pairs` lays them out): xyz (Nr, 3) the window
region's positions, fpr (Nr,) F' over it, ids (Nr,) its block indices; index / valid / sp_j
(n, M) each PE's candidates (place in the region, in the list, species); pos (n, 3), sp_i,
fp_i (n,) the PEs' own atoms, own (n,) their block indices; rhor, z2r (K, 4) the cubic
coefficients (a knot's four in one cache line), cf (8,) = box (3), 1 / box (3), cutoff^2,
1 / dr, ci (2,) = nr, number of elements:
- density: xyz, index, valid, sp_j, pos, sp_i, rhor, cf, ci; result rho (n,).
- force: xyz, fpr, index, valid, sp_j, pos, sp_i, fp_i, rhor, z2r, cf, ci; results f (n, 3),
  pair energy (n,), virial (n,).
- density_half: xyz, ids, index, valid, sp_j (nb, M) every list row of the block (only the
  first n are read), pos, sp_i, own, rhor, cf, ci; results rho (nb,) over the block, cut
  (nb, M) and ncut (nb,): per list row, the pairs it took within the cutoff, each its
  place in the region with the candidate's species from bit SPECIES_SHIFT up (rows past n:
  ncut 0).
- force_half: xyz, fpr, ids, cut, ncut, pos, sp_i, own, fp_i, rhor, z2r, cf, ci; results
  f (nb, 3), pair energy (nb,), virial (nb,): only the pairs `cut` names.
The handlers hand them to the kernels as `Region`, `Lists` (or `Cut`), `Own`, `Tables`
and a tuple of the results; an array a kernel does not read is there empty (length 0).
Each PE skips the candidates beyond the cutoff; the splines are `md.splines`' (LAMMPS's).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import carray, njit
from wse_core.host.numba_ffi import (
    FRAME_ARGS,
    FRAME_RETS,
    KERNEL_OPTS,
    addr,
    data,
    dims,
    handlers,
    ptr,
)
from wse_core.host.numba_ffi import metadata_query as metadata

from wse_hpc.md.pe_pair_math import F0, F1, Splines, geometry, knot, locate, pair, value
from wse_hpc.md.pe_pairs_half import density_half, force_half

__all__ = ["Cut", "Lists", "Own", "Region", "Tables", "handler"]


class Region(NamedTuple):
    """The window region the candidate lists point into, per place (Nr)."""

    xyz: np.ndarray  # (Nr, 3) float32 positions (A)
    fp: np.ndarray  # (Nr,) float32 F' (the density passes: empty, not known yet)
    ids: np.ndarray  # (Nr,) int32 block indices (full lists: empty)


class Lists(NamedTuple):
    """Each PE's candidates, per list row and slot (n, M)."""

    index: np.ndarray  # int32 place in the region
    valid: np.ndarray  # bool in the list (the valid ones first)
    sp: np.ndarray  # int32 species


class Cut(NamedTuple):
    """The pairs `density_half` took within the cutoff, per list row."""

    words: np.ndarray  # (nb, M) int32: place | species << SPECIES_SHIFT
    count: np.ndarray  # (nb,) int32


class Own(NamedTuple):
    """The PEs' own atoms, per list row (n)."""

    pos: np.ndarray  # (n, 3) float32 (A)
    sp: np.ndarray  # (n,) int32 species
    fp: np.ndarray  # (n,) float32 F' (the density passes: empty)
    ids: np.ndarray  # (n,) int32 block indices (full lists: empty)


class Tables(NamedTuple):
    """The potential's spline tables and the constants XLA hands over with them. The kernels
    read cf and ci where they always did: fastmath lets LLVM reorder sums and products by
    where their operands are defined, and with the constants unpacked into arguments the
    full-list density and forces came out different in the last bits."""

    rhor: np.ndarray  # (K, 4) float32 the density's cubic coefficients
    z2r: np.ndarray  # (K, 4) float32 r phi's (the density passes: empty (0, 4))
    cf: np.ndarray  # (8,) float32 box (3), 1 / box (3), cutoff^2, 1 / dr
    ci: np.ndarray  # (2,) int32 nr, number of elements


def _density(region, lists, own, tables, rho):
    xyz, index, valid, sp_j = region.xyz, lists.index, lists.valid, lists.sp
    pos, sp_i, rhor, cf, ci = own.pos, own.sp, tables.rhor, tables.cf, tables.ci
    n, m = index.shape
    nr, ne, size = ci[0], ci[1], rhor.shape[0]
    for i in range(n):
        xi, yi, zi, si = pos[i, 0], pos[i, 1], pos[i, 2], sp_i[i]
        acc = np.float32(0.0)
        for t in range(m):
            if valid[i, t]:
                _, _, _, r2 = geometry(xyz, index[i, t], xi, yi, zi, cf)
                if F0 < r2 < cf[6]:  # r = 0: no pair (a cfunc must not raise)
                    r = r2 * (F1 / np.sqrt(r2))
                    k, p = locate(r, cf[7], nr)
                    acc += value(rhor, knot(sp_j[i, t], si, k, ne, nr, size), p)
        rho[i] = acc


def _force(region, lists, own, tables, out):
    xyz, fpr, index, valid, sp_j = region.xyz, region.fp, lists.index, lists.valid, lists.sp
    pos, sp_i, fp_i, cf, ci = own.pos, own.sp, own.fp, tables.cf, tables.ci
    f, pair_e, virial = out
    n, m = index.shape
    nr, ne = ci[0], ci[1]
    for i in range(n):
        xi, yi, zi, si, fpi = pos[i, 0], pos[i, 1], pos[i, 2], sp_i[i], fp_i[i]
        fx, fy, fz = np.float32(0.0), np.float32(0.0), np.float32(0.0)
        e, v = np.float32(0.0), np.float32(0.0)
        for t in range(m):
            if valid[i, t]:
                j = index[i, t]
                dx, dy, dz, r2 = geometry(xyz, j, xi, yi, zi, cf)
                if F0 < r2 < cf[6]:  # r = 0: no pair (a cfunc must not raise)
                    s = Splines(tables.rhor, tables.z2r, cf[7], nr, ne)  # cf[7] read here
                    inv_r, r, phi, psip = pair(s, r2, si, sp_j[i, t], fpi, fpr[j])
                    scale = psip * inv_r
                    fx += scale * dx
                    fy += scale * dy
                    fz += scale * dz
                    e += phi
                    v += psip * r
        f[i, 0], f[i, 1], f[i, 2] = fx, fy, fz
        pair_e[i] = np.float32(0.5) * e
        virial[i] = np.float32(-0.5) * v


@njit(inline="always")
def _vector(frame, slot, i):
    """The i-th float32 argument or result of one dimension."""
    return carray(data(frame, slot, i), (dims(frame, slot, i, 1)[0],), np.float32)


@njit(inline="always")
def _matrix(frame, slot, i):
    """The i-th float32 argument or result of two dimensions."""
    d = dims(frame, slot, i, 2)
    return carray(data(frame, slot, i), (d[0], d[1]), np.float32)


@njit(inline="always")
def _ints(frame, i):
    """The i-th int32 argument of one dimension."""
    d = dims(frame, FRAME_ARGS, i, 1)
    return carray(data(frame, FRAME_ARGS, i), (d[0],), np.int32)


@njit(inline="always")
def _lists(frame, first):
    """`Lists` from args first .. first + 2."""
    d = dims(frame, FRAME_ARGS, first, 2)
    index = carray(data(frame, FRAME_ARGS, first), (d[0], d[1]), np.int32)
    valid = carray(data(frame, FRAME_ARGS, first + 1), (d[0], d[1]), np.bool_)
    sp_j = carray(data(frame, FRAME_ARGS, first + 2), (d[0], d[1]), np.int32)
    return Lists(index, valid, sp_j)


@njit(inline="always")
def _own(frame, first, fp, ids):
    """`Own`: pos (n, 3), sp_i (n,) from args first, first + 1."""
    n = dims(frame, FRAME_ARGS, first, 2)[0]
    pos = carray(data(frame, FRAME_ARGS, first), (n, 3), np.float32)
    return Own(pos, carray(data(frame, FRAME_ARGS, first + 1), (n,), np.int32), fp, ids)


@njit(inline="always")
def _tables(frame, rhor, z2r, first):
    """`Tables` of rhor, z2r and cf (8,) float32, ci (2,) int32 from args first, first + 1."""
    cf = carray(data(frame, FRAME_ARGS, first), (8,), np.float32)
    return Tables(rhor, z2r, cf, carray(data(frame, FRAME_ARGS, first + 1), (2,), np.int32))


@njit(inline="always")
def _empty(frame, dtype):
    """A length-0 array of dtype: what a kernel is given for an array it does not read."""
    return carray(data(frame, FRAME_ARGS, 0), (0,), dtype)


@njit(inline="always")
def _density_args(frame):
    no_f, no_i = _empty(frame, np.float32), _empty(frame, np.int32)
    region = Region(_matrix(frame, FRAME_ARGS, 0), no_f, no_i)
    no_z2r = carray(data(frame, FRAME_ARGS, 0), (0, 4), np.float32)
    tables = _tables(frame, _matrix(frame, FRAME_ARGS, 6), no_z2r, 7)
    own = _own(frame, 4, no_f, no_i)
    return region, _lists(frame, 1), own, tables, _vector(frame, FRAME_RETS, 0)


@njit(inline="always")
def _force_args(frame):
    no_i = _empty(frame, np.int32)
    region = Region(_matrix(frame, FRAME_ARGS, 0), _vector(frame, FRAME_ARGS, 1), no_i)
    own = _own(frame, 5, _vector(frame, FRAME_ARGS, 7), no_i)
    tables = _tables(frame, _matrix(frame, FRAME_ARGS, 8), _matrix(frame, FRAME_ARGS, 9), 10)
    n = own.pos.shape[0]
    out = (
        carray(data(frame, FRAME_RETS, 0), (n, 3), np.float32),
        _vector(frame, FRAME_RETS, 1),
        _vector(frame, FRAME_RETS, 2),
    )
    return region, _lists(frame, 2), own, tables, out


@njit(inline="always")
def _density_half_args(frame):
    no_f = _empty(frame, np.float32)
    region = Region(_matrix(frame, FRAME_ARGS, 0), no_f, _ints(frame, 1))
    own = _own(frame, 5, no_f, _ints(frame, 7))
    no_z2r = carray(data(frame, FRAME_ARGS, 0), (0, 4), np.float32)
    tables = _tables(frame, _matrix(frame, FRAME_ARGS, 8), no_z2r, 9)
    d = dims(frame, FRAME_RETS, 1, 2)
    out = (
        _vector(frame, FRAME_RETS, 0),
        carray(data(frame, FRAME_RETS, 1), (d[0], d[1]), np.int32),
        carray(data(frame, FRAME_RETS, 2), (d[0],), np.int32),
    )
    return region, _lists(frame, 2), own, tables, out


@njit(inline="always")
def _force_half_args(frame):
    region = Region(_matrix(frame, FRAME_ARGS, 0), _vector(frame, FRAME_ARGS, 1), _ints(frame, 2))
    d = dims(frame, FRAME_ARGS, 3, 2)
    cut = Cut(carray(data(frame, FRAME_ARGS, 3), (d[0], d[1]), np.int32), _ints(frame, 4))
    own = _own(frame, 5, _vector(frame, FRAME_ARGS, 8), _ints(frame, 7))
    tables = _tables(frame, _matrix(frame, FRAME_ARGS, 9), _matrix(frame, FRAME_ARGS, 10), 11)
    nb = dims(frame, FRAME_RETS, 0, 2)[0]
    out = (
        carray(data(frame, FRAME_RETS, 0), (nb, 3), np.float32),
        _vector(frame, FRAME_RETS, 1),
        _vector(frame, FRAME_RETS, 2),
    )
    return region, cut, own, tables, out


density_full = njit(**KERNEL_OPTS)(_density)
force_full = njit(**KERNEL_OPTS)(_force)


def density_full_ffi(frame_p):
    frame = addr(frame_p)
    if not metadata(frame):
        density_full(*_density_args(frame))
    return ptr(0)


def force_full_ffi(frame_p):
    frame = addr(frame_p)
    if not metadata(frame):
        force_full(*_force_args(frame))
    return ptr(0)


def density_half_ffi(frame_p):
    frame = addr(frame_p)
    if not metadata(frame):
        density_half(*_density_half_args(frame))
    return ptr(0)


def force_half_ffi(frame_p):
    frame = addr(frame_p)
    if not metadata(frame):
        force_half(*_force_half_args(frame))
    return ptr(0)


handler = handlers(
    {
        "density": density_full_ffi,
        "force": force_full_ffi,
        "density_half": density_half_ffi,
        "force_half": force_half_ffi,
    }
)
