"""The numba side of `sdpa_cpu`: fp32 masked attention forward and backward on one thread,
and their XLA FFI handlers (`handler("sdpa_fwd")`, `handler("sdpa_bwd")`, compiled or
loaded from numba's cache when a CPU step first needs them).

Layouts are `layer._sdpa`'s: q [b, KV, G, t, hd], k and v [b, KV, s, hd], mask [b, t, s]
(bool), out [b, KV, G, t, hd], probs [b, KV, G, t, s] (the softmax, zero where masked; a
row with no kept key mixes all keys evenly, as the XLA path's finite -1e30 does). hd is a
multiple of 4. Per (batch, kv head) the keys and values are transposed once ([hd, s], in L1
at s = 128, hd = 32); query rows go in blocks of R = 4, each block against the keys up to its
last kept one (a causal mask skips the upper triangle, rounded up to 16 keys so that no
scalar remainder loop runs). The products are written so that LLVM vectorises them over the
keys with register accumulators (`_rows_times_t`: scores and dP; `_rows_dot`: P V and dS K,
4 head dims at a time; `_acc_outer`: dK^T and dV^T); a row's max runs in 8 independent
chains (`_row_max`: LLVM vectorises no float max reduction); exp is a polynomial LLVM vectorises
(`_exp_row`; glibc's expf is a scalar call), flushed to 0 below 2^-125: the masked entries'
exp(-1e30) would otherwise be denormals, ~4x slower for the whole forward.
The backward needs no mask: dS = P (dP - rowsum(dO O)) is 0 where P is, except on a row
with no kept key, whose dS is 0 as the XLA path's `where` makes it.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.extending import intrinsic
from wse_core.host.numba_ffi import (
    FRAME_ARGS,
    FRAME_RETS,
    addr,
    data,
    dims,
    handlers,
    metadata_query,
    ptr,
)

__all__ = ["R", "handler", "sdpa_bwd", "sdpa_fwd"]

OPTS = {"fastmath": True, "boundscheck": False, "cache": True, "error_model": "numpy"}
R = 4  # query rows per block: the helpers below are written out for 4 rows
_MASKED = np.float32(-1e30)
_LOG2E = np.float32(1.4426950408889634)
_DENSE, _HOLES, _EMPTY = 1, 0, -1  # a row's keys up to its last kept one: all kept, some, none


@intrinsic
def _from_bits(typingctx, i):
    """The float32 whose bits are the int32 i."""

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@njit(**OPTS)
def _exp_row(r, m):
    """r[:] = exp(r - m) (r - m <= 0), vectorised: 2^n * 2^f, f in [-1/2, 1/2] by Cephes'
    exp2f polynomial (rel. error ~2e-7), 0 below 2^-125; returns the sum."""
    s = np.float32(0.0)
    for j in range(r.shape[0]):
        y = max((r[j] - m) * _LOG2E, np.float32(-125.0))
        e = np.floor(y + np.float32(0.5))
        f = y - e
        p = np.float32(1.535336188319500e-4)
        p = p * f + np.float32(1.339887440266574e-3)
        p = p * f + np.float32(9.618437357674640e-3)
        p = p * f + np.float32(5.550332471162809e-2)
        p = p * f + np.float32(2.402264791363012e-1)
        p = p * f + np.float32(6.931472028550421e-1)
        p = p * f + np.float32(1.0)
        x = (
            p * _from_bits((np.int32(e) + np.int32(127)) << 23)
            if y > np.float32(-125.0)
            else np.float32(0.0)
        )
        r[j] = x
        s += x
    return s


@njit(**OPTS)
def _row_kinds(mask, hi, kind):
    """hi[b, i]: one past row i's last kept key (s where none is); kind[b, i]: _DENSE when
    every key before hi is kept, _HOLES when some is not, _EMPTY when none is."""
    nb, t, s = mask.shape
    for b in range(nb):
        for i in range(t):
            z, kept = 0, 0
            for j in range(s):
                if mask[b, i, j]:
                    z = j + 1
                    kept += 1
            hi[b, i] = z if z > 0 else s
            kind[b, i] = _EMPTY if z == 0 else (_DENSE if kept == z else _HOLES)


@njit(**OPTS)
def _block(hi, b, i0, t, s):
    """The keys a block of rows from i0 reads: up to its last kept one, rounded up to 16."""
    n = 0
    for r in range(R):
        n = max(n, hi[b, min(i0 + r, t - 1)])
    return min(s, (n + 15) // 16 * 16)


@njit(**OPTS)
def _row_max(r, n):
    """max(_MASKED, r[:n]) in 8 independent chains: LLVM vectorises no float max reduction
    here (one chain: 0.60 ns an element, these: 0.26; the forward at [16, 4, 128, 32]
    causal 3.06-3.12 -> 2.74-2.75 ms, one core of the 2-core Xeon VM, 2026-12-04)."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = _MASKED
    j = 0
    while j + 8 <= n:
        a0, a1, a2, a3 = max(a0, r[j]), max(a1, r[j + 1]), max(a2, r[j + 2]), max(a3, r[j + 3])
        a4, a5, a6, a7 = max(a4, r[j + 4]), max(a5, r[j + 5]), max(a6, r[j + 6]), max(a7, r[j + 7])
        j += 8
    m = max(max(max(a0, a1), max(a2, a3)), max(max(a4, a5), max(a6, a7)))
    for jj in range(j, n):
        m = max(m, r[jj])
    return m


