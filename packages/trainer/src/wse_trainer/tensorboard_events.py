"""A run's TensorBoard event files, written as metrics.jsonl is: each record whole and handed
to the OS at once, and a resume's purge marker, so that TensorBoard tells metrics.jsonl's one
uninterrupted run.

Contract. `EventFile(folder, purge_step=T)` opens a new event file in `folder` (never one
that exists: the name carries the second, the host, the pid and a counter, as PyTorch's
`SummaryWriter` names its files) and writes the file version and, where T is given, the
marker PyTorch's `SummaryWriter(purge_step=T)` writes: a `SessionLog` START event at step T,
on which TensorBoard hides the events of earlier files whose step is >= T ("events whose
global_step >= T will be purged and hidden from TensorBoard"). `add_scalars(step, values)`
writes one Event of the scalars and flushes it to the OS (no fsync: a kill loses nothing, as
metrics.jsonl flushed at each record; a power cut may lose the last steps of both).

Hunt 77: tensorboardX's `SummaryWriter` queued events to a thread that flushed every 120 s,
so a killed run's event file was 0 bytes (steps 1-4 gone though checkpoint 4 held them), and
it wrote no purge marker, so a resume's steps after its checkpoint showed twice. The records
are tensorboardX's protobufs framed as TFRecords (length, its masked crc32c, the Event, its
masked crc32c), the format TensorBoard's readers read.

`trim_events(folder, last_step)` is a resume's other half, as metrics.jsonl is trimmed: each
event file in `folder` that holds a step past `last_step` (or a cut-off tail) is rewritten to
keep only its whole records of steps <= `last_step` (the file version, step 0, stays), under
its own name, atomically: the records go to a hidden temporary file beside it (its name has
no "tfevents", so no reader takes it for an event file), fsynced, then `os.replace`d onto the
old one, which stays whole until then; a killed rewrite's leftover is removed by the next.
Records are read with the framing above, each CRC checked. Hunt 78: reading stopped at the
first damaged record, so one flipped byte at step 2 of a 12-step run's file cut it from 2,807
bytes to 299 at a resume to 8, silently, steps 3-8 gone though the resume kept them. Bytes
that hold no whole record now are skipped to the next frame whose length and Event both pass
their CRCs (found by a vectorised scan, `_frame_starts`: review 78, a byte-at-a-time one took
2.6 s a MiB of zeros; a damaged record's step cannot be known: it is what goes), every whole
record of a step <= `last_step` is kept, a damaged file version is written anew, and each file's
skipped or cut-off bytes are a note (`trim_events` returns them; `metrics` says them on
stderr, as it says metrics.jsonl's cut-off line); a file with no whole record is left as it
is. TensorBoard's readers stop at a damaged record, so the rewrite shows them the rest. Review
77: the purge marker alone held only for TensorBoard's Python loaders: TensorBoard 2.21's
default Rust data server (`--load_fast=auto`) never applies it, and a file written before the
marker existed (or by a `mode: eval` run) was never purged, so a resume's steps showed twice.
Every reader now sees metrics.jsonl's one run; the marker is still written (PyTorch's).
`drop_scalars(folder, step)` rewrites the same way without one step's scalars: a step that a
rerun evaluates again replaces its record (review 78: it would have shown twice).
Hunt 78 too: an entry named as an event file that is a FIFO (the resume hung), a folder or a
link (a traceback) is a one-line ConfigError (`wse_trainer.run_entries` refuses it before the
run starts); a file over the `file_bytes` limit is left as it is, with a note, never read
into memory: refusing it would stop the resume, while left whole it keeps every byte, and its
steps past the checkpoint are hidden by the purge marker from TensorBoard's Python loaders.
"""

from __future__ import annotations

import functools
import itertools
import os
import socket
import stat
import struct
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from wse_trainer.run_entries import EVENTS_PREFIX, refuse, special

__all__ = ["EventFile", "drop_scalars", "event_files", "trim_events"]

PREFIX = EVENTS_PREFIX
VERSION = "brain.Event:2"  # the file version record every event file opens with
TRIM_PREFIX = ".wse-trim."  # a rewrite's temporary file: `TRIM_PREFIX<pid>.<name's tail>`
_serial = itertools.count()  # files opened by this process, for a unique name


