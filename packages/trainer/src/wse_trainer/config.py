"""Run configuration in Cerebras ModelZoo form: a YAML file with five sections.

`train_input`, `eval_input` (data), `model` (a `wse_models` preset plus ModelConfig field
overrides), `optimizer` (an optax transform and its schedule) and `runconfig` (steps,
checkpoints, `num_csx`, the wafer). `load_config(path, overrides)` reads the file, applies
dotted overrides (`optimizer.learning_rate=3e-4`, values parsed as YAML; `key=null` as
`key: null` in the file, `wse_trainer.override_nulls`) and returns a frozen `TrainConfig`;
ModelZoo's spellings of our settings (`runconfig.eval_steps`, `max_checkpoints`,
`optimizer.betas`, `weight_decay_rate`, `use_vsl`, GPT-2's model keys) are moved to ours
(`wse_trainer.modelzoo_keys`), its keys that change nothing here read with a note
(`wse_trainer.modelzoo_ignored`; a data processor's `vocab_size` checked against the model's
here, once every section is read), its model keys read by the model
(`wse_trainer.modelzoo_model`). A section that leaves `optimizer.lr_schedule` out runs
`optimizer_names.default_schedule`'s, said in the run's notes (hunt 81).
Unknown sections or keys, duplicate keys and wrong types are `ConfigError`s naming the key
and what to give instead. What the values cannot run is checked before anything compiles by
`wse_trainer.config_check.check_config`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from wse_core.errors import WseError, quoted_number, shown, shown_value, suggest, yaml_problem
from wse_core.host.readers import load_yaml, read_text
from wse_core.hw.presets import spec_loader

from wse_trainer import modelzoo_keys, modelzoo_model
from wse_trainer.modelzoo_ignored import IGNORED_NOTES, ignored
from wse_trainer.modelzoo_keys import MODELZOO_KEYS, Written, hint, moved, moved_problem, same
from wse_trainer.modelzoo_runconfig import runconfig_read
from wse_trainer.optimizer_names import (
    EPS_PLACEMENTS,
    OPTIMIZER_NAMES,
    READ_BY,
    SCHEDULE_NAMES,
    default_schedule,
    schedule_note,
    scheduler_list,
    unused_settings,
)
from wse_trainer.override_nulls import null_is_value, null_meaning, unknown_null
from wse_trainer.splits import data_dir_problem, default_splits

__all__ = ["ConfigError", "InputConfig", "OPTIMIZER_NAMES", "OptimizerConfig", "READ_BY",
           "SCHEDULE_NAMES", "RunConfig", "TrainConfig", "SECTIONS", "load_config",
           "config_from_dict", "apply_overrides", "checked_value", "shipped_config",
           "SHIPPED", "MODELZOO_KEYS", "unknown_model_key", "split_lengths"]  # fmt: skip


class ConfigError(WseError):
    """A params file, section, key or value is invalid."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputConfig:
    """One data split. `data_dir`: "stdlib" (the Python standard library's source), local
    .txt/.jsonl/.json/.parquet files or folders, or a `datasets` name."""

    data_dir: str | list[str] = "stdlib"
    text_key: str = "text"
    batch_size: int = 16  # global, over all num_csx replicas (each gets batch_size / num_csx)
    # per system, as ModelZoo's: sequences a replica runs at once, gradients accumulated over
    # batch_size / num_csx / micro_batch_size; "auto" (the key left out, as ModelZoo's): the
    # largest the SRAM ledger fits; "explore": the fastest predicted; "none", or a file's null
    # (ModelZoo's "disable micro batch tiling", read as "none"): the whole per-system batch
    micro_batch_size: int | str | None = "auto"
    max_sequence_length: int = 128
    shuffle_seed: int = 0
    split: str = "train"  # "train" | "eval" | "all" (`splits.default_splits`): 1/20 held out
    max_corpus_bytes: int = 3_000_000  # cap on the text read (stdlib corpus and files)
    eval_steps: int | None = None  # eval batches; None: the whole split, as ModelZoo (hunt 72)
    # documents packed without padding: attention kept within each document (segment ids),
    # positions restarting per document (`data.segments`); False: rows attend across them
    packing: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """The optax transform (`wse_trainer.optimizer`); names in any case, as ModelZoo's `AdamW`."""

    optimizer_type: str = "adamw"  # adamw | adam | sgd | momentum
    learning_rate: float = 3e-3
    # constant | cosine | linear; None (left out): `optimizer_names.default_schedule`,
    # constant as ModelZoo runs a number learning_rate, cosine beside our decay settings
    lr_schedule: str | None = None
    warmup_steps: int = 0
    min_learning_rate: float = 0.0
    decay_steps: int | None = None  # default: runconfig.max_steps
    weight_decay: float = 0.0
    beta1: float = 0.9  # adam, adamw: ModelZoo's defaults (hunt 70: beta2 was 0.95, eps 1e-8)
    beta2: float = 0.999
    eps: float = 1e-6
    # adam, adamw: where eps meets the second moment (`optimizer.adam_base`): "modelzoo",
    # ModelZoo's AdamBase (eps on sqrt(v) before the bias correction), or "optax" (optax's
    # and torch.optim.Adam(W)'s: on sqrt(v_hat) after it; "torch" reads as it)
    eps_placement: str = "modelzoo"
    momentum: float | None = None  # None: 0 for sgd (as ModelZoo's SGD), else 0.9
    nesterov: bool = False  # sgd / momentum: Nesterov momentum (ModelZoo's SGD nesterov)
    max_gradient_norm: float | None = None  # global-norm clipping
    # ModelZoo's clipping by value (torch's clip_grad_value_): each gradient element into
    # [-v, v], before the optimizer; one of the two clippings, as ModelZoo allows
    max_gradient_value: float | None = None

    def __post_init__(self) -> None:  # adamw's and adam's unread 0.9: as runs saved it before
        if self.lr_schedule is None:  # hunt 81: a ModelZoo file's number decayed to 0 unsaid
            object.__setattr__(self, "lr_schedule", default_schedule(self))
        for field, names in (("optimizer_type", OPTIMIZER_NAMES), ("lr_schedule", SCHEDULE_NAMES),
                             ("eps_placement", EPS_PLACEMENTS)):  # fmt: skip
            value = getattr(self, field)
            if isinstance(value, str) and value.casefold() in names:
                object.__setattr__(self, field, names[value.casefold()])
        if self.momentum is None:
            object.__setattr__(self, "momentum", 0.0 if self.optimizer_type == "sgd" else 0.9)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    # total, counted from step 0; None (left out): as ModelZoo, num_steps past the step the
    # run starts from (`modelzoo_runconfig.run_steps`), and a training run needs one of the two
    # (hunt 81: a hidden 100 set where a run stopped and how long its decay was)
    max_steps: int | None = None
    num_steps: int | None = None  # steps of this invocation
    mode: str = "train"  # train | eval | train_and_eval | eval_all (`run.run_eval_all`)
    model_dir: str = "model_dir"
    checkpoint_path: str | None = None
    checkpoint_steps: int | None = 50  # 0, null: no periodic save (ModelZoo's), the last still
    keep_checkpoint_max: int | None = None  # ModelZoo's max_checkpoints: None or 0 keeps all
    log_steps: int = 10  # 0: the last step's line only (ModelZoo's)
    eval_frequency: int | None = None  # train_and_eval: evaluate every this many steps
    seed: int = 0
    num_csx: int = 1
    wafer: str = "small"  # wse_core preset of each replica (SRAM ledger for activations)
    activation_stride: int = 0  # 0: the fastest predicted stride that fits; k: every k-th input
    # 0: whole layers when they fit, else column chunks as the SRAM ledger allows; k: stream
    # every weight matrix in k column chunks (weight streaming below the layer)
    weight_chunks: int = 0
    cpu_shards: int = 0  # emulator only: CPU devices per replica (0: choose; wse_trainer.layout)
    sample_tokens: int = 0  # tokens sampled after training (0: none)
    sample_prompt: str = "def "
    sample_temperature: float = 0.0  # 0: greedy
    save_initial_checkpoint: bool = False
    validate_only: bool = False
    # ModelZoo's; false: no resume from model_dir's newest step, refused only where there is
    # one and no checkpoint_path (`modelzoo_runconfig.autoload_problem`)
    autoload_checkpoint: bool = True
    # ModelZoo's: the components of checkpoint_path's step loaded (comma-separated); None or
    # "all": every one; "model": its weights alone, from step 0 (`modelzoo_runconfig`)
    load_checkpoint_states: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    train_input: InputConfig
    eval_input: InputConfig
    model: Mapping[str, Any]  # {"preset": name, <ModelConfig field>: value, ...}
    optimizer: OptimizerConfig
    runconfig: RunConfig
    # ModelZoo's keys read and dropped, as changing nothing here: the lines a run says of them
    # (`modelzoo_ignored.ignored`; not saved with the run: they are no setting)
    notes: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        sections = {k: v for k, v in vars(self).items() if k != "notes"}
        out = {k: dict(v) if k == "model" else dataclasses.asdict(v) for k, v in sections.items()}
        opt, kind = out["optimizer"], self.optimizer.optimizer_type  # what it reads: reruns as is
        out["optimizer"] = {k: v for k, v in opt.items() if kind in READ_BY.get(k, (kind,))}
        return out


