"""numba FFI handlers compiled ahead, in helper processes, into numba's on-disk cache while
this process does its other start-up work; the handler's first request here then loads it.

Why: on a cold cache numba compiles a handler for seconds of CPU (MD's PE kernels 2-5 s each,
`wse_hpc.md.pe_compile`; the CPU attention's forward ~3.5 s and backward ~2.6 s after it,
`wse_models.sdpa_cpu`), mostly Python under the GIL, and XLA needs a program's FFI targets
registered before it compiles it. A thread would hold the GIL the tracing needs; a process
compiles on another core into numba's on-disk cache (`NUMBA_CACHE_DIR`, set by
`runtime.configure`; the child inherits the environment, so it is the same place), and this
process loads the handler from there when it registers the target. A helper outliving a
killed run exits when its compile ends.

Why a handler is never compiled in the process that runs it (`load`): numba links each
`njit` kernel a handler calls into the handler's module as a weak (`linkonce_odr`) copy,
optimised again there, and caches the handler's object code with those copies. A process
that compiles the handler has compiled each kernel on its own first, and the JIT binds the
handler's calls to those earlier, strong definitions; a process that loads the handler from
the cache (no kernel compiled) runs the handler's own copies. The two are optimised apart,
and under `fastmath` LLVM orders the sums differently (the CPU attention's `_exp_row` adds
its four vector accumulators as ((a + b) + c) + d on its own, (a + b) + (c + d) as a copy):
on fixed inputs 3-33% of the attention's outputs came out a few ulps apart, a cold run
against a warm one. Compiled in a helper, every run loads the same object code.

Contract: a kernel module (a dotted name, inside a package) defines `handler =
numba_ffi.handlers({...})`. `start(module, names)` starts, for the handlers `names` not
started before and not in numba's cache (`stored`: numba's own index and its stamp of the
source; a warm run starts none), one process that compiles them in the order given (`python
-c BOOT module path name...`: the module imported under a bare stand-in of its package, whose
__init__ may import jax) and writes each name to its stdout once that handler is in the
cache; a process compiling two handlers pays numba's start-up once. `wait(module, name)`
waits for that line (not for the process's later handlers), when a helper was started, and
marks the handler done: its registration calls it first, so a registered handler is never
started; a helper that failed (its output ended without the name) or hung (past WAIT_S) is
given up, and the caller compiles in-process, as it would without. `load(module, name)`
is the handler, from numba's cache: `start` (a helper, unless the cache holds it or one was
started) then `wait`; in-process only where no helper could compile it (the rounding of a
cold run then, see above).
"""

from __future__ import annotations

import importlib
import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Iterable

__all__ = ["WAIT_S", "load", "start", "stored", "wait"]

# A handler's compile took at most ~10 s of CPU (MD's force at 32,000 atoms, issue 44); past
# this a helper is taken as hung and the handler is compiled in-process
WAIT_S = 120.0

# the child: the module's package as a bare stand-in (its __init__ may import jax), then
# each handler compiled (numba writes it to its cache) and announced
_BOOT = """
import importlib, os, sys, types
module, path, names = sys.argv[1], sys.argv[2], sys.argv[3:]
package = types.ModuleType(module.rpartition(".")[0])
package.__path__ = path.split(os.pathsep)
sys.modules[package.__name__] = package
handler = importlib.import_module(module).handler
for name in names:
    handler(name)
    try:
        print(name, flush=True)
    except OSError:  # the parent is gone: the cache is filled all the same
        pass
"""


class _Helper:
    """One helper process and the handler names it has announced."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.out = proc, proc.stdout  # None once the output ended
        self.done: set[str] = set()
        self.lock = threading.Lock()
        self._pending = b""

    def wait_for(self, name: str, timeout_s: float) -> None:
        """Until the helper announces `name`, ends, or `timeout_s` passes (then killed)."""
        with self.lock:
            deadline = time.monotonic() + timeout_s
            while name not in self.done and self.out is not None:
                left = deadline - time.monotonic()
                chunk = self._read(left) if left > 0 else None
                if chunk is None:  # hung: given up
                    self.proc.kill()
                    chunk = b""
                if not chunk:  # ended (or killed): its other handlers are compiled here
                    self.out.close()
                    self.out = None
                    self.proc.wait()
                    return
                lines = (self._pending + chunk).split(b"\n")
                self._pending = lines.pop()
                self.done.update(line.decode() for line in lines)

    def _read(self, timeout_s: float) -> bytes | None:
        """What the helper wrote (b"" at its end), or None when nothing came in timeout_s."""
        assert self.out is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.out, selectors.EVENT_READ)
            if not sel.select(timeout_s):
                return None
        return os.read(self.out.fileno(), 4096)


_helpers: dict[tuple[str, str], _Helper | None] = {}


def load(module: str, name: str) -> object:
    """Handler `name` of `module`, compiled by a helper (unless numba's cache holds it) and
    loaded from numba's cache: the code a warm run runs, bit for bit (module doc)."""
    start(module, [name])
    wait(module, name)
    return importlib.import_module(module).handler(name)


def start(module: str, names: Iterable[str]) -> None:
    """One compiling process for the handlers of `module` not started before (module doc)."""
    todo = []
    for name in dict.fromkeys(names):
        if (module, name) in _helpers:
            continue
        if stored(module, name):  # numba loads it: nothing to compile
            _helpers[(module, name)] = None
            continue
        todo.append(name)
    if not todo:
        return
    path = os.pathsep.join(importlib.import_module(module.rpartition(".")[0]).__path__)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, module, path, *todo],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=os.environ.copy(),
        )
    except OSError:  # no process: the handlers are compiled in-process
        proc = None
    helper = _Helper(proc) if proc is not None else None
    _helpers.update(dict.fromkeys(((module, name) for name in todo), helper))


def stored(module: str, name: str) -> bool:
    """Whether numba's on-disk cache holds handler `name` of `module` (`numba_ffi.stored`;
    this imports the module, as registering the handler does)."""
    return bool(importlib.import_module(module).handler.stored(name))


def wait(module: str, name: str) -> None:
    """Wait for the helper compiling handler `name` of `module`, if one was started, until it
    has the handler in numba's cache (module doc); from now on it is never started again."""
    helper, _helpers[(module, name)] = _helpers.get((module, name)), None
    if helper is not None:
        helper.wait_for(name, WAIT_S)
