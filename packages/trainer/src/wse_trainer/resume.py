"""Resuming a run: the checkpoint a `Session` starts from, and what is moved out of its way.

`open_checkpoints(s)` restores the newest checkpoint that reads back (or `--checkpoint-path`'s)
into the session: weights, optimizer state, RNG and data position (the state and meta that
`Session.state` / `Session.meta` save); one of another tokenizer or model is a ConfigError.
Newer steps that are corrupt, or come after the start step, are moved aside with a line each,
never deleted (`wse_trainer.checkpoints`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from wse_core.host.distributed import barrier

from wse_trainer.config import ConfigError
from wse_trainer.session import Session

__all__ = ["open_checkpoints"]

_META_KEYS = ("step", "data", "tokenizer_sha256", "model")


def open_checkpoints(s: Session) -> tuple[Any, int, list[str]]:
    """(the run's Checkpointer, the step it starts from, lines to log), the checkpoint loaded
    into `s`: `--checkpoint-path`'s step, else the newest step of `<model_dir>/checkpoints`
    that reads back, each newer one moved aside (`corrupt`) with a line saying why. Steps
    after the start step (and from the start step on, when `--checkpoint-path` names another
    run's) are moved aside (`superseded`), so training continues from there.
    Nothing is deleted (`wse_trainer.checkpoints`)."""
    from wse_trainer.checkpoints import (
        Checkpointer,
        committed_steps,
        move_aside,
        newest_readable,
        resolve_checkpoint,
    )

    run_cfg, own = s.config.runconfig, (s.dir / "checkpoints").absolute()
    steps, notes, folder = committed_steps(own), [], own
    if run_cfg.checkpoint_path:
        folder, start = resolve_checkpoint(run_cfg.checkpoint_path)
        _, got, bad = newest_readable(folder, [start], s.state(), meta_keys=_META_KEYS)
        if bad:
            raise ConfigError(f"checkpoint step {start} in {folder} cannot be used: {bad[0][1]}")
    else:
        start, got, bad = newest_readable(own, steps, s.state(), meta_keys=_META_KEYS)
        barrier("wse_trainer: checkpoints read")  # every process read them before any move
        for step, problem in bad:
            where = move_aside(own / str(step), "corrupt")
            resume = f"step {start}" if got is not None else "the start (no good step left)"
            notes.append(
                f"checkpoint step {step} is incomplete or corrupt: {problem}; moved it to "
                f"{where}; resuming from {resume}"
            )
    if got is not None:
        _restore(s, got)
    elif run_cfg.mode == "eval":  # as ModelZoo says it (hunt 62: an eval of random weights
        notes.append(  # ran without a word)
            "No checkpoint was provided. Using randomly initialized model parameters."
        )
    # steps after the start, and the start step itself when it came from another run's folder
    later = [t for t in steps if (t > start or (t == start and folder != own))]
    later = [t for t in later if all(t != b for b, _ in bad)]
    for step in later:
        where = move_aside(own / str(step), "superseded")
        source = "" if folder == own else f" of {folder}"
        notes.append(f"starting from step {start}{source}: moved step {step} of {own} to {where}")
    barrier("wse_trainer: checkpoints moved aside")
    return Checkpointer(own, keep=run_cfg.keep_checkpoint_max), start, notes


def _restore(s: Session, got: Any) -> None:
    """Load a verified checkpoint (`checkpoints.StepRead`): weights, optimizer state, RNG
    and data position; one of another tokenizer or model is a ConfigError."""
    import json

    import jax

    if got.meta["tokenizer_sha256"] != s.tok_id:
        raise ConfigError(
            "the checkpoint was trained with another tokenizer than "
            f"{s.dir / 'tokenizer.json'}; use its model_dir"
        )
    ours = json.loads(json.dumps(dataclasses.asdict(s.model)))
    theirs = got.meta["model"]
    if theirs != ours:
        diff = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
        raise ConfigError(
            f"the checkpoint holds another model (model.{', model.'.join(diff)} differ); "
            "use the config it was trained with or another model_dir"
        )
    s.trainer.memx.load_state_tree(got.state["memx"])
    s.key = jax.random.wrap_key_data(got.state["rng"])
    s.iterator.restore(got.meta["data"])
