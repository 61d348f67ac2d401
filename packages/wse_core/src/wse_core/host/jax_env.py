"""The environment variables JAX and XLA read when they start, checked before they do.

A bad value is refused in one line naming the variable and what it may be (a `WseError`: the
`wse` command's `Error: ...`, exit 2), instead of JAX's ValueError traceback at `import jax`
or XLA's 94-line flag list when its backend starts (hunt 65). `runtime.configure` calls
`check()` before JAX is imported.

Contract. `check(environ)` raises a WseError for the first bad one of:
- the JAX options of `JAX_OPTIONS`, the ones users set most (each read as JAX reads it at
  import, without JAX: a truth value, an integer, a number, one of a list; a test holds the
  table to JAX's own);
- every other JAX_* variable JAX reads at import, read by JAX itself (hunt 78: a hand table
  falls behind JAX; `JAX_DEFAULT_MATMUL_PRECISION=bogus` was a 70-line traceback): the
  ValueError JAX raises for it as it is imported becomes one line naming the variable and,
  from JAX's own definition of the option, what it may be;
- `JAX_PLATFORMS` naming a GPU (gpu, cuda, rocm) where no JAX GPU plugin is installed (JAX
  then named the backend it tried last: 'rocm' for `gpu`, on a machine without ROCm), and
  JAX's older `JAX_PLATFORM_NAME` naming a platform this machine has no backend for (it
  failed at the backend's start, after the import), and `JAX_DEFAULT_DEVICE` naming gpu or
  tpu where JAX will start no such backend (JAX_PLATFORMS's, else the CPU and the installed
  plugins': JAX failed at the first device use);
- XLA_FLAGS' `--xla_force_host_platform_device_count`, the one XLA flag the stack reads
  (`xla_device_count`: a positive integer; `runtime` bounds it), an XLA_FLAGS that XLA would
  read as a flags file or a word XLA reads that is no --flag (`xla_flags.check_words`), and
  the flags XLA reads, asked of XLA (`xla_flags.ask_xla`). Words XLA ignores (from the first
  that is no --flag on) pass, as XLA passes them, with a one-line note on stderr.
Cost. The table, the platforms, the device count and XLA_FLAGS' words are read without JAX
(~10 us a call). The other two checks need JAX or XLA, so for this process's environment,
with JAX not yet imported, they are made at JAX's first import (an import hook; hunt 78's
review: `import jax` here cost `wse wafer info` 0.6 -> 1.8 s for any JAX_* variable): the
JAX_* variables by that import itself (nothing extra), XLA_FLAGS by one helper process
(~0.2-0.4 s) where it holds flags other than the stack's own. A command that never imports
JAX (`wse wafer info`, `wse --help`) pays for neither; a refusal then comes at the command's
first JAX import instead of before its work. For another mapping, or with JAX imported
already, XLA is asked at once (JAX has read its variables by then).
`xla_device_count(environ)` is that flag's count (its last occurrence, as XLA takes it), None
where it is not given.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Mapping

from wse_core.errors import WseError, shown
from wse_core.host import xla_flags

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
    _check_platform_name(environ.get("JAX_PLATFORM_NAME", ""))
    _check_default_device(environ)
    xla_flags.check_words(environ)
    xla_device_count(environ)
    if environ is os.environ and "jax" not in sys.modules:
        _at_jax_import()  # the rest as JAX is imported, by commands that import it anyway
    else:
        xla_flags.ask_xla(environ)


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


def _check_platform_name(value: str) -> None:
    """JAX_PLATFORM_NAME (JAX lowercases it): cpu, a GPU with its plugin, a TPU with libtpu,
    or another installed plugin's platform; JAX refused anything else at the backend's start
    ("Backend 'tpu' failed to initialize ...", a traceback)."""
    name = value.lower()
    if name in ("", "cpu"):
        return
    plugins = _plugins()
    if name in _GPUS:
        ok = any(k in p for p in plugins for k in _GPUS[name])
    elif name == "tpu":
        ok = importlib.util.find_spec("libtpu") is not None
    else:
        ok = any(name in p.split() or p.startswith(f"{name} ") for p in plugins)
    if not ok:
        raise WseError(
            f"JAX cannot start JAX_PLATFORM_NAME={shown(value)} on this machine (no backend "
            "for it here); set JAX_PLATFORM_NAME=cpu or unset it (JAX's older spelling of "
            "JAX_PLATFORMS)"
        )


def _check_default_device(environ: Mapping[str, str]) -> None:
    """JAX_DEFAULT_DEVICE naming a backend JAX will not start here (hunt 79): JAX takes 'gpu'
    or 'tpu' at import and refused it at the first device use, a 93-line RuntimeError
    traceback ("Unknown backend: 'gpu' requested, but no platforms that are instances of gpu
    are present"). Its other values JAX refuses itself, at import."""
    value = environ.get("JAX_DEFAULT_DEVICE", "")
    if value not in ("gpu", "tpu"):
        return
    named = environ.get("JAX_PLATFORMS", "") or environ.get("JAX_PLATFORM_NAME", "")
    if named:  # the platforms JAX starts: those alone (checked above: their plugins are here)
        kinds = {"gpu" if p in _GPUS else p for p in named.lower().split(",") if p}
    else:  # all it finds: the CPU, and a GPU or TPU where its plugin is installed
        plugins = _plugins()
        kinds = {"cpu"} | ({"gpu"} if any(k in p for p in plugins for k in _GPUS["gpu"]) else set())
        if importlib.util.find_spec("libtpu") is not None:
            kinds.add("tpu")
    if value not in kinds:
        why = f"JAX_PLATFORMS={shown(named)} starts" if named else "this machine has"
        raise WseError(
            f"JAX_DEFAULT_DEVICE={shown(value)} names a backend JAX will not start here ({why} "
            f"{', '.join(sorted(kinds))}); set JAX_DEFAULT_DEVICE to one of those or unset it"
        )


def _plugins() -> list[str]:
    """The names of the JAX plugins installed (`jax_plugins.*` modules and entry points, as
    `jax._src.xla_bridge.discover_pjrt_plugins` finds them), lowercased; without JAX."""
    import importlib.metadata
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
    flags = [xla_flags.flag(w) for w in xla_flags.words(environ.get("XLA_FLAGS", ""))]
    values = [value for name, value in flags if name == XLA_DEVICE_FLAG]  # the ones XLA reads
    if not values:
        return None
    raw = values[-1]
    if not (raw.isascii() and raw.isdigit() and int(raw) > 0):
        raise WseError(
            f"XLA_FLAGS' --{XLA_DEVICE_FLAG} must be a positive integer of virtual CPU "
            f"devices (or give --devices / WSE_DEVICES instead); got {shown(raw)}"
        )
    return int(raw)


# set by `runtime.configure` itself (JAX_NUM_CPU_DEVICES overwritten, the cache folder any
# path), or checked without JAX (`check`): JAX's ValueError names none of them
_OWN = frozenset(
    {"JAX_NUM_CPU_DEVICES", "JAX_COMPILATION_CACHE_DIR", "JAX_PLATFORMS", *JAX_OPTIONS}
)


def _at_jax_import() -> None:
    """Have JAX's first import make the checks that need JAX or XLA (module doc), once."""
    if not any(isinstance(f, _CheckedImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _CheckedImport())


class _CheckedImport(importlib.abc.MetaPathFinder):
    """Runs the `jax` package checked: XLA_FLAGS' note and XLA's verdict before it, and the
    ValueError JAX raises for a JAX_* variable as it reads them one line (`_refused`)."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201 (importlib's)
        if name != "jax":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _CheckedImport)]
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_checked(module) -> None:  # noqa: ANN001
            xla_flags.ask_xla()  # a refusal is the one line: the note after it
            xla_flags.note_ignored()
            try:
                run(module)
            except ValueError as e:
                theirs = sorted(k for k in os.environ if k.startswith("JAX_") and k not in _OWN)
                if isinstance(e, WseError) or not theirs:
                    raise
                raise WseError(_refused(e, os.environ, theirs)) from None

        spec.loader.exec_module = exec_checked  # type: ignore[method-assign]
        return spec


# JAX's readers of one variable (jax._src.config), by what each takes
_READERS = {
    "bool_env": "a truth value (1/0, true/false, yes/no, on/off)",
    "bool_state": "a truth value (1/0, true/false, yes/no, on/off)",
    "int_env": "an integer",
    "int_state": "an integer",
    "float_state": "a number",
}


def _refused(e: ValueError, environ: Mapping[str, str], theirs: list[str]) -> str:
    """The line for JAX's ValueError `e`: the variable and what it may be, read from the
    frame of JAX's reader that raised it (its `name`/`varname`, its `enum_values`)."""
    name, wanted = None, None
    tb = e.__traceback__
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
        if not frame.f_code.co_filename.endswith(os.path.join("_src", "config.py")):
            continue
        local = frame.f_locals
        var = local.get("varname") or local.get("name")
        if isinstance(var, str) and var.upper() in environ:
            name, reader = var.upper(), frame.f_code.co_name
            wanted = _READERS.get(reader)
            values = local.get("enum_values") or [m.value for m in local.get("enum_class", ())]
            if values:
                wanted = f"one of {', '.join(map(str, values))}"
    said = " ".join(str(e).split())
    if name is None:
        return (
            f"JAX cannot start with the JAX variables set ({', '.join(theirs)}): {said}; fix "
            "or unset them"
        )
    if wanted is None:
        return f"{name} is refused by JAX ({said}); fix it or unset it"
    return f"{name} must be {wanted}, or unset; got {shown(environ[name])}"
