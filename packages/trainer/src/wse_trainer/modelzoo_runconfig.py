"""ModelZoo's runconfig keys for how its runs start and how long they train, where runs here
work one way only.

- `autoload_checkpoint` (ModelZoo: with no checkpoint_path, resume from the newest checkpoint
  in model_dir; its default true; false: start from scratch unless checkpoint_path names one)
  is `RunConfig.autoload_checkpoint`; `true` or null is what every run here does (null is read
  as the key left out). `false` means what runs wherever no checkpoint would be autoloaded: a
  new or empty model_dir, one whose checkpoints/ holds no step, or a `checkpoint_path`
  (`--checkpoint-path`), which ModelZoo loads whatever autoload says. Only a model_dir that
  holds a step and no checkpoint_path is refused (`autoload_problem`, asked by
  `session.check_inputs`, so `--validate-only` too): ModelZoo would start from scratch there;
  a run here does not, since a run folder holds one run (its metrics.jsonl, tokenizer.json and
  steps would mix two runs' steps 1..N), so the line names a new model_dir (-o), or the key
  left out to resume (hunt 79: false was refused at read time, even for a new folder or with
  the `--checkpoint-path` its own line advised). Any other value is refused as no boolean
  (hunt 77: "did you mean 'save_initial_checkpoint'?"). `num_epochs` and `steps_per_epoch`
  (no epochs here) are refused with their note in `modelzoo_keys.MODELZOO_NOTES`; a null
  (ModelZoo's default: unset) is dropped, as the key left out (hunt 78: refused as unknown).

ModelZoo's mode `eval_all` (every checkpoint of model_dir evaluated, in step order, each a
run of its own: `sideband_eval_all`) is `wse_trainer.run.run_eval_all`: a `mode: eval` run of
each committed step, `--checkpoint-path <model_dir>/checkpoints/<step>` (hunt 80: it was
refused, "run --mode eval once per step"). `eval_all_problem(runconfig, steps)` is its line
for a model_dir whose checkpoints/ holds no step, or a checkpoint_path (one checkpoint: mode
eval's), else None; asked by `session.check_inputs`, so before JAX is imported.

`runconfig_read(data)` is the runconfig mapping with `autoload_checkpoint` and the null epoch
keys read, or the line why it cannot be; `autoload_problem(runconfig, steps)` the line for
`false` where the model_dir's committed `steps` would be loaded. The reader
(`wse_trainer.config`) imports it; a `key=null` override of a key in `READ_AS_RUNS` is no
unknown key (`override_nulls`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from wse_core.errors import shown_value

__all__ = ["READ_AS_RUNS", "autoload_problem", "eval_all_problem", "runconfig_read"]

AUTOLOAD = "autoload_checkpoint"
EPOCHS = ("num_epochs", "steps_per_epoch")  # null: unset, dropped; a value: refused
# keys whose null is read and dropped, never unknown
READ_AS_RUNS = frozenset({("runconfig", k) for k in (AUTOLOAD, *EPOCHS)})


def runconfig_read(data: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """(the runconfig mapping with a null `autoload_checkpoint` and null epoch keys dropped,
    None), or (it, the line why its `autoload_checkpoint` is no boolean) (module doc)."""
    out = {k: v for k, v in data.items() if not (k in (AUTOLOAD, *EPOCHS) and v is None)}
    value = data.get(AUTOLOAD)
    if value is None or isinstance(value, bool):
        return out, None
    return out, (  # review 80: "(true ... is what runs here)" outlived false running too
        f"runconfig.autoload_checkpoint must be true or false, got {shown_value(value)} (true, "
        "ModelZoo's default, resumes from model_dir's newest checkpoint; false starts from "
        "scratch in a new model_dir, or from --checkpoint-path's step)"
    )


def autoload_problem(runconfig: Any, steps: list[int]) -> str | None:
    """The line for `autoload_checkpoint: false` where the run would load a checkpoint the
    user asked it not to: no checkpoint_path and `steps` (the model_dir's committed steps)
    not empty; else None (module doc)."""
    if runconfig.autoload_checkpoint or runconfig.checkpoint_path or not steps:
        return None
    return (
        f"runconfig.autoload_checkpoint false: model_dir {runconfig.model_dir!r} holds "
        f"checkpoint step {max(steps)}, which a run here resumes (one run a folder: ModelZoo "
        "would start from scratch beside it); to start fresh give a new model_dir (-o), to "
        "resume leave the key out, or give --checkpoint-path for a chosen step"
    )


def eval_all_problem(runconfig: Any, steps: list[int]) -> str | None:
    """The line refusing mode eval_all where `steps` (the model_dir's committed steps) is
    empty, or a checkpoint_path names one checkpoint; else None (module doc)."""
    if runconfig.checkpoint_path:
        return (
            "runconfig.mode eval_all evaluates every checkpoint in model_dir; "
            f"--checkpoint-path {runconfig.checkpoint_path} names one: use --mode eval for it, "
            "or leave --checkpoint-path out"
        )
    if steps:
        return None
    folder = os.path.join(runconfig.model_dir, "checkpoints")
    return (
        f"runconfig.mode eval_all: no committed checkpoint in {folder!r} to evaluate; give the "
        "model_dir (-o) of a run that saved checkpoints"
    )
