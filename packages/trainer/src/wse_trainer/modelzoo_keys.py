"""ModelZoo's keys for settings this stack holds under other keys, moved to ours.

ModelZoo's `runconfig.eval_steps` is our `eval_input.eval_steps`, its `max_checkpoints` our
`keep_checkpoint_max`, its AdamW's `optimizer.betas: [b1, b2]` our `beta1` and `beta2`, its
`optimizer.weight_decay_rate` (1.x's; hunt 81: "did you mean 'weight_decay'?") our
`weight_decay`, its data processors' `use_vsl` our `packing`, its GPT-2 model keys HF's
names of ours (`MODELZOO_KEYS`; hunt 72: they were refused, "did you mean 'max_steps'?").
`moved(data)` is a copy of one params mapping (a file's, or a command line's overrides as a
mapping) in our keys, with each setting it moved as the user wrote it (`Written`), so that a
line about it names the key written (hunt 73: `betas: [0.9, 1.5]` was refused as
`optimizer.beta2`). `moved_problem(data)` is the line
why a mapping cannot move: betas no pair, or one setting given both ways, differently, in the
same mapping. A file's settings are moved before a command line's overrides apply, each
mapping on its own, so that an override in either spelling replaces the file's value (hunt
73: `optimizer.beta2=0.99` over a file's betas was "give it once"). `written_problem` checks
a moved setting's range at read time, named as written.

ModelZoo's keys with no setting here are refused with what to do instead (`MODELZOO_NOTES`,
through `hint`); an unknown key is offered ours only where the two names are as close as a
typo (`KEY_MATCH`; hunt 80: max_gradient_value was "did you mean 'max_gradient_norm'?", another
clipping). ModelZoo's keys read and dropped at the values that mean what runs are
`wse_trainer.modelzoo_ignored`'s, its model keys read by the model's arch
`wse_trainer.modelzoo_model`'s; both import this module. Imports only `optimizer_names` of
wse_trainer: the reader (`wse_trainer.config`) imports it.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from wse_core.errors import shown_value

from wse_trainer.optimizer_names import IN_UNIT, outside_unit

__all__ = ["INPUTS", "KEY_MATCH", "MODELZOO_KEYS", "MODELZOO_NOTES", "Written",
           "eval_steps_problem", "hint", "keep_problem", "moved", "moved_problem", "same",
           "written_problem", "yaml_text"]  # fmt: skip

INPUTS = ("train_input", "eval_input")

# (ModelZoo's section, its key) -> (our section, our keys), one key a value of its list;
# ModelZoo's GPT-2 / Llama model keys are HF's names of ours (hunt 75: max_position_embeddings
# was "did you mean 'tie_embeddings'?"); max_checkpoints: None or 0 keeps every checkpoint,
# as ModelZoo's `CkptInfo.update` (hunt 76: refused, "did you mean 'checkpoint_steps'?")
MODELZOO_KEYS = {("runconfig", "eval_steps"): ("eval_input", ("eval_steps",)),
                 ("runconfig", "max_checkpoints"): ("runconfig", ("keep_checkpoint_max",)),
                 ("optimizer", "betas"): ("optimizer", ("beta1", "beta2")),
                 # ModelZoo 1.x's key (PyTorchBaseModel: weight_decay=oparams.get(
                 # "weight_decay_rate", 0.0)), an alias in its optimizer factory since
                 ("optimizer", "weight_decay_rate"): ("optimizer", ("weight_decay",)),
                 # its GPT data processors' variable sequence length (VSL: each token attends
                 # within its own packed sequence, position ids restarting at each; hunt 81:
                 # refused bare, false too), which packing is here (`data.segments`)
                 **{(s, "use_vsl"): (s, ("packing",)) for s in INPUTS},
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
    # hunt 79: "did you mean 'data_dir'?", and a user put a path in it
    "data_processor": (
        "ModelZoo's data processor class, e.g. GptHDF5DataProcessor over its preprocessed "
        "HDF5 shards; this stack reads its own data formats, named by data_dir: .txt, .jsonl, "
        ".json or .parquet files or folders, a Hugging Face datasets name, or stdlib, "
        "tokenized by the run's own BPE; leave the key out"
    ),
}
MODELZOO_NOTES = {
    **{(s, k): v for s in INPUTS for k, v in _INPUT_NOTES.items()},
    # hunt 80: "did you mean 'log_steps'?"; ModelZoo's is the optimizer's (run_cstorch_flow)
    ("runconfig", "log_summaries"): (
        "ModelZoo's log_summaries is an optimizer key: optimizer.log_summaries (its extra "
        "TensorBoard summaries; read and dropped here)"
    ),
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


# How close (difflib's ratio) an unknown key must be to one of ours to be offered as "did you
# mean": hunt 80's ModelZoo keys of another meaning scored 0.50-0.74 against ours
# (max_gradient_value / max_gradient_norm 0.74, use_position_embedding / tie_embeddings 0.67,
# log_summaries / log_steps 0.64, vocab_size / batch_size 0.60, grad_accum_steps / decay_steps
# 0.52), a typo of ours 0.78 and more (seq_len / max_seq_len 0.78, lerning_rate 0.96);
# wse_core.errors.suggest's 0.5 offered them all
KEY_MATCH = 0.75


def hint(section: str, key: str, keys: Iterable[str]) -> str:
    """What a refusal of ModelZoo's `section.key` (`section` "" for a top-level section) says
    to do: its note (`MODELZOO_NOTES`), else the one of `keys` as close as a typo (`KEY_MATCH`:
    " (did you mean ...?)"), else nothing."""
    if note := MODELZOO_NOTES.get((section, str(key))):
        return f" ({note})"
    close = difflib.get_close_matches(str(key), list(keys), n=1, cutoff=KEY_MATCH)
    return f" (did you mean {close[0]!r}?)" if close else ""


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
                was = yaml_text(target[name])
                given = f"{ours}.{name} {yaml_text(v)}, and {ours}.{name} is {was}"
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
    if key == "weight_decay" and not value >= 0:  # named as written (weight_decay_rate)
        return f"{where} must be >= 0, got {value}"
    return eval_steps_problem(where, value) if key == "eval_steps" else None


def yaml_text(value: Any) -> str:
    """A value as a params file gives it (`null`, `true`, `0.0`, 'learned', `.nan`, `-.inf`),
    bounded."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, float) and not math.isfinite(value):  # YAML's spelling (review 80)
        return ".nan" if math.isnan(value) else "-.inf" if value < 0 else ".inf"
    return shown_value(value)
