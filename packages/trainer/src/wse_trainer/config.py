"""Run configuration in Cerebras ModelZoo form: a YAML file with five sections.

`train_input`, `eval_input` (data), `model` (a `wse_models` preset plus ModelConfig field
overrides), `optimizer` (an optax transform and its schedule) and `runconfig` (steps,
checkpoints, `num_csx`, the wafer). `load_config(path, overrides)` reads the file, applies
dotted overrides (`optimizer.learning_rate=3e-4`, values parsed as YAML; `key=null` as
`key: null` in the file, `wse_trainer.override_nulls`) and returns a frozen `TrainConfig`,
each section read as `wse_trainer.config_read` reads a mapping (ModelZoo's spellings of our
settings moved to ours, its keys that change nothing here read with a note). Unknown sections
or keys, duplicate keys and wrong types are `ConfigError`s naming the key and what to give
instead. What the values cannot run is checked before anything compiles by
`wse_trainer.config_check.check_config`.

Contract: this module owns reading a params file (`load_config`, `shipped_config`,
`refuse_unused`) and is the import path of the whole reader: the sections' types are
`wse_trainer.config_schema`'s, reading a mapping `wse_trainer.config_read`'s and the dotted
overrides `wse_trainer.config_overrides`', each re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from wse_core.errors import suggest, yaml_problem
from wse_core.host.readers import load_yaml, read_text
from wse_core.hw.presets import spec_loader

from wse_trainer.config_overrides import apply_overrides, overridden
from wse_trainer.config_read import (
    checked_value,
    config_from_dict,
    config_from_moved,
    split_lengths,
    unknown_model_key,
)
from wse_trainer.config_read import number_text as number_text  # session's import path
from wse_trainer.config_schema import (
    SECTIONS,
    SHIPPED,
    ConfigError,
    InputConfig,
    OptimizerConfig,
    RunConfig,
    TrainConfig,
)
from wse_trainer.modelzoo_keys import MODELZOO_KEYS
from wse_trainer.optimizer_names import OPTIMIZER_NAMES, READ_BY, SCHEDULE_NAMES, unused_settings

__all__ = ["ConfigError", "InputConfig", "OPTIMIZER_NAMES", "OptimizerConfig", "READ_BY",
           "SCHEDULE_NAMES", "RunConfig", "TrainConfig", "SECTIONS", "load_config",
           "config_from_dict", "apply_overrides", "checked_value", "shipped_config",
           "SHIPPED", "MODELZOO_KEYS", "unknown_model_key", "split_lengths"]  # fmt: skip


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
    data, written = overridden(data, overrides)
    config = config_from_moved(data, written)
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
