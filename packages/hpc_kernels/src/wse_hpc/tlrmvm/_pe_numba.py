"""The numba side of `pe_kernels`: the kernels and their XLA FFI handlers (imported, and so
compiled or loaded from numba's cache, only when a CPU product first needs them).

A handler receives XLA's `XLA_FFI_CallFrame*` (jaxlib/include/xla/ffi/api/c_api.h, API
0.3) and reads it as 8-byte words: 1 extension_start, 9 args.args, 14 rets.rets (arrays of
`XLA_FFI_Buffer*`, whose words 3 and 5 are data and dims). XLA first calls a handler with a
metadata extension (word 1 of the extension is its type, word 3 the `XLA_FFI_Metadata*`) to
learn its API version (int32 words 6, 7) and traits (8). The kernels are compiled twice: on
the cores (prange) and on the calling thread (the same code with parallel=False).
"""

from __future__ import annotations

import types as types_module

import numpy as np
from numba import carray, cfunc, njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.ufunc.parallel import _launch_threads

_launch_threads()  # the parallel kernels' runtime, before any handler links against it

_FRAME_EXT, _FRAME_ARGS, _FRAME_RETS = 1, 9, 14
_BUF_DATA, _BUF_DIMS = 3, 5
_EXT_METADATA, _API_MAJOR, _API_MINOR = 1, 0, 3
_SIG = types.voidptr(types.voidptr)
_OPTS = {"fastmath": True, "boundscheck": False, "cache": True}


@intrinsic
def _ptr(typingctx, addr):
    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(types.int64), codegen


@intrinsic
def _addr(typingctx, p):
    def codegen(context, builder, sig, args):
        return builder.ptrtoint(args[0], cgutils.intp_t)

    return types.int64(types.voidptr), codegen


@njit(inline="always")
def _words(addr, n):
    return carray(_ptr(addr), (n,), np.int64)


@njit(inline="always")
def _metadata_query(frame):
    """True (and the answer written) when XLA asks for the handler's API version."""
    ext = _words(frame, 16)[_FRAME_EXT]
    if ext == 0:
        return False
    e = _words(ext, 4)
    if (e[1] & 0xFFFFFFFF) != _EXT_METADATA:
        return False
    md = carray(_ptr(e[3]), (12,), np.int32)
    md[6] = _API_MAJOR
    md[7] = _API_MINOR
    md[8] = 0
    return True


@njit(inline="always")
def _buffer(frame, slot, i):
    """The words of the i-th `XLA_FFI_Buffer` of the frame's args or rets (`slot`)."""
    return _words(_words(_words(frame, 16)[slot], i + 1)[i], 6)


@njit(inline="always")
def _data(frame, slot, i):
    return _ptr(_buffer(frame, slot, i)[_BUF_DATA])


@njit(inline="always")
def _dims(frame, slot, i, rank):
    return _words(_buffer(frame, slot, i)[_BUF_DIMS], rank)


@njit(inline="always")
def _rows_dot_args(frame):
    da, de = _dims(frame, _FRAME_ARGS, 0, 2), _dims(frame, _FRAME_ARGS, 1, 4)
    ds, do = _dims(frame, _FRAME_ARGS, 2, 1), _dims(frame, _FRAME_RETS, 0, 3)
    a = carray(_data(frame, _FRAME_ARGS, 0), (da[0], da[1]), np.float32)
    e = carray(_data(frame, _FRAME_ARGS, 1), (de[0], de[1], de[2], de[3]), np.float32)
    sel = carray(_data(frame, _FRAME_ARGS, 2), (ds[0],), np.int32)
    out = carray(_data(frame, _FRAME_RETS, 0), (do[0], do[1], do[2]), np.float32)
    return a, e, sel, out


@njit(inline="always")
def _sum_rows_args(frame):
    da, dt = _dims(frame, _FRAME_ARGS, 0, 3), _dims(frame, _FRAME_ARGS, 1, 4)
    dw, do = _dims(frame, _FRAME_ARGS, 2, 2), _dims(frame, _FRAME_RETS, 0, 5)
    a = carray(_data(frame, _FRAME_ARGS, 0), (da[0], da[1], da[2]), np.float32)
    t = carray(_data(frame, _FRAME_ARGS, 1), (dt[0], dt[1], dt[2], dt[3]), np.float32)
    win = carray(_data(frame, _FRAME_ARGS, 2), (dw[0], dw[1]), np.int32)
    sg = carray(_data(frame, _FRAME_ARGS, 3), (1,), np.float32)[0]
    out = carray(_data(frame, _FRAME_RETS, 0), (do[0], do[1], do[2], do[3], do[4]), np.float32)
    return a, t, win, sg, out


