"""One `wse train` at a time in a model_dir: an advisory lock held for the whole run.

Contract. `hold(model_dir)` takes an exclusive `fcntl.flock` on `<model_dir>/LOCK_NAME`
(made when missing) and writes the holder's pid, host and start time into it. When another
process holds it, `ModelDirInUse` (a ConfigError: exit 2, one line naming that pid) and
nothing is changed (hunt 64: two runs in one folder interleaved metrics.jsonl and broke
each other's saves, one with 972 lines of traceback). `release(model_dir)` removes the file
and drops the lock; `held(model_dir)` says whether this process holds it. Another command
that writes a folder one run at a time takes the same lock under its own file name and words
(`lock_name`, `in_use`: `wse experiments run` on its `--out`, hunt 68).

Why flock: the kernel drops it when its process dies, so a run killed with SIGKILL leaves a
lock file the next run takes at once (a pid file would have to guess whether its pid is
stale). The file is removed while still locked, and a lock taken on a file that was removed
meanwhile is taken again on the new one, so two runs never hold two files of one name.
A process holds a folder's lock once (a second `hold` is a no-op): a multi-process run
locks it in process 0 alone (`wse_trainer.run_folder.make_model_dir`). A filesystem
without flock (ENOLCK, some network mounts) runs unlocked, as before.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from wse_trainer.config import ConfigError

__all__ = ["LOCK_NAME", "ModelDirInUse", "hold", "held", "release"]

LOCK_NAME = ".wse-train.lock"
_UNLOCKED = -1  # held on a filesystem without flock: nothing to release
_held: dict[str, int] = {}  # absolute lock file -> its descriptor


class ModelDirInUse(ConfigError):
    """Another process runs in this model_dir (exit 2; nothing was changed)."""


def _key(model_dir: Path, lock_name: str) -> str:
    return str(Path(model_dir).absolute() / lock_name)


def held(model_dir: Path, *, lock_name: str = LOCK_NAME) -> bool:
    return _key(model_dir, lock_name) in _held


def hold(
    model_dir: Path,
    *,
    lock_name: str = LOCK_NAME,
    in_use: Callable[[str], Exception] | None = None,
) -> None:
    """Lock `model_dir` for this process, or ModelDirInUse naming the process that has it
    (`in_use(holder)`: another command's refusal, given the holder's words)."""
    key, path = _key(model_dir, lock_name), Path(model_dir) / lock_name
    if key in _held:
        return
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise ConfigError(f"cannot lock model_dir {str(model_dir)!r}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder(fd) if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else None
            os.close(fd)
            if holder is None:  # no flock on this filesystem
                _held[key] = _UNLOCKED
                return
            if in_use is not None:
                raise in_use(holder) from None
            raise ModelDirInUse(
                f"model_dir {str(model_dir)!r} is in use by another wse train ({holder}); "
                "wait for it to finish, or give another model_dir (-o)"
            ) from None
        if _same_file(fd, path):
            break
        os.close(fd)  # its holder removed it between our open and our lock: take the new one
    os.ftruncate(fd, 0)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {stamp}\n".encode())
    _held[key] = fd


def _holder(fd: int) -> str:
    """The holder's words ('pid 123, since 2025-01-02 03:04:05'), read from the lock file;
    it writes them just after it locks, so an empty file is read again for a moment."""
    for _ in range(20):
        text = os.pread(fd, 400, 0).decode("utf-8", "replace").split()
        if len(text) >= 4 and text[0] == "pid" and text[2] == "on":
            pid, host, since = text[1], text[3], " ".join(text[5:7])
            where = "" if host == socket.gethostname() else f" on {host}"
            return f"pid {pid}{where}, since {since}"
        time.sleep(0.025)
    return "pid unknown"


def _same_file(fd: int, path: Path) -> bool:
    try:
        now = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)


def release(model_dir: Path, *, lock_name: str = LOCK_NAME) -> None:
    """Remove the lock file (while still locked: see the module doc) and drop the lock; a
    folder this process does not hold is left alone."""
    fd = _held.pop(_key(model_dir, lock_name), _UNLOCKED)
    if fd == _UNLOCKED:
        return
    path = Path(model_dir) / lock_name
    try:
        if _same_file(fd, path):  # the folder may be gone, or another run's by now
            with contextlib.suppress(OSError):
                path.unlink()
    finally:
        os.close(fd)
