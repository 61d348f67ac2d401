"""Output files written whole or not at all: every file a command writes (a potential, an
operator, a trace, a step file, a page, a picture, a result) is written to a temporary name
beside it and renamed over it only once complete.

Contract: `atomic_path(path)` yields a path in `path`'s folder, ending in `path`'s suffix (so
`np.savez` adds no `.npz` and matplotlib picks the format from it), for the caller's writer
to fill. When the block ends cleanly the file is flushed to disk and renamed onto `path`
(`os.replace`: a reader sees the old file or the whole new one); when it raises, the
temporary file is removed and `path` is left as it was. A full disk, a file-size limit
(`ulimit -f`) or a kill while writing no longer leaves half a file where a good one was
(hunt 61: `ulimit -f 20; wse hpc md potential --out Cu.eam.alloy` cut an existing potential
to 20 KiB). A link is followed (its target is replaced, as writing through it would), the
new file keeps an existing file's permissions (else the umask's). `write_atomically(path,
data)` writes bytes or text this way.

- A path that is there but no regular file is refused (a `WseError`, one line), /dev/null
  alone excepted (written in place: what is written there is thrown away, as asked). Hunt 64:
  a FIFO there blocked the writer for ever, a folder was an IsADirectoryError traceback.
- An OSError of the writer that names no file (a `write` past `ulimit -f`) or names the
  temporary file is given `path` as its file name, so its one line says which file failed.
- SIGTERM (SLURM, `timeout`, `kill`) while a file is written removes the temporary file and
  then stops the process as SIGTERM's default does (status 143); the handler is the main
  thread's only while it writes and only where the program set none of its own (a server's
  or `wse launch`'s stays theirs), so a process busy elsewhere stops on SIGTERM as before.
  Hunt 64: a `.NAME.xxxx.part.png` was left behind; Ctrl-C already cleaned up (it raises).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "sigterm_unclaimed", "write_atomically"]

_UNDER_WAY: set[Path] = set()  # the temporary files being written, by every thread


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write in place of `path`, renamed onto it on a clean exit."""
    target = Path(os.path.realpath(path))  # through a link: replace what it points at
    if str(target) == os.devnull:  # no rename onto a device: written in place
        yield target
        return
    _refuse_not_regular(path, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.part{target.suffix}")
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else None
    with _removed_on_sigterm(tmp):
        os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))  # the umask applies
        try:
            yield tmp
            if mode is not None:
                os.chmod(tmp, mode)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)  # the data reaches the disk before the name does
            finally:
                os.close(fd)
            os.replace(tmp, target)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(e, OSError) and e.strerror and e.filename in (None, str(tmp)):
                e.filename = str(path)  # "cannot write out/figure.png: File too large"
            raise


def _refuse_not_regular(path: str | Path, target: Path) -> None:
    from wse_core.host.readers import not_regular

    if target.exists() and (why := not_regular(target)):
        from wse_core.errors import WseError

        raise WseError(f"cannot write {path}: it {why}; remove it or give another name")


@contextlib.contextmanager
def _removed_on_sigterm(tmp: Path) -> Iterator[None]:
    """`tmp` is removed if SIGTERM comes while the block runs (module docstring)."""
    _UNDER_WAY.add(tmp)
    own = sigterm_unclaimed()
    if own:
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        _UNDER_WAY.discard(tmp)
        # the outermost write's (nested ones found ours set), unless the block set its own
        if own and signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def sigterm_unclaimed() -> bool:
    """True where this thread may take SIGTERM for a while: the main thread (only it may set a
    handler) while SIGTERM has its default (never a program's own: a server's, `wse launch`'s)."""
    return (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    )


def _on_sigterm(signum: int, frame: object) -> None:
    for tmp in list(_UNDER_WAY):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    os.write(2, b"stopped (SIGTERM); the files being written were left as they were\n")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)  # stop as the default would have: status 143


def write_atomically(path: str | Path, data: bytes | str) -> Path:
    """Write `data` (text as UTF-8) to `path` whole or not at all; returns `path`."""
    with atomic_path(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
    return Path(path)
