"""The numba side of `stencil.pe_dots`: each PE's fp32 sums over its Z column of one or two
products (the local half of BiCGSTAB's dot products), as XLA FFI handlers (`handler(name)`,
name `dots1` or `dots2`, compiled or loaded from numba's cache on first use).

A handler reads XLA's call frame as `wse_hpc.numba_ffi` says: arguments the fp32 fields
(PEs, nz) of each pair in turn (a, b for `dots1`; a, b, c, d for `dots2`), result (PEs, k):
out[i, 0] = sum_z a[i, z] b[i, z] (and out[i, 1] = sum_z c[i, z] d[i, z]), each sum in
fp32 over the PE's column, on the calling thread (a mesh of several devices already runs
one block per thread).
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit

from wse_hpc.numba_ffi import FRAME_ARGS as _FRAME_ARGS
from wse_hpc.numba_ffi import FRAME_RETS as _FRAME_RETS
from wse_hpc.numba_ffi import OPTS as _OPTS
from wse_hpc.numba_ffi import addr as _addr
from wse_hpc.numba_ffi import data as _data
from wse_hpc.numba_ffi import dims as _dims
from wse_hpc.numba_ffi import handlers as _handlers
from wse_hpc.numba_ffi import metadata_query as _metadata_query
from wse_hpc.numba_ffi import ptr as _ptr


@njit(inline="always")
def _field(frame, i):
    d = _dims(frame, _FRAME_ARGS, i, 2)
    return carray(_data(frame, _FRAME_ARGS, i), (d[0], d[1]), np.float32)


@njit(inline="always")
def _out(frame):
    d = _dims(frame, _FRAME_RETS, 0, 2)
    return carray(_data(frame, _FRAME_RETS, 0), (d[0], d[1]), np.float32)


@njit(**_OPTS)
def dots1(a, b, out):
    for i in range(a.shape[0]):
        s = np.float32(0)
        for z in range(a.shape[1]):
            s += a[i, z] * b[i, z]
        out[i, 0] = s


@njit(**_OPTS)
def dots2(a, b, c, d, out):
    for i in range(a.shape[0]):
        s = np.float32(0)
        u = np.float32(0)
        for z in range(a.shape[1]):
            s += a[i, z] * b[i, z]
            u += c[i, z] * d[i, z]
        out[i, 0] = s
        out[i, 1] = u


def dots1_ffi(frame_p):
    frame = _addr(frame_p)
    if not _metadata_query(frame):
        dots1(_field(frame, 0), _field(frame, 1), _out(frame))
    return _ptr(0)


def dots2_ffi(frame_p):
    frame = _addr(frame_p)
    if not _metadata_query(frame):
        dots2(_field(frame, 0), _field(frame, 1), _field(frame, 2), _field(frame, 3), _out(frame))
    return _ptr(0)


handler = _handlers({"dots1": dots1_ffi, "dots2": dots2_ffi})
