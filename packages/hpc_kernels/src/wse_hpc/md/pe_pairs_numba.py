"""The numba side of `pe_pairs`: each PE's pair loops over its candidate list and their XLA
FFI handlers (`handler(name)`: each compiled or loaded from numba's cache only when a CPU
force evaluation first needs it; one device uses only the half pair). A handler reads
XLA's call frame as `wse_core.host.numba_ffi` says.
The kernels run on the calling thread (a mesh of several devices runs one block per
thread): full lists (each PE its own pairs) or, on one device, each pair once
(`density_half`, `force_half`: the PE of the larger block index takes the pair from the
other's list and adds its share to both).

Arguments, float32 and int32 (`pe_pairs` lays them out):
- density: xyz (Nr, 3) the window region's positions, index / valid / sp_j (n, M) each PE's
  candidates (place in the region, in the list, species), pos (n, 3), sp_i (n,), rhor
  (K, 4) the density's cubic coefficients (a knot's four in one cache line), cf (8,) =
  box (3), 1 / box (3), cutoff^2, 1 / dr, ci (2,) = nr, number of elements; result rho (n,).
- force: xyz, fpr (Nr,) F' over the region, index, valid, sp_j, pos, sp_i, fp_i (n,), rhor,
  z2r (K, 4), cf, ci; results f (n, 3), pair energy (n,), virial (n,).
- density_half: xyz, ids (Nr,) the region's block indices, index, valid, sp_j (nb, M) every
  list row of the block (only the first n are read), pos, sp_i, own (n,) the block indices
  of the PEs of the first n rows, rhor, cf, ci; results rho (nb,) over the block, cut
  (nb, M) and ncut (nb,): per list row, the pairs it took within the cutoff, each its
  place in the region with the candidate's species from bit SPECIES_SHIFT up (rows past n:
  ncut 0).
- force_half: xyz, fpr, ids, cut, ncut, pos, sp_i, own, fp_i, rhor, z2r, cf, ci; results
  f (nb, 3), pair energy (nb,), virial (nb,): only the pairs `cut` names.
Each PE skips the candidates beyond the cutoff; the splines are `md.splines`' (LAMMPS's).
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit
from wse_core.host.numba_ffi import FRAME_ARGS, FRAME_RETS, OPTS, addr, data, dims, handlers, ptr
from wse_core.host.numba_ffi import metadata_query as metadata

from wse_hpc.md.pe_pair_math import F0, F1, geometry, knot, locate, pair, value
from wse_hpc.md.pe_pairs_half import density_half, force_half

__all__ = ["handler"]


def _density(xyz, index, valid, sp_j, pos, sp_i, rhor, cf, ci, rho):
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


def _force(xyz, fpr, index, valid, sp_j, pos, sp_i, fp_i, tables, cf, ci, out):
    rhor, z2r = tables
    f, pair_e, virial = out
    n, m = index.shape
    nr, ne, size = ci[0], ci[1], rhor.shape[0]
    for i in range(n):
        xi, yi, zi, si, fpi = pos[i, 0], pos[i, 1], pos[i, 2], sp_i[i], fp_i[i]
        fx, fy, fz = np.float32(0.0), np.float32(0.0), np.float32(0.0)
        e, v = np.float32(0.0), np.float32(0.0)
        for t in range(m):
            if valid[i, t]:
                j = index[i, t]
                dx, dy, dz, r2 = geometry(xyz, j, xi, yi, zi, cf)
                if F0 < r2 < cf[6]:  # r = 0: no pair (a cfunc must not raise)
                    inv_r, r, phi, psip = pair(
                        rhor, z2r, r2, si, sp_j[i, t], fpi, fpr[j], cf, nr, ne, size
                    )
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
def _lists(frame, first):
    """index, valid, sp_j (n, M) from args first .. first + 2."""
    d = dims(frame, FRAME_ARGS, first, 2)
    index = carray(data(frame, FRAME_ARGS, first), (d[0], d[1]), np.int32)
    valid = carray(data(frame, FRAME_ARGS, first + 1), (d[0], d[1]), np.bool_)
    sp_j = carray(data(frame, FRAME_ARGS, first + 2), (d[0], d[1]), np.int32)
    return index, valid, sp_j


@njit(inline="always")
def _own(frame, first):
    """pos (n, 3), sp_i (n,) from args first, first + 1."""
    n = dims(frame, FRAME_ARGS, first, 2)[0]
    pos = carray(data(frame, FRAME_ARGS, first), (n, 3), np.float32)
    return pos, carray(data(frame, FRAME_ARGS, first + 1), (n,), np.int32)


@njit(inline="always")
def _consts(frame, first):
    """cf (8,) float32 and ci (2,) int32 from args first, first + 1."""
    cf = carray(data(frame, FRAME_ARGS, first), (8,), np.float32)
    return cf, carray(data(frame, FRAME_ARGS, first + 1), (2,), np.int32)


@njit(inline="always")
def _density_args(frame):
    xyz = _matrix(frame, FRAME_ARGS, 0)
    index, valid, sp_j = _lists(frame, 1)
    pos, sp_i = _own(frame, 4)
    rhor = _matrix(frame, FRAME_ARGS, 6)
    cf, ci = _consts(frame, 7)
    return xyz, index, valid, sp_j, pos, sp_i, rhor, cf, ci, _vector(frame, FRAME_RETS, 0)


@njit(inline="always")
def _force_args(frame):
    xyz, fpr = _matrix(frame, FRAME_ARGS, 0), _vector(frame, FRAME_ARGS, 1)
    index, valid, sp_j = _lists(frame, 2)
    pos, sp_i = _own(frame, 5)
    fp_i = _vector(frame, FRAME_ARGS, 7)
    tables = (_matrix(frame, FRAME_ARGS, 8), _matrix(frame, FRAME_ARGS, 9))
    cf, ci = _consts(frame, 10)
    n = pos.shape[0]
    out = (
        carray(data(frame, FRAME_RETS, 0), (n, 3), np.float32),
        _vector(frame, FRAME_RETS, 1),
        _vector(frame, FRAME_RETS, 2),
    )
    return xyz, fpr, index, valid, sp_j, pos, sp_i, fp_i, tables, cf, ci, out


@njit(inline="always")
def _ints(frame, i):
    """The i-th int32 argument of one dimension."""
    d = dims(frame, FRAME_ARGS, i, 1)
    return carray(data(frame, FRAME_ARGS, i), (d[0],), np.int32)


@njit(inline="always")
def _density_half_args(frame):
    xyz, ids = _matrix(frame, FRAME_ARGS, 0), _ints(frame, 1)
    index, valid, sp_j = _lists(frame, 2)
    pos, sp_i = _own(frame, 5)
    own, rhor = _ints(frame, 7), _matrix(frame, FRAME_ARGS, 8)
    cf, ci = _consts(frame, 9)
    d = dims(frame, FRAME_RETS, 1, 2)
    out = (
        _vector(frame, FRAME_RETS, 0),
        carray(data(frame, FRAME_RETS, 1), (d[0], d[1]), np.int32),
        carray(data(frame, FRAME_RETS, 2), (d[0],), np.int32),
    )
    return xyz, ids, index, valid, sp_j, pos, sp_i, own, rhor, cf, ci, out


@njit(inline="always")
def _force_half_args(frame):
    xyz, fpr, ids = _matrix(frame, FRAME_ARGS, 0), _vector(frame, FRAME_ARGS, 1), _ints(frame, 2)
    d = dims(frame, FRAME_ARGS, 3, 2)
    cut = carray(data(frame, FRAME_ARGS, 3), (d[0], d[1]), np.int32)
    ncut = _ints(frame, 4)
    pos, sp_i = _own(frame, 5)
    own, fp_i = _ints(frame, 7), _vector(frame, FRAME_ARGS, 8)
    tables = (_matrix(frame, FRAME_ARGS, 9), _matrix(frame, FRAME_ARGS, 10))
    cf, ci = _consts(frame, 11)
    nb = dims(frame, FRAME_RETS, 0, 2)[0]
    out = (
        carray(data(frame, FRAME_RETS, 0), (nb, 3), np.float32),
        _vector(frame, FRAME_RETS, 1),
        _vector(frame, FRAME_RETS, 2),
    )
    return xyz, fpr, ids, cut, ncut, pos, sp_i, own, fp_i, tables, cf, ci, out


density_full = njit(**OPTS)(_density)
force_full = njit(**OPTS)(_force)


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
