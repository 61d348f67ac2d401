"""JAX runtime set-up: the number of virtual CPU devices and the persistent compile cache.

JAX fixes its device count when the backend starts, so `configure` must run before any JAX
operation. It sets environment variables (read when `jax` is imported) and, when `jax` is
already imported but its backend is not started, the matching `jax.config` options. Call it
once, early: the `wse` command does it in its root callback; tests do it in the root
conftest.py.

Defaults: one virtual device per core (collectives between more virtual devices than cores
cost ~0.1 ms each, see shared/PLATFORM.md); `WSE_DEVICES` overrides. On a GPU host the real
devices are used and the CPU device count is irrelevant. The compile cache lives in
`$WSE_CACHE_DIR` (default `~/.cache/wse/jax`) — the counterpart of Cerebras' compile artifacts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from wse_core.errors import WseError

__all__ = ["configure", "default_devices", "cache_dir"]

_FAST_COMPILE_FLAG = "--xla_llvm_disable_expensive_passes=true"


def default_devices() -> int:
    """`WSE_DEVICES` if set, else one virtual CPU device per core."""
    env = os.environ.get("WSE_DEVICES")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise WseError(f"WSE_DEVICES must be a positive integer, got {env!r}") from None
        if n <= 0:
            raise WseError(f"WSE_DEVICES must be a positive integer, got {env!r}")
        return n
    return max(1, os.cpu_count() or 1)


def cache_dir() -> Path:
    return Path(os.environ.get("WSE_CACHE_DIR", Path.home() / ".cache" / "wse" / "jax"))


def configure(devices: int | None = None, *, compile_cache: bool = True) -> int:
    """Set the virtual CPU device count (before JAX starts) and the compile cache.

    Returns the device count asked for. Raises WseError for a non-positive count, or when
    JAX's backend has already started with a different count.
    """
    n = default_devices() if devices is None else devices
    if n <= 0:
        raise WseError(f"--devices must be a positive integer, got {n}")
    os.environ["JAX_NUM_CPU_DEVICES"] = str(n)
    flags = os.environ.get("XLA_FLAGS", "")
    if _FAST_COMPILE_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_FAST_COMPILE_FLAG}".strip()
    if compile_cache:
        os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(cache_dir()))
        os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    if "jax" in sys.modules:
        _configure_imported_jax(n, compile_cache)
    return n


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
