"""What a `wse train` model_dir may be, and whose checkpoints a run may resume.

Contract. `check_model_dir(path)` (cheap: no JAX, no orbax) refuses a model_dir that exists
and holds files, none of them a run's (`RUN_ENTRIES`: checkpoints/, tokenizer.json,
metrics.jsonl...): a run would write its checkpoints, logs and HF export among someone's
files (hunt 57: `-o ~/data` trained into it), or a run's entry of the wrong kind (a folder
run.log, a file hf, a FIFO tokenizer.json; in train/ and eval/, a params or event file that
is no regular file or is a symlink: `wse_trainer.run_entries`). A new, empty or run folder
passes.
`make_model_dir(path)` makes it (with its parents), checks it is writable and locks it for
the run (`wse_trainer.run_lock`: a second run there is refused naming the first's pid).
`checkpoint_steps(path)` lists the step folders a `--checkpoint-path` names (cheap, as
`check_model_dir`). `resumed_step(config)` is the step a run starts from, as
`resume.open_checkpoints` will pick it: in its own model_dir the newest whose seal holds as
far as its files' sizes tell (hunt 82: a corrupt newest step, which the run moves aside,
was the one the notes and checks read). `check_resume(config, model)` reads the meta JSON of
that step (or `--checkpoint-path`'s) and refuses
one written for another model, naming the fields: in its own model_dir a train compares
every field but the name; a `--checkpoint-path` start and an eval compare the fields that
shape the parameters (`shaping_diff`: hunt 81 refused llama's max_seq_len and rope_theta,
norm_eps and the compute dtype as "another model", though the same tree and shapes restore),
and return a note naming the others that differ, which the run then runs with. It refuses
one with another `train_input.shuffle_seed` where the data position is loaded (hunt 62:
refused only after the tokenizer): before, the model_dir's steps were moved aside as
"corrupt" and the run started again from step 0, and a `--checkpoint-path` was refused by
orbax's shape error after the tokenizer was made. It refuses the same way a resume whose
settings differ from the step's where `RESUMABLE` does not allow it (the optimizer, the
batch: hunt 64; a setting added since a step was saved compared at the value its run ran
with, `SAVED_BEFORE`; none where a start loads the weights alone,
`runconfig.load_checkpoint_states: model`, into a fresh optimizer of any type), a step
folder whose name is not its meta's step (`misnamed`), and a metrics.jsonl that is not JSON
lines (`wse_trainer.metrics.read_metrics`). A step without a readable meta is left to the
verified read (`wse_trainer.checkpoints`). Hunt 70: a resume whose max_steps would stretch
the decay keeps it (`keep_decay`; hunt 80: a --checkpoint-path start too, a schedule it is
given said where it changes a step's rate); a step folder of the run's that is a symlink, an
export that would move newer steps aside and a model_dir tokenizer.json of another identity
are refused; a `--checkpoint-path` into the run's own checkpoints is known by any spelling
(`resolved`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wse_trainer.config import ConfigError, TrainConfig
from wse_trainer.resume_checks import (
    PARAM_FIELDS,
    check_export,
    check_model,
    check_tokenizer,
    resolved,
    shaping_diff,
)
from wse_trainer.run_entries import check_entry, check_inner
from wse_trainer.run_lock import LOCK_NAME, ModelDirInUse, held, hold, release
from wse_trainer.seals import SEAL, SEALED_KEY, step_problem

__all__ = ["RUN_ENTRIES", "RESUMABLE", "PARAM_FIELDS", "check_model_dir", "make_model_dir",
           "undone_on_error", "check_resume", "checkpoint_steps", "misnamed", "keep_decay",
           "resumed_step",
           "resolved", "shaping_diff"]  # fmt: skip

# What a run writes in its model_dir (wse_trainer.metrics, checkpoints, run, session) and
# `wse demo`'s mark (wse_trainer.demo.MARKER)
RUN_ENTRIES = frozenset(
    {"checkpoints", "checkpoints_aside", "tokenizer.json", "metrics.jsonl", "run.log", "train",
     "eval", "hf", ".wse-demo", LOCK_NAME}
)  # fmt: skip
_IGNORED = frozenset({".DS_Store"})  # a file browser's, in any folder


def check_model_dir(path: Path) -> None:
    """ConfigError for a file, or a folder with files of which none is a run's."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"model_dir {str(path)!r} is a file; give a folder")
    if not path.is_dir():
        return
    try:
        names = sorted(set(os.listdir(path)) - _IGNORED)
    except OSError as e:
        raise ConfigError(f"cannot read model_dir {str(path)!r}: {e.strerror}") from None
    if names and not RUN_ENTRIES.intersection(names):
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3:,} more" if len(names) > 3 else "")
        raise ConfigError(
            f"model_dir {str(path)!r} holds {shown} and is no run folder (no checkpoints/, "
            "tokenizer.json or metrics.jsonl): a run would write among them; give a new or "
            "empty folder"
        )
    for name in sorted(RUN_ENTRIES.intersection(names)):
        check_entry(path / name)
    check_inner(path)  # hunt 78: params and event files a resume writes through or reads