def event_files(folder: Path) -> list[Path]:
    """The event files in `folder` (none where it does not exist), in TensorBoard's order."""
    try:
        return sorted(p for p in folder.iterdir() if PREFIX in p.name)
    except OSError:
        return []


def trim_events(folder: Path, last_step: int) -> list[str]:
    """Rewrite each event file of `folder` that holds a step > `last_step` or bytes that are
    no whole record to keep only its whole records of steps <= `last_step` (module doc); the
    notes on the bytes skipped, one line a file."""
    return _rewrite(folder, lambda event: event.step <= last_step)


def drop_scalars(folder: Path, step: int, *, skip: frozenset[Path] = frozenset()) -> list[str]:
    """Rewrite each event file of `folder` (but those in `skip`: the files this run writes)
    that holds scalars of `step` without them, as `trim_events` rewrites (review 78: a step
    evaluated again is the eval of record, never a second point); the notes as its."""
    return _rewrite(folder, lambda e: e.step != step or not e.summary.value, skip)


def _rewrite(folder: Path, keeps: Any, skip: frozenset[Path] = frozenset()) -> list[str]:
    """Each event file of `folder` but `skip` rewritten to its whole records whose Event
    `keeps(event)` (the file version always), where that drops a record or damaged bytes."""
    _sweep_killed_trims(folder)
    pb, notes = _protos(), []
    for path in (p for p in event_files(folder) if p not in skip):
        data = _read_bounded(path)
        if data is None:
            notes.append(_unbounded_note(path))
            continue
        spans, unread = _record_spans(data, pb.masked_crc32c)
        if not spans:  # nothing to judge steps by: as it is (an empty file too)
            if data:
                notes.append(f"note: {path} holds no whole event record; left as it is")
            continue
        kept = [data[a:b] for a, b in spans if _kept(pb, data[a + 12 : b - 4], keeps)]
        if spans[0][0] > 0 and not _is_version(pb, kept[:1]):  # its file version damaged
            wall_s = _event(pb, data[spans[0][0] + 12 : spans[0][1] - 4]).wall_time
            kept.insert(0, _framed(pb, pb.Event(wall_time=wall_s, file_version=VERSION)))
        if len(kept) < len(spans) or unread:
            _replace(path, b"".join(kept))
            notes += [_unread_note(path, a, b, len(data)) for a, b in unread]
    return notes


def _read_bounded(path: Path) -> bytes | None:
    """An event file's bytes, or None when it is over the `file_bytes` limit (left as it is,
    its steps too: the purge marker still hides them from TensorBoard's Python loaders). A
    link or anything but a regular file is a ConfigError: opened without following a link
    and without waiting for a FIFO's writer, checked by fstat (hunt 78: a FIFO hung the
    resume, a folder or a dangling link was a traceback)."""
    from wse_core.host.limits import limit

    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        refuse(path, special(path) or f"cannot be read ({e.strerror})")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # before fdopen: a folder's is an IsADirectoryError
        os.close(fd)
        refuse(path, special(path) or "is a special file, not a regular file")
    with os.fdopen(fd, "rb") as f:
        size, cap = st.st_size, limit("file_bytes")
        data = b"" if size > cap else f.read(size + 1)  # a byte more: one growing meanwhile
    return None if size > cap or len(data) > cap else data


def _unbounded_note(path: Path) -> str:
    from wse_core.host.limits import lift, limit

    return (
        f"note: {path} is over {limit('file_bytes'):,} bytes, the most a resume rewrites; left "
        f"as it is, with its steps past the checkpoint ({lift('file_bytes')})"
    )


def _unread_note(path: Path, start: int, end: int, size: int) -> str:
    """The line for bytes `start`..`end` of an event file of `size` bytes that were skipped."""
    if end == size:
        return (
            f"note: dropped the last {end - start:,} bytes of {path}: no whole event record (a "
            "write a kill or a full disk interrupted, or damage)"
        )
    return (
        f"note: skipped bytes {start:,}-{end - 1:,} of {path}: a damaged event record (its "
        "step unknown), the records after it kept"
    )


