"""The environment variables JAX and XLA read when they start, checked before they do.

A bad value is refused in one line naming the variable and what it may be (a `WseError`: the
`wse` command's `Error: ...`, exit 2), instead of JAX's ValueError traceback at `import jax`
or XLA's 94-line flag list when its backend starts (hunt 65). `runtime.configure` calls
`check()` before JAX is imported.

Contract. `check(environ)` raises a WseError for the first bad one of:
- the JAX options of `JAX_OPTIONS`, the ones users set (each read as JAX reads it at import:
  a truth value, an integer, a number, one of a list; a test holds the table to JAX's own);
- `JAX_PLATFORMS` naming a GPU (gpu, cuda, rocm) where no JAX GPU plugin is installed (JAX
  then named the backend it tried last: 'rocm' for `gpu`, on a machine without ROCm);
- XLA_FLAGS' `--xla_force_host_platform_device_count`, the one XLA flag the stack reads
  (`xla_device_count`: a positive integer; `runtime` bounds it). XLA checks its other flags
  itself.
`xla_device_count(environ)` is that flag's count (its last occurrence, as XLA takes it), None
where it is not given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from wse_core.errors import WseError, shown

__all__ = ["JAX_OPTIONS", "TRUTH_VALUES", "XLA_DEVICE_FLAG", "check", "xla_device_count"]

# JAX's `bool_env`, case-insensitive: true ones, then false ones
TRUTH_VALUES = ("y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0")
JAX_OPTIONS: dict[str, type | tuple[str, ...]] = {
    "JAX_ENABLE_X64": bool,
    "JAX_DISABLE_JIT": bool,
    "JAX_DEBUG_NANS": bool,
    "JAX_DEBUG_INFS": bool,
    "JAX_LOG_COMPILES": bool,
    "JAX_ENABLE_CHECKS": bool,
    "JAX_ENABLE_COMPILATION_CACHE": bool,
    "JAX_ENABLE_PREEMPTION_SERVICE": bool,
    "JAX_EXPLAIN_CACHE_MISSES": bool,
    "JAX_CPU_ENABLE_ASYNC_DISPATCH": bool,
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": float,  # the stack's default is 0
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": int,
    "JAX_NUMPY_RANK_PROMOTION": ("allow", "warn", "raise"),
    "JAX_TRACEBACK_FILTERING": (
        "off",
        "tracebackhide",
        "remove_frames",
        "quiet_remove_frames",
        "auto",
    ),  # fmt: skip
    "JAX_DEFAULT_PRNG_IMPL": (
        "threefry2x32",
        "threefry4x32",
        "rbg",
        "unsafe_rbg",
        "philox2x32",
        "philox4x32",
    ),  # fmt: skip
}
XLA_DEVICE_FLAG = "xla_force_host_platform_device_count"
_GPUS = {"gpu": ("cuda", "rocm"), "cuda": ("cuda",), "rocm": ("rocm",)}


def check(environ: Mapping[str, str] = os.environ) -> None:
    """Refuse the first JAX or XLA variable JAX could not start with (module doc)."""
    for name, kind in JAX_OPTIONS.items():
        if name in environ and (wanted := _unreadable(environ[name], kind)):
            raise WseError(f"{name} must be {wanted}, or unset; got {shown(environ[name])}")
    _check_platforms(environ.get("JAX_PLATFORMS", ""))
    xla_device_count(environ)


def _unreadable(value: str, kind: type | tuple[str, ...]) -> str | None:
    """What `value` should be, where JAX cannot read it as `kind`; None where it can."""
    if isinstance(kind, tuple):
        return None if value in kind else f"one of {', '.join(kind)}"
    if kind is bool:
        words = "a truth value (1/0, true/false, yes/no, on/off)"
        return None if value.lower() in TRUTH_VALUES else words
    try:
        kind(value)  # int() and float(), as JAX reads them
    except ValueError:
        return "an integer" if kind is int else "a number"
    return None


def _check_platforms(value: str) -> None:
    """The words of the CLI's own line for a platform JAX cannot start (errors._no_backend)."""
    for name in value.split(","):
        if name in _GPUS and not any(k in p for p in _plugins() for k in _GPUS[name]):
            which = f" ({name})" if name != value else ""
            raise WseError(
                f"JAX cannot start JAX_PLATFORMS={shown(value)} on this machine; set "
                f"JAX_PLATFORMS=cpu or unset it (it asks for a GPU{which}, and no JAX GPU "
                "plugin is installed here: pip install 'jax[cuda12]')"
            )


def _plugins() -> list[str]:
    """The names of the JAX plugins installed (`jax_plugins.*` modules and entry points, as
    `jax._src.xla_bridge.discover_pjrt_plugins` finds them), lowercased; without JAX."""
    import importlib.metadata
    import importlib.util
    import pkgutil

    try:
        spec = importlib.util.find_spec("jax_plugins")
        where = list(spec.submodule_search_locations or ()) if spec else []
        names = [m.name for m in pkgutil.iter_modules(where)]
        names += [
            f"{e.name} {e.value}" for e in importlib.metadata.entry_points(group="jax_plugins")
        ]
    except Exception:  # a broken install: JAX says what it finds
        return ["cuda rocm"]
    return [n.lower() for n in names]


def xla_device_count(environ: Mapping[str, str] = os.environ) -> int | None:
    """XLA_FLAGS' `--xla_force_host_platform_device_count` (module doc); WseError where it
    is no positive integer (XLA's own parser printed its 94-line flag list for `abc`)."""
    values = [
        flag.partition("=")[2]
        for flag in environ.get("XLA_FLAGS", "").split()
        if flag.startswith("-") and flag.lstrip("-").partition("=")[0] == XLA_DEVICE_FLAG
    ]
    if not values:
        return None
    raw = values[-1]
    if not (raw.isascii() and raw.isdigit() and int(raw) > 0):
        raise WseError(
            f"XLA_FLAGS' --{XLA_DEVICE_FLAG} must be a positive integer of virtual CPU "
            f"devices (or give --devices / WSE_DEVICES instead); got {shown(raw)}"
        )
    return int(raw)
