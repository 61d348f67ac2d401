"""A parsed params mapping read into a `TrainConfig` (`config_from_dict`).

Contract: this module owns reading values and sections. `checked_value` reads one value
against its field's type (a quoted number, inf/NaN, a float past an int's exact range refused);
`config_from_dict` reads every section, ModelZoo's spellings of our settings moved to ours
first (`wse_trainer.modelzoo_keys`), its keys that change nothing here read with a note
(`wse_trainer.modelzoo_ignored`; a data processor's `vocab_size` checked against the model's
once every section is read), its model keys read by the model (`wse_trainer.modelzoo_model`).
A section that leaves `optimizer.lr_schedule` out runs `optimizer_names.default_schedule`'s,
said in the run's notes (hunt 81). Unknown sections or keys, duplicate keys and wrong types
are `ConfigError`s naming the key and what to give instead, every one of a mapping said in one
error (`_Said`, hunt 79). Files and overrides are `wse_trainer.config`'s and
`wse_trainer.config_overrides`'.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from wse_core.errors import quoted_number, shown, shown_value

from wse_trainer import modelzoo_keys, modelzoo_model
from wse_trainer.config_schema import (
    SECTIONS,
    ConfigError,
    InputConfig,
    OptimizerConfig,
    RunConfig,
    TrainConfig,
)
from wse_trainer.modelzoo_ignored import IGNORED_NOTES, ignored
from wse_trainer.modelzoo_keys import Written, hint, moved, moved_problem
from wse_trainer.modelzoo_runconfig import runconfig_read
from wse_trainer.optimizer_names import schedule_note, scheduler_list
from wse_trainer.splits import data_dir_problem, default_splits

__all__ = ["checked_value", "number_text", "unknown_model_key", "config_from_dict",
           "config_from_moved", "split_lengths", "moved_or_refused"]  # fmt: skip


# Whole floats an integer field takes (`max_steps: 1e3`): exact in a float64.
_EXACT_INT = 1 << 53


def checked_value(where: str, value: Any, annotation: Any) -> Any:
    """`value` of field `annotation` ((dataclass, name)) as read, or a ConfigError (`where`)."""
    hint = typing.get_type_hints(annotation[0])[annotation[1]]
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if isinstance(value, str) and {int, float} & set(options) and number_text(value):
        # hunt 56: `learning_rate: "3e-4"` was read as a number (the file is read as YAML 1.2
        # reads numbers, `spec_loader`, so 3e-4 unquoted is a float): refused as spec files do
        raise ConfigError(quoted_number(where, annotation[1], value))
    if annotation[1] == "data_dir" and (why := data_dir_problem(where, value)):
        raise ConfigError(why)
    for t in options:
        origin = typing.get_origin(t) or t
        if t is type(None) and value is None:
            return None
        if origin is float and isinstance(value, int | float) and type(value) is not bool:
            number = _finite(where, value)
            if number is not None:
                return number
        if origin is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if origin is int and isinstance(value, float) and value.is_integer():
            if abs(value) <= _EXACT_INT:  # as spec files and model sections take them
                return int(value)
        if origin is list and isinstance(value, list):
            return [str(v) for v in value]
        if origin in (str, bool) and type(value) is origin:
            return value
    raise ConfigError(_wrong_type(where, value, options))


def _wrong_type(where: str, value: Any, options: Sequence[Any]) -> str:
    names = " or ".join(getattr(t, "__name__", str(t)) for t in options)
    return f"{where} must be {names}, got {shown_value(value)}"


def number_text(text: str) -> bool:
    """True for text Python reads as a number ('128', '3e-4', 'inf')."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _finite(where: str, value: int | float) -> float | None:
    """`value` as a finite float (None: an integer beyond float64); inf, NaN and numbers
    beyond float64 (`1e400`) are refused: they train to NaN."""
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    if not math.isfinite(number):
        raise ConfigError(f"{where} must be a finite number, got {shown(value, quote=False)}")
    return number


