"""The speculative-decoding settings, parsed once for every command that takes them.

Contract. `parse_speculative_config(value)` reads vLLM's `--speculative-config`: a JSON
object, or the path of a JSON or YAML file holding one, with the keys `model` (the draft's
model directory), `num_speculative_tokens` (gamma, an integer in [1, 64]: the limit
`gamma` of `wse_core.host.limits`, checked by `check_gamma`, which `SpeculativeDecoder`'s
`gamma` also passes; default 4), `method` (vLLM's, accepted and not used: the draft is
always a model) and
`mock_accepted_tokens` (the mock engine's accepted drafts per round, 0..gamma, default
gamma). Any other key, a non-object, bad JSON or an unreadable file is a `SamplingError`
with one line. The result is a frozen `SpeculativeConfig`; `draft_dir()` is the draft's
folder, an error when the config names none (only the mock engine needs no draft).
`wse infer generate` and `wse infer serve` both read the option through this function, so
they accept the same text and files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wse_core.errors import is_int, shown, shown_setting
from wse_core.host.limits import lift, limit

from wse_inference.engine import SamplingError  # no JAX (sampling imports it)

__all__ = ["SpeculativeConfig", "parse_speculative_config", "check_gamma", "DEFAULT_GAMMA"]

DEFAULT_GAMMA = 4  # drafted tokens per round when the config does not say
OPTION = "--speculative-config"


def check_gamma(gamma: object, name: str = "num_speculative_tokens") -> None:
    """Raise `SamplingError` (naming `name`) unless `gamma` is an integer in [1, the limit
    `gamma`] (64 unless $WSE_LIMIT_GAMMA lifts it): every round drafts `gamma` tokens and
    allocates [gamma, vocab] rows, so a count past the limit is refused before anything is
    allocated (hunt 56: 10^12 was a 7 TiB allocation's traceback; hunt 67: 2.5, True and
    "4" failed inside JAX)."""
    top = limit("gamma")
    if is_int(gamma) and 1 <= gamma <= top:  # type: ignore[operator]
        return
    over = is_int(gamma) and gamma > top  # type: ignore[operator]
    raise SamplingError(
        f"{name} must be an integer in [1, {top}], got {shown_setting(gamma)}"
        + (f"; {lift('gamma')}" if over else "")
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpeculativeConfig:
    """A draft model and how many tokens it proposes per round (see the module contract)."""

    model: str | None = None
    num_speculative_tokens: int = DEFAULT_GAMMA
    method: str | None = None
    mock_accepted_tokens: int | None = None

    def __post_init__(self) -> None:
        gamma = self.num_speculative_tokens
        check_gamma(gamma)
        j = self.mock_accepted_tokens
        if j is not None and (isinstance(j, bool) or not isinstance(j, int) or not 0 <= j <= gamma):
            got = shown(repr(j), quote=False)
            raise SamplingError(
                f"mock_accepted_tokens must be an integer in [0, {gamma}], got {got}"
            )
        if self.model is not None and not isinstance(self.model, str):
            got = shown(repr(self.model), quote=False)
            raise SamplingError(f"{OPTION}'s model must be a folder name, got {got}")
        if isinstance(self.model, str) and not self.model.strip():  # hunt 62: "" was "."
            raise SamplingError(f"{OPTION}'s model must name the draft's folder, got an empty name")

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> SpeculativeConfig:
        unknown = set(cfg) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise SamplingError(f"{OPTION} has unknown keys {sorted(unknown)}")
        return cls(**cfg)

    def draft_dir(self) -> str:
        """The draft's model directory; a SamplingError when the config names none."""
        if self.model is None:
            raise SamplingError(f'{OPTION} needs {{"model": DIR, "num_speculative_tokens": N}}')
        return self.model

    def check_real_model(self) -> None:
        """SamplingError for `mock_accepted_tokens` beside a real model, whose drafts the
        target accepts: no engine but the mock reads it (hunts 65 and 67: serve and generate
        ignored it)."""
        if self.mock_accepted_tokens is not None:
            raise SamplingError(
                f"{OPTION}'s mock_accepted_tokens applies to `wse infer serve --model-dir "
                "mock`; a real model's drafts are accepted by the target (leave the key out)"
            )

    @property
    def accepted_tokens(self) -> int:
        """The mock engine's accepted drafts per round (default: all of them)."""
        j = self.mock_accepted_tokens
        return self.num_speculative_tokens if j is None else j


def parse_speculative_config(value: str) -> SpeculativeConfig:
    """A JSON object, or a JSON / YAML file holding one (the module contract)."""
    import yaml
    from wse_core.host.readers import load_json, load_yaml, read_text

    if not str(value).strip():  # hunt 67: `serve --speculative-config ''` served no drafts
        example = '{"num_speculative_tokens": 4}'
        raise SamplingError(
            f"{OPTION} is empty ({str(value)!r}); give a JSON object (e.g. '{example}') or a file "
            "holding one, or leave it out"
        )
    path = Path(value)
    try:
        if path.is_file():
            cfg = load_yaml(read_text(path, OPTION), f"{OPTION} file {value!r}")
        else:
            cfg = load_json(value, OPTION)
    except (ValueError, OSError, yaml.YAMLError) as err:
        raise SamplingError(
            f"{OPTION} is neither a JSON object nor a readable file: {err}"
        ) from None
    if not isinstance(cfg, dict):
        raise SamplingError(f"{OPTION} must be an object, got {type(cfg).__name__}")
    return SpeculativeConfig.from_mapping(cfg)
