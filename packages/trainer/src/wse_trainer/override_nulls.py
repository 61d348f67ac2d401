"""What `key=null` means as a `wse train` override: what `key: null` means in the params file.

Hunt 77: `runconfig.checkpoint_steps=null` saved every 50 steps where the file's null saves no
periodic checkpoint, and `train_input.micro_batch_size=null` gave auto where the file's null
gives none. Where the file's null is a value of its own, other than the key left out
(`null_is_value`: a field that may be null whose default is not, `runconfig.checkpoint_steps`
(50; null: no periodic save) and `train_input` / `eval_input.micro_batch_size` (auto; null:
none, ModelZoo's "disable micro batch tiling"); and the model's fields that may be null over
its preset's value, `model.rope_scaling` (null: none), `head_dim` and `mlp_activation` (null:
the derived and the arch's)), the override sets null. Everywhere else a null is the key's
default or refused in the file, and the override drops the key to its default (Hydra's `~key`;
hunt 70). A null on a key no section has is refused as a value is (`unknown_null`; hunt 71).

Each function takes the section's dataclass (`config.SECTIONS[section]`; None: the model
section, `wse_models.ModelConfig`'s fields) and returns what `wse_trainer.config` acts on: it
imports this module, never the other way.
"""

from __future__ import annotations

import dataclasses
import typing

from wse_core.errors import shown

from wse_trainer import modelzoo_keys, modelzoo_model, modelzoo_runconfig
from wse_trainer.modelzoo_ignored import ignored

__all__ = ["null_is_value", "null_meaning", "unknown_null"]


def _fields(cls: type | None) -> tuple[type, dict[str, dataclasses.Field]]:
    """The section's dataclass and its fields by name (the model's: ModelConfig's)."""
    if cls is None:
        import wse_models  # the model section's keys: ModelConfig's, its `name` the preset's

        cls = wse_models.ModelConfig
    fields = {f.name: f for f in dataclasses.fields(cls)}
    return cls, fields


def null_is_value(cls: type | None, section: str, key: str) -> bool:
    """Whether `key: null` in `section` of a params file is a value other than the key left
    out (module docstring): a field that may be null whose default is not, or a model field
    that may be null (its default is the preset's)."""
    cls, fields = _fields(cls)
    if key not in fields or key == "name":
        return False
    nullable = type(None) in typing.get_args(typing.get_type_hints(cls)[key])
    return nullable and (section == "model" or fields[key].default is not None)


def null_meaning(cls: type | None, section: str, key: str) -> str:
    """What `section.key=null` does, in the words of a refusal that offers it."""
    if null_is_value(cls, section, key):
        return f"for null, as `{key}: null` in a params file"
    return "to drop the key and take its default"


def unknown_null(cls: type | None, section: str, key: str, item: str) -> str | None:
    """The line for `item`, a null on a key its section cannot have, as for a value
    (`config_read._section`; the model's: `session.model_config`) and Hydra's `~key` of a
    missing key; None for a key it can have (ModelZoo's spellings too)."""
    model = cls is None
    cls, fields = _fields(cls)
    keys = ["preset"] if model else []
    keys += sorted(name for name in fields if name != "name")
    if key in keys + modelzoo_model.zoo_keys(section):  # ModelZoo's moved or read as ours
        return None
    if (section, key) in modelzoo_runconfig.READ_AS_RUNS:  # null: dropped, as true is
        return None
    if (read := ignored(section, key, None)) and read.why is None:
        return None  # a key that changes nothing here (hunt 79): its null dropped
    return (
        f"unknown key {section}.{shown(key, quote=False)}"
        f"{modelzoo_keys.hint(section, key, keys)} in override {shown(item)}; valid keys: "
        f"{', '.join(keys)}"
    )