def _record_spans(data: bytes, crc: Any) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """([(start, end)] of each whole record of `data`, in order; [(start, end)] of the bytes
    between and after them that hold none): after bytes that are no record (cut off, or the
    length or Event failing its masked crc32c), reading goes on at the next whole frame."""
    spans: list[tuple[int, int]] = []
    unread: list[tuple[int, int]] = []
    at, starts = 0, None
    while at < len(data):
        end = _frame_end(data, at, crc)
        if end is None:
            starts = _frame_starts(data) if starts is None else starts  # once, at a damage
            later = starts[np.searchsorted(starts, at, side="right") :]
            resync = next((int(r) for r in later if _frame_end(data, int(r), crc)), len(data))
            unread.append((at, resync))
            at = resync
        else:
            spans.append((at, end))
            at = end
    return spans, unread


def _frame_end(data: bytes, at: int, crc: Any) -> int | None:
    """The end of the whole record framed at `at` of `data`, or None (cut off; the length or
    the Event failing its masked crc32c). Most offsets fail on the length alone, uncomputed."""
    if at + 16 > len(data):
        return None
    (n,) = struct.unpack_from("<Q", data, at)
    end = at + 16 + n
    if end > len(data) or struct.unpack_from("<I", data, at + 8)[0] != crc(data[at : at + 8]):
        return None
    if struct.unpack_from("<I", data, end - 4)[0] != crc(data[at + 12 : end - 4]):
        return None
    return end


def _frame_starts(data: bytes, chunk: int = 1 << 20) -> np.ndarray:
    """The offsets of `data` (int64, ascending) where a frame may start: its 8-byte length
    fits in the bytes after it and its masked crc32c is the 4 bytes that follow; every whole
    record's start is among them (`_frame_end` still checks each whole). Vectorised over
    every offset at once (review 78: one pure-Python CRC an offset took 2.6 s a MiB of
    zeros): a length as a strided view at each offset, the implausible ones dropped before
    the few left are CRC-checked; a zero length (a run of zeros) is checked against the one
    CRC it can have, its first byte first."""
    last = len(data) - 16  # the last offset a frame fits at
    if last < 0:
        return np.zeros(0, np.int64)
    lengths = np.ndarray((last + 1,), "<u8", buffer=data, strides=(1,))
    crcs = np.ndarray((last + 1,), "<u4", buffer=data, offset=8, strides=(1,))
    byte8 = np.frombuffer(data, np.uint8)[8:]
    k0 = _length_crcs(np.zeros(1, np.uint64))[0]  # a zero length's masked crc32c
    steps, out = np.arange(chunk, dtype=np.uint64), []
    for r0 in range(0, last + 1, chunk):
        n, c = lengths[r0 : r0 + chunk], crcs[r0 : r0 + chunk]
        room = np.uint64(last - r0) - steps[: len(n)]  # bytes a frame's Event may take
        some = np.flatnonzero(n - np.uint64(1) < room)  # 1 <= length <= room
        some = some[_length_crcs(n[some]) == c[some]]
        none = np.flatnonzero(byte8[r0 : r0 + len(n)] == (k0 & 0xFF))
        none = none[(n[none] == 0) & (c[none] == k0)]
        out.append(np.sort(np.concatenate([some, none])).astype(np.int64) + r0)
    return np.concatenate(out)


def _length_crcs(lengths: np.ndarray) -> np.ndarray:
    """The masked crc32c (uint32) of each uint64 of `lengths` as its 8 little-endian bytes:
    TFRecord's length check, vectorised (CRC-32C, reflected 0x82F63B78, a byte a round)."""
    table = _crc_table()
    crc = np.full(lengths.shape, 0xFFFFFFFF, np.uint32)
    for i in range(8):
        byte = ((lengths >> np.uint64(8 * i)) & np.uint64(0xFF)).astype(np.uint32)
        crc = table[(crc ^ byte) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
    crc = crc ^ np.uint32(0xFFFFFFFF)
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)


@functools.cache
def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1)
    return table.astype(np.uint32)


def _is_version(pb: _Protos, records: list[bytes]) -> bool:
    """Whether the first of the framed `records` is a file version event."""
    return bool(records) and _event(pb, records[0][12:-4]).HasField("file_version")


def _event(pb: _Protos, event: bytes) -> Any:
    """A serialized Event, parsed (an empty Event where it parses as none)."""
    from google.protobuf.message import DecodeError

    try:
        return pb.Event.FromString(event)
    except DecodeError:  # CRC-whole but no Event: not ours to judge, kept as step 0
        return pb.Event()


