"""The checks a resume asks before any data is read (hunt 70), apart from `resume` and
`run_folder` so both ask them without importing each other: `resolved(path)` (one folder by
any spelling is one path), `check_tokenizer` (a checkpoint of another tokenizer, naming the
tokenizer.json to copy in) and `check_export` (a --checkpoint-path that trains nothing but
would move the run's newer steps aside)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wse_trainer.config import ConfigError

__all__ = ["check_export", "check_tokenizer", "resolved"]


def resolved(path: str | Path) -> Path:
    """`path` with its links and `..` resolved, so one folder by any spelling is one path
    (hunt 70: `Path.absolute()` kept `run/../run` apart from `run`); absolute() on a loop."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(path).absolute()


def check_tokenizer(
    config: Any, step: Path, sha: str, tok: Path, *, trained: bool, mine: str | None = None
) -> None:
    """ConfigError when the tokenizer file `tok` (of identity `mine`, read when not given;
    `trained` on this run's data or found in the model_dir) is not the one checkpoint `step`
    was trained with (identity `sha`), naming the remedy: the tokenizer of the step's own
    run copied in (hunt 70: "use its model_dir" would have continued, and altered, the
    source run)."""
    mine = mine if mine is not None else _identity(tok)
    if mine is None or mine == sha:
        return
    run = config.runconfig
    whose = "this run trained on its data" if trained else "in the model_dir"
    source = next((p / "tokenizer.json" for p in (step.parent.parent, step.parent)
                   if _identity(p / "tokenizer.json") == sha), None)  # fmt: skip
    if not run.checkpoint_path or step.parent == resolved(Path(run.model_dir) / "checkpoints"):
        fix = "put back the tokenizer.json the run was trained with, or give a new model_dir (-o)"
    elif source is not None:
        fix = f"copy its run's tokenizer ({source}) into {run.model_dir} to fine-tune from it"
    else:
        fix = f"copy the tokenizer.json it was trained with into {run.model_dir}"
    raise ConfigError(
        f"checkpoint step {step.name} ({step}) was trained with another tokenizer than "
        f"{tok} (the one {whose}); {fix}"
    )


def _identity(path: Path) -> str | None:
    """The identity of a tokenizer file (`data.tokenizer_identity`), or None when it is
    none (missing, or not a tokenizer: the run's own reads say what is wrong with it)."""
    from wse_trainer.data import read_tokenizer, tokenizer_identity

    if not path.is_file():
        return None
    try:
        return tokenizer_identity(read_tokenizer(path))
    except Exception:
        return None


def check_export(config: Any, step: Path, mine: bool, own: list[int]) -> None:
    """ConfigError for a --checkpoint-path that trains nothing (max_steps at or below its
    step) but would move the run's newer steps aside and cut its metrics.jsonl (hunt 70:
    exporting step 4 of a run at step 6 lost step 6's place and records 5-6). `own`: the
    steps of the run's own checkpoints folder."""

    run, start = config.runconfig, int(step.name)
    if run.max_steps > start:
        return
    moved = [t for t in own if t > start or (t == start and not mine)]
    if moved:
        raise ConfigError(
            f"--checkpoint-path: checkpoint step {start} ({step}) trains nothing at "
            f"runconfig.max_steps={run.max_steps}, and exporting it into model_dir "
            f"{str(run.model_dir)!r} would move its step {moved[0]} aside and cut its "
            f"metrics.jsonl at step {start}; to export step {start} give a new model_dir (-o), "
            "or raise runconfig.max_steps to train on from it"
        )
