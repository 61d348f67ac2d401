"""The kinds of a `wse train` run folder's entries: what a run writes or reads there must be
a regular file (or, for checkpoints/, train/, eval/, hf, a folder), checked before a run
starts, and the files a run writes whole there.

Contract. `check_entry(entry)` raises a one-line ConfigError for a model_dir entry of the
wrong kind (hunt 62: a folder run.log, a file train/, a FIFO tokenizer.json).
`check_inner(model_dir)` does the same for the files a run writes or rewrites inside train/
and eval/: `params_<mode>.yaml` and TensorBoard's `events.out.tfevents.*`; a symlink there is
refused too, even one to a regular file, since a run would write through it into a file
outside the folder. `write_entry(path, text)` writes such a file whole or not at all
(`wse_core.host.atomic`: a temporary file beside it, renamed), refusing the same kinds.
Hunt 78: params_train.yaml was written by a plain `write_text`, so a symlink there overwrote
the file it named (rc 0), a FIFO hung the run, a folder was a 64-line IsADirectoryError and a
kill mid-write left half a file; an event file that was a FIFO hung a resume's trim, a folder
or a dangling link was a 72-line traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

from wse_core.host.atomic import write_atomically
from wse_core.host.readers import not_regular

from wse_trainer.config import ConfigError

__all__ = ["EVENTS_PREFIX", "FOLDERS", "check_entry", "check_inner", "refuse", "special",
           "write_entry"]  # fmt: skip

EVENTS_PREFIX = "events.out.tfevents"  # TensorBoard's event files (`tensorboard_events`)
# The model_dir entries a run makes as folders; the others it writes (or reads) as files
FOLDERS = frozenset({"checkpoints", "checkpoints_aside", "train", "eval", "hf"})


def check_entry(entry: Path) -> None:
    """ConfigError for a run folder's entry of the wrong kind (hunt 62: a folder run.log or
    metrics.jsonl, a file train/, hf or checkpoints, was a traceback after the tokenizer,
    or after the whole run; a FIFO tokenizer.json hung the run, one linked to /dev/zero
    read until memory ran out)."""
    folder = entry.name in FOLDERS
    if folder:
        why = None if entry.is_dir() else _kind(entry, "a folder")
    else:
        why = not_regular(entry)
    if why is not None:
        raise ConfigError(
            f"{str(entry)!r} {why}: a run writes its {entry.name} {'folder' if folder else 'file'} "
            "there; move it away, or give a new model_dir (-o)"
        )


def check_inner(model_dir: Path) -> None:
    """ConfigError for a params file or event file in `model_dir`'s train/ or eval/ that is
    no regular file, or is a symlink (module doc)."""
    for mode in ("train", "eval"):
        folder = model_dir / mode
        try:
            names = sorted(os.listdir(folder)) if folder.is_dir() else []
        except OSError as e:
            raise ConfigError(f"cannot read {str(folder)!r}: {e.strerror}") from None
        for name in names:
            if name == f"params_{mode}.yaml" or name.startswith(EVENTS_PREFIX):
                if why := special(folder / name):
                    refuse(folder / name, why)


def write_entry(path: Path, text: str) -> None:
    """`path` (a run folder's file) holds `text`, written whole or not at all; a ConfigError
    where a symlink or anything but a regular file is there."""
    if why := special(path):
        refuse(path, why)
    write_atomically(path, text)


def special(path: Path) -> str | None:
    """Why `path` may not be written or read as a run's file ("is a FIFO, not a regular
    file"; "is a symlink (to '/x'), not a regular file"), or None (a regular file, or
    nothing there)."""
    if os.path.islink(path):
        return f"is a symlink (to {os.readlink(path)!r}), not a regular file"
    return not_regular(path)


def refuse(path: Path, why: str) -> NoReturn:
    """The one-line ConfigError for a run's file `path` that cannot be written or read: `why`
    (`special`'s words), then the remedy."""
    raise ConfigError(f"{str(path)!r} {why}; move it away, or give a new model_dir (-o)")


def _kind(entry: Path, want: str) -> str:
    """not_regular's words for an entry that must be `want` ("a folder")."""
    if entry.is_file():
        return f"is a file, not {want}"
    words = not_regular(entry) or "is a special file, not a regular file"
    return words.replace("not a regular file", f"not {want}")
