"""The PE kernels' numba compiles run in helper processes, one per kernel module, while the MD
shell traces and lowers its first program (`wse_core.host.compile_ahead`'s helpers).

Why: on a cold cache numba compiles the kernels for ~15 s of CPU at 32,000 atoms (force 5.4 s,
density 4.0, build 5.4, each in a process of its own; issue 44's timeline; ~6.5 s since
`numba_ffi` reads XLA's call frame by intrinsics, in two processes), and XLA needs a
program's FFI targets registered before it compiles it: a process per kernel module (the pair
kernels, the build) compiles on another core into numba's on-disk cache, and this process
then loads the handler from there when it registers the target.

Contract: `start(targets)` starts, for the FFI target names (`wse_md_<kernel>`) not started
before and not in numba's cache (`stored`: a warm run starts none), one process per module
(`module_of`) that compiles their handlers in turn (`compile_ahead.start`; the force and
density kernels share one: ~0.5 s of CPU less than a process each). `wait(target)` waits
until that target's handler is in the cache, when a helper was started, and marks the target
done (its registration calls it first: a registered target is never started); a helper that
failed or hung is ignored: the caller then compiles in-process, as it did without.
`deferred()` is a context in which `pe_pairs._target` and `neighbours.build._build_target`
name their target without compiling or registering it (tracing needs only the name);
`exec_cache.compiled` registers the targets a lowered program calls before XLA compiles it.
Only the shell starts processes: `simulate.run_md` the pair kernels' once the wafer is known
and the build's once the window is (`neighbours.build.pe_kernels_for`; the 32,000-atom cold
start's ~1.2 s of planning runs beside them), `exec_cache.compiled` a program's kernels not
started before.
"""

from __future__ import annotations

import contextlib
import threading

from wse_core.host import compile_ahead

__all__ = ["deferred", "deferring", "start", "stored", "wait", "module_of"]

_local = threading.local()


def module_of(target: str) -> tuple[str, str]:
    """(module under `wse_hpc.md`, kernel name) of an FFI target `wse_md_<kernel>`."""
    name = target.removeprefix("wse_md_")
    return ("pe_build_numba" if name in ("build", "build_pairs") else "pe_pairs_numba"), name


def _handler_of(target: str) -> tuple[str, str]:
    """(dotted kernel module, handler name) of an FFI target, for `compile_ahead`."""
    module, name = module_of(target)
    return f"wse_hpc.md.{module}", name


def start(targets) -> None:
    """One compiling process per module of the targets not started before (module doc)."""
    by_module: dict[str, list[str]] = {}
    for target in dict.fromkeys(targets):
        module, name = _handler_of(target)
        by_module.setdefault(module, []).append(name)
    for module, names in by_module.items():
        compile_ahead.start(module, names)


def stored(target: str) -> bool:
    """Whether numba's on-disk cache holds the handler of `target` (`compile_ahead.stored`)."""
    return compile_ahead.stored(*_handler_of(target))


def wait(target: str) -> None:
    """Wait until `target`'s handler is in numba's cache, if a helper compiles it (module
    doc)."""
    compile_ahead.wait(*_handler_of(target))


def deferring() -> bool:
    """Inside `deferred()`: targets are named, not compiled nor registered."""
    return getattr(_local, "depth", 0) > 0


@contextlib.contextmanager
def deferred():
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1