class _Said:
    """What reading a params mapping found: each setting that cannot run (`problems`: its
    line alone, and the line in a list of several), all said in one error (hunt 79: ModelZoo's
    params_gpt2_small.yaml took 13 runs, one refused key each), and the keys read and dropped
    (`ignored`: by their note, `modelzoo_ignored.IGNORED_NOTES`), with the data processors'
    vocab_size given (`vocab`: checked against the model's once every section is read)."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []
        self.ignored: dict[str, list[str]] = {}
        self.unknown: dict[str, list[str]] = {}  # unknown keys by their note: listed once
        self.vocab: dict[str, Any] = {}
        self.seq_lens: tuple[int, ...] = ()  # each read split's (`split_lengths`)

    def add(self, line: str, listed: str | None = None) -> None:
        self.problems.append((line, line if listed is None else listed))

    def raise_any(self) -> None:
        if len(self.problems) == 1:
            raise ConfigError(self.problems[0][0])
        if not self.problems:
            return
        items, said = [], set()
        for _, listed in self.problems:
            note = next((n for n, keys in self.unknown.items() if listed in keys), None)
            if note is None:
                items.append(listed)
            elif note not in said and (keys := self.unknown[note]):
                said.add(note)
                names = ", ".join(k.removeprefix("unknown key ").removesuffix(note) for k in keys)
                items.append(f"unknown key{'s' * (len(keys) > 1)} {names}{note}")
        listed = "; ".join(f"({i}) {item}" for i, item in enumerate(items, 1))
        raise ConfigError(
            f"{len(self.problems)} settings of the params file cannot run here: {listed}"
        )

    def notes(self) -> tuple[str, ...]:
        return tuple(f"note: {', '.join(k)}: {IGNORED_NOTES[n]}"
                     for n, k in self.ignored.items())  # fmt: skip


def _unknown(said: _Said, where: str, why: str, valid: str) -> None:
    """An unknown key `where`; `why`: its note or suggestion; `valid`: its section's keys."""
    said.add(_unknown_line(where, why, valid), f"unknown key {where}{why}")
    if why.startswith(" (") and "did you mean" not in why:  # a note: keys sharing it, listed once
        said.unknown.setdefault(why, []).append(f"unknown key {where}{why}")


def _section(name: str, data: Any, written: Mapping[str, Written], said: _Said) -> Any:
    """The section `name` of `data`, or None where `said` got the lines why it cannot be."""
    cls = SECTIONS[name]
    data = {} if data is None else data
    if not isinstance(data, dict):
        said.add(f"section {name!r} must be a mapping of keys, got {shown_value(data)}")
        return None
    if cls is None:
        _model_keys(data, said)
        return types.MappingProxyType({"preset": "tiny-gpt2", **data})
    fields = {f.name for f in dataclasses.fields(cls)}
    if name == "runconfig":  # ModelZoo's autoload_checkpoint of no boolean, null epochs
        data, why = runconfig_read(data)
        if why:
            said.add(why)
            data = {k: v for k, v in data.items() if k != "autoload_checkpoint"}
    kwargs, before = {}, len(said.problems)
    for key, value in data.items():
        if key not in fields and (ig := ignored(name, str(key), value)):
            if ig.why:
                said.add(ig.why)
            else:  # hunt 79: changes nothing here, said in a note
                said.ignored.setdefault(str(ig.note), []).append(f"{name}.{key}")
                if key == "vocab_size" and value is not None:  # hunt 80: the model's, checked
                    said.vocab[name] = value
        elif key not in fields:
            where = f"{name}.{shown(key, quote=False)}"
            _unknown(said, where, hint(name, key, fields), ", ".join(sorted(fields)))
        else:
            try:
                kwargs[key] = _value(name, key, value, written)
            except ConfigError as e:
                said.add(str(e))
    if len(said.problems) > before:
        return None
    for key in ("model_dir", "checkpoint_path") if name == "runconfig" else ():
        if isinstance(kwargs.get(key), str):  # hunt 62: '~/x' made a folder named '~'
            kwargs[key] = os.path.expanduser(kwargs[key])
    return cls(**kwargs)


def _value(name: str, key: str, value: Any, written: Mapping[str, Written]) -> Any:
    """Section `name`'s `key` as read, or a ConfigError naming it as written."""
    cls = SECTIONS[name]
    if cls is OptimizerConfig and key == "learning_rate" and isinstance(value, list | dict):
        raise ConfigError(scheduler_list(value))  # hunt 69: a repr of dicts
    # named as written (hunt 73: `betas: [0.9, 1.5]` was refused as optimizer.beta2's)
    where = w.name if (w := written.get(f"{name}.{key}")) else f"{name}.{key}"
    out = checked_value(where, value, (cls, key))
    if key == "micro_batch_size" and out is None:  # ModelZoo's "disable micro batch
        out = "none"  # tiling"; the key left out is "auto" (hunt 76)
    if w and (why := modelzoo_keys.written_problem(where, key, out)):
        raise ConfigError(why)
    return out


def _unknown_line(where: str, why: str, valid: str) -> str:
    return f"unknown key {where}{why}; valid keys: {valid}"


def _model_fields() -> set[str]:
    """The model section's keys besides preset: `wse_models.ModelConfig`'s fields but name."""
    import wse_models

    return {f.name for f in dataclasses.fields(wse_models.ModelConfig)} - {"name"}


def _unknown_model_key(key: Any) -> tuple[str, str, str]:
    """(where, why, valid) of the model section's unknown `key` (`_unknown`'s arguments)."""
    fields = _model_fields()
    where = f"model.{shown(key, quote=False)}"
    return where, hint("model", key, fields), f"preset, {', '.join(sorted(fields))}"


def unknown_model_key(key: Any) -> str:
    """The line that refuses the model section's unknown `key`: the one text of the file's
    read (`_model_keys`) and of `session.model_config` (review 79: written twice)."""
    return _unknown_line(*_unknown_model_key(key))


