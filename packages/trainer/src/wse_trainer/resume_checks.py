"""The checks a resume asks before any data is read (hunt 70), apart from `resume` and
`run_folder` so both ask them without importing each other: `resolved(path)` (one folder by
any spelling is one path), `check_tokenizer` (a checkpoint of another tokenizer, naming the
tokenizer.json to copy in), `check_export` (a --checkpoint-path that trains nothing but
would move the run's newer steps aside) and `check_model` (a checkpoint of another model: in
any field for a train in its own model_dir, else in a field that shapes the parameters,
`shaping_diff`; hunt 81: llama's max_seq_len and rope_theta, norm_eps and the compute dtype
were refused as "another model" though the same tree and shapes restore, now said in a
note)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wse_trainer.config import ConfigError

__all__ = ["PARAM_FIELDS", "check_export", "check_model", "check_tokenizer", "resolved",
           "shaping_diff"]  # fmt: skip


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


# The model fields that shape the parameter tree a checkpoint holds (`wse_models.init_params`:
# the embedding, each layer's matrices and norms, the head, stored in param_dtype); n_heads
# and n_kv_heads also split the attention matrices into heads. GPT-2's max_seq_len sizes its
# learned position table (`shaping_diff`); Llama's sizes nothing (rotary positions), nor do
# rope_theta, rope_scaling, norm_eps, the compute dtype or mlp_activation (hunt 81).
PARAM_FIELDS = ("arch", "vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff",
                "head_dim", "tie_embeddings", "param_dtype")  # fmt: skip
GPT2_POSITIONS = "max_seq_len"  # a GPT-2's (max_seq_len, d_model) position table


def shaping_diff(want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """The fields of `PARAM_FIELDS` (and GPT-2's max_seq_len) in which two models' saved
    fields (`dataclasses.asdict` of `wse_models.ModelConfig`) differ; head_dim compared as
    resolved (None: d_model // n_heads)."""
    gpt2 = "gpt2" in (want.get("arch"), got.get("arch"))
    fields = [*PARAM_FIELDS, *([GPT2_POSITIONS] if gpt2 else [])]
    return [k for k in fields if _resolved(want, k) != _resolved(got, k)]


def _resolved(model: dict[str, Any], key: str) -> Any:
    value = model.get(key)
    if key == "head_dim" and value is None:
        d, h = model.get("d_model"), model.get("n_heads")
        return d // h if isinstance(d, int) and isinstance(h, int) and h else None
    return value


def _differs(key: str, got: dict[str, Any], want: dict[str, Any]) -> str:
    """ "head_dim 32 there, 64 here (d_model // n_heads)": a field's values as the models
    resolve them (hunt 82: a head_dim left out was shown as "None there, None here")."""
    derived = key == "head_dim" and None in (got.get(key), want.get(key))
    how = " (d_model // n_heads)" if derived else ""
    return f"{key} {_resolved(got, key)!r} there, {_resolved(want, key)!r} here{how}"


def check_model(
    ours: dict[str, Any], theirs: Any, step: Path, where: str, new: str, strict: bool
) -> list[str]:
    """ConfigError when checkpoint `step`'s model `theirs` is another than `ours`: in any
    field but the name (`strict`: a train resuming its own model_dir), else in a field that
    shapes the parameters (`shaping_diff`); the note of the fields that differ otherwise."""
    want, got = json.loads(json.dumps(ours)), theirs
    every = [k for k in sorted(set(want) | set(got)) if k != "name" and want.get(k) != got.get(k)]
    diff = every if strict else shaping_diff(want, got)
    if diff:
        shown = "; ".join(_differs(k, got, want) for k in diff[:4])
        other = ""
        if strict and not shaping_diff(want, got):  # a start from it may change them
            other = (
                f", or start a new model_dir from it with --checkpoint-path {step} (settings "
                "that shape no parameter may change there)"
            )
        raise ConfigError(
            f"{where}: checkpoint step {step.name} ({step}) is of another model ({shown}); "
            f"resume with its model settings (model.{diff[0]}={got.get(diff[0])!r}){other}, "
            f"or {new}"
        )
    if not every:
        return []
    was = ", ".join(f"model.{k}={_setting(got.get(k))}" for k in every)
    now = ", ".join(_setting(want.get(k)) for k in every)
    return [
        f"note: checkpoint step {step.name} ({step}) was trained with {was} ({now} here): "
        "settings that shape no parameter (its weights restore as they are); this run "
        "runs with its own"
    ]


def _setting(value: Any) -> str:
    """A config value as an override gives it (`adamw`, `0.003`, `null`)."""
    return value if isinstance(value, str) and value.strip() == value != "" else json.dumps(value)
