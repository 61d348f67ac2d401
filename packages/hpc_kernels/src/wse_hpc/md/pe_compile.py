"""The PE kernels' numba compiles run in helper processes, one per kernel module, while the MD
shell traces and lowers its first program.

Why: on a cold cache numba compiles the kernels for ~15 s of CPU at 32,000 atoms (force 5.4 s,
density 4.0, build 5.4, each in a process of its own; issue 44's timeline; ~6.5 s since
`numba_ffi` reads XLA's call frame by intrinsics, in two processes), mostly Python under the
GIL, and XLA needs a program's FFI targets registered before it compiles it. A thread would
hold the GIL the tracing needs and would compile the kernels one after the other; a process
per kernel module (the pair kernels, the build) compiles on another core into numba's on-disk
cache (`NUMBA_CACHE_DIR`, set by `wse_core.host.runtime.configure`; the child inherits the
environment, so it is the same place), and this process then loads the handler from there when
it registers the target. A helper outliving a killed run exits when its compile ends.

Contract: `start(targets)` starts, for the FFI target names (`wse_md_<kernel>`) not started
before and not in numba's cache (`stored`, numba's own index and source stamp: a warm run
starts none), one process per module that compiles their handlers in turn (`python -c BOOT
<module> <kernel>...`: the kernels' module imported without `wse_hpc.md`'s package imports,
which load jax); a process compiling two kernels pays numba's start-up once (the force and
density kernels: ~0.5 s of CPU less than a process each). `wait(target)` waits for that
target's process, when one was started, and marks the target done (its registration calls it
first: a registered target is never started); a process that failed or hung (past WAIT_S) is
ignored: the caller then compiles in-process, as it did without. `deferred()` is a context in
which `pe_pairs._target` and `neighbours.build._build_target` name their target without
compiling or registering it (tracing needs only the name); `exec_cache.compiled` registers the
targets a lowered program calls before XLA compiles it. Only the shell starts processes:
`simulate.run_md` the pair kernels' once the wafer is known and the build's once the window is
(`neighbours.build.pe_kernels_for`; the 32,000-atom cold start's ~1.2 s of planning runs
beside them), `exec_cache.compiled` a program's kernels not started before.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["deferred", "deferring", "start", "stored", "wait", "module_of"]

# A kernel's compile took at most ~10 s of CPU (force, 32,000 atoms, issue 44); past this a
# helper is taken as hung and the kernel is compiled in-process
WAIT_S = 120.0

# the child: `wse_hpc.md` as a bare namespace (its __init__ imports jax), then the handler
_BOOT = """
import sys, types, importlib
pkg = types.ModuleType("wse_hpc.md"); pkg.__path__ = [sys.argv[1]]
sys.modules["wse_hpc.md"] = pkg
handler = importlib.import_module("wse_hpc.md." + sys.argv[2]).handler
for name in sys.argv[3:]:
    handler(name)
"""

_procs: dict[str, subprocess.Popen | None] = {}
_local = threading.local()


def module_of(target: str) -> tuple[str, str]:
    """(module under `wse_hpc.md`, kernel name) of an FFI target `wse_md_<kernel>`."""
    name = target.removeprefix("wse_md_")
    return ("pe_build_numba" if name in ("build", "build_pairs") else "pe_pairs_numba"), name


def start(targets) -> None:
    """One compiling process per module of the targets not started before (module doc)."""
    here = str(Path(__file__).resolve().parent)
    by_module: dict[str, list[str]] = {}
    for target in dict.fromkeys(targets):
        if target in _procs:
            continue
        if stored(target):  # numba loads it: nothing to compile
            _procs[target] = None
            continue
        by_module.setdefault(module_of(target)[0], []).append(target)
    for module, group in by_module.items():
        cmd = [sys.executable, "-c", _BOOT, here, module, *(module_of(t)[1] for t in group)]
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=os.environ.copy(),
            )
        except OSError:  # no process: the kernels are compiled in-process
            proc = None
        _procs.update(dict.fromkeys(group, proc))


def stored(target: str) -> bool:
    """Whether numba's on-disk cache holds the handler of `target` (`numba_ffi.stored`; this
    imports the kernels' module, as registering it does)."""
    module, name = module_of(target)
    return importlib.import_module(f"wse_hpc.md.{module}").handler.stored(name)


def wait(target: str) -> None:
    """Wait for the process compiling `target`, if one was started (module doc)."""
    proc, _procs[target] = _procs.get(target), None  # from now on, never started again
    if proc is None:
        return
    try:
        proc.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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