def make_model_dir(path: Path) -> Path:
    """`path` made (with its parents), writable and locked for this run (process 0:
    `wse_trainer.run_lock`), or a ConfigError saying why not (`ModelDirInUse` when another
    run holds it); a folder it makes is marked, for `undone_on_error`."""
    from wse_core.host.distributed import is_primary

    check_model_dir(path)
    top = next((p for p in reversed([path, *path.parents]) if not p.exists()), None)
    key = str(path.absolute())
    _made[key] = top
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot make model_dir {str(path)!r}: {e.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"model_dir {str(path)!r} is not writable")
    if is_primary():
        try:
            hold(path)
        except ModelDirInUse:
            _made.pop(key, None)  # the other run's folder: nothing here is this block's
            raise
    return path


_made: dict[str, Path | None] = {}  # model_dir -> the outermost folder make_model_dir made


@contextlib.contextmanager
def undone_on_error(path: Path) -> Iterator[None]:
    """On an error inside (the data refused, a checkpoint of another tokenizer), release
    the lock the block took and remove the tokenizer.json it wrote and the folders
    `make_model_dir` made inside it when they are empty again (process 0 alone: the others
    only read). A retry then trains its tokenizer on the data it is given. A block refused
    before its `make_model_dir` wrote nothing, and one refused because another run holds
    the folder (`ModelDirInUse`) undoes nothing: the files are that run's."""
    from wse_core.host.distributed import is_primary

    tok, key = path / "tokenizer.json", str(path.absolute())
    try:
        had = tok.exists()
    except OSError:  # an unreadable model_dir: refused inside, nothing there is the block's
        had = True
    locked = held(path)
    _made.pop(key, None)  # what an earlier block made is not this one's to remove
    try:
        yield
    except ModelDirInUse:
        raise
    except BaseException:
        reached, top = key in _made, _made.pop(key, None)
        if not locked:
            release(path)
        if is_primary() and reached:
            with contextlib.suppress(OSError):  # best effort: the error inside is what is told
                _undo(path, None if had else tok, top)
        raise


def _undo(path: Path, tok: Path | None, top: Path | None) -> None:
    """Remove `tok` (when given) and the folders from `path` up to `top` that are empty."""
    if tok is not None:
        tok.unlink(missing_ok=True)
    for folder in [path, *path.parents] if top is not None else []:
        if any(folder.iterdir()):
            break
        folder.rmdir()
        if folder == top:
            break


def _steps(folder: Path) -> list[Path]:
    """Step folders of a checkpoints folder, newest first."""
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if p.name.isdigit() and p.is_dir()),
                  key=lambda p: int(p.name), reverse=True)  # fmt: skip


def checkpoint_steps(path: str | Path) -> list[Path]:
    """The step folders `--checkpoint-path` names, newest first, where
    `wse_trainer.checkpoints.resolve_checkpoint` looks (one step folder, a checkpoints
    folder or a model_dir), read without orbax: none, and the run refuses it."""
    p = resolved(path)
    return [p] if p.name.isdigit() and p.is_dir() else _steps(p / "checkpoints") or _steps(p)


META_MAX_BYTES = 1 << 20  # a step's meta JSON is ~2 KB; a larger one is left to orbax's read