@njit(**OPTS)
def _softmax_row(x, mi, kind, hr):
    """x[:] = exp(x - max) over the kept keys (mask row mi), 0 elsewhere; 1 / the sum."""
    n = x.shape[0]
    if kind == _DENSE:
        tot = _exp_row(x[:hr], _row_max(x, hr))
        for j in range(hr, n):
            x[j] = 0.0
    else:
        for j in range(n):
            x[j] = x[j] if mi[j] else _MASKED
        tot = _exp_row(x, _row_max(x, n))
    return np.float32(1.0) / tot


@njit(**OPTS)
def _transposed(kh, vh, kt, vt):
    """kt, vt [hd, s] = kh, vh [s, hd] transposed."""
    for j in range(kh.shape[0]):
        for d in range(kh.shape[1]):
            kt[d, j] = kh[j, d]
            vt[d, j] = vh[j, d]


@njit(**OPTS)
def _rows_times_t(a, bt, n, out):
    """out[r, j] = sum_d a[r, d] * bt[d, j] for the R rows of a, j < n."""
    o0, o1, o2, o3 = out[0], out[1], out[2], out[3]
    for j in range(n):
        o0[j] = 0.0
        o1[j] = 0.0
        o2[j] = 0.0
        o3[j] = 0.0
    for d in range(0, a.shape[1], 4):
        b0, b1, b2, b3 = bt[d], bt[d + 1], bt[d + 2], bt[d + 3]
        a00, a01, a02, a03 = a[0, d], a[0, d + 1], a[0, d + 2], a[0, d + 3]
        a10, a11, a12, a13 = a[1, d], a[1, d + 1], a[1, d + 2], a[1, d + 3]
        a20, a21, a22, a23 = a[2, d], a[2, d + 1], a[2, d + 2], a[2, d + 3]
        a30, a31, a32, a33 = a[3, d], a[3, d + 1], a[3, d + 2], a[3, d + 3]
        for j in range(n):
            y0, y1, y2, y3 = b0[j], b1[j], b2[j], b3[j]
            o0[j] += a00 * y0 + a01 * y1 + a02 * y2 + a03 * y3
            o1[j] += a10 * y0 + a11 * y1 + a12 * y2 + a13 * y3
            o2[j] += a20 * y0 + a21 * y1 + a22 * y2 + a23 * y3
            o3[j] += a30 * y0 + a31 * y1 + a32 * y2 + a33 * y3


@njit(**OPTS)
def _rows_dot(p, bt, n, out):
    """out[r, d] = sum_{j < n} p[r, j] * bt[d, j]."""
    p0, p1, p2, p3 = p[0], p[1], p[2], p[3]
    for d in range(0, bt.shape[0], 4):
        b0, b1, b2, b3 = bt[d], bt[d + 1], bt[d + 2], bt[d + 3]
        x00, x01, x02, x03 = np.float32(0.0), np.float32(0.0), np.float32(0.0), np.float32(0.0)
        x10, x11, x12, x13 = np.float32(0.0), np.float32(0.0), np.float32(0.0), np.float32(0.0)
        x20, x21, x22, x23 = np.float32(0.0), np.float32(0.0), np.float32(0.0), np.float32(0.0)
        x30, x31, x32, x33 = np.float32(0.0), np.float32(0.0), np.float32(0.0), np.float32(0.0)
        for j in range(n):
            y0, y1, y2, y3 = b0[j], b1[j], b2[j], b3[j]
            z = p0[j]
            x00 += z * y0
            x01 += z * y1
            x02 += z * y2
            x03 += z * y3
            z = p1[j]
            x10 += z * y0
            x11 += z * y1
            x12 += z * y2
            x13 += z * y3
            z = p2[j]
            x20 += z * y0
            x21 += z * y1
            x22 += z * y2
            x23 += z * y3
            z = p3[j]
            x30 += z * y0
            x31 += z * y1
            x32 += z * y2
            x33 += z * y3
        out[0, d], out[0, d + 1], out[0, d + 2], out[0, d + 3] = x00, x01, x02, x03
        out[1, d], out[1, d + 1], out[1, d + 2], out[1, d + 3] = x10, x11, x12, x13
        out[2, d], out[2, d + 1], out[2, d + 2], out[2, d + 3] = x20, x21, x22, x23
        out[3, d], out[3, d + 1], out[3, d + 2], out[3, d + 3] = x30, x31, x32, x33