SECTIONS: dict[str, type | None] = {"train_input": InputConfig, "eval_input": InputConfig,
    "model": None, "optimizer": OptimizerConfig, "runconfig": RunConfig}  # fmt: skip
SHIPPED = ("tiny", "gpt2_124m", "llama3_8b", "llama3_70b", "llama_1t", "llama_24t")


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
    return _config(*_moved(data))


def _config(data: Mapping[str, Any], written: Mapping[str, Written]) -> TrainConfig:
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


def _moved(data: Mapping[str, Any], *, nulls: bool = False) -> tuple[dict, dict[str, Written]]:
    if why := moved_problem(data, nulls=nulls):
        raise ConfigError(why)
    return moved(data, nulls=nulls)


def _parse_override(item: str) -> tuple[str, str, Any]:
    if "=" not in item or "." not in item.split("=", 1)[0]:
        raise ConfigError(f"override {item!r} must look like section.key=value")
    path, raw = item.split("=", 1)
    section, key = path.split(".", 1)
    if section not in SECTIONS:
        raise ConfigError(
            f"unknown section {section!r} in override {item!r}{hint('', section, SECTIONS)}"
        )
    try:
        value = load_yaml(raw, f"override {item!r}", spec_loader())
    except yaml.YAMLError:
        value = raw
    if value is None and not raw.split("#")[0].strip():  # hunt 71: `key=$UNSET` dropped the
        raise ConfigError(  # key; Hydra reads `key=` as "": only a null drops one (Hydra's `~`)
            f"override {shown(item)} has an empty value; give a value ('' for empty text), or "
            f"{shown(path, quote=False)}=null {null_meaning(SECTIONS[section], section, key)}"
        )
    return section, key, value


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of the params mapping in our keys with `section.key=value` overrides applied."""
    return _overridden(data, overrides)[0]


def _overridden(data: Mapping[str, Any], overrides: Sequence[str]) -> tuple[dict, dict]:
    """`apply_overrides` and the settings given ModelZoo's way, by our dotted key (`moved`):
    the file's moved first, so that an override in either spelling replaces them (hunt 73)."""
    bad = [k for k, v in data.items() if v is not None and not isinstance(v, Mapping)]
    if bad:
        raise ConfigError(
            f"section {str(bad[0])!r} must be a mapping of key: value lines, got "
            f"{type(data[bad[0]]).__name__}"
        )
    out, written = _moved({k: dict(v or {}) for k, v in data.items()})
    given: dict[str, tuple[str, Any]] = {}
    asked: dict[str, dict[str, Any]] = {}
    for item in overrides:
        section, key, value = _parse_override(item)
        path, raw = item.split("=", 1)
        if path in given and not same(given[path][1], value):
            # hunt 60: `model.vocab_size=300 model.vocab_size=1` took the last, as click did
            # `--devices 8 --devices 9` (wse_cli.option_repeats refuses that the same way)
            raise ConfigError(
                f"{shown(path, quote=False)} is given twice ({shown(given[path][0])}, then "
                f"{shown(raw)}); give it once"
            )
        given[path] = (raw, value)
        if value is None and key not in out.get(section, {}):  # hunt 71: a typo's null
            if why := unknown_null(SECTIONS[section], section, key, item):  # dropped nothing
                raise ConfigError(why)
        asked.setdefault(section, {})[key] = value
    asked, said = _moved(asked, nulls=True)
    for section, keys in asked.items():
        for key, value in keys.items():
            written.pop(f"{section}.{key}", None)
            out.setdefault(section, {})[key] = value
            if value is None and not null_is_value(SECTIONS[section], section, key):
                del out[section][key]  # its default (Hydra's `~key`; hunt 70): `override_nulls`
    return out, written | {k: w for k, w in said.items() if w.value is not None}


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a params YAML file (or a shipped config name) and apply dotted overrides."""
    text = _read_params(path)
    try:
        data = load_yaml(text, f"params file {str(path)!r}", spec_loader())
    except yaml.YAMLError as e:
        raise ConfigError(
            f"params file {str(path)!r} is not valid YAML: {yaml_problem(e)}"
        ) from None
    if data is None or data == {}:  # hunt 55: an empty file validated as every default
        raise ConfigError(
            f"params file {str(path)!r} is empty: it needs its sections ({', '.join(SECTIONS)}); "
            "start from a shipped one (wse train tiny --validate-only)"
        )
    if not isinstance(data, dict):
        raise ConfigError(f"params file {str(path)!r} must hold a mapping of sections")
    data, written = _overridden(data, overrides)
    config = _config(data, written)
    refuse_unused(config.optimizer, data.get("optimizer"), written)  # also a default, named
    return config


def refuse_unused(
    opt: OptimizerConfig, given: Mapping[str, Any] | None = None, written: Mapping | None = None
) -> None:
    """ConfigError naming set settings its optimizer or schedule does not read (hunts 69, 70),
    by the keys written (`written`: those given ModelZoo's way, by our dotted key; hunt 73)."""
    base = OptimizerConfig(optimizer_type=opt.optimizer_type)
    if why := unused_settings(opt, base, given, written):
        raise ConfigError(why)


def shipped_config(name: str) -> Path:
    """The path of a config shipped with the package ("tiny", "gpt2_124m", ...)."""
    if name not in SHIPPED:
        raise ConfigError(
            f"no shipped config {name!r}{suggest(name, SHIPPED)}; shipped: {', '.join(SHIPPED)}"
        )
    return Path(str(resources.files("wse_trainer") / "configs" / f"{name}.yaml"))


def _read_params(path: str | Path) -> str:
    if not str(path).strip():  # hunt 61: '' was read as '.', "params file '.' is a folder"
        raise ConfigError(
            f"the params file is empty text ({str(path)!r}); give a params YAML file or a "
            f"shipped config: {', '.join(SHIPPED)}"
        )
    p = Path(path)
    if not p.exists() and str(path) in SHIPPED:
        p = shipped_config(str(path))
    try:
        return read_text(p, "params file")
    except UnicodeDecodeError as e:
        raise ConfigError(f"params file {str(path)!r} is not UTF-8 text: {e.reason}") from None
    except OSError as e:
        raise ConfigError(
            f"cannot read params file {str(path)!r}: {e.strerror or e}; "
            f"or name a shipped config: {', '.join(SHIPPED)}"
        ) from None
