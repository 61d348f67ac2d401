"""ModelZoo's keys for settings this stack holds under other keys, moved to ours.

ModelZoo's `runconfig.eval_steps` is our `eval_input.eval_steps`, its `max_checkpoints` our
`keep_checkpoint_max`, its AdamW's `optimizer.betas: [b1, b2]` our `beta1` and `beta2`, its
GPT-2 model keys HF's names of ours (`MODELZOO_KEYS`; hunt 72: they were refused, "did you
mean 'max_steps'?"). `moved(data)` is a copy of one params mapping (a
file's, or a command line's overrides as a mapping) in our keys, with each setting it moved
as the user wrote it (`Written`), so that a line about it names the key written (hunt 73:
`betas: [0.9, 1.5]` was refused as `optimizer.beta2`). `moved_problem(data)` is the line
why a mapping cannot move: betas no pair, or one setting given both ways, differently, in the
same mapping. A file's settings are moved before a command line's overrides apply, each
mapping on its own, so that an override in either spelling replaces the file's value (hunt
73: `optimizer.beta2=0.99` over a file's betas was "give it once"). `written_problem` checks
a moved setting's range at read time, named as written.

ModelZoo's model keys whose meaning here depends on the model's arch (`MODEL_VALUES`: the
`nonlinearity`, and the settings the arch fixes, positions, norms, biases, dropout) are read
once the arch is known, by `session.model_config`: `model_values(fields, arch_of)` moves a
`nonlinearity` to our `mlp_activation` and drops a setting at the value the model runs, or
says what runs instead (hunt 76: "did you mean 'tie_embeddings'?"), and gives a gpt2 whose
heads alone are given (ModelZoo's GPT-2 has no other) as many key/value heads. Imports only
`optimizer_names` of wse_trainer: the reader (`wse_trainer.config`) imports it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from wse_core.errors import shown_value, suggest

from wse_trainer.optimizer_names import IN_UNIT, outside_unit

__all__ = ["IGNORED_NOTES", "Ignored", "LOADER_KEYS", "LOSS_SCALE_KEYS", "MODELZOO_KEYS",
           "MODELZOO_NOTES", "MODEL_VALUES", "NONLINEARITIES", "Written", "ignored",
           "eval_steps_problem", "hint", "keep_problem", "model_values", "moved",
           "moved_problem", "same", "written_problem", "zoo_keys"]  # fmt: skip

# (ModelZoo's section, its key) -> (our section, our keys), one key a value of its list;
# ModelZoo's GPT-2 / Llama model keys are HF's names of ours (hunt 75: max_position_embeddings
# was "did you mean 'tie_embeddings'?"); max_checkpoints: None or 0 keeps every checkpoint,
# as ModelZoo's `CkptInfo.update` (hunt 76: refused, "did you mean 'checkpoint_steps'?")
MODELZOO_KEYS = {("runconfig", "eval_steps"): ("eval_input", ("eval_steps",)),
                 ("runconfig", "max_checkpoints"): ("runconfig", ("keep_checkpoint_max",)),
                 ("optimizer", "betas"): ("optimizer", ("beta1", "beta2")),
                 ("model", "share_embedding_weights"): ("model", ("tie_embeddings",)),
                 ("model", "layer_norm_epsilon"): ("model", ("norm_eps",)),
                 ("model", "hidden_size"): ("model", ("d_model",)),
                 ("model", "num_hidden_layers"): ("model", ("n_layers",)),
                 ("model", "num_heads"): ("model", ("n_heads",)),
                 ("model", "num_attention_heads"): ("model", ("n_heads",)),
                 ("model", "filter_size"): ("model", ("d_ff",)),
                 ("model", "intermediate_size"): ("model", ("d_ff",)),
                 ("model", "max_position_embeddings"): ("model", ("max_seq_len",))}  # fmt: skip

# ModelZoo's keys with no setting here: what to do instead, said in the refusal (hunt 75); a
# section's key "" is a top-level section
_INPUT_NOTES = {
    "shuffle": "no equivalent: batches are always shuffled, seeded by shuffle_seed",
    "drop_last": "no equivalent: a last partial batch is always dropped",
    # hunt 79: "did you mean 'data_dir'?", and a user put a path in it
    "data_processor": (
        "ModelZoo's data processor class, e.g. GptHDF5DataProcessor over its preprocessed "
        "HDF5 shards; this stack reads its own data formats, named by data_dir: .txt, .jsonl, "
        ".json or .parquet files or folders, a Hugging Face datasets name, or stdlib, "
        "tokenized by the run's own BPE; leave the key out"
    ),
}
MODELZOO_NOTES = {
    **{(s, k): v for s in ("train_input", "eval_input") for k, v in _INPUT_NOTES.items()},
    ("optimizer", "correct_bias"): "no equivalent: adam and adamw always correct the bias",
    ("model", "mixed_precision"): (
        "no such key: model.dtype sets it; bfloat16 is 16-bit compute over fp32 master "
        "weights, as mixed_precision true, and float32 none"
    ),
    ("model", "fp16_type"): "no such key: model.dtype: bfloat16 is the one 16-bit type here",
    ("", "trainer"): (
        "ModelZoo 2.x's trainer: format is not read; give the 1.x params sections "
        "train_input, eval_input, model, optimizer, runconfig"
    ),
    # hunt 77: "did you mean 'num_steps'?"
    **dict.fromkeys(
        [("runconfig", "num_epochs"), ("runconfig", "steps_per_epoch")],
        (
            "no epochs here: a run trains to runconfig.max_steps steps of train_input.batch_size "
            "sequences each; give runconfig.max_steps (runconfig.num_steps: this invocation's "
            "steps)"
        ),
    ),
}


# ModelZoo's keys that change nothing here, read and dropped with a note at the values that
# mean what runs (`ignored`; hunt 79: refused one a run, with no note or none that fitted):
# PyTorch DataLoader performance settings (no loader runs here), and loss scaling, which
# ModelZoo applies to float16 gradients (model.dtype is float32 or bfloat16 here: their 8-bit
# exponent needs none, and no loss scaling is applied). ModelZoo's loss_scaling_factor is 1.0
# (none) unless given; its initial/max/min_loss_scale and steps_per_increase are read by
# "dynamic" scaling only
LOADER_KEYS = ("num_workers", "prefetch_factor", "persistent_workers")
LOSS_SCALE_KEYS = ("loss_scaling_factor", "initial_loss_scale", "max_loss_scale",
                   "min_loss_scale", "steps_per_increase")  # fmt: skip
IGNORED_NOTES = {
    "loader": (
        "PyTorch DataLoader performance settings; no loader runs here (the corpus is read and "
        "tokenized once, before training): ignored"
    ),
    "scale": (
        "ModelZoo's loss scaling, for float16 gradients; there is no float16 here "
        "(model.dtype float32 or bfloat16, whose 8-bit exponent needs no scaling) and no loss "
        "scaling is applied: ignored"
    ),
    "dynamic": (
        "dynamic loss scaling; there is no float16 here (model.dtype float32 or bfloat16) and "
        "no scaling is applied: ignored, and a step whose loss or gradient norm is not finite "
        "stops the run instead of being skipped"
    ),
}


class Ignored(NamedTuple):
    """An ignored key's note (an `IGNORED_NOTES` key) or the line why its value cannot be."""

    note: str | None
    why: str | None


