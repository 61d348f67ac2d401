"""Resuming a run: the checkpoint a `Session` starts from, and what is moved out of its way.

`open_checkpoints(s)` restores the newest checkpoint that reads back (or `--checkpoint-path`'s)
into the session: weights, optimizer state, RNG and data position (the state and meta that
`Session.state` / `Session.meta` save); one of another tokenizer or model is a ConfigError.
`runconfig.load_checkpoint_states` (ModelZoo's; `modelzoo_runconfig`) may name less: "model"
reads the step's weights alone (`checkpoints.read_step(partial=True)`, whatever optimizer
state it holds) into a fresh optimizer state and starts at step 0 (hunt 81: a fine-tune
start was impossible), "dataloader" beside it keeps the data position, and leaving dataloader
out of a resume starts the data afresh; the run's log says what was loaded. The data
position is kept in rows (`BatchIterator`), a position saved before it was read at the saved
config's batch size.
Newer steps that are corrupt, or come after the start step, are moved aside with a line each,
never deleted (`wse_trainer.checkpoints`); an eval moves nothing (it reads). A step whose
meta holds another step than its folder's name is a ConfigError, never resumed under it.
`check_tokenizer` (one of another tokenizer, naming the tokenizer.json to copy in) and
`check_export` (a --checkpoint-path that trains nothing but would move newer steps aside)
are `wse_trainer.resume_checks`', also asked by `run_folder.check_resume` before any data
is read (hunt 70). `nothing_to_train` is the line of a resume at or past max_steps.
`eval_on_record` is the eval a rerun that trains nothing finds on record, where its settings
are those saved (`params_on_file`), else None: the eval runs again (review 78).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import yaml
from wse_core.host.distributed import barrier

from wse_trainer.config import ConfigError
from wse_trainer.modelzoo_runconfig import loads_data, loads_training_state
from wse_trainer.resume_checks import check_export, check_tokenizer, resolved
from wse_trainer.session import Session

__all__ = [
    "check_export",
    "check_tokenizer",
    "eval_on_record",
    "evaluating",
    "nothing_to_train",
    "open_checkpoints",
    "params_on_file",
]

_META_KEYS = ("step", "data", "tokenizer_sha256", "model")
_EVAL_SECTIONS = ("eval_input", "model")  # what an eval's loss depends on, besides weights


def open_checkpoints(s: Session) -> tuple[Any, int, list[str]]:
    """(the run's Checkpointer, the step it starts from, lines to log), the checkpoint loaded
    into `s`: `--checkpoint-path`'s step, else the newest step of `<model_dir>/checkpoints`
    that reads back, each newer one moved aside (`corrupt`) with a line saying why. Steps
    after the start step (and from the start step on, when `--checkpoint-path` names another
    run's) are moved aside (`superseded`), so training continues from there. An eval moves
    nothing (it reads a checkpoint, as ModelZoo's `--mode eval` does; hunt 64: it moved
    the newer steps aside) and its Checkpointer is read-only.
    Nothing is deleted (`wse_trainer.checkpoints`)."""
    from wse_trainer.checkpoints import Checkpointer, committed_steps, move_aside

    # resolved: `run/../run` or a link to the run is the run itself (hunt 70: it moved the
    # very step it started from aside as "superseded")
    run_cfg, own = s.config.runconfig, resolved(s.dir / "checkpoints")
    reads = run_cfg.mode == "eval"
    steps = committed_steps(own)
    start, got, bad, folder = _read_start(s, own, steps)
    barrier("wse_trainer: checkpoints read")  # every process read them before any move
    resume = f"step {start}" if got is not None else "the start (no good step left)"
    notes = list(getattr(s, "notes", []))  # the Session's (a kept decay)
    for step, problem in bad:
        where = "left it in place (an eval moves nothing)"
        if not reads:
            where = f"moved it to {move_aside(own / str(step), 'corrupt')}"
        notes.append(
            f"checkpoint step {step} is incomplete or corrupt: {problem}; {where}; "
            f"{'evaluating' if reads else 'resuming from'} {resume}"
        )
    if got is not None:
        moved = _restore(s, got, folder / str(start))  # other rows than it indexed: said
        notes += [moved] if moved and not reads else []  # an eval takes no batch of them
        s.read_from = folder / str(start)
    origin = f"step {start}"
    weights_alone = got is not None and not loads_training_state(run_cfg.load_checkpoint_states)
    if weights_alone and not reads:
        notes.append(_fresh_note(s, folder / str(start)))
        origin, start = f"step {start}'s weights at step 0", 0  # a fine-tune (ModelZoo's)
    elif weights_alone:  # hunt 82: ModelZoo's global step, not loaded, stays 0 (`evaluating`)
        start = 0
    elif got is None and reads:  # as ModelZoo says it (hunt 62: random weights, no word)
        notes.append("No checkpoint was provided. Using randomly initialized model parameters.")
    # steps after the start, and the start step itself when it came from another run's folder
    later = [t for t in steps if (t > start or (t == start and folder != own))]
    later = [t for t in later if all(t != b for b, _ in bad) and not reads]
    for step in later:
        where = move_aside(own / str(step), "superseded")
        source = "" if folder == own else f" of {folder}"
        notes.append(f"starting from {origin}{source}: moved step {step} of {own} to {where}")
    barrier("wse_trainer: checkpoints moved aside")
    return Checkpointer(own, keep=run_cfg.keep_checkpoint_max, read_only=reads), start, notes


def evaluating(s: Session, start: int) -> str:
    """The line of an eval that read checkpoint `s.read_from`, recorded at step `start`:
    "evaluating checkpoint step 4", or, where `runconfig.load_checkpoint_states` loads no
    global step, the weights of that step recorded at step 0, as ModelZoo records them
    (its trainer's global step is set only by a loaded "global_step", 0 otherwise: hunt 82,
    recorded at step 4 here, the weights alone read unsaid)."""
    step = s.read_from
    if step is None or int(step.name) == start:
        return f"evaluating checkpoint step {start}"
    states = s.config.runconfig.load_checkpoint_states
    return (
        f"evaluating checkpoint step {step.name}'s weights ({step}) at step {start}: "
        f"runconfig.load_checkpoint_states={states} loads no global_step, so the eval is "
        f"recorded at step {start}, as ModelZoo records it (its global step is 0 unless "
        "global_step is loaded); leave the key out to record it at the checkpoint's step"
    )


def _read_start(s: Session, own: Path, steps: list[int]) -> tuple[int, Any, list, Path]:
    """(start step, its `StepRead` or None, the newer steps that do not read back with why,
    their folder): `--checkpoint-path`'s step (one that does not read is a ConfigError), or
    the newest of `steps` that reads back. A step whose meta holds another step than its
    folder's name is a ConfigError (`run_folder.check_resume` refuses it first)."""
    from wse_trainer.checkpoints import newest_readable, resolve_checkpoint
    from wse_trainer.run_folder import misnamed

    run_cfg = s.config.runconfig
    where = "--checkpoint-path" if run_cfg.checkpoint_path else f"model_dir {run_cfg.model_dir!r}"
    like, partial = _like(s)
    if run_cfg.checkpoint_path:
        folder, start = resolve_checkpoint(run_cfg.checkpoint_path)
        _, got, bad = newest_readable(folder, [start], like, meta_keys=_META_KEYS, partial=partial)
        if bad:
            raise ConfigError(f"checkpoint step {start} in {folder} cannot be used: {bad[0][1]}")
    else:
        folder = own
        start, got, bad = newest_readable(own, steps, like, meta_keys=_META_KEYS, partial=partial)
    problem = None if got is None else misnamed(folder / str(start), got.meta, where)
    if problem is not None:
        raise ConfigError(problem)
    return start, got, bad, folder


def _like(s: Session) -> tuple[Any, bool]:
    """(what a start reads, shaped as the session's state; whether that is part of the
    step): the whole state, or the weights alone where `load_checkpoint_states` leaves the
    training state out."""
    state = s.state()
    if loads_training_state(s.config.runconfig.load_checkpoint_states):
        return state, False
    return {"memx": {"params": state["memx"]["params"]}}, True


def _restore(s: Session, got: Any, step: Path) -> str | None:
    """Load a verified checkpoint (`checkpoints.StepRead`) of folder `step`: weights,
    optimizer state, RNG and data position, or what `load_checkpoint_states` names (the
    weights alone: a fresh optimizer state, `MemoryX.load_params`); one of another tokenizer
    or model (a field that shapes the parameters: `resume_checks.shaping_diff`) is a ConfigError.
    Returns the note of a position restored over other rows than it indexed, or at another
    batch size (`BatchIterator.restore`), or None."""
    import json

    import jax

    from wse_trainer.resume_checks import shaping_diff

    tok = s.dir / "tokenizer.json"
    check_tokenizer(s.config, step, got.meta["tokenizer_sha256"], tok, trained=True, mine=s.tok_id)
    ours = json.loads(json.dumps(dataclasses.asdict(s.model)))
    diff = shaping_diff(ours, got.meta["model"])  # `check_resume` said the others
    if diff:
        raise ConfigError(
            f"the checkpoint holds another model (model.{', model.'.join(diff)} differ); "
            "use the config it was trained with or another model_dir"
        )
    memx = got.state["memx"]
    if "opt_state" in memx:
        s.trainer.memx.load_state_tree(memx)
        s.key = jax.random.wrap_key_data(got.state["rng"])
    else:
        s.trainer.memx.load_params(memx["params"])
    if not loads_data(s.config.runconfig.load_checkpoint_states):
        return None  # the data from the start, as ModelZoo's dataloader not loaded
    return s.iterator.restore(_data_state(got.meta))


def _data_state(meta: dict[str, Any]) -> dict[str, Any]:
    """The meta's data position, with the batch size it was taken at where it was saved
    before positions held it (the saved config's): read in rows (`BatchIterator.restore`)."""
    data = dict(meta["data"])
    config = meta.get("config")
    inp = config.get("train_input") if isinstance(config, dict) else None
    saved = inp.get("batch_size") if isinstance(inp, dict) else None
    if "batch_size" not in data and isinstance(saved, int):
        data["batch_size"] = saved
    return data


def _fresh_note(s: Session, step: Path) -> str:
    """The line of a start that loaded checkpoint `step`'s weights without its training
    state (`load_checkpoint_states`): what starts afresh."""
    states = s.config.runconfig.load_checkpoint_states
    data = "the data from the start of its order"
    if loads_data(states):
        at = f"row {s.iterator.taken:,} of epoch {s.iterator.epoch}"
        data = f"the data from the checkpoint's position ({at})"
    return (
        f"starting from checkpoint step {step.name}'s weights ({step}): "
        f"runconfig.load_checkpoint_states={states}, so a fresh "
        f"{s.config.optimizer.optimizer_type} optimizer state, the learning-rate schedule and "
        f"the global step start at step 0, {data}"
    )


def nothing_to_train(step: int, max_steps: int) -> str:
    """The line of a resume from `step` at or past `max_steps`: it trains nothing, exports."""
    where = "at" if step == max_steps else "past"
    return (
        f"note: checkpoint step {step} is {where} runconfig.max_steps={max_steps}: nothing to "
        f"train (raise runconfig.max_steps to train on); exporting step {step}"
    )


def params_on_file(folder: Path) -> list[Any]:
    """The run folder's saved settings, train/params_train.yaml's and eval/params_eval.yaml's
    (those that exist; None for one that cannot be read): what the evals on record in its
    metrics.jsonl ran with, read before this run saves its own."""
    from wse_core.errors import WseError
    from wse_core.host.readers import load_yaml, read_text

    out: list[Any] = []
    for mode in ("train", "eval"):
        path = folder / mode / f"params_{mode}.yaml"
        if os.path.lexists(path):
            try:
                out.append(load_yaml(read_text(path, "saved params"), str(path)))
            except (OSError, ValueError, yaml.YAMLError, WseError):
                out.append(None)
    return out


def eval_on_record(log: Any, step: int, s: Session, on_file: list[Any]) -> float | None:
    """The eval loss of `step` that metrics.jsonl holds, said in the run log, or None (hunt 78:
    a finished run rerun held step 14's eval twice, in metrics.jsonl and eval/): only where
    the eval would run as it ran, the settings it depends on those of every saved params
    file `on_file` (`params_on_file`; review 78: a rerun with eval_input.eval_steps=1 said
    the loss of 2 batches); else the reason is said and the eval runs again, its record
    replacing the old one (`MetricsLog.record`)."""
    held = log.recorded(step, "eval") or {}
    loss = held.get("loss")
    if not isinstance(loss, int | float) or isinstance(loss, bool):
        return None
    said = f"eval of step {step} on record in metrics.jsonl (loss {loss:.5f})"
    changed = _eval_changed(s, on_file)
    if changed is not None:
        log.line(f"{said} ran with other settings ({changed}): evaluating it again")
        return None
    log.line(f"{said}: not run again")
    return float(loss)


def _eval_changed(s: Session, on_file: list[Any]) -> str | None:
    """How this run's eval would differ from the one on record, or None: its eval_input and
    model sections (the data, eval_steps, batch size, sequence length, packing; the model)
    against each saved file's; a `--checkpoint-path`'s weights may be another run's."""
    if s.config.runconfig.checkpoint_path:
        return "runconfig.checkpoint_path names the weights"
    if not on_file:
        return "no saved params to compare"
    now = yaml.safe_load(yaml.safe_dump(s.settings()))  # as `run._save_params` saves them
    for saved in on_file:
        if not isinstance(saved, dict):
            return "a saved params file cannot be read"
        for section in _EVAL_SECTIONS:
            theirs, ours = saved.get(section), now[section]
            if not isinstance(theirs, dict):
                return f"no {section} section saved"
            keys = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
            if keys:
                return ", ".join(
                    f"{section}.{k} was {theirs.get(k)!r}, now {ours.get(k)!r}" for k in keys
                )
    return None
