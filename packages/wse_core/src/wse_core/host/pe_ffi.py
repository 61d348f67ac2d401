"""The PEs' own kernels on a CPU (numba) as XLA FFI targets: whether they can run and their
registration, shared by `wse_hpc`'s `tlrmvm.pe_kernels` and `md.pe_pairs` and by
`wse_models.sdpa_cpu` (the call frame a handler reads is `numba_ffi`'s, imported only with
the kernels).

Contract: `available()` says whether numba is installed; `register(target, handler)`
registers a numba `cfunc` handler with XLA's CPU platform under `target` and returns it.
`available()` first checks the numba variables that break the kernels' start (a `WseError`,
one line naming the variable): `NUMBA_NUM_THREADS` an integer in [1, `max_numba_threads()`]
and `NUMBA_THREADING_LAYER` one of numba's layers (tbb and safe: with TBB loadable). Hunt
65: 100,000 threads crashed the process (SIGSEGV, no message), 0, an unknown layer and an
absent TBB were 100-line tracebacks at the first kernel, and `abc` was numba's own warning
with a traceback, then its default.

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

from wse_core.errors import WseError, ascii_only, shown

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

__all__ = ["WAIT_POLICIES", "available", "max_numba_threads", "register", "wait_policy"]

# numba's threading layers (numba.np.ufunc.parallel): its own three and the three it picks
# among by purpose, and "default"
NUMBA_LAYERS = ("default", "safe", "threadsafe", "forksafe", "tbb", "omp", "workqueue")


def max_numba_threads() -> int:
    """The most numba threads a process may ask for: this machine's cores, at least 1,024.
    More threads only time-share the cores, and numba starts them all at the first parallel
    kernel: 5,000 took 15 s on the 2-core VM, 100,000 crashed it (hunt 65)."""
    return max(1024, os.cpu_count() or 1)


def _check_numba_variables() -> None:
    """A WseError for a NUMBA_NUM_THREADS or NUMBA_THREADING_LAYER numba cannot start with."""
    raw = os.environ.get("NUMBA_NUM_THREADS")
    if raw is not None:
        cap = max_numba_threads()
        wanted = (
            f"an integer in [1, {cap:,}] (threads of the PE kernels), or unset it for one a core"
        )
        try:
            n = int(ascii_only(raw))
        except ValueError:
            n = 0
        if not 1 <= n <= cap:
            raise WseError(f"NUMBA_NUM_THREADS must be {wanted}; got {shown(raw)}")
    layer = os.environ.get("NUMBA_THREADING_LAYER")
    if layer is not None and layer.lower() not in NUMBA_LAYERS:  # numba reads it lowercased
        raise WseError(
            f"NUMBA_THREADING_LAYER must be one of {', '.join(NUMBA_LAYERS)} (numba's threading "
            f"layers), or unset it; got {shown(layer)}"
        )


def available() -> bool:
    """numba is installed (the kernels' compiler); a WseError first for a numba variable it
    cannot start with (module doc)."""
    _check_numba_variables()  # before numba reads them, at its import or first kernel
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    _check_tbb()
    return True


def _check_tbb() -> None:
    """A WseError where NUMBA_THREADING_LAYER asks for TBB alone (tbb, safe) and numba cannot
    load it: numba's ValueError came at the first kernel, a 120-line traceback (hunt 65)."""
    layer = os.environ.get("NUMBA_THREADING_LAYER", "").lower()
    if layer in ("tbb", "safe"):
        try:
            import numba.np.ufunc.tbbpool  # noqa: F401  (what numba loads for it)
        except ImportError as e:
            raise WseError(
                f"NUMBA_THREADING_LAYER={layer} needs Intel TBB, which numba cannot load here "
                f"({e}); install it (pip install tbb), choose omp or workqueue, or unset it"
            ) from None


def register(target: str, handler) -> str:
    """`handler` (a numba cfunc) as the XLA FFI target `target` on the CPU."""
    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler.ctypes), platform="cpu")
    return target