def _count(value: Any, least: int) -> bool:
    """null, or a whole number >= `least`: ModelZoo's pydantic int fields take a whole float
    (2.0 is 2; review 80: it was refused here), not a bool nor 2.5."""
    whole = type(value) is int or (type(value) is float and value.is_integer())
    return value is None or (whole and value >= least)


def ignored(section: str, key: str, value: Any) -> Ignored | None:
    """Whether ModelZoo's `section.key` at `value` is read and dropped here (`Ignored` with its
    note), refused (`Ignored` with the line), or none of these keys (None)."""
    where = f"{section}.{key}"
    if section in ("train_input", "eval_input") and key in LOADER_KEYS:
        ok = value is None or type(value) is bool
        if key != "persistent_workers":
            ok = _count(value, int(key == "prefetch_factor"))
        want = {"num_workers": "a count >= 0", "prefetch_factor": "a count >= 1"}
        if ok:
            return Ignored("loader", None)
        # review 80: "(ignored here: ...: ignored)" refused the key while saying it is dropped
        return Ignored(
            None,
            f"{where} must be {want.get(key, 'true or false')} as ModelZoo requires, got "
            f"{_yaml(value)} (a PyTorch DataLoader setting: no loader runs here, so a valid one "
            "is read and dropped); fix it, or leave the key out",
        )
    if section != "optimizer" or key not in LOSS_SCALE_KEYS:
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if key == "loss_scaling_factor":
        if isinstance(value, str) and value.casefold() == "dynamic":
            return Ignored("dynamic", None)
        if value is None or (number and value == 1):
            return Ignored("scale", None)
        if not (number and 0 < value < math.inf):  # review 80: -1, 0 and .nan were "scales"
            return Ignored(
                None, f'{where} must be a positive number or "dynamic", got {_yaml(value)}'
            )
        return Ignored(
            None,
            (
                f"{where} {_yaml(value)} is a static loss scale, which ModelZoo applies to keep "
                "float16 gradients from underflowing; there is no float16 here (model.dtype "
                "float32 or bfloat16) and no loss scaling, so the run would not be the one asked "
                'for: give 1.0 (none) or "dynamic", or leave the key out'
            ),
        )
    if key == "steps_per_increase" and _count(value, 1):
        return Ignored("scale", None)
    if key != "steps_per_increase" and (value is None or (number and 0 < value < math.inf)):
        return Ignored("scale", None)
    want = "a count >= 1" if key == "steps_per_increase" else "a positive number"
    return Ignored(None, f"{where} must be {want}, got {_yaml(value)}")


