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
eval's), or a `load_checkpoint_states` without the global step (each eval would be recorded
at step 0: hunt 82), else None; asked by `session.check_inputs`, so before JAX is imported.

ModelZoo's `load_checkpoint_states` (hunt 81: refused as an unknown key, "did you mean
'checkpoint_steps'?") is `RunConfig.load_checkpoint_states`: the comma-separated components of
the `checkpoint_path` step that are loaded, of ModelZoo's (`CHECKPOINT_STATES`, its run flow's
`checkpoint_states_to_load`: model, optimizer, dataloader, grad_scaler, lr_scheduler,
global_step, sparsity); null or "all" (its default) loads every one. "model" is the fine-tune
start ModelZoo's params table describes: the checkpoint's weights into a fresh optimizer
state, training from step 0, the data from the start, so another optimizer_type than the
checkpoint's runs (`wse_trainer.resume`, `run_folder.check_resume`); "model,dataloader" keeps
the data position too. Here the optimizer state, the learning-rate schedule and the global
step are one state (optax's update count, in the optimizer state, is the schedule's step and
Adam's bias correction's), so `TRAINING_STATE` is loaded whole or not at all, and "model" is
always loaded (a start without the checkpoint's weights is a run without checkpoint_path);
grad_scaler and sparsity name state no run here has (no loss scaling, no sparsity) and load
nothing. ModelZoo's older `is_pretrained_checkpoint: true` (its run.py's
`--is_pretrained_checkpoint`: step 0, the optimizer state ignored) is read as
`load_checkpoint_states: model`; false or null is dropped. `checkpoint_states(value)` is the
set named (None: all); `loads_training_state` / `loads_data` what a start restores;
`states_problem(runconfig)` the line for a start that names components but no checkpoint_path
(ModelZoo: "used in conjunction with checkpoint_path"; an eval reads the weights whatever it
names), asked by `session.check_inputs`.

