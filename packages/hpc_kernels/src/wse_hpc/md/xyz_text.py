"""An extended XYZ file's text, as `wse_hpc.md.xyz` parses it.

Contract: `read_lines(path)` is the file's lines, read within the limit `xyz_bytes` and the
host memory its parsing needs (checked from the size before a byte is read; hunt 57: a file
of any size was read whole, then split into per-line strings), a gzip file (by its magic
bytes, whatever its name) unpacked a chunk at a time within the same limits (hunt 68: a
.gz structure was refused; a small file may unpack 1000-fold), decoded as UTF-8 (a byte-order
mark dropped). Each problem is an `XyzError` naming the file.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

from wse_core.errors import WseError
from wse_core.host.limits import lift, limit

__all__ = ["XyzError", "read_lines", "READ_BYTES_PER_FILE_BYTE"]

# read_xyz reads at most the limits `xyz_bytes` and `xyz_atoms` of wse_core.host.limits
# (hunt 57: a file of any size was read whole, then split into per-line strings).
# Host bytes per byte of file while reading: the bytes, the text, its lines and their fields
# (measured: a 15 MB file of 200,000 atoms with velocities peaks at 200 MB, 13x).
READ_BYTES_PER_FILE_BYTE = 16


class XyzError(WseError):
    """A malformed extended XYZ file."""


def read_lines(path: Path) -> list[str]:
    """The file's lines (module docstring)."""
    _check_size(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise XyzError(f"cannot read {str(path)!r}: {e.strerror}") from None
    if raw[:2] == b"\x1f\x8b":  # gzip's magic, whatever the name (ASE goes by a .gz suffix)
        raw = _gunzip(raw, path)
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (Windows editors) is dropped
    except UnicodeDecodeError as e:
        from wse_core.host.readers import packed_hint

        if how := packed_hint(raw[:8]):  # hunt 61: a gzip'd file was "line 1: not UTF-8"
            raise XyzError(f"{path.name} is not extended XYZ text{how}") from None
        line = raw.count(b"\n", 0, e.start) + 1
        raise XyzError(
            f"{path.name} line {line}: not UTF-8 text ({e.reason} at byte {e.start:,}); "
            "extended XYZ is a text file"
        ) from None
    return text.splitlines()


GUNZIP_CHUNK = 1 << 20


def _gunzip(raw: bytes, path: Path) -> bytes:
    """The text of a gzip file (every member, as zcat), unpacked a chunk at a time and
    stopped past the limit `xyz_bytes` or past the text whose reading the host memory holds
    (a small file may unpack 1000-fold), checked as `_check_size` checks a plain file."""
    from wse_core.host.memory import available_bytes, format_bytes, require

    cap, budget, parts, size = limit("xyz_bytes"), available_bytes(), [], 0
    what = f"reading {path.name} (unpacked past {{}})"
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
            while chunk := f.read(GUNZIP_CHUNK):
                parts.append(chunk)
                size += len(chunk)
                if size > cap:
                    raise XyzError(
                        f"{path.name} unpacks past {format_bytes(cap)}; extended XYZ text is "
                        f"read up to {format_bytes(cap)} ({lift('xyz_bytes')})"
                    )
                if READ_BYTES_PER_FILE_BYTE * size > budget:
                    require(what.format(format_bytes(size)), READ_BYTES_PER_FILE_BYTE * size,
                            fits=_fits)  # fmt: skip
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError
        raise XyzError(f"{path.name} is not a whole gzip file ({e}); gunzip -t checks it") from None
    return b"".join(parts)


def _fits(budget: int) -> str:
    from wse_core.host.memory import format_bytes

    return f"files up to {format_bytes(budget // READ_BYTES_PER_FILE_BYTE)} can be read"


def _check_size(path: Path) -> None:
    """Refuse a file past the limit `xyz_bytes`, or one whose reading needs more host memory
    than is available, from its size alone (before a byte is read)."""
    from wse_core.host.memory import format_bytes, require

    try:
        size = path.stat().st_size
    except OSError as e:
        raise XyzError(f"cannot read {str(path)!r}: {e.strerror}") from None
    if size > limit("xyz_bytes"):
        raise XyzError(
            f"{path.name} is {format_bytes(size)}; extended XYZ files are read up to "
            f"{format_bytes(limit('xyz_bytes'))} (a frame of {limit('xyz_atoms'):,} atoms; "
            f"{lift('xyz_bytes')}); keep the frame to run (e.g. ase convert -n -1 in.xyz "
            "last.xyz)"
        )

    require(f"reading {path.name} ({format_bytes(size)})", READ_BYTES_PER_FILE_BYTE * size,
            fits=_fits)  # fmt: skip