def hint(section: str, key: str, keys: Iterable[str]) -> str:
    """What a refusal of ModelZoo's `section.key` (`section` "" for a top-level section) says
    to do: its note (`MODELZOO_NOTES`), else the closest of `keys` (" (did you mean ...?)")."""
    if note := MODELZOO_NOTES.get((section, str(key))):
        return f" ({note})"
    return suggest(str(key), keys)


class Written(NamedTuple):
    """One of our settings as the user wrote it: ModelZoo's `key` ("optimizer.betas"), the
    `value` given it, and `index`, the setting's place in that value (None: the value)."""

    key: str
    value: Any
    index: int | None

    @property
    def name(self) -> str:
        """The setting's name in lines: "optimizer.betas[1]", "runconfig.eval_steps"."""
        return self.key if self.index is None else f"{self.key}[{self.index}]"


def same(a: Any, b: Any) -> bool:
    """One value given twice (`300`, `300`), not two (`300`, `300.0`; `1`, `true`)."""
    return type(a) is type(b) and a == b


def _held(data: Mapping[str, Any]) -> Iterator[tuple[str, str, str, tuple[str, ...]]]:
    """(section, key, our section, our keys) of each ModelZoo key `data` gives; a section
    that is no mapping is skipped (the reader says what it must be)."""
    for (section, key), (ours, keys) in MODELZOO_KEYS.items():
        held, target = data.get(section), data.get(ours)
        if isinstance(held, Mapping) and key in held and isinstance(target, Mapping | None):
            yield section, key, ours, keys


def _values(value: Any, keys: tuple[str, ...], nulls: bool) -> list[Any] | None:
    """`value` as one value a key, or None where it cannot be (betas no pair); `nulls`: a
    null is a null for each key (an override's `betas=null` drops beta1 and beta2)."""
    if len(keys) == 1:
        return [value]
    if nulls and value is None:
        return [None] * len(keys)
    return list(value) if isinstance(value, list) and len(value) == len(keys) else None


def moved_problem(data: Mapping[str, Any], *, nulls: bool = False) -> str | None:
    """The line for a ModelZoo key of `data` that does not move, or None. A null moved
    (`nulls`) beside a value in our spelling is no clash: the value is kept."""
    for section, key, ours, keys in _held(data):
        value, target = data[section][key], data.get(ours) or {}
        values = _values(value, keys, nulls)
        if values is None:
            got = shown_value(value)
            return f"{section}.{key} must be a list [{', '.join(keys)}], got {got}"
        for name, v in zip(keys, values, strict=True):
            if name in target and not same(target[name], v) and not (nulls and v is None):
                given = f"{ours}.{name} {_yaml(v)}, and {ours}.{name} is {_yaml(target[name])}"
                return f"{section}.{key} gives {given}; give it once"
    return None