@njit(**OPTS)
def _acc_outer(ct, p, a, n):
    """ct[d, j] += sum_r p[r, j] * a[r, d] for j < n."""
    p0, p1, p2, p3 = p[0], p[1], p[2], p[3]
    for d in range(0, a.shape[1], 4):
        c0, c1, c2, c3 = ct[d], ct[d + 1], ct[d + 2], ct[d + 3]
        a00, a01, a02, a03 = a[0, d], a[0, d + 1], a[0, d + 2], a[0, d + 3]
        a10, a11, a12, a13 = a[1, d], a[1, d + 1], a[1, d + 2], a[1, d + 3]
        a20, a21, a22, a23 = a[2, d], a[2, d + 1], a[2, d + 2], a[2, d + 3]
        a30, a31, a32, a33 = a[3, d], a[3, d + 1], a[3, d + 2], a[3, d + 3]
        for j in range(n):
            x0, x1, x2, x3 = p0[j], p1[j], p2[j], p3[j]
            c0[j] += x0 * a00 + x1 * a10 + x2 * a20 + x3 * a30
            c1[j] += x0 * a01 + x1 * a11 + x2 * a21 + x3 * a31
            c2[j] += x0 * a02 + x1 * a12 + x2 * a22 + x3 * a32
            c3[j] += x0 * a03 + x1 * a13 + x2 * a23 + x3 * a33


@njit(**OPTS)
def sdpa_fwd(q, k, v, mask, out, probs):
    """out, probs = softmax(q k^T / sqrt(hd), masked) v and the softmax (module doc)."""
    nb, nkv, ng, t, hd = q.shape
    s = k.shape[2]
    scale = np.float32(1.0 / math.sqrt(hd))
    hi = np.empty((nb, t), np.int64)
    kind = np.empty((nb, t), np.int8)
    _row_kinds(mask, hi, kind)
    kt, vt = np.empty((hd, s), np.float32), np.empty((hd, s), np.float32)
    qs, sc = np.empty((R, hd), np.float32), np.empty((R, s), np.float32)
    ob, inv = np.empty((R, hd), np.float32), np.empty(R, np.float32)
    for b in range(nb):
        for h in range(nkv):
            _transposed(k[b, h], v[b, h], kt, vt)
            for g in range(ng):
                qh, oh, ph = q[b, h, g], out[b, h, g], probs[b, h, g]
                for i0 in range(0, t, R):
                    n = _block(hi, b, i0, t, s)
                    for r in range(R):
                        i = min(i0 + r, t - 1)
                        for d in range(hd):
                            qs[r, d] = qh[i, d] * scale
                    _rows_times_t(qs, kt, n, sc)
                    for r in range(R):
                        i = min(i0 + r, t - 1)
                        x = sc[r, :n]
                        inv[r] = _softmax_row(x, mask[b, i, :n], kind[b, i], hi[b, i])
                        if i0 + r < t:
                            pr, c = ph[i0 + r], inv[r]
                            for j in range(n):
                                pr[j] = x[j] * c
                            for j in range(n, s):
                                pr[j] = 0.0
                    _rows_dot(sc, vt, n, ob)  # unnormalised: times inv below
                    for r in range(min(R, t - i0)):
                        for d in range(hd):
                            oh[i0 + r, d] = ob[r, d] * inv[r]