def _model_keys(data: Mapping[str, Any], said: _Said) -> None:
    """Add to `said` the model section's unknown keys and the lines and notes of ModelZoo's
    keys read by the model (`modelzoo_model.read_model`), as `session.model_config` reads them,
    so that a file's are said with its others' (hunt 79)."""
    fields = _model_fields()
    for key in data:
        if key != "preset" and key not in fields | modelzoo_model.MODEL_VALUES:
            _unknown(said, *_unknown_model_key(key))
    import wse_models

    given = {k: v for k, v in data.items() if k != "preset"}
    try:
        read = modelzoo_model.read_model(given, lambda: _preset(data), said.seq_lens)
    except wse_models.ModelConfigError:
        return  # the preset is refused when the model is built
    for line in read.lines:
        said.add(line)
    for note, keys in read.notes.items():
        said.ignored.setdefault(note, []).extend(keys)


def _preset(model: Mapping[str, Any]) -> Any:
    """The `wse_models.ModelConfig` of the model section's preset (tiny-gpt2 by default)."""
    import wse_models

    return wse_models.preset_config(str(model.get("preset", "tiny-gpt2")))


def _vocab_problems(model: Any, said: _Said) -> None:
    """Add to `said` a data processor's vocab_size (ModelZoo's) other than the model's."""
    import wse_models

    if not said.vocab or not isinstance(model, Mapping):
        return
    ours = model.get("vocab_size")
    if ours is None:
        try:
            ours = _preset(model).vocab_size
        except wse_models.ModelConfigError:
            return  # the preset is refused when the model is built
    if type(ours) is not int:
        return  # the model refuses its vocab_size
    whose = "" if "vocab_size" in model else f", preset {model.get('preset', 'tiny-gpt2')}'s"
    for name, value in said.vocab.items():
        if value != ours:
            said.add(
                f"{name}.vocab_size {shown_value(value)} is not the model's vocabulary "
                f"(model.vocab_size {shown_value(ours)}{whose}): a run here tokenizes both "
                "splits with its own tokenizer of model.vocab_size tokens, so ModelZoo's data "
                f"processor vocabulary is the model's; give {shown_value(ours)}, or leave the "
                "key out"
            )


def config_from_dict(data: Mapping[str, Any]) -> TrainConfig:
    """A TrainConfig from a parsed params mapping (missing sections take defaults; ModelZoo's
    keys for settings held elsewhere here moved to them: `wse_trainer.modelzoo_keys`)."""
    if not isinstance(data, Mapping):
        raise ConfigError("a params file must hold a mapping of sections")
    return config_from_moved(*moved_or_refused(data))


def config_from_moved(data: Mapping[str, Any], written: Mapping[str, Written]) -> TrainConfig:
    """The TrainConfig of a mapping in our keys; `written`: its settings given ModelZoo's way.
    Every setting that cannot run is said in one error (`_Said`)."""
    said = _Said()
    said.seq_lens = _split_lengths(data)  # the model's loss keys read them (hunt 82)
    for name in (k for k in data if k not in SECTIONS):
        why = f"unknown section {name!r}{hint('', name, SECTIONS)}"
        said.add(f"{why}; sections: {', '.join(SECTIONS)}", why)
    sections = {name: _section(name, data.get(name), written, said) for name in SECTIONS}
    _vocab_problems(data.get("model") or {}, said)
    said.raise_any()
    notes = said.notes()
    if (data.get("optimizer") or {}).get("lr_schedule") is None:  # left out: what runs, said
        notes += (schedule_note(sections["optimizer"]),)
    return TrainConfig(**default_splits(sections, data), notes=notes)


def split_lengths(train_input: Any, eval_input: Any, mode: Any) -> tuple[int, ...]:
    """The max_sequence_length of each split a run of `mode` reads (train's; eval's too
    outside mode train), each an `InputConfig` or its mapping as given (a length left out:
    the default; one of no integer, which its section refuses, left out)."""
    out = []
    for split in (train_input, *([] if mode == "train" else [eval_input])):
        value = getattr(split, "max_sequence_length", None)
        if isinstance(split, Mapping):
            value = split.get("max_sequence_length", InputConfig.max_sequence_length)
        if type(value) is int and value > 0:
            out.append(value)
    return tuple(out)


def _split_lengths(data: Mapping[str, Any]) -> tuple[int, ...]:
    """`split_lengths` of a params mapping as given (its mode left out: train)."""
    run = data.get("runconfig") if isinstance(data.get("runconfig"), Mapping) else {}
    train, ev = ({} if data.get(k) is None else data.get(k) for k in ("train_input", "eval_input"))
    return split_lengths(train, ev, run.get("mode", RunConfig.mode))


def moved_or_refused(
    data: Mapping[str, Any], *, nulls: bool = False
) -> tuple[dict, dict[str, Written]]:
    if why := moved_problem(data, nulls=nulls):
        raise ConfigError(why)
    return moved(data, nulls=nulls)