def moved(
    data: Mapping[str, Any], *, nulls: bool = False
) -> tuple[dict[str, Any], dict[str, Written]]:
    """A copy of `data` (`moved_problem` None) in our keys, and the settings moved, by our
    dotted key ("optimizer.beta2"). One given both ways keeps our spelling's value and name."""
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in data.items()}
    written: dict[str, Written] = {}
    for section, key, ours, keys in list(_held(out)):
        value = out[section].pop(key)
        target = out[ours] = dict(out.get(ours) or {})
        values = _values(value, keys, nulls)
        if values is None:
            raise ValueError(f"{section}.{key} does not move: see moved_problem")
        for i, (name, v) in enumerate(zip(keys, values, strict=True)):
            if name not in target:
                target[name] = v
                where = i if len(keys) > 1 else None
                written[f"{ours}.{name}"] = Written(f"{section}.{key}", value, where)
    return out, written


def eval_steps_problem(where: str, value: Any) -> str | None:
    """The line for an eval_steps that is no positive count (`where`: its name as written:
    hunt 73 left `runconfig.eval_steps=0` refused as `eval_input.eval_steps`)."""
    if value is None or value > 0:
        return None
    return (
        f"{where} must be positive (batches per evaluation), got {value}; leave it out to "
        "evaluate the whole eval split"
    )


def keep_problem(where: str, value: Any) -> str | None:
    """The line for a keep_checkpoint_max (`where`: as written) below 0, or None."""
    if value is None or value >= 0:
        return None
    return f"{where} must be >= 0 (checkpoints kept; 0 or null: every one), got {value}"


def written_problem(where: str, key: str, value: Any) -> str | None:
    """The line for a moved setting (our `key`, `where` its name as written) out of range."""
    if key in IN_UNIT:
        return outside_unit(where, value)
    if key == "keep_checkpoint_max":
        return keep_problem(where, value)
    return eval_steps_problem(where, value) if key == "eval_steps" else None


# ModelZoo's `nonlinearity` (its `layers/activations.py` names, read in any case, as its
# `get_activation`) -> (our mlp_activation, gated). The gating is the arch's here: gpt2
# applies one activation to the up projection, llama gates (act(gate) * up). ModelZoo's
# "gelu" and "geglu" are torch's erf GELU; ours is the tanh form (HF's gelu_new), at most
# 4.7e-4 from it (at x = 2.70)
NONLINEARITIES = {"gelu": ("gelu", False), "gelu_new": ("gelu", False),
                  "gelu_fast": ("gelu", False), "relu": ("relu", False),
                  "squared_relu": ("relu2", False), "silu": ("silu", False),
                  "swish": ("silu", False), "swiglu": ("silu", True), "reglu": ("relu", True),
                  "geglu": ("gelu", True)}  # fmt: skip
_DROPOUT = ("dropout_rate", "embedding_dropout_rate", "attention_dropout_rate")
# ModelZoo's model keys whose value the arch fixes here: (gpt2's, llama's), and what runs;
# a key at the model's own value is dropped, at another refused with that line
_BY_ARCH = {
    "position_embedding_type": (("learned", "rotary"), "positions are the arch's here"),
    "norm_type": (("layernorm", "rmsnorm"), "the norm is the arch's here"),
    **{k: ((True, False), "biases are the arch's here")
       for k in ("use_projection_bias_in_attention", "use_ffn_bias_in_attention",
                 "use_ffn_bias")},
    "use_bias_in_output": ((False, False), "the output layer has no bias here"),
    "attention_type": (("scaled_dot_product",) * 2, "attention is scaled dot product here"),
    "loss_scaling": (("num_tokens",) * 2, "the loss is the mean over the batch's tokens here"),
    "loss_weight": ((1.0, 1.0), "the loss is not weighted here"),
    **{k: ((0.0, 0.0), "there is no dropout here") for k in _DROPOUT},
}  # fmt: skip
MODEL_VALUES = frozenset({"nonlinearity", *_BY_ARCH})


