"""A `wse train` run folder's HF export seen from inference: is it the run's newest step?

Contract. `stale_export(folder)` is the one-line note for an HF folder that `wse train`
exported (it holds `wse_export.json`, `{"step": N}`: the step its weights are of) when the
run folder above it holds a newer sealed checkpoint, else None:
`note: run/hf is the export of step 4; run/checkpoints holds step 10 (rerun its wse train
command with runconfig.max_steps=10 to export that step)`. The export is written at the clean
end of a run only, so after a stopped resume `wse infer --model-dir run` loaded the older
export without a word (hunt 68). The note is advice, never a refusal: a folder from
elsewhere, or a record that cannot be read, gives None. `say_once(note)` prints it on stderr
once per process (a command resolves its model folder several times).

The file names are the trainer's (`wse_trainer.export.EXPORT_RECORD`; a step is finished
once it holds `wse_trainer.seals.SEAL`), spelled here: siblings never import each other.
"""

from __future__ import annotations

import sys
from pathlib import Path

from wse_core.errors import WseError
from wse_core.host.readers import not_regular

from wse_inference.model_files import json_file

__all__ = ["say_once", "stale_export"]

# <run>/hf/wse_export.json and <run>/checkpoints/<step>/wse_sha256.json
EXPORT_RECORD, CHECKPOINTS, SEAL = "wse_export.json", "checkpoints", "wse_sha256.json"
_said: set[str] = set()


def stale_export(folder: Path) -> str | None:
    """The note for the export in `folder` when its run has a newer sealed checkpoint."""
    step = exported_step(folder)
    newest = newest_sealed(folder.parent / CHECKPOINTS) if step is not None else None
    if step is None or newest is None or newest <= step:
        return None
    return (
        f"note: {folder} is the export of step {step}; {folder.parent / CHECKPOINTS} holds "
        f"step {newest} (rerun its wse train command with runconfig.max_steps={newest} to "
        "export that step)"
    )


def exported_step(folder: Path) -> int | None:
    """The step of the `wse train` export in `folder`, or None (no record, or no step in it)."""
    record = folder / EXPORT_RECORD
    if not record.is_file() or not_regular(record):
        return None
    try:  # within the file limits: a record is a dozen bytes
        step = json_file(record).get("step")
    except (OSError, ValueError, AttributeError, WseError):  # cut short, hand-edited
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def newest_sealed(checkpoints: Path) -> int | None:
    """The newest step folder of `checkpoints` that holds its seal, or None."""
    try:
        steps = [int(p.name) for p in checkpoints.iterdir() if p.name.isdecimal()]
    except (OSError, ValueError):  # no checkpoints folder: an export copied elsewhere
        return None
    return max((n for n in steps if (checkpoints / str(n) / SEAL).is_file()), default=None)


def say_once(note: str | None) -> None:
    """`note` on stderr, once per process."""
    if note is not None and note not in _said:
        _said.add(note)
        print(note, file=sys.stderr, flush=True)
