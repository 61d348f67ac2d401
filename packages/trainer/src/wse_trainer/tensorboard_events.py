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
Records are read with the framing above, each CRC checked; reading stops at the first record
cut off or damaged (what a kill leaves; TensorBoard's Python reader stops there too). Review
77: the purge marker alone held only for TensorBoard's Python loaders: TensorBoard 2.21's
default Rust data server (`--load_fast=auto`) never applies it, and a file written before the
marker existed (or by a `mode: eval` run) was never purged, so a resume's steps showed twice.
Every reader now sees metrics.jsonl's one run; the marker is still written (PyTorch's).
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["EventFile", "event_files", "trim_events"]

PREFIX = "events.out.tfevents"
TRIM_PREFIX = ".wse-trim."  # a rewrite's temporary file: `TRIM_PREFIX<pid>.<name's tail>`
_serial = itertools.count()  # files opened by this process, for a unique name


def event_files(folder: Path) -> list[Path]:
    """The event files in `folder` (none where it does not exist), in TensorBoard's order."""
    try:
        return sorted(p for p in folder.iterdir() if PREFIX in p.name)
    except OSError:
        return []


def trim_events(folder: Path, last_step: int) -> list[Path]:
    """Rewrite each event file of `folder` that holds a step > `last_step` or a cut-off tail
    to keep only its records of steps <= `last_step` (module doc); the files rewritten."""
    _sweep_killed_trims(folder)
    pb, rewritten = _protos(), []
    for path in event_files(folder):
        data = path.read_bytes()
        spans, whole_to = _record_spans(data, pb.masked_crc32c)
        kept = [data[a:b] for a, b in spans if _step(pb, data[a + 12 : b - 4]) <= last_step]
        if len(kept) < len(spans) or whole_to < len(data):
            _replace(path, b"".join(kept))
            rewritten.append(path)
    return rewritten


def _record_spans(data: bytes, crc: Any) -> tuple[list[tuple[int, int]], int]:
    """([(start, end)] of each whole record of `data`, in order, and the end of the last):
    a record cut off or whose length or Event fails its masked crc32c ends the reading."""
    spans, at = [], 0
    while at + 16 <= len(data):
        (n,) = struct.unpack_from("<Q", data, at)
        end = at + 16 + n
        if end > len(data) or struct.unpack_from("<I", data, at + 8)[0] != crc(data[at : at + 8]):
            break
        if struct.unpack_from("<I", data, end - 4)[0] != crc(data[at + 12 : end - 4]):
            break
        spans.append((at, end))
        at = end
    return spans, at


def _step(pb: _Protos, event: bytes) -> int:
    """The step of a serialized Event (0 where it has none: the file version)."""
    from google.protobuf.message import DecodeError

    try:
        return pb.Event.FromString(event).step
    except DecodeError:  # CRC-whole but no Event: not ours to judge, kept
        return 0


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
        self._write(pb.Event(wall_time=time.time(), file_version="brain.Event:2"))
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
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        crc = self._pb.masked_crc32c
        # one write: a kill leaves a record whole or a cut-off tail TensorBoard's reader skips
        self._file.write(
            header + struct.pack("<I", crc(header)) + data + struct.pack("<I", crc(data))
        )


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