def zoo_keys(section: str) -> list[str]:
    """ModelZoo's keys of `section` read as ours (moved, or `MODEL_VALUES`)."""
    moved_keys = [k for s, k in MODELZOO_KEYS if s == section]
    return moved_keys + (sorted(MODEL_VALUES) if section == "model" else [])


def _agrees(value: Any, ours: Any) -> bool:
    """Whether a ModelZoo value is ours: text in any case, numbers by value, bools as bools."""
    if isinstance(ours, str):
        return isinstance(value, str) and value.casefold() == ours
    if isinstance(ours, bool) or isinstance(value, bool):
        return value is ours
    return isinstance(value, int | float) and value == ours


def _nonlinearity(value: Any, arch: str) -> tuple[str | None, str | None]:
    """(our mlp_activation, None) for ModelZoo's nonlinearity on `arch`, or (None, why)."""
    gated = arch == "llama"
    names = [k for k, (_, g) in NONLINEARITIES.items() if g == gated]
    use = f"use one of {', '.join(names)} (this model is {arch})"
    if not isinstance(value, str) or value.casefold() not in NONLINEARITIES:
        return (
            None,
            f"model.nonlinearity {shown_value(value)} has no equivalent here; {use}",
        )
    ours, its_gated = NONLINEARITIES[value.casefold()]
    if its_gated != gated:
        kind = "a gated MLP (act(gate) * up)" if its_gated else "an MLP of one activation"
        other = "llama" if its_gated else "gpt2"
        return None, (
            f"model.nonlinearity {value!r} is {kind}, the {other} arch's here; {use}, or a "
            f"{other} preset"
        )
    return ours, None


def model_values(
    fields: Mapping[str, Any], arch_of: Callable[[], str]
) -> tuple[dict[str, Any], str | None]:
    """(the model section's `fields` in our keys, None), or (`fields`, the line why not), of
    a model whose arch ("gpt2" or "llama") `arch_of()` says, asked only where it matters:
    ModelZoo's `MODEL_VALUES` keys read (module contract), and a gpt2's n_kv_heads its n_heads
    where only n_heads is given (gpt2 has no grouped-query attention: ModelZoo's GPT-2 and
    HF's GPT2Config give its heads alone)."""
    asks = MODEL_VALUES & fields.keys() or ("n_heads" in fields and "n_kv_heads" not in fields)
    arch = str(arch_of()) if asks else ""
    out = dict(fields)
    if arch == "gpt2" and "n_heads" in fields and "n_kv_heads" not in fields:
        out["n_kv_heads"] = fields["n_heads"]
    for key, value in fields.items():
        if key == "nonlinearity":
            ours, why = _nonlinearity(value, arch)
            given = fields.get("mlp_activation")
            if why is None and given is not None and given != ours:
                why = (f"model.nonlinearity {value!r} gives model.mlp_activation {ours!r}, and "
                       f"model.mlp_activation is {given!r}; give it once")  # fmt: skip
            if why is not None:
                return dict(fields), why
            out["mlp_activation"] = ours
        elif key in _BY_ARCH:
            values, runs = _BY_ARCH[key]
            mine, other = values[arch == "llama"], values[arch != "llama"]
            if not _agrees(value, mine):
                fix = f"give {_yaml(mine)}"
                if _agrees(value, other):  # the other arch's: its presets run it
                    fix = f"use a {'gpt2' if arch == 'llama' else 'llama'} preset for it"
                return dict(fields), (
                    f"model.{key} {_yaml(value)}: {runs}, and this {arch} model runs "
                    f"{_yaml(mine)}; {fix}, or leave the key out"
                )
        else:
            continue
        del out[key]
    return out, None


def _yaml(value: Any) -> str:
    """A value as a params file gives it (`null`, `true`, `0.0`, 'learned', `.nan`, `-.inf`),
    bounded."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, float) and not math.isfinite(value):  # YAML's spelling (review 80)
        return ".nan" if math.isnan(value) else "-.inf" if value < 0 else ".inf"
    return shown_value(value)
