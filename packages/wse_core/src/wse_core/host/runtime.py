"""JAX runtime set-up: the number of virtual CPU devices and the persistent compile cache.

JAX fixes its device count when the backend starts, so `configure` must run before any JAX
operation. It sets environment variables (read when `jax` is imported) and, when `jax` is
already imported but its backend is not started, the matching `jax.config` options. Call it
once, early: the `wse` command does it in its root callback; tests do it in the root
conftest.py.

Defaults: one virtual device per core (collectives between more virtual devices than cores
cost ~0.1 ms each, see shared/PLATFORM.md); `WSE_DEVICES` overrides, and where it is not set
XLA_FLAGS' `--xla_force_host_platform_device_count` (JAX's own spelling) does. A count is an
integer of at most the `devices` limit, and the JAX and XLA variables JAX reads at its start
are checked (`wse_core.host.jax_env`), both before the environment is touched (what needs JAX
or XLA itself to judge, at JAX's first import). On a GPU host
the real devices are used and the CPU device count is irrelevant. The compile cache lives in
`$WSE_CACHE_DIR` (default `~/.cache/wse/jax`) — the counterpart of Cerebras' compile artifacts;
numba's (the PE kernels of `wse_hpc`) in its `numba/` folder (`NUMBA_CACHE_DIR`, unless set,
read when numba is first imported): one folder holds everything a first run compiles,
writable wherever the cache is, also for a package installed read-only. Both caches stay an
optimisation (`compile_caches.guard`, set up here): an entry is whole or absent, one that
cannot be read is compiled again, and a folder that takes no new entry (a full disk, a
quota) is one note, the run going on without it (hunt 69).

`sync_dispatch()` (opt-in, process-wide, before the backend starts) runs each jitted call on
the calling thread. JAX's CPU client otherwise hands every call of more than a few hundred
elements to a worker thread and the caller waits for it to wake: measured on the 2-core VM,
`x * 2` on 1,024 floats took 32 us a call (median) against 4.4 us inline, and a 2500 x 2500
TLR-MVM product 0.20 ms against 0.11. Worth it where single calls are timed against code
that runs inline (NumPy); it gives up overlapping Python with the computation.

`keep_freed_memory()` (opt-in, process-wide, glibc only) stops the C allocator from handing
large freed blocks back to the kernel. XLA:CPU mallocs each execution's temporary buffer and
frees it after the call; glibc serves blocks above its mmap threshold (32 MiB at most, and
64 MiB in a thread's own arena) with a fresh `mmap` and unmaps them on free, so a program
whose temporaries pass that size faults in every page again on every call: a 34 MB
temporary cost ~8,200 page faults per call and tripled the time of a d128 GPT-2 layer's
backward at batch 16 on the 2-core development VM. `wse train` and bench_train call it.

Timing (the one helper every kernel, experiment and bench uses): `wall_s(fn, *args)` is one
call of `fn(*args)` and the wall seconds until its result is ready (`time.perf_counter`
around the call and `jax.block_until_ready` on the result, so JAX's asynchronous dispatch
is not mistaken for the work; NumPy results are not walked). `wall_times_s(fn, *args,
repeats=, warmup=)` runs `warmup` untimed calls (each waited for: compilation and first-touch
costs stay out) and then `repeats` timed ones; `median_wall_s` is their median. Timing is
shell work: never inside `jit`.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from wse_core.errors import WseError, ascii_only, shown, shown_int
from wse_core.host import compile_caches, jax_env, xla_flags

__all__ = [
    "configure",
    "default_devices",
    "usable_cores",
    "cache_dir",
    "keep_freed_memory",
    "train_arenas",
    "sync_dispatch",
    "wall_s",
    "wall_times_s",
    "median_wall_s",
]

_FAST_COMPILE_FLAG = "--xla_llvm_disable_expensive_passes=true"


def default_devices() -> int:
    """`WSE_DEVICES` if set, else XLA_FLAGS' `--xla_force_host_platform_device_count` (JAX's
    own way to ask; hunt 65: it was silently replaced), else one virtual CPU device per core
    this process may run on (its CPU affinity: `taskset`, a SLURM allocation, a benchmark's
    pinning; at most the `devices` limit). Set but empty (`WSE_DEVICES=` in a script whose
    value went missing) is a WseError, not "unset"."""
    env = os.environ.get("WSE_DEVICES")
    if env is None:
        from wse_core.host.limits import limit

        asked = jax_env.xla_device_count()
        return min(usable_cores(), limit("devices")) if asked is None else asked
    wanted = (
        "a positive integer of virtual CPU devices (e.g. WSE_DEVICES=8), or unset it for one "
        f"per core ({usable_cores()} here)"
    )
    if not env.strip():  # hunt 59: was read as unset
        raise WseError(f"WSE_DEVICES is set but empty; give {wanted}")
    try:
        n = int(ascii_only(env))  # hunt 61: '٨' was read as 8
    except ValueError:
        raise WseError(f"WSE_DEVICES must be {wanted}; got {shown(env)}") from None
    if n <= 0:
        raise WseError(f"WSE_DEVICES must be {wanted}; got {shown(env)}")
    return n


def _checked_devices(n: object, what: str) -> int:
    """`n` where it is a device count of 1..the `devices` limit; else a WseError naming
    `what` gave it (hunt 65: `configure(10**5)` hung JAX's start at 3 GB, 2.5 or True left a
    JAX_NUM_CPU_DEVICES that `import jax` refused)."""
    from wse_core.host.limits import VIRTUAL_DEVICE_HOST_BYTES, lift, limit

    cap = limit("devices")
    if isinstance(n, bool) or not isinstance(n, int | np.integer):
        got = shown(n, quote=isinstance(n, str))
    elif not 1 <= n <= cap:
        got = shown_int(int(n))
    else:
        return int(n)
    raise WseError(
        f"{what} must be an integer in 1..{cap:,}, got {got} (virtual CPU devices: each "
        f"costs ~{VIRTUAL_DEVICE_HOST_BYTES / 1e6:.1f} MB of host memory and slows JAX's "
        f"start; {lift('devices')})"
    )


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def cache_dir() -> Path:
    """`$WSE_CACHE_DIR` (unset or empty: ~/.cache/wse/jax); WseError when it is set to a
    path that cannot hold the cache (a file, or under a folder that takes no new files):
    JAX would warn on every compile, and the cache would silently not work."""
    raw = os.environ.get("WSE_CACHE_DIR", "").strip()
    if not raw:
        return Path.home() / ".cache" / "wse" / "jax"
    path = Path(raw)
    if path.exists():
        if not path.is_dir():
            raise WseError(f"WSE_CACHE_DIR {raw} is not a folder; give a folder or unset it")
        return path
    above = path.absolute().parent
    while not above.exists() and above != above.parent:
        above = above.parent
    try:
        if not above.is_dir():
            raise NotADirectoryError(0, f"{above} is not a folder")
        os.rmdir(tempfile.mkdtemp(prefix=".wse-probe-", dir=above))
    except OSError as e:
        raise WseError(
            f"WSE_CACHE_DIR {raw} cannot be made: {e.strerror or e}; give a writable folder "
            "or unset it"
        ) from None
    return path


def configure(devices: int | None = None, *, compile_cache: bool = True) -> int:
    """Set the virtual CPU device count (before JAX starts) and the compile cache.

    Returns the device count asked for. Raises WseError, before the environment is touched,
    for a count that is no integer in 1..the `devices` limit, for a JAX or XLA variable JAX
    could not start with (`jax_env.check`; the checks that need JAX or XLA at JAX's first
    import), or when JAX's backend has already started with a different count. Its own XLA
    flag goes where XLA reads it: ahead of any words XLA ignores (`xla_flags.split`).
    `devices` wins over `WSE_DEVICES` and XLA_FLAGS' device count.
    """
    if devices is None:
        n = _checked_devices(default_devices(), _devices_source())
    else:
        n = _checked_devices(devices, "devices")
    jax_env.check()
    cache = {}
    if compile_cache:  # cache_dir() refuses a bad WSE_CACHE_DIR before anything is set
        where = cache_dir()
        cache = {
            "JAX_COMPILATION_CACHE_DIR": str(where),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "NUMBA_CACHE_DIR": str(where / "numba"),
        }
    os.environ["JAX_NUM_CPU_DEVICES"] = str(n)
    flags = os.environ.get("XLA_FLAGS", "")
    if _FAST_COMPILE_FLAG.partition("=")[0] not in flags:  # the user's own setting wins
        read, rest = xla_flags.split(flags)  # ahead of words XLA ignores, or it is ignored too
        os.environ["XLA_FLAGS"] = " ".join([*read, _FAST_COMPILE_FLAG, rest]).strip()
    for key, value in cache.items():
        os.environ.setdefault(key, value)
    compile_caches.guard()  # whole entries, and a full cache folder is one note (hunt 69)
    if "jax" in sys.modules:
        _configure_imported_jax(n, compile_cache)
    return n


def _devices_source() -> str:
    """Which setting gave the default device count, for its error line."""
    if "WSE_DEVICES" in os.environ:
        return "WSE_DEVICES"
    if jax_env.xla_device_count() is not None:
        return f"XLA_FLAGS' --{jax_env.XLA_DEVICE_FLAG}"
    return "the device count (one per core)"


def _configure_imported_jax(n: int, compile_cache: bool) -> None:
    import jax

    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:
        # The backend is up already: fine if it has what was asked.
        have = len(jax.devices("cpu"))
        if have != n and jax.default_backend() == "cpu":
            raise WseError(
                f"JAX already started with {have} CPU devices; cannot switch to {n} "
                "(set WSE_DEVICES before starting)"
            ) from None
    if compile_cache:
        jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
        jax.config.update(
            "jax_persistent_cache_min_compile_time_secs",
            float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]),
        )


def sync_dispatch() -> bool:
    """Have JAX's CPU client run each call on the calling thread (`jax_cpu_enable_async_dispatch`
    off; see the module doc). Call before the backend starts; returns False (nothing changed)
    when it has started already."""
    import jax
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        return False
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    return True


_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -2, -4, -8  # glibc's mallopt
_ARENA_HEAP = 64 << 20  # a thread arena's heap, at most (glibc's HEAP_MAX_SIZE on 64-bit)


def keep_freed_memory(keep_bytes: int = 1 << 30, *, arenas: int = 1) -> bool:
    """Have glibc's malloc keep freed memory for reuse instead of unmapping it (process-wide).

    Every block comes from the heap (`M_MMAP_MAX` 0), all threads share the main arena
    (`M_ARENA_MAX` 1: a thread's own arena falls back to mmap above 64 MiB), and up to
    `keep_bytes` of free heap top stay mapped (`M_TRIM_THRESHOLD`), so XLA's per-call
    temporaries reuse pages already faulted in. The cost is resident memory: the freed
    blocks stay with the process. Call it early, before JAX starts its threads. Returns
    False (nothing changed) where the C library is not glibc.

    `arenas` 0 leaves glibc's own arena count (8 a core) instead of the one shared arena:
    threads that malloc at once then do not queue on its lock. `wse train` runs so: its
    2-core step runs each CPU device's calls on its own XLA threads, which allocate side by
    side, and one arena made them wait on each other (a thread caught in `free` waiting for
    the main arena's lock). bench_train's quick step at 2 cores, fresh processes alternated
    (2026-12-03, load 1.0-1.4): 96.2 and 98.4 ms against 102.5 and 104.3 with one arena; a
    thread's arena heap is at most 64 MiB, so a larger block still comes from the main one,
    and some blocks are faulted in again (0-2,400 page faults a step against none). Those
    came from glibc unmapping a thread arena's extra heap once every block in it is free
    (the trim threshold does not hold these back): the next step maps it and faults its
    pages in afresh (bench_train's quick streamed step at 2 cores: 0-14 page faults a step in
    most runs, 2,700-5,600 in some, by the heap state the run's other contenders left). With
    `arenas` 0, `M_TOP_PAD` of a whole arena heap (64 MiB) keeps every such heap (glibc
    frees one only while its arena keeps less than the pad spare): 0-300 a step, 12
    alternated runs (2026-12-04).
    `train_arenas()` gives what `wse train` passes: 0 on more than one core, 1 on one core,
    where no two threads allocate at once and one arena faults nothing in (bench_train's quick
    1-core worker, alternated 2026-12-03: 1.12 / 1.11x PyTorch with one arena, 1.10 / 1.10x
    with glibc's, 84-134 page faults a step against none).
    """
    if not 0 < keep_bytes < 1 << 31:
        raise WseError(f"keep_bytes must be in (0, 2**31), got {keep_bytes}")
    if arenas < 0:
        raise WseError(f"arenas must be >= 0 (0: glibc's default), got {arenas}")
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    settings = [(_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, keep_bytes)]
    settings += [(_M_ARENA_MAX, arenas)] if arenas else [(_M_TOP_PAD, _ARENA_HEAP)]
    return all(mallopt(param, value) == 1 for param, value in settings)


def train_arenas() -> int:
    """`keep_freed_memory`'s `arenas` for a training process: glibc's own arenas (0) when it
    runs on more than one core, where threads allocate side by side, else one arena (1)."""
    return 0 if usable_cores() > 1 else 1


def _ready(out: Any) -> Any:
    """`out` once its JAX arrays are computed (no JAX imported: nothing to wait for)."""
    if "jax" not in sys.modules or isinstance(out, np.ndarray):
        return out
    import jax

    return jax.block_until_ready(out)


def wall_s(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """(result, wall seconds) of one call `fn(*args)`, its JAX results waited for."""
    t0 = time.perf_counter()
    out = _ready(fn(*args))
    return out, time.perf_counter() - t0


def wall_times_s(
    fn: Callable[..., Any], *args: Any, repeats: int = 5, warmup: int = 1
) -> list[float]:
    """Wall seconds of `repeats` calls of `fn(*args)` after `warmup` untimed calls."""
    if repeats < 1 or warmup < 0:
        raise WseError(f"timing needs repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
    for _ in range(warmup):
        _ready(fn(*args))
    return [wall_s(fn, *args)[1] for _ in range(repeats)]


def median_wall_s(fn: Callable[..., Any], *args: Any, repeats: int = 5, warmup: int = 1) -> float:
    """Median wall seconds of one call of `fn(*args)` (see `wall_times_s`)."""
    return statistics.median(wall_times_s(fn, *args, repeats=repeats, warmup=warmup))
