"""A run's cadences as ModelZoo's runconfig gives them, and as the training loop reads them.

ModelZoo's 0 and null (hunt 76: refused, "must be positive"): `checkpoint_steps` 0 or null
saves no periodic checkpoint (cstorch's `DataExecutor` takes None or 0 as no checkpointing);
ours still saves the last step, which a resume, `mode: eval` and the HF export read (ModelZoo
saves none). `log_steps` 0 logs the last step's line alone (ModelZoo's `is_log_step`: the
final iteration, or every `log_steps` when set). `keep_checkpoint_max` (ModelZoo's
`runconfig.max_checkpoints`) null or 0 keeps every checkpoint, ModelZoo's default ("Default
to keeping all checkpoints", `run_cstorch_flow`; `CkptInfo.update` deletes only while
`max_store` is set); k > 0 keeps the newest k steps of `<model_dir>/checkpoints`, orbax's
`max_to_keep`, which counts the steps an earlier invocation of the folder saved too, where
ModelZoo's counts its own run's alone.

`loop_config(config)` is `config` as `wse_trainer.run`'s loop reads it (`step %
checkpoint_steps`, `step % log_steps`, orbax's `max_to_keep`): a cadence of 0 or null made
`max_steps + 1`, a period no step of the run reaches, so the last step alone is saved or
logged, and a keep of 0 None. A `Session` runs that config and saves the one given
(`given_settings`). `saves_text(run)` says when a run saves (beside the predicted step),
`keep_note(config, model_dir)` the run log's line naming the steps a kept count deletes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from wse_trainer.config import RunConfig, TrainConfig

__all__ = ["CADENCES", "given_settings", "keep_note", "loop_config", "saved_steps", "saves_text"]

CADENCES = ("checkpoint_steps", "log_steps", "keep_checkpoint_max")  # resolved for the loop


def loop_config(config: TrainConfig) -> TrainConfig:
    """`config` with its cadences as the training loop reads them (module contract)."""
    run = config.runconfig
    past = run.max_steps + 1  # no step of a run reaches it: the last step alone
    loop = dataclasses.replace(
        run,
        checkpoint_steps=run.checkpoint_steps or past,
        log_steps=run.log_steps or past,
        keep_checkpoint_max=run.keep_checkpoint_max or None,
    )
    return dataclasses.replace(config, runconfig=loop)


def given_settings(config: TrainConfig, given: TrainConfig) -> dict[str, Any]:
    """`config.to_dict()` with the cadences and eval_steps of `given` (what a run saves:
    params_<mode>.yaml, each checkpoint's meta), so that a rerun reads them as given."""
    out = config.to_dict()
    out["runconfig"].update({k: getattr(given.runconfig, k) for k in CADENCES})
    out["eval_input"]["eval_steps"] = given.eval_input.eval_steps
    return out


def saved_steps(run: RunConfig, start: int) -> Iterator[int]:
    """The steps a training run from `start` saves, in order: each multiple of
    checkpoint_steps (0, null: none) and the last step (as `wse_trainer.run`'s loop)."""
    end = min(start + run.num_steps, run.max_steps) if run.num_steps else run.max_steps
    every = run.checkpoint_steps
    if every:
        yield from range((start // every + 1) * every, end, every)
    if end > start:
        yield end


def _count(run: RunConfig, start: int) -> int:
    """len(saved_steps(run, start)), counted without listing them."""
    end = min(start + run.num_steps, run.max_steps) if run.num_steps else run.max_steps
    if end <= start:
        return 0
    every = run.checkpoint_steps
    return ((end - 1) // every - start // every if every else 0) + 1


def keep_note(config: TrainConfig, model_dir: Path) -> str | None:
    """The line saying which steps a run of `config` deletes to keep its newest
    `keep_checkpoint_max`, or None where it deletes none (or evaluates, or keeps every one):
    the steps `model_dir`'s checkpoints folder holds count, and the run starts from the
    newest (`--checkpoint-path`'s: from another folder, said without the steps)."""
    from wse_trainer.run_folder import checkpoint_steps

    run = config.runconfig
    keep = run.keep_checkpoint_max
    if not keep or run.mode == "eval":
        return None
    what = f"note: keeping the newest {keep:,} checkpoints (runconfig.keep_checkpoint_max)"
    rest = "leave it out (or 0) to keep every one, as ModelZoo does"
    if run.checkpoint_path:
        return f"{what}: once it holds {keep:,}, each save deletes its oldest step; {rest}"
    on_disk = [int(p.name) for p in checkpoint_steps(model_dir / "checkpoints")]
    start = max((s for s in on_disk if s <= run.max_steps), default=0)
    kept = sorted(s for s in on_disk if s <= start)
    initial = [0] if run.save_initial_checkpoint and start == 0 and 0 not in kept else []
    total = len(kept) + len(initial) + _count(run, start)
    if total <= keep:
        return None
    oldest = list(islice((*kept, *initial, *islice(saved_steps(run, start), 3)), 3))
    named = ", ".join(str(s) for s in oldest[: total - keep])
    more = f" and {total - keep - 3:,} more" if total - keep > 3 else ""
    return (
        f"{what}: this run deletes {total - keep:,} of its folder's {total:,} checkpoints as "
        f"newer ones are saved, oldest first: step{'s' * (total - keep > 1)} {named}{more}; "
        f"{rest}"
    )


def saves_text(run: RunConfig) -> str:
    """When a run saves, in words ("every 50 steps and at the end")."""
    every = run.checkpoint_steps
    if not every:
        return "at the end only (runconfig.checkpoint_steps 0 or null: no periodic save)"
    return f"every {every:,} step{'s' * (every != 1)} and at the end"
