"""Seals: what makes a finished checkpoint step checkable before it is restored.

Once orbax has finished a step, process 0 writes `<step>/wse_sha256.json` (`SEAL`,
`seal_step`): the size and sha256 of every file of the step. `step_problem(step_dir)`
compares the files with it, so a truncated, deleted or rewritten file (a disk that filled up,
a copy cut short, a hand edit) is found before anything is restored. `wse_trainer.checkpoints`
seals each step it saves and reads every step through `step_problem` first.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from wse_core.host.limits import LIMITS, LimitError
from wse_core.host.readers import load_json, not_regular, read_text
from wse_core.host.run_files import SEAL, newest_sealed  # the run folder's names, shared

__all__ = ["SEAL", "SEALED_KEY", "newest_sealed", "seal_step", "step_problem"]

_CHUNK_BYTES = 1 << 20
SEALED_KEY = "wse_sealed"  # in every save's meta: the step is complete only with its seal


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


def _step_files(step_dir: Path) -> dict[str, Path]:
    return {
        p.relative_to(step_dir).as_posix(): p
        for p in sorted(step_dir.rglob("*"))
        if p.is_file() and p.name != SEAL
    }


def seal_step(step_dir: Path) -> None:
    """Write `step_dir/SEAL`: the size and sha256 of each of the finished step's files."""
    record = {rel: [p.stat().st_size, _sha256(p)] for rel, p in _step_files(step_dir).items()}
    tmp = step_dir / f".{SEAL}.tmp"
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, step_dir / SEAL)  # a kill leaves the old state or the whole seal


def step_problem(step_dir: Path, *, digests: bool = True) -> str | None:
    """Why the files of a committed step cannot be trusted (one line), or None: every file
    its seal lists is there with the size and sha256 it was written with (`digests` False:
    the sizes alone, a read of no file's bytes, as the checks before a resume ask it). An
    unsealed step gives None (its restore decides). The seal is read bounded
    (`wse_core.host.readers`): one that is no regular file, past `file_bytes` or nested past
    `json_depth` is a problem of the step, as a seal of bad JSON is (the caller falls back
    to an older step)."""
    seal = step_dir / SEAL
    if not seal.exists():
        return None
    if why := not_regular(seal):  # hunt 67: a FIFO hung the run, /dev/zero read until OOM
        return f"its {SEAL} {why}"
    try:  # bounded: at most `file_bytes`, nested at most `json_depth` (hunt 67: '[' * 200000)
        record = load_json(read_text(seal, SEAL), SEAL)
        entries = [(str(rel), int(size), str(digest)) for rel, (size, digest) in record.items()]
    except LimitError as e:  # a seal is a few KB nested 2 deep: past a limit it is corrupt
        return f"its {SEAL} is unreadable: {_limit_words(e)}"
    except (OSError, ValueError, TypeError, AttributeError, RecursionError):
        return f"its {SEAL} is unreadable"
    for rel, size, digest in entries:
        path = step_dir / rel
        if not path.is_file():
            return f"{rel} is missing"
        if path.stat().st_size != size:
            return f"{rel} has {path.stat().st_size} bytes where {size} were written"
        if digests and _sha256(path) != digest:
            return f"{rel} differs from what was written (sha256)"
    return None


def _limit_words(e: LimitError) -> str:
    """A limit's refusal of the seal as "it is 70,000,000 bytes, over the limit of 67,108,864
    bytes" or "its nesting is 200,000 levels, over the limit of 64 levels", from the error's
    figures: without the path (the line names the step) or the override (a seal this code
    wrote is a few KB nested 2 levels; lifting the limit would not make the step
    trustworthy). A refusal without figures (the seal's kind): its own words."""
    if e.limit_name is None or e.limit is None:
        return str(e)
    subject = "its nesting" if e.limit_name == "json_depth" else "it"
    return f"{subject} is {e.value}, over the limit of {e.limit:,} {LIMITS[e.limit_name].unit}"
