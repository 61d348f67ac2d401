"""Host memory: refuse a problem that will not fit before allocating it.

Contract. A command that sizes a problem counts the bytes of the host arrays it will hold
(each package estimates its own arrays next to the code that allocates them), then calls
`require(what, needed_bytes, fits=...)`. When the estimate exceeds `available_bytes()` it
raises `HostMemoryError` (a `WseError`: the `wse` command prints one line and exits 2) naming
the bytes needed, the bytes available and what would fit, which `fits(budget_bytes)` phrases
from the budget (`largest(bytes_for, budget)` finds the largest size whose estimate fits).

`available_bytes()` is the kernel's MemAvailable (`/proc/meminfo`), else the physical memory
(`os.sysconf`); the variable `WSE_HOST_MEMORY_BYTES` caps it (a shared machine's share, or a
test's small budget). Wafer SRAM is checked separately, at plan time, by `SramLedger`.

What a benchmark's numbers were measured on: `bandwidth_gb_s()` is this host's memory
bandwidth from a STREAM-like triad (NumPy, one thread, arrays beyond the L3 cache) and
`host_record()` the dict every `bench/*.py` JSON carries: that bandwidth, the load average
(1, 5, 15 min: other work on a shared machine), the CPUs this process may use, the
machine (`platform.node()`, `platform.processor()`) and the UTC time.
"""

from __future__ import annotations

import datetime
import os
import platform
import time
from collections.abc import Callable
from typing import Any

from wse_core.errors import WseError, ascii_only, shown

__all__ = [
    "HostMemoryError",
    "ENV_LIMIT",
    "available_bytes",
    "bandwidth_gb_s",
    "host_record",
    "format_bytes",
    "largest",
    "require",
]

ENV_LIMIT = "WSE_HOST_MEMORY_BYTES"


class HostMemoryError(WseError):
    """A problem's host arrays need more memory than the machine has available."""


def format_bytes(n: float) -> str:
    """`n` bytes in binary units, three significant figures ('1.50 GiB')."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def available_bytes(held_bytes: int = 0, *, share: bool = True) -> int:
    """Host bytes a new problem may use: MemAvailable (else physical memory) plus the
    `held_bytes` of the problem already resident (read before the check, so MemAvailable no
    longer counts them), capped by `$WSE_HOST_MEMORY_BYTES` when set and `share` (False: the
    machine's own bytes, for a cost every run of a wafer pays whatever its problem's share)."""
    avail = _meminfo_available()
    if avail is None:
        avail = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    avail += held_bytes
    cap = os.environ.get(ENV_LIMIT) if share else None
    if cap:
        try:
            limit = int(float(ascii_only(cap)))  # hunt 61: '١٠٠' was 100
        except (ValueError, OverflowError):  # 'abc', 'nan', '1e400' (inf)
            raise WseError(f"{ENV_LIMIT} must be a number of bytes, got {shown(cap)}") from None
        if limit <= 0:
            raise WseError(f"{ENV_LIMIT} must be positive, got {shown(cap)}")
        avail = min(avail, limit)
    return int(avail)


def largest(bytes_for: Callable[[int], int], budget_bytes: int, *, hi: int = 2**62) -> int:
    """The largest n in [0, hi] with bytes_for(n) <= budget_bytes (bytes_for nondecreasing);
    0 when even n = 1 does not fit."""
    lo = 0
    if bytes_for(1) > budget_bytes:
        return 0
    lo, top = 1, 2
    while top <= hi and bytes_for(top) <= budget_bytes:
        lo, top = top, top * 2
    top = min(top, hi + 1)
    while top - lo > 1:  # invariant: bytes_for(lo) fits, bytes_for(top) does not (or top > hi)
        mid = (lo + top) // 2
        lo, top = (mid, top) if bytes_for(mid) <= budget_bytes else (lo, mid)
    return lo


def require(
    what: str,
    needed_bytes: int,
    *,
    fits: Callable[[int], str],
    held_bytes: int = 0,
    share: bool = True,
) -> None:
    """Raise `HostMemoryError` when `needed_bytes` exceed `available_bytes(held_bytes, share)`.

    `what` names the problem ('wse hpc md: 32,000,000 atoms'); `fits(budget_bytes)` says what
    would fit in the available bytes ('at most 1,200,000 atoms (--cells 66 66 66)');
    `held_bytes`: the part of `needed_bytes` this process already holds (not counted twice)."""
    avail = available_bytes(held_bytes, share=share)
    if needed_bytes <= avail:
        return
    raise HostMemoryError(
        f"{what} needs {format_bytes(needed_bytes)} of host memory ({needed_bytes:,} B) but "
        f"{format_bytes(avail)} ({avail:,} B) is available; {fits(avail)}"
    )


def bandwidth_gb_s(n_bytes: int = 256 << 20, repeats: int = 5) -> float:
    """GB/s of a two-pass triad a = b + 3 c on float64 arrays of `n_bytes` each (beyond the L3
    cache of the 2-core VM, 105 MiB), the best of `repeats`: 5 arrays moved per pass pair
    (read c, write a; read a and b, write a)."""
    import numpy as np

    n = n_bytes // 8
    b, c, a = np.ones(n), np.full(n, 2.0), np.empty(n)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.multiply(c, 3.0, out=a)
        np.add(a, b, out=a)
        best = min(best, time.perf_counter() - t0)
    return 5 * n * 8 / best / 1e9


def host_record(n_bytes: int = 256 << 20) -> dict[str, Any]:
    """What a benchmark ran on (module docstring): JSON-ready."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "memory_bandwidth_gb_s": bandwidth_gb_s(n_bytes),
        "load_average": list(os.getloadavg()),
        "cpus": cpus,
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
        "utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
