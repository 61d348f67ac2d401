"""What a failed checkpoint save leaves behind, reduced to the one line that reports it.

When a save fails on the disk (ENOSPC, a folder gone), `wse_trainer.checkpoints` raises
`CheckpointSaveError` (one line: the disk, the bytes needed, the last good step). orbax's
background threads meanwhile log the same error with its traceback at ERROR level, then
log the follow-on failures of its other threads; tensorstore's writes still in flight
complete onto the failed save's closed event loop and print `RuntimeError: Event loop is
closed` (through `sys.excepthook` or `sys.unraisablehook`), and the write coroutines that
never ran are collected at exit with `RuntimeWarning: coroutine ... was never awaited`;
closing the manager raises the stored error once more.
`quiet_orbax()` (installed by every writing `Checkpointer`) drops orbax's log records
whose error is an OSError, and every orbax record once a save has failed; `save_failed()`
marks that moment, installs hooks that drop the closed-loop errors (any other error still
prints) and ignores the never-awaited warning of orbax's abandoned writes. Errors that are
not the disk's keep their tracebacks.
"""

from __future__ import annotations

import logging
import shutil
import sys
import warnings
from pathlib import Path
from types import TracebackType

__all__ = ["free_bytes", "os_error", "quiet_orbax", "save_failed"]

_failed = False  # a save failed in this process: orbax's further records are its echoes


def free_bytes(directory: Path) -> int:
    """Free bytes on the disk that holds `directory` (or its nearest existing parent)."""
    p = directory
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def os_error(e: BaseException | None) -> OSError | None:
    """The OSError under an exception (orbax wraps the disk's own error)."""
    while e is not None and not isinstance(e, OSError):
        e = e.__cause__ or e.__context__
    return e


class _OrbaxEchoes(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if "orbax" not in record.pathname:
            return True
        if _failed:
            return False
        error = record.exc_info[1] if record.exc_info else None
        return os_error(error) is None


_FILTER = _OrbaxEchoes()


def quiet_orbax() -> None:
    """Drop orbax's echoes of a disk error from the `absl` logger (idempotent)."""
    absl = logging.getLogger("absl")
    if _FILTER not in absl.filters:
        absl.addFilter(_FILTER)


def _closed_loop(e: BaseException) -> bool:
    return isinstance(e, RuntimeError) and str(e) == "Event loop is closed"


def save_failed() -> None:
    """A save failed: from now on orbax's records and the closed-loop errors of its writes
    still in flight are not printed."""
    global _failed
    if _failed:
        return
    _failed = True
    previous, unraisable = sys.excepthook, sys.unraisablehook

    def hook(kind: type[BaseException], e: BaseException, tb: TracebackType | None) -> None:
        if not _closed_loop(e):
            previous(kind, e, tb)

    def unraisable_hook(u) -> None:  # noqa: ANN001 (sys.UnraisableHookArgs)
        if u.exc_value is None or not _closed_loop(u.exc_value):
            unraisable(u)

    sys.excepthook, sys.unraisablehook = hook, unraisable_hook
    # the writes orbax had queued for the failed save are collected unawaited at exit
    warnings.filterwarnings(
        "ignore", message=r"coroutine '.*' was never awaited", category=RuntimeWarning
    )
