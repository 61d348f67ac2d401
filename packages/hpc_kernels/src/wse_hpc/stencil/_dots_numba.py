"""The numba side of `stencil.pe_dots`: each PE's fp32 sums over its Z column of one or two
products (the local half of BiCGSTAB's dot products), as XLA FFI handlers (`handler(name)`,
name `dots1` or `dots2` for fp32 fields, `dots1_f16` or `dots2_f16` for fp16 ones, compiled
or loaded from numba's cache on first use).

A handler reads XLA's call frame as `wse_core.host.numba_ffi` says: arguments the fields (PEs,
nz) of each pair in turn (a, b for `dots1`; a, b, c, d for `dots2`), result (PEs, k) fp32:
out[i, 0] = sum_z a[i, z] b[i, z] (and out[i, 1] = sum_z c[i, z] d[i, z]), each sum in
fp32 over the PE's column, on the calling thread (a mesh of several devices already runs
one block per thread). The `_f16` handlers read the fp16 fields as their bits (numba has no
fp16 type) and widen each element to fp32 in the loop (`widen`: LLVM's exact `fpext half`,
F16C's vcvtph2ps when vectorized): the same fp32 products as widening the fields first,
without writing an fp32 copy of each field (XLA's convert was ~60 us a field at 48^3, five
a mixed iteration).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.extending import intrinsic
from wse_core.host.numba_ffi import FRAME_ARGS as _FRAME_ARGS
from wse_core.host.numba_ffi import FRAME_RETS as _FRAME_RETS
from wse_core.host.numba_ffi import OPTS as _OPTS
from wse_core.host.numba_ffi import addr as _addr
from wse_core.host.numba_ffi import data as _data
from wse_core.host.numba_ffi import dims as _dims
from wse_core.host.numba_ffi import handlers as _handlers
from wse_core.host.numba_ffi import metadata_query as _metadata_query
from wse_core.host.numba_ffi import ptr as _ptr


@intrinsic
def widen(typingctx, x):
    """An element as fp32: an fp32 as it is, fp16 bits (uint16) widened exactly."""
    if x == types.float32:
        return types.float32(x), lambda context, builder, sig, args: args[0]
    if x == types.uint16:

        def codegen(context, builder, sig, args):
            return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

        return types.float32(x), codegen
    return None


@njit(inline="always")
def _field(frame, i):
    d = _dims(frame, _FRAME_ARGS, i, 2)
    return carray(_data(frame, _FRAME_ARGS, i), (d[0], d[1]), np.float32)


@njit(inline="always")
def _field16(frame, i):
    d = _dims(frame, _FRAME_ARGS, i, 2)
    return carray(_data(frame, _FRAME_ARGS, i), (d[0], d[1]), np.uint16)


@njit(inline="always")
def _out(frame):
    d = _dims(frame, _FRAME_RETS, 0, 2)
    return carray(_data(frame, _FRAME_RETS, 0), (d[0], d[1]), np.float32)


@njit(**_OPTS)
def dots1(a, b, out):
    for i in range(a.shape[0]):
        s = np.float32(0)
        for z in range(a.shape[1]):
            s += widen(a[i, z]) * widen(b[i, z])
        out[i, 0] = s


@njit(**_OPTS)
def dots2(a, b, c, d, out):
    for i in range(a.shape[0]):
        s = np.float32(0)
        u = np.float32(0)
        for z in range(a.shape[1]):
            s += widen(a[i, z]) * widen(b[i, z])
            u += widen(c[i, z]) * widen(d[i, z])
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


def dots1_f16_ffi(frame_p):
    frame = _addr(frame_p)
    if not _metadata_query(frame):
        dots1(_field16(frame, 0), _field16(frame, 1), _out(frame))
    return _ptr(0)


def dots2_f16_ffi(frame_p):
    frame = _addr(frame_p)
    if not _metadata_query(frame):
        f = _field16
        dots2(f(frame, 0), f(frame, 1), f(frame, 2), f(frame, 3), _out(frame))
    return _ptr(0)


handler = _handlers(
    {
        "dots1": dots1_ffi,
        "dots2": dots2_ffi,
        "dots1_f16": dots1_f16_ffi,
        "dots2_f16": dots2_f16_ffi,
    }
)