def _meta(step: Path) -> dict[str, Any] | None:
    path = step / "meta" / "metadata"
    try:
        if not path.is_file() or path.stat().st_size > META_MAX_BYTES:
            return None
        meta = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return meta if isinstance(meta, dict) and isinstance(meta.get("model"), dict) else None


def _sound(step: Path, meta: dict[str, Any]) -> bool:
    """Whether step folder `step` (of meta `meta`) reads back as far as its files tell without
    orbax: the seal its meta promised is there (`seals.SEALED_KEY`) and lists files there at
    their sizes (`seals.step_problem` without the digests, which the verified read computes)."""
    if meta.get(SEALED_KEY) and not (step / SEAL).is_file():
        return False
    return step_problem(step, digests=False) is None


def _resumed(config: TrainConfig) -> tuple[list[tuple[Path, dict[str, Any]]], str]:
    """The step folders a run may resume with their metas, newest first (those without a
    readable meta left out, and in its own model_dir those that are not `_sound`, which
    `resume.open_checkpoints` moves aside as corrupt: hunt 82, the notes and checks read a
    step the run then moved aside), and how to name where they are. A --checkpoint-path step
    that is not sound is refused by the run, naming it."""
    ckpt = config.runconfig.checkpoint_path
    if ckpt:
        steps, where = checkpoint_steps(ckpt), "--checkpoint-path"
    else:
        steps = _steps(Path(config.runconfig.model_dir) / "checkpoints")
        where = f"model_dir {str(config.runconfig.model_dir)!r}"
    found = [(step, meta) for step in steps if (meta := _meta(step)) is not None]
    return [(s, m) for s, m in found if ckpt or _sound(s, m)], where


def resumed_step(config: TrainConfig) -> int | None:
    """The step a run of `config` starts from, as `resume.open_checkpoints` will pick it
    without orbax's read: the newest sound step of its model_dir, or --checkpoint-path's
    newest; None where there is none (cheap: meta JSON and seals, no digest)."""
    found, _ = _resumed(config)
    return int(found[0][0].name) if found else None


def misnamed(step: Path, meta: dict[str, Any], where: str) -> str | None:
    """The refusal of a step folder whose name is not the step its meta holds (a copied or
    renamed folder), or None."""
    said = meta.get("step")
    if not isinstance(said, int) or isinstance(said, bool) or str(said) == step.name:
        return None
    return (
        f"{where}: checkpoint step {step.name} ({step}) holds step {said} (its meta's step): "
        f"a copied or renamed step folder would resume step {said}'s weights and data "
        f"position as step {step.name}; move it out of {step.parent} (or name it {said}), "
        "or give a new model_dir (-o)"
    )


def check_resume(config: TrainConfig, model: Any) -> list[str]:
    """ConfigError when the step the run would resume was written for another model than
    `model` (the run's `wse_models.ModelConfig`), with another `train_input.shuffle_seed`,
    or with settings `RESUMABLE` does not list (`_check_settings`); when a step folder's
    name is not its meta's step; or when metrics.jsonl is not JSON lines. Returns the notes
    of model fields that differ but shape no parameter (a start or an eval runs them)."""
    from wse_trainer.metrics import read_metrics
    from wse_trainer.modelzoo_runconfig import loads_data, loads_training_state

    read_metrics(config.runconfig.model_dir)  # hunt 64: refused only after the compile
    _check_linked(config)
    found, where = _resumed(config)
    for step, meta in found:
        problem = misnamed(step, meta, where)
        if problem is not None:  # hunt 64: trained step 3 again and logged it as step 6
            raise ConfigError(problem)
    if not found:
        return []
    step, meta = found[0]
    mine = not config.runconfig.checkpoint_path or step.parent == _own(config)  # any spelling
    states = config.runconfig.load_checkpoint_states
    whole = loads_training_state(states)  # else the weights alone, from step 0
    if config.runconfig.checkpoint_path and config.runconfig.mode != "eval" and whole:
        own = [
            int(p.name) for p in checkpoint_steps(Path(config.runconfig.model_dir) / "checkpoints")
        ]
        check_export(config, step, mine, own)
    strict = where != "--checkpoint-path" and config.runconfig.mode != "eval"
    new = "give a new model_dir (-o)" if where != "--checkpoint-path" else "drop --checkpoint-path"
    notes = check_model(dataclasses.asdict(model), meta["model"], step, where, new, strict)
    data, seed = meta.get("data"), config.train_input.shuffle_seed
    theirs = data.get("seed") if isinstance(data, dict) and loads_data(states) else None
    if isinstance(theirs, int) and theirs != seed:  # hunt 62: refused after the tokenizer
        raise ConfigError(
            f"{where}: checkpoint step {step.name} ({step}) was trained with "
            f"train_input.shuffle_seed={theirs}, {seed} here; resume with "
            f"train_input.shuffle_seed={theirs}, or {new}"
        )
    if whole:  # a fresh optimizer of any type takes the weights alone (hunt 81)
        _check_settings(config, step, meta, where, new, strict)
    sha, tok = meta.get("tokenizer_sha256"), Path(config.runconfig.model_dir) / "tokenizer.json"
    if isinstance(sha, str) and tok.is_file():  # hunt 70: refused 14 s in, after the data
        check_tokenizer(config, step, sha, tok, trained=False)
    return notes


