"""The speculative-decoding settings, parsed once for every command that takes them.

Contract. `parse_speculative_config(value)` reads vLLM's `--speculative-config`: a JSON
object, or the path of a JSON or YAML file holding one, with the keys `model` (the draft's
model directory), `num_speculative_tokens` (gamma, an integer in [1, 64]: the limit
`gamma` of `wse_core.host.limits`, checked by `check_gamma`, which `SpeculativeDecoder`'s
`gamma` also passes; the option's text must give it beside a draft `model`, as vLLM
requires it of a draft model; the mock engine's default, and the dataclass's, is 4),
`method` (vLLM's name of the speculation:
left out or "draft_model", the only one run here; "ngram", "eagle", "medusa", ... are
refused, as vLLM refuses a method it does not know: hunt 77, "xyz" ran as a draft model) and
`mock_accepted_tokens` (the mock engine's accepted drafts per round, 0..gamma, default
gamma). Any other key, a non-object, bad JSON or an unreadable file is a `SamplingError`
with one line. The result is a frozen `SpeculativeConfig`; `draft_dir()` is the draft's
folder, an error when the config names none (only the mock engine needs no draft).
`check_draft_size` refuses a draft with more parameters than
its target, by `wse plan infer`'s rule (`wse_systems.planning.infer_inputs`).
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

__all__ = [
    "SpeculativeConfig",
    "parse_speculative_config",
    "check_gamma",
    "check_draft_size",
    "DEFAULT_GAMMA",
    "METHODS",
]

DEFAULT_GAMMA = 4  # the mock's drafted tokens per round when the config does not say
OPTION = "--speculative-config"
METHODS = ("draft_model",)  # vLLM's `method` names of what runs here: a separate draft model


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
    num_speculative_tokens: int = DEFAULT_GAMMA  # the option's text must give it with a model
    method: str | None = None
    mock_accepted_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.method is not None and self.method not in METHODS:
            got = shown(repr(self.method), quote=False)
            raise SamplingError(
                f'{OPTION}\'s method must be "draft_model" (a draft model, the only speculation '
                f"run here) or left out, got {got}"
            )
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
        out = cls(**cfg)
        # vLLM requires it of a draft model (hunt 77: 4 were drafted unasked); a model beside
        # mock_accepted_tokens is refused by the engine's own rule (check_real_model or the
        # mock's), which names what to drop
        given = {"num_speculative_tokens", "mock_accepted_tokens"} & set(cfg)
        if out.model is not None and not given:
            raise SamplingError(
                f"{OPTION} names a draft model ({shown(out.model)}) without "
                "num_speculative_tokens; give the tokens it drafts per round, e.g. "
                f'{{"model": DIR, "num_speculative_tokens": {DEFAULT_GAMMA}}}'
            )
        return out

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


def check_draft_size(target_config: Any, draft_config: Any, target: str, draft: str) -> None:
    """`ModelLoadError` when the draft's config (a `wse_models.ModelConfig`: `num_params()`)
    counts more parameters than the target's; `target` and `draft` name them. The rule and
    words are `wse plan infer`'s own (`wse_systems.planning.infer_inputs.check_draft_size`,
    hunt 77: written here a second time)."""
    from wse_systems.planning.infer_inputs import check_draft_size as rule

    from wse_inference.model_files import ModelLoadError

    rule(target_config, draft_config, target=repr(target), draft=f"the draft {draft!r}",
         remedy="give a smaller draft, or leave --speculative-config out",
         error=ModelLoadError)  # fmt: skip


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
