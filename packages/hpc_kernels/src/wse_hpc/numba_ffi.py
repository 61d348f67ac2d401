"""How a numba `cfunc` serves as an XLA typed-FFI handler on the CPU: the call frame read
from numba, for the PEs' own kernels (`tlrmvm.pe_kernels`, `md.pe_pairs`).

Contract: a handler compiled with `cfunc(SIG, cache=True)` receives XLA's
`XLA_FFI_CallFrame*` (jaxlib/include/xla/ffi/api/c_api.h, API 0.3) and reads it as 8-byte
words: 1 extension_start, 9 args.args, 14 rets.rets (arrays of `XLA_FFI_Buffer*`, whose
words 3 and 5 are data and dims). XLA first calls a handler with a metadata extension (word
1 of the extension is its type, word 3 the `XLA_FFI_Metadata*`) to learn its API version
(int32 words 6, 7) and traits (8): `metadata_query(frame)` answers it and says so.
`data(frame, slot, i)` and `dims(frame, slot, i, rank)` are the i-th argument's (slot
FRAME_ARGS) or result's (FRAME_RETS) data pointer and dimensions, for `numba.carray`;
`named(fn, suffix)` is a copy of a kernel under its own name for numba's on-disk cache;
`handlers(bodies)` is `name -> cfunc(SIG, cache=True)(bodies[name])`, compiled (or loaded
from numba's cache) on the name's first request only, so that a process pays for the
handlers it calls, not for every one a module defines.
Importing this module starts numba's parallel runtime (the `prange` kernels' threads)
before any handler links against it.
"""

from __future__ import annotations

import functools
import types as types_module
from collections.abc import Callable

import numpy as np
from numba import carray, cfunc, njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.ufunc.parallel import _launch_threads

__all__ = [
    "FRAME_ARGS",
    "FRAME_RETS",
    "SIG",
    "OPTS",
    "ptr",
    "addr",
    "metadata_query",
    "data",
    "dims",
    "named",
    "handlers",
]

_launch_threads()  # the parallel kernels' runtime, before any handler links against it

_FRAME_EXT, FRAME_ARGS, FRAME_RETS = 1, 9, 14
_BUF_DATA, _BUF_DIMS = 3, 5
_EXT_METADATA, _API_MAJOR, _API_MINOR = 1, 0, 3
SIG = types.voidptr(types.voidptr)
OPTS = {"fastmath": True, "boundscheck": False, "cache": True}


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


@njit(inline="always")
def _words(address, n):
    return carray(ptr(address), (n,), np.int64)


@njit(inline="always")
def metadata_query(frame):
    """True (and the answer written) when XLA asks for the handler's API version."""
    ext = _words(frame, 16)[_FRAME_EXT]
    if ext == 0:
        return False
    e = _words(ext, 4)
    if (e[1] & 0xFFFFFFFF) != _EXT_METADATA:
        return False
    md = carray(ptr(e[3]), (12,), np.int32)
    md[6] = _API_MAJOR
    md[7] = _API_MINOR
    md[8] = 0
    return True


@njit(inline="always")
def _buffer(frame, slot, i):
    """The words of the i-th `XLA_FFI_Buffer` of the frame's args or rets (`slot`)."""
    return _words(_words(_words(frame, 16)[slot], i + 1)[i], 6)


@njit(inline="always")
def data(frame, slot, i):
    """The data pointer of the i-th argument or result."""
    return ptr(_buffer(frame, slot, i)[_BUF_DATA])


@njit(inline="always")
def dims(frame, slot, i, rank):
    """The `rank` dimensions of the i-th argument or result."""
    return _words(_buffer(frame, slot, i)[_BUF_DIMS], rank)


def named(fn, suffix: str):
    """A copy of fn under its own name: numba's on-disk cache is keyed by the function's
    name and line, so two compilations of one body would otherwise share (and load) one
    entry."""
    out = types_module.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + suffix)
    out.__qualname__ = fn.__qualname__ + suffix
    return out


def handlers(bodies: dict[str, Callable]) -> Callable[[str], object]:
    """name -> the cfunc handler of bodies[name] (see the module doc), compiled once."""

    @functools.cache
    def handler(name: str):
        return cfunc(SIG, cache=True)(bodies[name])

    return handler
