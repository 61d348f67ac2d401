"""The names and records of a `wse train` run folder that more than one package reads: the
trainer writes them, inference reads them (siblings never import each other, so both import
them from here; nothing here imports JAX).

- `CHECKPOINTS`: the run's checkpoint folder; each finished step `<CHECKPOINTS>/<n>/` holds
  its `SEAL` (`wse_trainer.seals`: the size and sha256 of each file orbax wrote).
- `EXPORT_RECORD`: `hf/wse_export.json`, `{"step": N}`, the step the HF export's weights are
  of (`wse_trainer.export`; transformers ignores the file).
- `newest_sealed(folder)`: the newest step folder of a checkpoints folder that holds its
  seal, or None. `exported_step(hf_dir)`: the step an export's record names, or None (no
  export, one made before the record existed, or a record that is no file or holds no step).
"""

from __future__ import annotations

from pathlib import Path

from wse_core.errors import WseError
from wse_core.host.readers import load_json, not_regular, read_text

__all__ = ["CHECKPOINTS", "EXPORT_RECORD", "SEAL", "exported_step", "newest_sealed"]

CHECKPOINTS = "checkpoints"
SEAL = "wse_sha256.json"  # per step: {relative path: [bytes, sha256]} of every file orbax wrote
EXPORT_RECORD = "wse_export.json"  # {"step": N}


def newest_sealed(folder: Path) -> Path | None:
    """The newest step folder of a checkpoints `folder` that carries its seal (orbax had
    finished it), else None: what an interrupted run names as the step it resumes from."""
    try:
        steps = [p for p in folder.iterdir() if p.name.isdigit() and (p / SEAL).is_file()]
    except OSError:  # no folder yet (stopped before the first save), or it went
        return None
    return max(steps, key=lambda p: int(p.name), default=None)


def exported_step(hf_dir: Path) -> int | None:
    """The step the export in `hf_dir` holds (its `EXPORT_RECORD`), or None (module doc)."""
    path = hf_dir / EXPORT_RECORD
    if not path.is_file() or not_regular(path):
        return None
    try:  # bounded: a record is a dozen bytes (past a limit it is no record of ours)
        step = load_json(read_text(path, EXPORT_RECORD), EXPORT_RECORD).get("step")
    except (OSError, ValueError, AttributeError, WseError):  # cut short, hand-edited
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None
