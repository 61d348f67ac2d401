"""The PE kernels' numba compiles run in helper processes, one per kernel, while the MD shell
traces and lowers its first program.

Why: on a cold cache numba compiles the kernels for ~15 s of CPU at 32,000 atoms (force
5.4 s, density 4.0, build 5.4, each in a process of its own; issue 44's timeline), mostly
Python under the GIL, and XLA needs a program's FFI targets registered before it compiles
it. A thread would hold the GIL the tracing needs and would compile the kernels one after
the other; a process per kernel compiles on another core into numba's on-disk cache
(`NUMBA_CACHE_DIR`, set by `wse_core.host.runtime.configure`; the child inherits the
environment, so it is the same place), and this process then loads the handler from there
when it registers the target. A helper outliving a killed run exits when its compile ends.

Contract: `start(targets)` starts, for each FFI target name (`wse_md_<kernel>`) not started
before, one process that compiles its handler (`python -c BOOT <target>`: the kernel's
module imported without `wse_hpc.md`'s package imports, which load jax). `wait(target)`
waits for that target's process, when one was started, and marks the target done (its
registration calls it first: a registered target is never started); a process that failed
or hung (past WAIT_S) is ignored: the caller then compiles in-process, as it did without.
`deferred()` is a context in which `pe_pairs._target` and `neighbours.build._build_target`
name their target without compiling or registering it (tracing needs only the name);
`exec_cache.compiled` registers the targets a lowered program calls before XLA compiles it.
Only the shell starts processes, and only when a program is not in the disk cache (a warm
run starts none).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["deferred", "deferring", "start", "wait", "module_of"]

# A kernel's compile took at most ~10 s of CPU (force, 32,000 atoms, issue 44); past this a
# helper is taken as hung and the kernel is compiled in-process
WAIT_S = 120.0

# the child: `wse_hpc.md` as a bare namespace (its __init__ imports jax), then the handler
_BOOT = """
import sys, types, importlib
pkg = types.ModuleType("wse_hpc.md"); pkg.__path__ = [sys.argv[1]]
sys.modules["wse_hpc.md"] = pkg
importlib.import_module("wse_hpc.md." + sys.argv[2]).handler(sys.argv[3])
"""

_procs: dict[str, subprocess.Popen | None] = {}
_local = threading.local()


def module_of(target: str) -> tuple[str, str]:
    """(module under `wse_hpc.md`, kernel name) of an FFI target `wse_md_<kernel>`."""
    name = target.removeprefix("wse_md_")
    return ("pe_build_numba" if name in ("build", "build_pairs") else "pe_pairs_numba"), name


def start(targets) -> None:
    """One compiling process per target not started before (module doc)."""
    here = str(Path(__file__).resolve().parent)
    for target in targets:
        if target in _procs:
            continue
        module, name = module_of(target)
        cmd = [sys.executable, "-c", _BOOT, here, module, name]
        try:
            _procs[target] = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=os.environ.copy(),
            )
        except OSError:  # no process: the kernel is compiled in-process
            _procs[target] = None


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
