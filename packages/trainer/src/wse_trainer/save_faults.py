"""What a failed or interrupted checkpoint save leaves behind, reduced to the one line that
reports it, and an exit that cannot hang on it.

When a save fails on the disk (ENOSPC, EFBIG, a read-only or vanished folder),
`wse_trainer.checkpoints` raises `CheckpointSaveError` (one line: the disk, the bytes needed,
the last good step). The disk's error reaches it as an OSError in the exception's chain
(etils' `open`), or only as text: tensorstore, which writes the state's arrays, raises a
ValueError whose message carries the errno (`RESOURCE_EXHAUSTED: ... No space left on device
[os_error_code='28']`); `os_error` reads both. orbax's background threads meanwhile log the
same error with its traceback at ERROR level, then the follow-on failures of its other
threads; asyncio logs each of its write tasks that failed ("Task exception was never
retrieved") as it is collected; tensorstore's writes still in flight complete onto the failed
save's closed event loop and print `RuntimeError: Event loop is closed` (through
`sys.excepthook`), and the write coroutines that never ran are collected at exit with
`RuntimeWarning: coroutine ... was never awaited` or an error of their cleanup; closing the
manager raises the stored error once more (hunt 64: 3,481 lines under `ulimit -f`).
`quiet_orbax()` (called by every writing `Checkpointer`) drops orbax's records (on `absl` and
`asyncio`) whose error is the disk's, and every one of them once a save has failed, and
installs hooks that drop the closed-loop errors. `save_failed()` marks that moment and drops
the errors and never-awaited warnings of orbax's abandoned coroutines. Errors that are not
the disk's keep their tracebacks. `save_interrupted()` does the same for Ctrl-C during a save
(hunt 64: orbax's threads then logged `cannot schedule new futures after shutdown` with a
37-line traceback).

A save that failed or was interrupted can leave orbax's threads waiting for a signal that
will never come (hunt 64: the model_dir remounted read-only mid-run printed the fault line,
then `threading._shutdown` waited on threads blocked in orbax's `blocking_key_value_get` for
its 300 s coordination timeout). `within(fn)` bounds a wait for orbax to `EXIT_BOUND_S`, and
once a save failed or was interrupted the process's exit is bounded too: if orbax's threads
still block it `EXIT_BOUND_S` after its shutdown began, stdout and stderr are flushed and the
process leaves with `os._exit` and the code its run ends with (1 for the fault, 130 for
Ctrl-C), as `timeout` would, only sooner.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

__all__ = [
    "EXIT_BOUND_S",
    "free_bytes",
    "os_error",
    "quiet_orbax",
    "save_failed",
    "save_interrupted",
    "within",
]

EXIT_BOUND_S = 5.0  # the longest a failed run's exit waits for orbax's threads (seconds)
INTERRUPTED_EXIT = 128 + 2  # Ctrl-C's exit code (128 + SIGINT), as typer's and the shells'

_failed = False  # a save failed in this process: orbax's further records are its echoes
_exit_code = 1  # the code the process ends with if orbax's threads block its exit
# the errno in an error's text: tensorstore's status, Rust's io::Error (safetensors, tokenizers)
_OS_ERROR_CODE = re.compile(r"\[os_error_code='?(\d+)'?\]|\(os error (\d+)\)")


def free_bytes(directory: Path) -> int:
    """Free bytes on the disk that holds `directory` (or its nearest existing parent)."""
    p = directory
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def os_error(e: BaseException | None) -> OSError | None:
    """The disk's error under an exception, or None: the first OSError in its chain
    (`__cause__`, `__context__`, an exception group's members: orbax wraps the disk's own
    error), else the errno that tensorstore's error text carries (or a Rust library's:
    safetensors' `I/O error: File too large (os error 27)`), as an OSError."""
    todo, seen = [e], set()
    while todo:
        x = todo.pop(0)
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, OSError):
            return x
        code = _OS_ERROR_CODE.search(str(x))
        n = int(code.group(1) or code.group(2)) if code else -1
        if n in errno.errorcode:
            return OSError(n, os.strerror(n))
        todo += [x.__cause__, x.__context__, *getattr(x, "exceptions", ())]
    return None