def _kept(pb: _Protos, event: bytes, keeps: Any) -> bool:
    """Whether a serialized Event is kept: a file version always (its step is 0)."""
    parsed = _event(pb, event)
    return parsed.HasField("file_version") or bool(keeps(parsed))


def _replace(path: Path, data: bytes) -> None:
    """`path` holds `data`, or (killed or failed) what it held: a temporary file beside it,
    of its mode, fsynced and then renamed onto it."""
    tmp = path.with_name(f"{TRIM_PREFIX}{os.getpid()}.{path.name.replace(PREFIX, 'tb')}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), path.stat().st_mode & 0o7777)
            os.fsync(f.fileno())  # the data reaches the disk before the name does
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _sweep_killed_trims(folder: Path) -> None:
    """Remove the temporary files of rewrites whose process is gone (a kill -9 mid-rewrite;
    the run lock keeps other hosts' runs out of a model_dir)."""
    for tmp in folder.glob(TRIM_PREFIX + "*") if folder.is_dir() else ():
        pid = tmp.name[len(TRIM_PREFIX) :].split(".", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            tmp.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: it runs
        return True
    return True


class EventFile:
    """One new event file in `folder` (module doc); `purge_step`: the first step this run
    writes, where TensorBoard is to hide the earlier files' steps from it on (None: none)."""

    def __init__(self, folder: Path, *, purge_step: int | None = None):
        self._pb = _protos()
        folder.mkdir(parents=True, exist_ok=True)
        self.path, self._file = _new_file(folder)
        pb = self._pb
        self._write(pb.Event(wall_time=time.time(), file_version=VERSION))
        if purge_step is not None:
            start = pb.SessionLog(status=pb.SessionLog.START)
            self._write(pb.Event(wall_time=time.time(), step=purge_step, session_log=start))
        self._file.flush()

    def add_scalars(self, step: int, values: dict[str, float]) -> None:
        """One Event of `values` (tag -> scalar) at `step`, flushed to the OS."""
        summary = self._pb.Summary(
            value=[self._pb.Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()]
        )
        self._write(self._pb.Event(wall_time=time.time(), step=step, summary=summary))
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def _write(self, event: Any) -> None:
        # one write: a kill leaves a record whole or a cut-off tail TensorBoard's reader skips
        self._file.write(_framed(self._pb, event))


def _framed(pb: _Protos, event: Any) -> bytes:
    """`event` as a TFRecord: its length, the length's masked crc32c, it, its masked crc32c."""
    data = event.SerializeToString()
    header = struct.pack("<Q", len(data))
    crc = pb.masked_crc32c
    return header + struct.pack("<I", crc(header)) + data + struct.pack("<I", crc(data))


def _new_file(folder: Path) -> tuple[Path, Any]:
    """A file of a name no other writer has taken, opened exclusively (tensorboardX's name,
    the second and the host alone, truncated another writer's file of the same second)."""
    while True:
        name = (
            f"{PREFIX}.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}."
            f"{next(_serial):03d}"
        )
        try:
            return folder / name, open(folder / name, "xb")  # noqa: SIM115 (closed in close)
        except FileExistsError:
            continue


class _Protos:
    """tensorboardX's Event, SessionLog and Summary protobufs and its masked crc32c."""

    def __init__(self) -> None:
        from tensorboardX.proto.event_pb2 import Event, SessionLog
        from tensorboardX.proto.summary_pb2 import Summary
        from tensorboardX.record_writer import masked_crc32c

        self.Event, self.SessionLog, self.Summary = Event, SessionLog, Summary
        self.masked_crc32c = masked_crc32c


def _protos() -> _Protos:
    """tensorboardX's protobufs, imported without torch where torch is not loaded yet:
    tensorboardX's `__init__` imports its writer, which imports torch at its top only to
    accept torch tensors (`writer.py`: `try: import torch`), which cost every `wse train`
    process 1.5 s here (8.6 s under load; stop 69's suite trim). A None in `sys.modules` makes
    that `import torch` fail as if torch were absent, tensorboardX's own fallback; it is
    removed at once, so a later `import torch` loads it."""
    if "tensorboardX" in sys.modules or "torch" in sys.modules:
        return _Protos()
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        return _Protos()
    finally:
        del sys.modules["torch"]
