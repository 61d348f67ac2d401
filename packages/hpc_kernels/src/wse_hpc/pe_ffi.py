"""The PEs' own kernels on a CPU (numba) as XLA FFI targets: whether they can run and their
registration, shared by `tlrmvm.pe_kernels` and `md.pe_pairs` (the call frame a handler
reads is `numba_ffi`'s, imported only with the kernels).

Contract: `available()` says whether numba is installed; `register(target, handler)`
registers a numba `cfunc` handler with XLA's CPU platform under `target` and returns it.
"""

from __future__ import annotations

import jax

__all__ = ["available", "register"]


def available() -> bool:
    """numba is installed (the kernels' compiler)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def register(target: str, handler) -> str:
    """`handler` (a numba cfunc) as the XLA FFI target `target` on the CPU."""
    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler.ctypes), platform="cpu")
    return target
