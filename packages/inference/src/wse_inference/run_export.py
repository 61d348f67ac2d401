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

The run folder's names and records are read by `wse_core.host.run_files`, as the trainer
reads them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from wse_core.host.run_files import CHECKPOINTS, exported_step, newest_sealed

__all__ = ["say_once", "stale_export"]

_said: set[str] = set()


def stale_export(folder: Path) -> str | None:
    """The note for the export in `folder` when its run has a newer sealed checkpoint."""
    step = exported_step(folder)
    sealed = newest_sealed(folder.parent / CHECKPOINTS) if step is not None else None
    newest = None if sealed is None else int(sealed.name)
    if step is None or newest is None or newest <= step:
        return None
    return (
        f"note: {folder} is the export of step {step}; {folder.parent / CHECKPOINTS} holds "
        f"step {newest} (rerun its wse train command with runconfig.max_steps={newest} to "
        "export that step)"
    )


def say_once(note: str | None) -> None:
    """`note` on stderr, once per process."""
    if note is not None and note not in _said:
        _said.add(note)
        print(note, file=sys.stderr, flush=True)
