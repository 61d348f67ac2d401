"""How a numba `cfunc` serves as an XLA typed-FFI handler on the CPU: the call frame read
from numba, for the PEs' own kernels (`wse_hpc`'s `tlrmvm.pe_kernels`, `md.pe_pairs`) and the
CPU attention (`wse_models.sdpa_cpu`).

Contract: a handler compiled with `cfunc(SIG, cache=True)` receives XLA's
`XLA_FFI_CallFrame*` (jaxlib/include/xla/ffi/api/c_api.h, API 0.3) and reads it as 8-byte
words: 1 extension_start, 9 args.args, 14 rets.rets (arrays of `XLA_FFI_Buffer*`, whose
words 3 and 5 are data and dims). XLA first calls a handler with a metadata extension (word
1 of the extension is its type, word 3 the `XLA_FFI_Metadata*`) to learn its API version
(int32 words 6, 7) and traits (8): `metadata_query(frame)` answers it and says so.
`data(frame, slot, i)` and `dims(frame, slot, i, rank)` are the i-th argument's (slot
FRAME_ARGS) or result's (FRAME_RETS) data pointer and dimensions (a tuple of `rank`, a
constant), for `numba.carray`. They are intrinsics, a few loads written as LLVM IR: as numba
functions inlined (`inline="always"`) into each other, a handler's frame reading was ~150
inlines of numba IR, most of its compile (the force handler 4.3 -> 2.3 s of CPU, the list
build 4.0 -> 2.9, the density 4.0 -> 2.0 on a cold cache; the same loads, the same kernels);
`named(fn, suffix)` is a copy of a kernel under its own name for numba's on-disk cache;
`handlers(bodies)` is `name -> cfunc(SIG, cache=True)(bodies[name])`, compiled (or loaded
from numba's cache) on the name's first request only, so that a process pays for the
handlers it calls, not for every one a module defines; `stored(body)` says whether numba's
cache holds a handler, without compiling it.
Importing this module starts numba's parallel runtime (the `prange` kernels' threads)
before any handler links against it.
"""

from __future__ import annotations

import functools
import types as types_module
from collections.abc import Callable

import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.ufunc.parallel import _launch_threads

__all__ = [
    "FRAME_ARGS",
    "FRAME_RETS",
    "SIG",
    "OPTS",
    "KERNEL_OPTS",
    "ptr",
    "addr",
    "metadata_query",
    "data",
    "dims",
    "named",
    "handlers",
    "stored",
]

_launch_threads()  # the parallel kernels' runtime, before any handler links against it

_FRAME_EXT, FRAME_ARGS, FRAME_RETS = 1, 9, 14
_BUF_DATA, _BUF_DIMS = 3, 5
_EXT_METADATA, _API_MAJOR, _API_MINOR = 1, 0, 3
SIG = types.voidptr(types.voidptr)
OPTS = {"fastmath": True, "boundscheck": False, "cache": True}
# a kernel that only handlers call (natively): without the CPython and cfunc wrappers numba
# otherwise compiles beside it to unbox its arguments (the MD pair kernels, whose arguments
# are NamedTuples of arrays: ~0.1-0.2 s of CPU less per kernel on a cold cache)
KERNEL_OPTS = {**OPTS, "no_cpython_wrapper": True, "no_cfunc_wrapper": True}


@intrinsic
def ptr(typingctx, address):
    """An int64 address as a void pointer."""

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(types.int64), codegen


@intrinsic
def addr(typingctx, p):
    """A void pointer as an int64 address."""

    def codegen(context, builder, sig, args):
        return builder.ptrtoint(args[0], cgutils.intp_t)

    return types.int64(types.voidptr), codegen


def _load(builder, address, i):
    """The int64 word i (an int, or an i64 value) from `address` (an i64 value)."""
    at = builder.inttoptr(address, ir.IntType(64).as_pointer())
    k = ir.Constant(ir.IntType(64), i) if isinstance(i, int) else i
    return builder.load(builder.gep(at, [k]))


def _int64s(context, builder, sig, args) -> list:
    """The integer arguments `args` (of types `sig.args`) as i64 values."""
    tys = sig.args[: len(args)]
    return [context.cast(builder, v, t, types.int64) for v, t in zip(args, tys, strict=True)]


def _buffer_word(context, builder, sig, args, w: int):
    """Word w of the `XLA_FFI_Buffer` that args[:3] (frame, slot, i) name."""
    frame, slot, i = _int64s(context, builder, sig, args[:3])
    return _load(builder, _load(builder, _load(builder, frame, slot), i), w)


def _integers(*tys) -> bool:
    return all(isinstance(t, types.Integer) for t in tys)


@intrinsic
def _word(typingctx, address, i):
    """The int64 word i from `address`."""
    if not _integers(address, i):
        return None

    def codegen(context, builder, sig, args):
        return _load(builder, *_int64s(context, builder, sig, args))

    return types.int64(address, i), codegen


@njit(inline="always")
def metadata_query(frame):
    """True (and the answer written) when XLA asks for the handler's API version."""
    ext = _word(frame, _FRAME_EXT)
    if ext == 0:
        return False
    if (_word(ext, 1) & 0xFFFFFFFF) != _EXT_METADATA:
        return False
    md = carray(ptr(_word(ext, 3)), (12,), np.int32)
    md[6] = _API_MAJOR
    md[7] = _API_MINOR
    md[8] = 0
    return True


@intrinsic
def data(typingctx, frame, slot, i):
    """The data pointer of the i-th argument or result."""
    if not _integers(frame, slot, i):
        return None

    def codegen(context, builder, sig, args):
        at = _buffer_word(context, builder, sig, args, _BUF_DATA)
        return builder.inttoptr(at, cgutils.voidptr_t)

    return types.voidptr(frame, slot, i), codegen


@intrinsic
def dims(typingctx, frame, slot, i, rank):
    """The `rank` (a constant) dimensions of the i-th argument or result, a tuple."""
    if not (_integers(frame, slot, i) and isinstance(rank, types.IntegerLiteral)):
        return None
    out = types.UniTuple(types.int64, rank.literal_value)

    def codegen(context, builder, sig, args):
        at = _buffer_word(context, builder, sig, args, _BUF_DIMS)
        return context.make_tuple(builder, out, [_load(builder, at, k) for k in range(out.count)])

    return out(frame, slot, i, rank), codegen


def named(fn, suffix: str):
    """A copy of fn under its own name: numba's on-disk cache is keyed by the function's
    name and line, so two compilations of one body would otherwise share (and load) one
    entry."""
    out = types_module.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + suffix)
    out.__qualname__ = fn.__qualname__ + suffix
    return out


def handlers(bodies: dict[str, Callable]) -> Callable[[str], object]:
    """name -> the cfunc handler of bodies[name] (see the module doc), compiled once; its
    `stored(name)` says whether numba's cache holds that handler (`stored`)."""

    @functools.cache
    def handler(name: str):
        return cfunc(SIG, cache=True)(bodies[name])

    handler.stored = lambda name: stored(bodies[name])  # type: ignore[attr-defined]
    return handler


def stored(body: Callable) -> bool:
    """Whether numba's on-disk cache holds `cfunc(SIG, cache=True)(body)` for body's source as
    it is now (numba's own index of it, and its stamp of the source file): compiling it
    would load it."""
    from numba.core.caching import FunctionCache

    try:
        return bool(FunctionCache(body)._cache_file._load_index())
    except Exception:  # noqa: BLE001 - a cache numba cannot read holds nothing
        return False
