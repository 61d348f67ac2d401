"""The sampling defaults of a model folder's generation_config.json, applied where a request
or a command leaves a setting out, as vLLM's `--generation-config auto` (its default) does.

Contract. `sampling_defaults(folder)` -> {`SamplingParams` field: value} for what the file
sets (not null) of the keys vLLM reads (`get_diff_sampling_param`): temperature, top_k,
top_p, repetition_penalty and max_new_tokens (as max_tokens), and do_sample false, which is
greedy (temperature 0) as in transformers' `generate` (vLLM ignores do_sample). A value that
no request may ask (temperature outside [0, 2], top_p outside (0, 1], top_k below -1,
max_new_tokens below 1, repetition_penalty <= 0, a string) is a `ModelLoadError` naming the
file; top_k -1 is 0 (off). vLLM reads min_p too: a min_p above 0 is refused at load, naming
the file and the key, as the server refuses a request's (this engine does not sample with
it; hunt 72: it was dropped without a word), and min_p 0 (off) is nothing. A missing file is
{}; one that cannot be read is refused.

`applied_line(defaults, what)` is the one line a command says when they apply (hunt 69:
they were ignored, so a model whose file says greedy with 3 new tokens sampled 32 tokens at
temperature 1, and the server sampled to the end of the context). `cli_settings(folder,
**given)` fills the settings a command line left as None: the file's, else `CLI_DEFAULTS`,
saying once which the file gave. `server_defaults(engine)` are the defaults of the model an
engine serves (its `LoadedModel.sampling_defaults`; {} for a mock), said once at start: the
server applies the file's max_new_tokens to chat and gRPC, never to /v1/completions, whose
max_tokens left out is 16 (vLLM's CompletionRequest default, which its `get_max_tokens`
takes before the file's).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from wse_core.errors import shown_value

from wse_inference.model_files import ModelLoadError, json_file, present
from wse_inference.run_export import say_once

__all__ = ["CLI_DEFAULTS", "applied_line", "cli_settings", "sampling_defaults", "server_defaults"]

FILE = "generation_config.json"
# `wse infer generate`'s settings where neither its command line nor the file gives one
CLI_DEFAULTS = {
    "max_tokens": 32, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "repetition_penalty": 1.0,
}  # fmt: skip
# the file's key -> (the SamplingParams field, its check, what it must be)
_KEYS = {
    "temperature": ("temperature", lambda v: 0 <= v <= 2, "a number in [0, 2]"),
    "top_k": ("top_k", lambda v: v == int(v) and v >= -1, "an integer >= -1 (-1 and 0: off)"),
    "top_p": ("top_p", lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "repetition_penalty": ("repetition_penalty", lambda v: v > 0, "a number > 0 (1: off)"),
    "max_new_tokens": ("max_tokens", lambda v: v == int(v) and v >= 1, "an integer >= 1"),
}


def sampling_defaults(folder: Path) -> dict[str, Any]:
    """The file's sampling defaults in `folder` (module docstring)."""
    path = folder / FILE
    if not present(path, f"{FILE} must be a JSON file (or absent)"):
        return {}
    try:
        config = json_file(path)
    except (OSError, ValueError) as e:
        why = " ".join(str(e).split())[:200]
        raise ModelLoadError(f"cannot read {str(path)!r}: {why}; fix or remove it") from None
    if not isinstance(config, dict):
        return {}  # no object: nothing to apply (as eos_token_ids reads none from it)
    out: dict[str, Any] = {}
    for key, (field, ok, want) in _KEYS.items():
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not _ok(ok, value):
            raise ModelLoadError(f"{str(path)!r} has {key} {shown_value(value)}; it must be {want}")
        out[field] = int(value) if field in ("top_k", "max_tokens") else float(value)
    _refuse_min_p(path, config.get("min_p"))
    if out.get("top_k") == -1:
        out["top_k"] = 0
    if config.get("do_sample") is False:  # transformers' generate is greedy then
        out["temperature"] = 0.0
    return out


def _refuse_min_p(path: Path, value: Any) -> None:
    """The file's min_p: absent, null or 0 is nothing; any other is a ModelLoadError."""
    if value is None:
        return
    number = not isinstance(value, bool) and isinstance(value, int | float)
    if not number or not _ok(lambda v: 0 <= v <= 1, value):
        raise ModelLoadError(
            f"{str(path)!r} has min_p {value!r:.40}; it must be a number in [0, 1]"
        )
    if value > 0:
        raise ModelLoadError(
            f"{str(path)!r} has min_p {value}: min_p is not supported by this engine (as a "
            "request's); set it to 0 or remove it"
        )


def _ok(check: Any, value: int | float) -> bool:
    try:
        return math.isfinite(value) and bool(check(value))
    except OverflowError:  # an integer past a float's range
        return False


def applied_line(defaults: dict[str, Any], what: str) -> str | None:
    """`note: generation_config.json's sampling defaults <what>: temperature 0.0, ...`."""
    if not defaults:
        return None
    shown = ", ".join(f"{k} {v}" for k, v in defaults.items())
    return f"note: {FILE}'s sampling defaults {what}: {shown} (vLLM's --generation-config auto)"


def cli_settings(folder: Path | None, **given: Any) -> dict[str, Any]:
    """The command's settings (`CLI_DEFAULTS`' keys): those given, else the file's in the
    model `folder` (None: no folder, loading it refuses it in its own words), else
    `CLI_DEFAULTS`; says once which the file gave. `wse_inference.model_dir.cli_settings`
    finds the folder of a `model_dir`."""
    file = sampling_defaults(folder) if folder is not None else {}
    applied = {k: file[k] for k, v in given.items() if v is None and k in file}
    say_once(applied_line(applied, "applied, where the command line gives none"))
    return {k: v if v is not None else applied.get(k, CLI_DEFAULTS[k]) for k, v in given.items()}


def server_defaults(engine: Any) -> dict[str, Any]:
    """The sampling defaults of the model `engine` serves, said once (vLLM logs them too)."""
    model = getattr(engine, "model", None) or getattr(engine, "target", None)
    defaults = dict(getattr(model, "sampling_defaults", None) or {})
    what = "apply where a request leaves a setting out"
    if "max_tokens" in defaults:  # vLLM's CompletionRequest default of 16 comes first
        what += " (max_tokens on chat and gRPC; /v1/completions' stays 16, as vLLM's)"
    say_once(applied_line(defaults, what))
    return defaults
