"""The PEs' own kernels on a CPU (numba) as XLA FFI targets: whether they can run and their
registration, shared by `tlrmvm.pe_kernels` and `md.pe_pairs` (the call frame a handler
reads is `numba_ffi`'s, imported only with the kernels).

Contract: `available()` says whether numba is installed; `register(target, handler)`
registers a numba `cfunc` handler with XLA's CPU platform under `target` and returns it.

Importing this module sets `OMP_WAIT_POLICY=passive` unless the environment says otherwise
(read by libgomp when numba's OpenMP layer loads it, on a kernel's first parallel run): the
kernels' threads sleep at the end of a parallel region instead of spinning. Spinning threads
take the cores from the ones still working whenever the machine runs more threads than it
has cores: a 1,024 TLR-MVM product took 108-120 ms instead of 0.24-0.30 at a load average
of 11-13 on the 2-core VM (2026-11-28, the same process and code, only this setting).
"""

from __future__ import annotations

import os

import jax

os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # before libgomp loads (module doc)

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