How long a run trains (hunt 81: a file with `num_steps` alone, or neither key, ran under a
hidden `max_steps: 100`, which also set its decay's length, and `num_steps: 150` was refused
naming that 100): ModelZoo 1.x trains min(num_steps, max_steps - global step) steps
(`PyTorchBaseRunner`: "One of num_epochs, num_steps, or max_steps must be provided"; its
params table: max_steps is optional unless neither num_epochs nor num_steps is given), as
runs here do where both are given. With `num_steps` alone, `run_steps(config, start)` gives
`max_steps` = the step the run starts from + num_steps (the total the run reaches, where a
decay without optimizer.decay_steps ends, unless a resumed run keeps its checkpoint's) and
`steps_note` the line saying so; a training mode with
neither is refused (`steps_problem`, asked by `session.check_inputs`, so by a run and
`--validate-only`). An eval trains nothing: its `max_steps` left out is the step it starts
from.

`runconfig_read(data)` is the runconfig mapping with `autoload_checkpoint`, the null epoch
keys and `is_pretrained_checkpoint` read, and `load_checkpoint_states` checked, or the line
why one cannot be (the key dropped); `autoload_problem(runconfig, steps)` the line for `false`
where the model_dir's committed `steps` would be loaded. The reader (`wse_trainer.config`)
imports it; a `key=null` override of a key in `READ_AS_RUNS` is no unknown key
(`override_nulls`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from wse_core.errors import shown, shown_value, suggest

__all__ = ["CHECKPOINT_STATES", "READ_AS_RUNS", "TRAINING_STATE", "autoload_problem",
           "checkpoint_states", "eval_all_problem", "loads_data", "loads_training_state",
           "run_steps", "runconfig_read", "states_problem", "steps_note",
           "steps_problem"]  # fmt: skip

AUTOLOAD = "autoload_checkpoint"
EPOCHS = ("num_epochs", "steps_per_epoch")  # null: unset, dropped; a value: refused
STATES, PRETRAINED = "load_checkpoint_states", "is_pretrained_checkpoint"
# keys whose null is read and dropped, never unknown
READ_AS_RUNS = frozenset({("runconfig", k) for k in (AUTOLOAD, *EPOCHS, PRETRAINED)})
# The components `load_checkpoint_states` may name: ModelZoo's (Cerebras/modelzoo's cstorch
# run flow, `checkpoint_states_to_load`, and its runconfig params table), "all" besides
CHECKPOINT_STATES = ("model", "optimizer", "dataloader", "grad_scaler", "lr_scheduler",
                     "global_step", "sparsity")  # fmt: skip
# One state here (module doc): optax's update count is the schedule's step and the global one
TRAINING_STATE = frozenset({"optimizer", "lr_scheduler", "global_step"})
_WHOLE = TRAINING_STATE | {"model", "dataloader"}  # every component a checkpoint here holds


def runconfig_read(data: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """(the runconfig mapping with a null `autoload_checkpoint` and null epoch keys dropped,
    `is_pretrained_checkpoint` read, None), or (it without the key that cannot be read, the
    line why) (module doc)."""
    nulls = (AUTOLOAD, *EPOCHS, PRETRAINED, STATES)
    out = {k: v for k, v in data.items() if not (k in nulls and v is None)}
    value = data.get(AUTOLOAD)
    if not (value is None or isinstance(value, bool)):
        out.pop(AUTOLOAD)
        return out, (  # review 80: "(true ... is what runs here)" outlived false running too
            f"runconfig.autoload_checkpoint must be true or false, got {shown_value(value)} "
            "(true, ModelZoo's default, resumes from model_dir's newest checkpoint; false "
            "starts from scratch in a new model_dir, or from --checkpoint-path's step)"
        )
    why = _states_read(out)
    if why is not None:
        out.pop(STATES, None)
    return out, why


def _states_read(out: dict[str, Any]) -> str | None:
    """`out` with `is_pretrained_checkpoint` moved to `load_checkpoint_states` and a list of
    components joined; the line why either cannot be read, or None."""
    pretrained, states = out.pop(PRETRAINED, None), out.get(STATES)
    if pretrained is not None and not isinstance(pretrained, bool):
        return (
            f"runconfig.is_pretrained_checkpoint must be true or false, got "
            f"{shown_value(pretrained)} (true: the checkpoint's weights alone, from step 0, as "
            "runconfig.load_checkpoint_states: model)"
        )
    if isinstance(states, list) and all(isinstance(k, str) for k in states):
        states = out[STATES] = ",".join(states)  # ModelZoo's Trainer takes a list too
    if pretrained:
        if states is not None and checkpoint_states(str(states)) != {"model"}:
            return (
                f"runconfig.is_pretrained_checkpoint true loads the checkpoint's model alone, "
                f"and runconfig.load_checkpoint_states {shown_value(states)} says otherwise; "
                "give one of them (ModelZoo deprecated is_pretrained_checkpoint for "
                "load_checkpoint_states)"
            )
        out[STATES] = states = "model"
    if states is None:
        return None
    if not isinstance(states, str):
        return (
            f"runconfig.load_checkpoint_states must be text, got {shown_value(states)}: the "
            f"comma-separated components to load ({', '.join(CHECKPOINT_STATES)}), or all"
        )
    return _names_problem(states)


def checkpoint_states(value: str | None) -> frozenset[str] | None:
    """The components `load_checkpoint_states` names, or None for all of them (null, "all",
    or every component a checkpoint here holds)."""
    if value is None or value.strip() == "all":
        return None
    names = frozenset(k.strip() for k in value.split(","))
    return None if _WHOLE <= names else names


def loads_training_state(value: str | None) -> bool:
    """Whether a start restores the optimizer state, its schedule's step and the global step
    (`TRAINING_STATE`): False for a fine-tune start (step 0, a fresh optimizer state)."""
    names = checkpoint_states(value)
    return names is None or TRAINING_STATE <= names


def loads_data(value: str | None) -> bool:
    """Whether a start restores the checkpoint's data position (ModelZoo's "dataloader")."""
    names = checkpoint_states(value)
    return names is None or "dataloader" in names


def _names_problem(value: str) -> str | None:
    """The line why `load_checkpoint_states` `value` cannot run here, or None."""
    names = checkpoint_states(value)
    if names is None:
        return None
    where = f"runconfig.load_checkpoint_states {shown(value)}"
    unknown = sorted(names - set(CHECKPOINT_STATES))
    if unknown:
        name = unknown[0]
        return (
            f"{where} names {shown(name)}, no checkpoint component"
            f"{suggest(name, CHECKPOINT_STATES)}; give some of {', '.join(CHECKPOINT_STATES)} "
            "(comma-separated, as ModelZoo's), or all"
        )
    if "model" not in names:
        return (
            f"{where} loads no model: a run here starts from a checkpoint's weights; add model "
            "(model: a fine-tune from step 0), or leave --checkpoint-path out to start from "
            "initial weights"
        )
    some = sorted(TRAINING_STATE & names)
    if some and not TRAINING_STATE <= names:
        return (
            f"{where} loads {', '.join(some)} without "
            f"{', '.join(sorted(TRAINING_STATE - names))}: here the optimizer state holds the "
            "update count that is the learning-rate schedule's step and the global step, so "
            "the three load together: give model,optimizer,lr_scheduler,global_step (a resume; "
            "dataloader too to keep the data position), or model (a fine-tune from step 0)"
        )
    return None


def states_problem(runconfig: Any) -> str | None:
    """The line for a `load_checkpoint_states` other than all on a train with no
    checkpoint_path (module doc), or None."""
    value = runconfig.load_checkpoint_states
    if checkpoint_states(value) is None or runconfig.checkpoint_path:
        return None
    if runconfig.mode in ("eval", "eval_all"):  # an eval reads the weights, nothing else
        return None
    return (
        f"runconfig.load_checkpoint_states {shown(value)} names what to load from "
        "runconfig.checkpoint_path, and none is given: give the step to start from with "
        "--checkpoint-path (a fine-tune: <pretrained run>/checkpoints/<step>) and a new "
        "model_dir (-o), or leave the key out (a run resumes its model_dir's newest step whole)"
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
    if steps and not loads_training_state(runconfig.load_checkpoint_states):
        return (  # hunt 82: an eval of the weights alone is recorded at step 0, as ModelZoo's
            f"runconfig.mode eval_all with runconfig.load_checkpoint_states "
            f"{shown(runconfig.load_checkpoint_states)}: each checkpoint's weights would be "
            "evaluated at step 0 (no global_step loaded, as ModelZoo records them), each "
            "replacing the one before; leave the key out to record each at its step"
        )
    if steps:
        return None
    folder = os.path.join(runconfig.model_dir, "checkpoints")
    return (
        f"runconfig.mode eval_all: no committed checkpoint in {folder!r} to evaluate; give the "
        "model_dir (-o) of a run that saved checkpoints"
    )


TRAINS = ("train", "train_and_eval")  # the modes that train (eval and eval_all do not)


def steps_problem(runconfig: Any) -> str | None:
    """The line for a training mode given neither max_steps nor num_steps, else None."""
    given = runconfig.max_steps is not None or runconfig.num_steps is not None
    if runconfig.mode not in TRAINS or given:
        return None
    return (
        f"runconfig.max_steps is not given: runconfig.mode {runconfig.mode} trains to "
        "runconfig.max_steps (the total steps, counted from step 0; --max-steps), or "
        "runconfig.num_steps more steps from where it starts (--num-steps); give one, as "
        "ModelZoo requires"
    )


def run_steps(config: Any, start: int) -> Any:
    """`config` with runconfig.max_steps resolved for a run starting at step `start`: a
    max_steps given is kept; left out, it is `start` + num_steps (module doc), or `start`
    where nothing trains."""
    run = config.runconfig
    if run.max_steps is not None:
        return config
    total = start + (run.num_steps or 0)
    return dataclasses.replace(config, runconfig=dataclasses.replace(run, max_steps=total))


def steps_note(given: Any, config: Any, start: int) -> str | None:
    """The line of a training run whose max_steps `given` (its runconfig as given) leaves
    out, or None: the step it trains to from `start`, and where the decay ends, read from
    `config`, the run's settings with max_steps resolved (`run_steps`) and the decay it
    runs (`run_folder.keep_decay`'s). A resumed run that keeps its checkpoint's decay has
    optimizer.decay_steps set, and that decay's own note: this line is silent on it
    (review 82: it said the decay ended at the new max_steps, the next note that it kept
    the 8 steps trained on, which the learning rates followed)."""
    run, opt = config.runconfig, config.optimizer
    if given.max_steps is not None or run.mode not in TRAINS:
        return None
    decay = ""
    if opt.lr_schedule != "constant" and opt.decay_steps is None:
        decay = f"; the {opt.lr_schedule} decay (optimizer.decay_steps unset) ends at it"
    since = f"checkpoint step {start}" if start else "step 0"
    return (
        f"note: runconfig.max_steps unset: runconfig.num_steps={run.num_steps:,} from "
        f"{since}, so the run trains to step {run.max_steps:,} (max_steps {run.max_steps:,})"
        f"{decay}"
    )
