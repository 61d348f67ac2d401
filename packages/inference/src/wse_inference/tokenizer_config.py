"""What an HF tokenizer's folder says beside tokenizer.json: the chat template and the
special tokens, read where transformers reads them.

Contract. `read_tokenizer_config(folder)` -> `TokenizerConfig(chat_template, template_vars,
template_error)`. The chat template is `chat_template.jinja` (UTF-8 text), else
tokenizer_config.json's "chat_template": a Jinja string, or a list of {"name", "template"}
objects of which the one named "default" is used (transformers' choice when no tools are
given; the server takes none). Where tokenizer_config.json's template cannot be chosen (a
list without "default", a value that is no template) `chat_template` is None and
`template_error` says why in one line: `HFTokenizer.chat_template` raises it when a chat
needs the template, as transformers raises "multiple chat templates with no default" at
`apply_chat_template`, so a plain prompt, or a server given --chat-template, still runs.
`template_vars` are the special tokens transformers 5 passes a chat template (its
`special_tokens_map`; hunt 71: only bos_token and eos_token were, and `{{ pad_token }}`
rendered empty): bos, eos, unk, sep, pad, cls and mask_token, every other "*_token" key
(image_token, ...) and those of an "extra_special_tokens" object; each a string or an
AddedToken object's "content"; tokenizer_config.json's, and where it is of the older save
format (no "added_tokens_decoder") special_tokens_map.json's, which win (transformers'
legacy merge). The eos_token is one the model stops on (`model_dir.eos_token_ids`). A file
that is there but cannot be read is a `ModelLoadError` naming it (hunt 62).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from wse_core.host.readers import read_text

from wse_inference.model_files import ModelLoadError, json_file, present

__all__ = ["SIDE_FILES", "TokenizerConfig", "json_object", "read_tokenizer_config"]

# the files of a tokenizer's folder read here (a cached tokenizer is read again when one changes)
SIDE_FILES = ("tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


class TokenizerConfig(NamedTuple):
    chat_template: str | None  # the Jinja template; None: none, or `template_error`
    template_vars: dict[str, str]  # the special tokens the template is given
    template_error: str | None  # why tokenizer_config.json's template cannot be used


def read_tokenizer_config(folder: Path) -> TokenizerConfig:
    """The chat template and special tokens of the tokenizer in `folder` (module docstring)."""
    config = json_object(folder / "tokenizer_config.json")
    tokens = _special_tokens(config)
    if "added_tokens_decoder" not in config:  # the older save format (hunt 64: never read)
        tokens |= _special_tokens(json_object(folder / "special_tokens_map.json"))
    jinja = folder / "chat_template.jinja"
    if present(jinja, "the chat template must be a UTF-8 text file"):
        return TokenizerConfig(_jinja_text(jinja) or None, tokens, None)  # read first
    template, error = _config_template(config.get("chat_template"), folder)
    return TokenizerConfig(template, tokens, error)


def json_object(path: Path) -> dict[str, Any]:
    """The JSON object in `path`, {} where there is no file."""
    what = f"{path.name} must be a JSON object (or absent)"
    try:
        value = json_file(path) if present(path, what) else {}
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"cannot read {str(path)!r}: {e}") from None
    if not isinstance(value, dict):  # hunt 62: a list was "'list' object has no attribute"
        raise ModelLoadError(f"{str(path)!r} holds a JSON {type(value).__name__}; {what}")
    return value


def _special_tokens(config: dict[str, Any]) -> dict[str, str]:
    """transformers' special_tokens_map of `config`: its "*_token" keys (an extra_special_tokens
    object's names win, as there), each a string or an AddedToken object."""
    extra = config.get("extra_special_tokens")
    named = [(k, v) for k, v in config.items() if k.endswith("_token")]
    named += list(extra.items()) if isinstance(extra, dict) else []
    tokens = {}
    for name, value in named:
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str):
            tokens[name] = value
    return tokens


def _config_template(template: Any, folder: Path) -> tuple[str | None, str | None]:
    """(the template, why none can be used) of tokenizer_config.json's "chat_template"; hunt
    64: a list without "default", or a number, was passed over for "role: content" lines."""
    file = repr(str(folder / "tokenizer_config.json"))
    if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
        named = {  # hunt 62: an entry named by a list is passed over, not "unhashable type"
            t["name"]: t.get("template")
            for t in template
            if isinstance(t, dict) and isinstance(t.get("name"), str)
        }
        if "default" not in named:
            return None, (
                f"{file} has chat templates {sorted(named)} and none named 'default' (the one "
                "used without tools); pass --chat-template, or name the one to use 'default'"
            )
        template = named["default"]
    if template is None or isinstance(template, str):
        return template or None, None
    return None, (
        f"{file} has chat_template {template!r:.60}; it must be a Jinja template (a string) "
        "or a list of {'name': ..., 'template': ...} objects, one named 'default'"
    )


def _jinja_text(jinja: Path) -> str:
    try:
        return read_text(jinja, "chat template")
    except UnicodeDecodeError as e:  # hunt 62: the codec's own words
        raise ModelLoadError(
            f"{str(jinja)!r} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
            f"{e.start:,}); the chat template must be a UTF-8 text file"
        ) from None