# flat (10 > 8): the XLA FFI call's 7 inputs and 3 outputs one for one (`_bwd_args`)
@njit(**OPTS)
def sdpa_bwd(q, k, v, mask, probs, out, d_out, dq, dk, dv):
    """dq, dk, dv of `sdpa_fwd`'s out against d_out (module doc)."""
    nb, nkv, ng, t, hd = q.shape
    s = k.shape[2]
    scale = np.float32(1.0 / math.sqrt(hd))
    hi = np.empty((nb, t), np.int64)
    kind = np.empty((nb, t), np.int8)
    _row_kinds(mask, hi, kind)
    kt, vt = np.empty((hd, s), np.float32), np.empty((hd, s), np.float32)
    dkt, dvt = np.empty((hd, s), np.float32), np.empty((hd, s), np.float32)
    qb, dob = np.empty((R, hd), np.float32), np.empty((R, hd), np.float32)
    dqb = np.empty((R, hd), np.float32)
    pb, ds = np.empty((R, s), np.float32), np.empty((R, s), np.float32)
    delta = np.empty(R, np.float32)
    for b in range(nb):
        for h in range(nkv):
            _transposed(k[b, h], v[b, h], kt, vt)
            dkt[:] = 0.0
            dvt[:] = 0.0
            for g in range(ng):
                qh, oh, ph = q[b, h, g], out[b, h, g], probs[b, h, g]
                doh, dqh = d_out[b, h, g], dq[b, h, g]
                for i0 in range(0, t, R):
                    n = _block(hi, b, i0, t, s)
                    for r in range(R):  # a block's rows past t are zeros
                        i = min(i0 + r, t - 1)
                        live = np.float32(1.0 if i0 + r < t else 0.0)
                        z = np.float32(0.0)
                        for d in range(hd):
                            qb[r, d] = qh[i, d]
                            y = doh[i, d] * live
                            dob[r, d] = y
                            z += y * oh[i, d]
                        delta[r] = z
                        for j in range(n):
                            pb[r, j] = ph[i, j] * live
                    _rows_times_t(dob, vt, n, ds)
                    for r in range(R):
                        x, pr, dr = ds[r, :n], pb[r, :n], delta[r]
                        if kind[b, min(i0 + r, t - 1)] == _EMPTY:
                            x[:] = 0.0
                        else:
                            for j in range(n):
                                x[j] = pr[j] * (x[j] - dr) * scale
                    _rows_dot(ds, kt, n, dqb)
                    for r in range(min(R, t - i0)):
                        for d in range(hd):
                            dqh[i0 + r, d] = dqb[r, d]
                    _acc_outer(dkt, ds, qb, n)
                    _acc_outer(dvt, pb, dob, n)
            _transposed(dkt, dvt, dk[b, h], dv[b, h])  # not `dk[b, h] = dkt.T`: 3.3 s to compile


@njit(inline="always")
def _fwd_args(frame):
    a, r = FRAME_ARGS, FRAME_RETS
    dq, dk, dm = dims(frame, a, 0, 5), dims(frame, a, 1, 4), dims(frame, a, 3, 3)
    dp = dims(frame, r, 1, 5)
    f32 = np.float32
    return (carray(data(frame, a, 0), dq, f32), carray(data(frame, a, 1), dk, f32),
            carray(data(frame, a, 2), dk, f32), carray(data(frame, a, 3), dm, np.bool_),
            carray(data(frame, r, 0), dq, f32), carray(data(frame, r, 1), dp, f32))  # fmt: skip


@njit(inline="always")
def _bwd_args(frame):
    a, r = FRAME_ARGS, FRAME_RETS
    dq, dk, dm = dims(frame, a, 0, 5), dims(frame, a, 1, 4), dims(frame, a, 3, 3)
    dp = dims(frame, a, 4, 5)
    f32 = np.float32
    return (carray(data(frame, a, 0), dq, f32), carray(data(frame, a, 1), dk, f32),
            carray(data(frame, a, 2), dk, f32), carray(data(frame, a, 3), dm, np.bool_),
            carray(data(frame, a, 4), dp, f32), carray(data(frame, a, 5), dq, f32),
            carray(data(frame, a, 6), dq, f32), carray(data(frame, r, 0), dq, f32),
            carray(data(frame, r, 1), dk, f32), carray(data(frame, r, 2), dk, f32))  # fmt: skip


def sdpa_fwd_ffi(frame_p):
    frame = addr(frame_p)
    if not metadata_query(frame):
        sdpa_fwd(*_fwd_args(frame))
    return ptr(0)


def sdpa_bwd_ffi(frame_p):
    frame = addr(frame_p)
    if not metadata_query(frame):
        sdpa_bwd(*_bwd_args(frame))
    return ptr(0)


handler = handlers({"sdpa_fwd": sdpa_fwd_ffi, "sdpa_bwd": sdpa_bwd_ffi})