def _own(config: TrainConfig) -> Path:
    return resolved(Path(config.runconfig.model_dir) / "checkpoints")


def _check_linked(config: TrainConfig) -> None:
    """ConfigError for a step folder of the run's own that is a symlink (hunt 70: once
    keep_checkpoint_max retired it, orbax's rmtree failed every save, forever)."""
    if config.runconfig.mode == "eval":  # it reads, deletes nothing
        return
    for step in _steps(Path(config.runconfig.model_dir) / "checkpoints"):
        if step.is_symlink():
            raise ConfigError(
                f"checkpoint step {step.name} ({step}) is a symlink to {resolved(step)}: orbax "
                "cannot delete it when runconfig.keep_checkpoint_max retires it, so every save "
                "from then on would fail; copy the step folder in its place, or start a new "
                f"model_dir from it with --checkpoint-path {resolved(step)}"
            )


def keep_decay(config: TrainConfig) -> tuple[TrainConfig, list[str]]:
    """`config` with the decay length of the step the run resumes where its max_steps would
    stretch it and optimizer.decay_steps is left out (`optimizer.kept_decay`), and the notes
    saying so (`optimizer.kept_note`); in its own model_dir a decay_steps naming another
    length is a ConfigError. A start from a --checkpoint-path (hunt 80: the decay was
    rebuilt from this run's max_steps, unsaid) keeps it too, but runs a decay_steps or other
    rates it is given, as ModelZoo runs its params file's schedule on the restored step
    count, saying the first step whose rate that changes (`optimizer.started_rate_note`).
    An eval keeps none."""
    from wse_trainer.modelzoo_runconfig import loads_training_state

    run = config.runconfig
    found, where = _resumed(config)
    if not found or run.mode == "eval" or not loads_training_state(run.load_checkpoint_states):
        return config, []  # a fine-tune start (step 0) runs its own schedule
    from wse_trainer.optimizer import kept_decay, kept_note, started_rate_note  # imports JAX

    step, meta = found[0]
    at, saved = f"{where}: checkpoint step {step.name} ({step})", meta.get("config")
    started, opt = bool(run.checkpoint_path), config.optimizer
    notes = []
    if not (started and opt.decay_steps is not None):  # given to a new run: its own
        decay = kept_decay(opt, run.max_steps, int(step.name), saved, at)
        if decay is not None:
            opt = dataclasses.replace(opt, decay_steps=decay)
            notes.append(kept_note(opt, run.max_steps, step, started))
    if started and (rate := started_rate_note(opt, run.max_steps, int(step.name), saved, at)):
        notes.append(rate)
    return dataclasses.replace(config, optimizer=opt), notes


