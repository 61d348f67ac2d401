"""Dotted overrides of a params mapping (`section.key=value`, as Hydra's).

Contract: this module owns the overrides: `apply_overrides(data, overrides)` returns a copy of
the mapping in our keys with each `optimizer.learning_rate=3e-4` applied, values parsed as
YAML (`spec_loader`, as the file is), `key=null` as `key: null` in the file
(`wse_trainer.override_nulls`: a null drops a key to its default where null is no value), an
empty value and a key given twice with two values refused. ModelZoo's spellings of our keys
are moved to ours, the file's first, so that an override in either spelling replaces them
(hunt 73).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from wse_core.errors import shown
from wse_core.host.readers import load_yaml
from wse_core.hw.presets import spec_loader

from wse_trainer.config_read import moved_or_refused
from wse_trainer.config_schema import SECTIONS, ConfigError
from wse_trainer.modelzoo_keys import hint, same
from wse_trainer.override_nulls import null_is_value, null_meaning, unknown_null

__all__ = ["apply_overrides", "overridden"]


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
    return overridden(data, overrides)[0]


def overridden(data: Mapping[str, Any], overrides: Sequence[str]) -> tuple[dict, dict]:
    """`apply_overrides` and the settings given ModelZoo's way, by our dotted key (`moved`):
    the file's moved first, so that an override in either spelling replaces them (hunt 73)."""
    bad = [k for k, v in data.items() if v is not None and not isinstance(v, Mapping)]
    if bad:
        raise ConfigError(
            f"section {str(bad[0])!r} must be a mapping of key: value lines, got "
            f"{type(data[bad[0]]).__name__}"
        )
    out, written = moved_or_refused({k: dict(v or {}) for k, v in data.items()})
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
    asked, said = moved_or_refused(asked, nulls=True)
    for section, keys in asked.items():
        for key, value in keys.items():
            written.pop(f"{section}.{key}", None)
            out.setdefault(section, {})[key] = value
            if value is None and not null_is_value(SECTIONS[section], section, key):
                del out[section][key]  # its default (Hydra's `~key`; hunt 70): `override_nulls`
    return out, written | {k: w for k, w in said.items() if w.value is not None}
