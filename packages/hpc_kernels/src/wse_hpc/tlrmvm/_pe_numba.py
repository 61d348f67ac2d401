"""The numba side of `pe_kernels`: the kernels and their XLA FFI handlers (`handler(name)`,
name `rows_dot_cores`, `rows_dot_thread`, `sum_rows_cores`, `sum_rows_thread` or
`gather_rows_thread`: each compiled or loaded from numba's cache only when a CPU product
first needs it).

A handler reads XLA's call frame as `wse_core.host.numba_ffi` says. The kernels are compiled
twice: on the cores (prange) and on the calling thread (the same code with parallel=False).
`rows_dot` deals its rows in fixed chunks that the threads claim from a shared counter
(`_claim`) as they get to them: a thread the OS runs late (the machine is shared; the
threads sleep between regions, `pe_ffi`) leaves its chunks to the others instead of holding
the product up for a static half (each row's dot is the same whoever computes it; on the
2-core VM at load 8, 2026-12-02, no better or worse than the static split by min and median
of 60 calls). `sum_rows` gives each thread a run of whole block rows holding an equal share
of the floats it reads (`_parts`). The block rows are the PE rows, whose loads are far from
equal with one tile column per group (n = 9801: 304-692 U rows each, the heaviest first by
`grouped_plan.deal_groups`), so an even split by count gave one of two threads 58% of the
floats; split by floats phase 3 alone takes 0.71-0.72 ms against 0.78-0.81 (p10, median of
200 calls, 2-core VM, 2026-12-03), the sums bit for bit the same (a block row is summed by one
thread, in row order, whichever). Claiming block rows from a counter changed the sums'
rounding once (the vectorized loop compiled differently) and ran no faster at load 2 in three
process pairs. Both kernels prefetch the stored row PREFETCH_ROWS ahead of the one they
read (`_prefetch_row`): the hardware prefetcher restarts at each 4 KB page (two rows), and
the bases come from memory, not cache, when other work shares the machine.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, config, njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic
from wse_core.host.numba_ffi import FRAME_ARGS as _FRAME_ARGS
from wse_core.host.numba_ffi import FRAME_RETS as _FRAME_RETS
from wse_core.host.numba_ffi import OPTS as _OPTS
from wse_core.host.numba_ffi import addr as _addr
from wse_core.host.numba_ffi import data as _data
from wse_core.host.numba_ffi import dims as _dims
from wse_core.host.numba_ffi import handlers as _handlers
from wse_core.host.numba_ffi import metadata_query as _metadata_query
from wse_core.host.numba_ffi import named as _named
from wse_core.host.numba_ffi import ptr as _ptr


@njit(inline="always")
def _rows_dot_args(frame):
    da, de = _dims(frame, _FRAME_ARGS, 0, 2), _dims(frame, _FRAME_ARGS, 1, 4)
    ds, do = _dims(frame, _FRAME_ARGS, 2, 1), _dims(frame, _FRAME_RETS, 0, 3)
    a = carray(_data(frame, _FRAME_ARGS, 0), (da[0], da[1]), np.float32)
    e = carray(_data(frame, _FRAME_ARGS, 1), (de[0], de[1], de[2], de[3]), np.float32)
    sel = carray(_data(frame, _FRAME_ARGS, 2), (ds[0],), np.int32)
    nk = carray(_data(frame, _FRAME_ARGS, 3), (ds[0],), np.int32)
    out = carray(_data(frame, _FRAME_RETS, 0), (do[0], do[1], do[2]), np.float32)
    return a, e, sel, nk, out


@njit(inline="always")
def _sum_rows_args(frame):
    da, dt = _dims(frame, _FRAME_ARGS, 0, 3), _dims(frame, _FRAME_ARGS, 1, 4)
    dw, do = _dims(frame, _FRAME_ARGS, 2, 2), _dims(frame, _FRAME_RETS, 0, 5)
    a = carray(_data(frame, _FRAME_ARGS, 0), (da[0], da[1], da[2]), np.float32)
    t = carray(_data(frame, _FRAME_ARGS, 1), (dt[0], dt[1], dt[2], dt[3]), np.float32)
    win = carray(_data(frame, _FRAME_ARGS, 2), (dw[0], dw[1]), np.int32)
    nk = carray(_data(frame, _FRAME_ARGS, 3), (dw[0], dw[1]), np.int32)
    sg = carray(_data(frame, _FRAME_ARGS, 4), (1,), np.float32)[0]
    out = carray(_data(frame, _FRAME_RETS, 0), (do[0], do[1], do[2], do[3], do[4]), np.float32)
    return a, t, win, nk, sg, out


THREADS = config.NUMBA_NUM_THREADS  # sum_rows' parts (a constant: get_num_threads() is not cached)
ROWS_CHUNK = 512  # rows_dot rows a claim: 1 MB of stored rows (~40 us on one core)


@intrinsic
def _claim(typingctx, counter):
    """The next chunk: atomically counter[0] += 1, returning the value before."""
    sig = types.int64(counter)

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        zero = context.get_constant(types.intp, 0)
        at = cgutils.get_item_pointer(context, builder, aryty, ary, [zero])
        one = context.get_constant(types.int64, 1)
        return builder.atomic_rmw("add", at, one, "monotonic")

    return sig, codegen


PREFETCH_ROWS = 4  # the kernels ask for the row this many rows ahead (8 KB) as they start one


@intrinsic
def _prefetch_row(typingctx, rows, r, n):
    """Ask the cache for floats [0, n) of row r of a 2-D C array (llvm.prefetch, one per
    64-byte line, into L2: prefetcht2; no arithmetic changes). Phase 1's 38.6 MB of rows at
    n = 9801 read from memory (a 400 MB read between calls) on one thread: 3.7-3.8 -> 3.3-3.4
    ms of CPU at 2, 4 or 6 rows ahead, the same 12 rows ahead (p10 of 40 interleaved calls,
    2026-12-02, load 2). Into L2 rather than L1 (prefetcht0): the L3 keeps more of the 74 MB
    of bases from one product to the next, so a burst of products after other work warms up
    sooner (both phases on the cores, 10 products after a 400 MB read, medians of 8 rounds,
    Xeon VM, 2026-12-02: products 1-4 3.9 / 3.6 / 3.1 / 2.4 ms against 4.5 / 4.1 / 3.7 / 3.1,
    products 2-10 2.15 against 2.3 ms; cold, one thread, the same or 3% faster)."""
    sig = types.none(rows, r, n)

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        zero = context.get_constant(types.intp, 0)
        row = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1], zero])
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        at = builder.bitcast(row, i8p)
        size = builder.mul(args[2], context.get_constant(types.intp, 4))
        line = context.get_constant(types.intp, 64)
        read, keep, data = (ir.Constant(i32, v) for v in (0, 1, 1))  # keep 1: prefetcht2
        with cgutils.for_range_slice(builder, zero, size, line, inc=True) as (off, _):
            builder.call(fn, [builder.gep(at, [off]), read, keep, data])
        return context.get_dummy_value()

    return sig, codegen


@njit(inline="always")
def _rows_dot_row(a, e, r, g, n, out):
    B, C = e.shape[1], e.shape[2]
    for bb in range(B):
        if C == 2:
            s0 = np.float32(0)
            s1 = np.float32(0)
            for k in range(n):
                s0 += a[r, k] * e[g, bb, 0, k]
                s1 += a[r, k] * e[g, bb, 1, k]
            out[r, 0, bb] = s0
            out[r, 1, bb] = s1
        else:
            s0 = np.float32(0)
            for k in range(n):
                s0 += a[r, k] * e[g, bb, 0, k]
            out[r, 0, bb] = s0


def _rows_dot(a, e, sel, nk, out):
    """out[r, c, b] = a[r, :nk[r]] . e[sel[r], b, c, :nk[r]] (row r is zero past nk[r]: the
    edge tiles' padding and the empty rows, nk 0, are not read). One row a pass, so that a
    thread reads each claim (ROWS_CHUNK rows) as one sequential stream (two rows a pass
    interleave two streams 2 KB apart: 9.5-11 against 20.6 GB/s from DRAM on two cores for
    38.6 MB of rows, 44 against 54 GB/s from cache; the 2-core machine under load,
    2026-12-02)."""
    R, K = a.shape
    chunks = (R + ROWS_CHUNK - 1) // ROWS_CHUNK
    counter = np.zeros(1, np.int64)
    for _ in prange(chunks):  # each drains the counter: a thread claims chunks while any are left
        c = _claim(counter)
        while c < chunks:
            end = min(R, (c + 1) * ROWS_CHUNK)
            for r in range(c * ROWS_CHUNK, end):
                if r + PREFETCH_ROWS < end:
                    _prefetch_row(a, r + PREFETCH_ROWS, min(nk[r + PREFETCH_ROWS], K))
                _rows_dot_row(a, e, r, sel[r], min(nk[r], K), out)
            c = _claim(counter)


@njit(inline="always")
def _sum_block_row(a, t, win, nk, sg, out, g):
    """out[g] of `_sum_rows`: block row g's rows into its pieces, in row order."""
    RW, K = a.shape[1], a.shape[2]
    C, B = t.shape[2], t.shape[3]
    out[g] = 0
    rows = a[g]
    for r in range(RW):
        if r + PREFETCH_ROWS < RW:
            _prefetch_row(rows, r + PREFETCH_ROWS, min(nk[g, r + PREFETCH_ROWS], K))
        p, h = win[g, r], min(nk[g, r], K) // C
        for bb in range(B):
            if C == 2:
                tr = t[g, r, 0, bb]
                ti = t[g, r, 1, bb]
                for k in range(h):
                    ar = a[g, r, 2 * k]
                    ai = a[g, r, 2 * k + 1]
                    out[g, p, 0, bb, k] += tr * ar - sg * ti * ai
                    out[g, p, 1, bb, k] += sg * tr * ai + ti * ar
            else:
                tr = t[g, r, 0, bb]
                for k in range(h):
                    out[g, p, 0, bb, k] += tr * a[g, r, k]


def _sum_rows(a, t, win, nk, sg, out):
    """out[g, win[g, r]] += t[g, r] * row (g, r); complex rows interleaved (conj when sg < 0),
    the output planar (re, im): strided reads vectorize, interleaved writes do not. Row
    (g, r) is zero past its first nk[g, r] floats, which are all that is read. Each thread
    sums a run of whole block rows holding an equal share of the floats read (`_parts`):
    a block row is summed by one thread in row order, so the sums do not depend on the
    split."""
    BR = a.shape[0]
    P = min(THREADS, BR)
    part = _parts(nk, P)
    for q in prange(P):
        for g in range(BR):
            if part[g] == q:
                _sum_block_row(a, t, win, nk, sg, out, g)


@njit(inline="always")
def _parts(nk, P):
    """(BR,) the part in [0, P) of each block row: P runs of consecutive block rows, a block
    row in the run whose 1/P of all the floats read (nk) holds its middle float."""
    BR, RW = nk.shape
    load = np.zeros(BR, np.int64)
    for g in range(BR):
        for r in range(RW):
            load[g] += nk[g, r]
    total = max(load.sum(), 1)
    part = np.zeros(BR, np.int64)
    before = 0
    for g in range(BR):
        part[g] = min(P - 1, (2 * before + load[g]) * P // (2 * total))
        before += load[g]
    return part


def _gather_rows(src, at, out):
    """out[i] = src[at[i]] (rows of floats; the ring allgather's pick, `ring_pick`)."""
    F = src.shape[1]
    for i in range(at.shape[0]):
        j = at[i]
        if F == 2:  # one (re, im) pair: the one-vector product's case
            out[i, 0] = src[j, 0]
            out[i, 1] = src[j, 1]
        else:
            for f in range(F):
                out[i, f] = src[j, f]


rows_dot_cores = njit(parallel=True, **_OPTS)(_named(_rows_dot, "_cores"))
rows_dot_thread = njit(parallel=False, **_OPTS)(_named(_rows_dot, "_thread"))
sum_rows_cores = njit(parallel=True, **_OPTS)(_named(_sum_rows, "_cores"))
sum_rows_thread = njit(parallel=False, **_OPTS)(_named(_sum_rows, "_thread"))
gather_rows_thread = njit(**_OPTS)(_gather_rows)


def rows_dot_cores_ffi(frame_p):
    frame = _addr(frame_p)
    if not _metadata_query(frame):
        rows_dot_cores(*_rows_dot_args(frame))
    return _ptr(0)


def rows_dot_thread_ffi(frame_p):
    frame = _addr(frame_p)
    if not _metadata_query(frame):
        rows_dot_thread(*_rows_dot_args(frame))
    return _ptr(0)


def sum_rows_cores_ffi(frame_p):
    frame = _addr(frame_p)
    if not _metadata_query(frame):
        sum_rows_cores(*_sum_rows_args(frame))
    return _ptr(0)


def sum_rows_thread_ffi(frame_p):
    frame = _addr(frame_p)
    if not _metadata_query(frame):
        sum_rows_thread(*_sum_rows_args(frame))
    return _ptr(0)


@njit(inline="always")
def _gather_rows_args(frame):
    ds, da, do = (
        _dims(frame, _FRAME_ARGS, 0, 2),
        _dims(frame, _FRAME_ARGS, 1, 1),
        _dims(frame, _FRAME_RETS, 0, 2),
    )
    src = carray(_data(frame, _FRAME_ARGS, 0), (ds[0], ds[1]), np.float32)
    at = carray(_data(frame, _FRAME_ARGS, 1), (da[0],), np.int32)
    out = carray(_data(frame, _FRAME_RETS, 0), (do[0], do[1]), np.float32)
    return src, at, out


def gather_rows_thread_ffi(frame_p):
    frame = _addr(frame_p)
    if not _metadata_query(frame):
        gather_rows_thread(*_gather_rows_args(frame))
    return _ptr(0)


handler = _handlers(
    {
        "rows_dot_cores": rows_dot_cores_ffi,
        "rows_dot_thread": rows_dot_thread_ffi,
        "sum_rows_cores": sum_rows_cores_ffi,
        "sum_rows_thread": sum_rows_thread_ffi,
        "gather_rows_thread": gather_rows_thread_ffi,
    }
)