# What may change between the runs of one model_dir (ModelZoo resumes with a new
# runconfig the same way): how long it runs, how often it saves, logs, evaluates and
# samples; how the emulator lays the same step out; where the text is read from (a moved
# run folder, or more text: the tokenizer's sha256 and the data seed are checked apart);
# the seed (the RNG key is restored from the checkpoint); and eval_input (never trained
# on). Anything else (the optimizer and its schedule, the batch, the sequence length,
# packing) changes what a step computes, or makes the saved optimizer state unusable
# (hunt 64: optimizer_type adamw -> sgd moved every step aside as "corrupt" and trained
# from step 0), and is refused. `model` is compared field by field above. max_steps also
# sets the length of a decay without optimizer.decay_steps: `keep_decay` keeps that.
RESUMABLE = frozenset(
    {f"runconfig.{k}" for k in ("max_steps", "num_steps", "mode", "model_dir",
      "checkpoint_path", "checkpoint_steps", "keep_checkpoint_max", "log_steps",
      "eval_frequency", "seed", "num_csx", "wafer", "activation_stride", "weight_chunks",
      "cpu_shards", "sample_tokens", "sample_prompt", "sample_temperature",
      "save_initial_checkpoint", "validate_only", "autoload_checkpoint",
      "load_checkpoint_states")}
    | {f"train_input.{k}" for k in ("data_dir", "text_key", "split", "max_corpus_bytes",
       "micro_batch_size", "eval_steps", "shuffle_seed")}
)  # fmt: skip
# What a step's saved optimizer state is shaped by: refused also where the other settings
# may differ (an eval, a --checkpoint-path to start from); sgd keeps a trace only with
# momentum (hunt 69: an eval of a momentum run as plain sgd evaluated step 0, unsaid)
STATE_SHAPING = frozenset({"optimizer.optimizer_type", "optimizer.momentum"})


def _check_settings(
    config: TrainConfig, step: Path, meta: dict[str, Any], where: str, new: str, strict: bool
) -> None:
    """ConfigError naming the settings that differ from the ones `step` was trained with
    (all but `RESUMABLE` when a train resumes its own model_dir; `STATE_SHAPING` when it
    evaluates, or starts from a --checkpoint-path)."""
    theirs = meta.get("config")
    if not isinstance(theirs, dict):  # a step saved before metas held the config
        return
    theirs = _as_run(theirs)
    ours = json.loads(json.dumps(config.to_dict()))
    diff = []
    for section in sorted(set(ours) & set(theirs) - {"model", "eval_input"}):
        mine, saved = ours[section], theirs[section]
        if not isinstance(saved, dict):
            continue
        for key in sorted(set(mine) & set(saved)):
            name = f"{section}.{key}"
            checked = name not in RESUMABLE if strict else name in STATE_SHAPING
            checked = checked and name != "optimizer.decay_steps"  # `keep_decay`: its length
            if checked and mine[key] != saved[key]:
                diff.append((name, saved[key], mine[key]))
    if not diff:
        return
    was = ", ".join(f"{k}={_setting(a)}" for k, a, _ in diff[:4])
    here = ", ".join(_setting(b) for _, _, b in diff[:4])
    more = f" and {len(diff) - 4} more" if len(diff) > 4 else ""
    fix = " ".join(f"{k}={_setting(a)}" for k, a, _ in diff[:4])
    tune = ""
    if where == "--checkpoint-path" and config.runconfig.mode != "eval":  # hunt 81
        tune = (
            ", or start from its weights alone under this optimizer, at step 0, with "
            "runconfig.load_checkpoint_states=model (a fine-tune)"
        )
    raise ConfigError(
        f"{where}: checkpoint step {step.name} ({step}) was trained with {was}{more} "
        f"({here} here); resume with the same settings ({fix}){tune}, or {new}; runconfig's "
        "max_steps, checkpoint_steps, log_steps and the other cadences may change"
    )


# Settings added after runs were saved, at the value those runs ran with (a saved config
# without the key): hunt 82's eps_placement, whose optax form adam and adamw ran before
SAVED_BEFORE = {("optimizer", "eps_placement"): ("optax", ("adam", "adamw"))}


def _as_run(theirs: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's saved config with the `SAVED_BEFORE` settings it lacks at the value its
    run ran with, where its optimizer read them: a resume under another is refused as any
    changed setting is, not run silently."""
    out = dict(theirs)
    for (section, key), (value, readers) in SAVED_BEFORE.items():
        held = out.get(section)
        if isinstance(held, dict) and key not in held and held.get("optimizer_type") in readers:
            out[section] = {**held, key: value}
    return out


def _setting(value: Any) -> str:
    """A config value as an override gives it (`adamw`, `0.003`, `null`)."""
    return value if isinstance(value, str) and value.strip() == value != "" else json.dumps(value)