def _rows_dot(a, e, sel, out):
    """out[r, c, b] = a[r] . e[sel[r], b, c]: two rows per pass, both dots of a complex row
    in it (four independent sums: 0.71 vs 0.92 ms for 40 MB on two cores, one row a pass)."""
    R, K = a.shape
    B, C = e.shape[1], e.shape[2]
    for rr in prange((R + 1) // 2):
        r = 2 * rr
        q = min(r + 1, R - 1)  # the last row twice when R is odd
        g, h = sel[r], sel[q]
        for bb in range(B):
            if C == 2:
                s0 = np.float32(0)
                s1 = np.float32(0)
                s2 = np.float32(0)
                s3 = np.float32(0)
                for k in range(K):
                    s0 += a[r, k] * e[g, bb, 0, k]
                    s1 += a[r, k] * e[g, bb, 1, k]
                    s2 += a[q, k] * e[h, bb, 0, k]
                    s3 += a[q, k] * e[h, bb, 1, k]
                out[r, 0, bb] = s0
                out[r, 1, bb] = s1
                out[q, 0, bb] = s2
                out[q, 1, bb] = s3
            else:
                s0 = np.float32(0)
                s2 = np.float32(0)
                for k in range(K):
                    s0 += a[r, k] * e[g, bb, 0, k]
                    s2 += a[q, k] * e[h, bb, 0, k]
                out[r, 0, bb] = s0
                out[q, 0, bb] = s2


def _sum_rows(a, t, win, sg, out):
    """out[g, win[g, r]] += t[g, r] * row (g, r); complex rows interleaved (conj when sg < 0),
    the output planar (re, im): strided reads vectorize, interleaved writes do not."""
    BR, RW, K = a.shape
    C, B = t.shape[2], t.shape[3]
    H = K // C
    for g in prange(BR):
        out[g] = 0
        for r in range(RW):
            p = win[g, r]
            for bb in range(B):
                if C == 2:
                    tr = t[g, r, 0, bb]
                    ti = t[g, r, 1, bb]
                    for k in range(H):
                        ar = a[g, r, 2 * k]
                        ai = a[g, r, 2 * k + 1]
                        out[g, p, 0, bb, k] += tr * ar - sg * ti * ai
                        out[g, p, 1, bb, k] += sg * tr * ai + ti * ar
                else:
                    tr = t[g, r, 0, bb]
                    for k in range(H):
                        out[g, p, 0, bb, k] += tr * a[g, r, k]


def _named(fn, suffix: str):
    """A copy of fn under its own name: numba's on-disk cache is keyed by the function's
    name and line, so the two compilations of one body would otherwise share (and load)
    one entry."""
    out = types_module.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + suffix)
    out.__qualname__ = fn.__qualname__ + suffix
    return out


rows_dot_cores = njit(parallel=True, **_OPTS)(_named(_rows_dot, "_cores"))
rows_dot_thread = njit(parallel=False, **_OPTS)(_named(_rows_dot, "_thread"))
sum_rows_cores = njit(parallel=True, **_OPTS)(_named(_sum_rows, "_cores"))
sum_rows_thread = njit(parallel=False, **_OPTS)(_named(_sum_rows, "_thread"))


@cfunc(_SIG, cache=True)
def rows_dot_cores_ffi(frame_p):
    frame = _addr(frame_p)
    if not _metadata_query(frame):
        rows_dot_cores(*_rows_dot_args(frame))
    return _ptr(0)


@cfunc(_SIG, cache=True)
def rows_dot_thread_ffi(frame_p):
    frame = _addr(frame_p)
    if not _metadata_query(frame):
        rows_dot_thread(*_rows_dot_args(frame))
    return _ptr(0)


@cfunc(_SIG, cache=True)
def sum_rows_cores_ffi(frame_p):
    frame = _addr(frame_p)
    if not _metadata_query(frame):
        sum_rows_cores(*_sum_rows_args(frame))
    return _ptr(0)


@cfunc(_SIG, cache=True)
def sum_rows_thread_ffi(frame_p):
    frame = _addr(frame_p)
    if not _metadata_query(frame):
        sum_rows_thread(*_sum_rows_args(frame))
    return _ptr(0)


HANDLERS = {
    "rows_dot": {True: rows_dot_cores_ffi, False: rows_dot_thread_ffi},
    "sum_rows": {True: sum_rows_cores_ffi, False: sum_rows_thread_ffi},
}
