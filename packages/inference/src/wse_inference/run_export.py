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
`unexported_run(folder)` is the refusal's line for a run folder with checkpoints but no `hf/`
(a run stopped before its end, or killed during its export: hunt 77 said "neither an
HF-format directory ... nor a `wse train` model_dir"), naming its newest sealed step and the
rerun that exports it (`wse_trainer.export.refresh`'s advice: a run whose max_steps is its
checkpoint's step trains nothing, removes a killed export's leftover part and writes `hf/`);
None for a folder with no checkpoints/.

The run folder's names and records are read by `wse_core.host.run_files`, as the trainer
reads them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from wse_core.host.run_files import CHECKPOINTS, exported_step, newest_sealed

__all__ = ["say_once", "stale_export", "unexported_run"]

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


def unexported_run(folder: Path) -> str | None:
    """Why `folder`, a `wse train` model_dir with no `hf/` export, gives no model, and how to
    export its newest checkpoint; None where it holds no checkpoints/ (module doc)."""
    checkpoints = folder / CHECKPOINTS
    if not checkpoints.is_dir():
        return None
    head = (
        f"{str(folder)!r} is a `wse train` model_dir without an hf/ export (written at the end "
        "of a run: this one stopped before it, or during it)"
    )
    sealed = newest_sealed(checkpoints)
    if sealed is None:
        return f"{head}, and {str(checkpoints)!r} holds no finished step; train it with wse train"
    return (
        f"{head}; its newest checkpoint is step {sealed.name}: rerun its wse train command with "
        f"runconfig.max_steps={sealed.name} to export that step to {str(folder / 'hf')!r}"
    )


def say_once(note: str | None) -> None:
    """`note` on stderr, once per process."""
    if note is not None and note not in _said:
        _said.add(note)
        print(note, file=sys.stderr, flush=True)
