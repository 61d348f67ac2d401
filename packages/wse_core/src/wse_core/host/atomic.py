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
new file keeps an existing file's permissions (else the umask's), and a path that is not a
regular file (`/dev/null`) is written in place. `write_atomically(path, data)` writes bytes
or text this way.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "write_atomically"]


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write in place of `path`, renamed onto it on a clean exit."""
    target = Path(os.path.realpath(path))  # through a link: replace what it points at
    if target.exists() and not target.is_file():  # /dev/null, a device: no rename onto it
        yield target
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.part{target.suffix}")
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else None
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
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomically(path: str | Path, data: bytes | str) -> Path:
    """Write `data` (text as UTF-8) to `path` whole or not at all; returns `path`."""
    with atomic_path(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
    return Path(path)