class _OrbaxEchoes(logging.Filter):
    """On `absl` (orbax's records) and `asyncio` (its tasks' errors, logged as they are
    collected: "Task exception was never retrieved")."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "orbax" in record.pathname or (
            record.name == "asyncio" and "orbax" in record.getMessage()
        ):
            error = record.exc_info[1] if record.exc_info else None
            return not _failed and os_error(error) is None
        return True


_FILTER = _OrbaxEchoes()


def quiet_orbax() -> None:
    """Drop orbax's echoes of a disk error from the `absl` and `asyncio` loggers, and the
    closed-loop errors of its abandoned writes (idempotent)."""
    absl = logging.getLogger("absl")
    if _FILTER not in absl.filters:
        absl.addFilter(_FILTER)
        logging.getLogger("asyncio").addFilter(_FILTER)
        _drop_closed_loop_errors()


def _closed_loop(e: BaseException) -> bool:
    return isinstance(e, RuntimeError) and str(e) == "Event loop is closed"


def _orbax_coroutine(u) -> bool:  # noqa: ANN001 (sys.UnraisableHookArgs)
    """An error raised while one of orbax's abandoned coroutines was collected."""
    code = getattr(u.object, "cr_code", None)
    return code is not None and "orbax" in code.co_filename


def _drop_closed_loop_errors() -> None:
    """Hooks that drop `RuntimeError: Event loop is closed`: a tensorstore write finishing
    onto the loop of a save orbax already gave up on, the echo of that save's error (the
    writes fail the moment the disk does, before the main thread hears of it: hunt 64 saw
    179 of them under `ulimit -f`); after a failed save, also the errors of orbax's
    coroutines collected at exit. Any other error still prints."""
    previous, unraisable = sys.excepthook, sys.unraisablehook

    def hook(kind: type[BaseException], e: BaseException, tb: TracebackType | None) -> None:
        if not _closed_loop(e):
            previous(kind, e, tb)

    def unraisable_hook(u) -> None:  # noqa: ANN001 (sys.UnraisableHookArgs)
        e = u.exc_value
        if e is None or not (_closed_loop(e) or (_failed and _orbax_coroutine(u))):
            unraisable(u)

    sys.excepthook, sys.unraisablehook = hook, unraisable_hook


def save_failed(exit_code: int = 1) -> None:
    """A save failed: from now on orbax's records and its abandoned writes print nothing,
    and the process cannot hang at exit on orbax's threads (it ends with `exit_code` if they
    still block it `EXIT_BOUND_S` into its shutdown)."""
    global _failed, _exit_code
    quiet_orbax()
    if _exit_code != INTERRUPTED_EXIT:  # Ctrl-C ends the run with 130 whatever follows it
        _exit_code = exit_code
    _guard_exit()
    if _failed:
        return
    _failed = True
    # the writes orbax had queued for the failed save are collected unawaited at exit
    warnings.filterwarnings(
        "ignore", message=r"coroutine '.*' was never awaited", category=RuntimeWarning
    )


def save_interrupted() -> None:
    """Ctrl-C reached a run during a save: orbax's errors are echoes of it, as after a
    failed save, and a blocked exit ends with 130."""
    save_failed(INTERRUPTED_EXIT)


def within(fn: Callable[[], object], seconds: float | None = None) -> bool:
    """Run `fn` in a daemon thread for at most `seconds` (default `EXIT_BOUND_S`): whether it
    returned (or raised: its error is dropped, an echo of the fault being reported) in time."""
    done = threading.Event()

    def run() -> None:
        try:
            fn()
        except BaseException:  # an echo of the fault already being reported
            pass
        finally:
            done.set()

    threading.Thread(target=run, name="wse-bounded-wait", daemon=True).start()
    return done.wait(EXIT_BOUND_S if seconds is None else seconds)


_shutting_down = threading.Event()
_watchdog: threading.Thread | None = None


def _guard_exit() -> None:
    """Arm the exit's bound once: a daemon thread started now (a thread cannot be started
    once the interpreter finalizes) waits for `threading._shutdown` to begin (its hook runs
    before it joins the other threads), then for `EXIT_BOUND_S`."""
    global _watchdog
    register = getattr(threading, "_register_atexit", None)  # CPython's, 3.9+
    if _watchdog is not None or register is None:
        return
    try:
        register(_shutting_down.set)
    except RuntimeError:  # already shutting down
        _shutting_down.set()
    _watchdog = threading.Thread(target=_bound_exit, name="wse-exit-bound", daemon=True)
    _watchdog.start()


def _orbax_thread(t: threading.Thread) -> bool:
    """One of orbax's save threads (its `_SignalingThread`s, its `async_save` thread)."""
    target = getattr(t, "_target", None)  # threading's own attribute, gone once it ran
    return any(str(getattr(x, "__module__", "")).startswith("orbax") for x in (type(t), target))


def _bound_exit() -> None:
    _shutting_down.wait()
    time.sleep(EXIT_BOUND_S)
    if not any(t.is_alive() and not t.daemon and _orbax_thread(t) for t in threading.enumerate()):
        return  # nothing of orbax's blocks the exit: it goes on, with its own exit code
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(_exit_code)
