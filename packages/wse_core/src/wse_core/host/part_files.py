"""The hidden parts that `wse_core.host.atomic` fills in place of a file or folder, and the
ones a killed writer left.

Contract: `part_path(target, ext)` names a new part beside `target`,
`.NAME.PID-HOST-XXXXXXXX.part{ext}`: its writer's pid, six hex naming this host and pid
namespace (a hash of the host name and the namespace: another node's pid on a shared file
system, or another container's, says nothing here) and eight random hex. A writer stopped
where no handler runs (`kill -9`, the OOM killer, a power cut) leaves its part behind (hunt
71: each killed `wse train` left a `.hf.xxxx.part` export of hundreds of MB, for ever);
`killed_parts(target, ext, folder=)` gives the parts of `target` with that `ext` (folders
where `folder`, else files) named by this host and a pid that runs no more, for the next
write of `target` to remove, silently, as a finished write says nothing.

- A pid that runs is a live writer whatever its user (`kill(pid, 0)` says EPERM), as are this
  process and its parent; a part of another target, another host, or another `ext`, a link,
  the `.old` of an interrupted folder swap (it may hold the old results) and the parts older
  versions named `.NAME.XXXXXXXX.part.EXT` are never given: their writer cannot be told, and
  a running one may be filling them (remove them by hand).
- A folder is listed at a write unless less time has passed since its last listing than 100
  such listings take, so a run writing thousands of step files into one folder spends at most
  1% of its time listing it (listed at every write, 20,000 files took 6x the write of 1 MB);
  a part left meanwhile goes at a later write.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import os
import re
import secrets
import time
from pathlib import Path

__all__ = ["killed_parts", "part_path"]

_PART = re.compile(r"\.(.+)\.(\d+)-([0-9a-f]{6})-[0-9a-f]{8}\.part(.*)", re.DOTALL)
# folder -> (when listed, s the listing took, {(target name, ext, a folder): killed writers' parts})
_LISTED: dict[str, tuple[float, float, dict[tuple[str, str, bool], list[str]]]] = {}


def part_path(target: Path, ext: str) -> Path:
    """A new hidden part beside `target`, named by this process, ending in `ext`."""
    writer = f"{os.getpid()}-{_host()}-{secrets.token_hex(4)}"
    return target.with_name(f".{target.name}.{writer}.part{ext}")


def killed_parts(target: Path, ext: str, *, folder: bool) -> list[Path]:
    """The parts of `target` (its folder already resolved) ending in `ext` that a killed
    writer left: folders where `folder`, else files (module doc)."""
    where, now = str(target.parent), time.monotonic()
    at, took, found = _LISTED.get(where, (-math.inf, 0.0, {}))
    if now - at > 100 * took:  # listing takes at most 1% of the time
        found = _listed(where)
        _LISTED[where] = (now, time.monotonic() - now, found)
    return [target.parent / name for name in found.pop((target.name, ext, folder), [])]


def _listed(folder: str) -> dict[tuple[str, str, bool], list[str]]:
    """The killed writers' parts in `folder`, by (target name, ext, a folder)."""
    found: dict[tuple[str, str, bool], list[str]] = {}
    here = _host()
    with contextlib.suppress(OSError), os.scandir(folder) as entries:  # none there: nothing left
        for entry in entries:
            m = _PART.fullmatch(entry.name)
            if m is None or m[3] != here or _alive(int(m[2])):
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if is_dir or entry.is_file(follow_symlinks=False):  # never a link
                found.setdefault((m[1], m[4], is_dir), []).append(entry.name)
    return found


@functools.cache  # a process's host and pid namespace stay (a fork shares them)
def _host() -> str:
    """Six hex naming this host and pid namespace: where a part's pid names its writer."""
    ns = 0
    with contextlib.suppress(OSError):  # no /proc (macOS): the host name alone
        ns = os.stat("/proc/self/ns/pid").st_ino
    host = os.uname().nodename if hasattr(os, "uname") else os.environ.get("COMPUTERNAME", "")
    return hashlib.blake2s(f"{host}/{ns}".encode(), digest_size=3).hexdigest()


def _alive(pid: int) -> bool:
    """Whether process `pid` may still be writing: it runs (another user's: EPERM), it is this
    process or its parent, or it cannot be asked (Windows: `os.kill` would end it)."""
    if os.name != "posix" or pid in (os.getpid(), os.getppid()):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # PermissionError: another user's; a pid out of range
        pass
    return True
