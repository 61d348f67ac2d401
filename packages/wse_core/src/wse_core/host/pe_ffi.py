"""The PEs' own kernels on a CPU (numba) as XLA FFI targets: whether they can run and their
registration, shared by `wse_hpc`'s `tlrmvm.pe_kernels` and `md.pe_pairs` and by
`wse_models.sdpa_cpu` (the call frame a handler reads is `numba_ffi`'s, imported only with
the kernels).

Contract: `available()` says whether numba is installed; `register(target, handler)`
registers a numba `cfunc` handler with XLA's CPU platform under `target` and returns it.

Importing this module sets `OMP_WAIT_POLICY=passive` unless the environment sets it or
`GOMP_SPINCOUNT` (read by libgomp when numba's OpenMP layer loads it, on a kernel's first
parallel run): the kernels' threads sleep at the end of a parallel region. Spinning threads
take the cores from the ones still working whenever the machine runs more threads than it
has cores (libgomp's default, 300,000 pauses: a 1,024 TLR-MVM product took 108-120 ms
instead of 0.24-0.30 at a load average of 11-13 on the 2-core VM, 2026-11-28), and MD's
kernels alternate with XLA's own threads every step (a bounded spin of 20,000 pauses: the
cold first MD step at 32,000 atoms 18.9 -> 24.3 s, 29.5 -> 37.8 s of CPU, 2026-12-02).
`wait_policy("spin")`, called by a workload whose products are bursts of back-to-back
parallel regions (TLR-MVM, `tlrmvm.pe_kernels`) before its first kernel runs, sets a
bounded spin instead (`OMP_WAIT_POLICY=active`, `GOMP_SPINCOUNT=10000000`, then sleep)
unless the user set either variable; the process's first parallel run fixes it. The spin
outlasts the gaps inside a burst (XLA's work between two regions of one product, the caller's
between products: 0.05-0.2 ms) and ends ~0.1 s after the burst, as OpenBLAS's threads do
after a call (the process burns, in the 1 s after a tiny parallel region, 0.1 ms of CPU at
20,000 pauses or 300,000, 7 ms at 1,000,000, 104 ms at 10,000,000; 2-core VM, 2026-12-03).
A thread that sleeps between the regions of a product is woken once per region, and on the
VM a woken core runs the product's next regions slowly for a while: TLR-MVM at n 9801,
bench_tlrmvm's rounds (0.3 s idle, then the median of 9 products after one) against NumPy's
TLR-MVM in 10 or 14 processes alternated (2026-12-03): median of the processes' median
ratios 0.51x at 20,000 (0.46-0.94x), 0.90x at 10,000,000 (0.35-1.07x), 1,000,000 between
(0.64-0.96x, 4 processes). Earlier (2026-12-02): 6 products back to back after 0.3 s idle,
passive 6.4 ms a product, 2,000 pauses 5.0, 20,000 3.9, 200,000 3.4; beside six busy
processes passive 23.6 ms, 20,000 27.4: on a machine shared with busy processes
`OMP_WAIT_POLICY=passive` in the environment wins over this.
"""

from __future__ import annotations

import os

import jax

_USER_SET = "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ
WAIT_POLICIES = {
    "sleep": {"OMP_WAIT_POLICY": "passive"},
    "spin": {"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": "10000000"},  # ~0.1 s (module doc)
}


def wait_policy(kind: str) -> None:
    """The kernels' threads at the end of a parallel region: "sleep" or "spin" (a bounded
    while, then sleep); the user's own setting wins, and so does the first parallel run's
    (libgomp reads the environment once)."""
    if kind not in WAIT_POLICIES:
        raise ValueError(f"wait policy {kind!r}; known: {', '.join(WAIT_POLICIES)}")
    if not _USER_SET:
        for key in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
            os.environ.pop(key, None)
        os.environ.update(WAIT_POLICIES[kind])


wait_policy("sleep")  # before libgomp loads (module doc)

__all__ = ["WAIT_POLICIES", "available", "register", "wait_policy"]


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
