"""A model directory for inference: a directory -> config, parameters, a tokenizer, an engine.

Contract. `load_model(path)` accepts an HF-format directory (config.json + safetensors, read
by `wse_models.from_pretrained`) or a `wse train` model_dir whose `hf/` subfolder holds that
export. The tokenizer is `tokenizer.json` of the same folder (HF `tokenizers`); without one,
a byte-level tokenizer (id = UTF-8 byte) is used only if the vocabulary has >= 256 ids, else
`ModelLoadError`. The chat template is read as transformers saves it, from the tokenizer's
folder: `chat_template.jinja`, else `tokenizer_config.json`'s "chat_template" (a string, or a
list of named templates of which "default" is used), with its bos_token and eos_token.
`eos_token_ids` are the ids generation stops on (config.json, generation_config.json, the
tokenizer's eos_token); the tokenizer decodes without special tokens, as vLLM does.
`read_weights(path)` reads every tensor
with NumPy and no JAX (a command refuses NaN or infinite weights before JAX loads, and hands
the arrays to `load_model(path, weights=...)`: read once). `read_config(path)` reads only
config.json, so that `wse_inference.host_memory.check_host_memory(config, rows=...,
max_context=...)` can refuse a serving size (parameters plus KV cache rows) that the host
cannot hold before JAX builds anything (weights already read are passed as `held_bytes`:
MemAvailable no longer counts them). `check_draft(target, draft)` refuses a draft whose
vocabulary differs from the target's (size, or the tokenizers' token tables). Errors are
`WseError`s with one line.

The `Engine` a directory serves is built by `wse_inference.load.load_engine` (the engines
import this module, so it builds none of them).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wse_core.errors import WseError
from wse_core.host.readers import load_json, not_regular, read_text

from wse_inference.engine import ByteTokenizer

__all__ = [
    "ModelLoadError",
    "LoadedModel",
    "ByteTokenizer",
    "HFTokenizer",
    "check_tokenizer_file",
    "load_model",
    "read_tokenizer",
    "read_weights",
    "check_draft",
    "resolve_model_dir",
    "eos_token_ids",
    "read_config",
    "check_config_file",
]


class ModelLoadError(WseError):
    """A model directory that cannot be used as asked."""


class HFTokenizer:
    """An HF `tokenizers.Tokenizer` behind the engine's `Tokenizer` protocol, with the chat
    template and special tokens saved beside it (`chat_template`: None when there is none;
    `template_vars`: bos_token and eos_token for the template)."""

    kind = "tokenizers"

    def __init__(self, path: Path):
        from tokenizers import Tokenizer

        self.path = path
        try:  # read_text: a regular file within file_bytes (hunt 62: /dev/zero grew unbounded)
            self._tok = Tokenizer.from_str(read_text(path, "tokenizer"))
        except WseError:
            raise
        except Exception as e:  # tokenizers raises a bare Exception for a file it cannot parse
            why = " ".join(str(e).split())[:200]
            raise ModelLoadError(f"{path} is not a readable tokenizer file: {why}") from None
        self.chat_template, self.template_vars = _chat_template(path.parent)
        self.max_token_bytes = _max_token_bytes(self._tok)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:  # special tokens are not text (vLLM's default)
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def vocab(self) -> dict[str, int]:
        return dict(self._tok.get_vocab(with_added_tokens=True))


def _max_token_bytes(tok: Any) -> int | None:
    """The most UTF-8 bytes of text one token stands for, when that is known: a BPE without
    an unknown token or a normalizer spells every token as the text it covers (byte-level
    symbols like 'Ġ' or byte-fallback names like '<0x41>' are longer than their byte), so a
    prompt of B bytes has at least B / this many tokens. None otherwise (a WordPiece's [UNK]
    may cover a long word; a normalizer may shorten text)."""
    from tokenizers import models

    if not isinstance(tok.model, models.BPE) or tok.model.unk_token or tok.normalizer:
        return None
    return max(len(t.encode("utf-8")) for t in tok.get_vocab(with_added_tokens=True))


_TOKENIZER_IS = "tokenizer.json must be an HF tokenizers JSON file (or absent: byte-level)"
_CONFIG_IS = "tokenizer_config.json must be a JSON object (or absent)"


def _json_file(path: Path) -> Any:
    """A JSON file of the model folder, within the stack's file size and depth limits."""
    return load_json(read_text(path, path.name), str(path))


def _present(path: Path, what: str) -> bool:
    """True for a regular file at `path`, False where nothing is; ModelLoadError for anything
    else (hunt 62: a dangling tokenizer.json link, a partly fetched HF snapshot's, or a FIFO
    or folder, was passed over: the model was served with the byte tokenizer, or without its
    chat template, exit 0)."""
    if why := not_regular(path):
        raise ModelLoadError(f"{str(path)!r} {why}; {what}")
    return path.is_file()


def _chat_template(folder: Path) -> tuple[str | None, dict[str, str]]:
    config_file = folder / "tokenizer_config.json"
    try:
        config = _json_file(config_file) if _present(config_file, _CONFIG_IS) else {}
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"cannot read {str(config_file)!r}: {e}") from None
    if not isinstance(config, dict):  # hunt 62: a list was "'list' object has no attribute"
        raise ModelLoadError(
            f"{str(config_file)!r} holds a JSON {type(config).__name__}; {_CONFIG_IS}"
        )
    tokens = {}
    for name in ("bos_token", "eos_token"):  # a string or an AddedToken dict
        value = config.get(name)
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str):
            tokens[name] = value
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
        named = {  # hunt 62: a list as a name was "unhashable type: 'list'"
            t["name"]: t.get("template")
            for t in template
            if isinstance(t, dict) and isinstance(t.get("name"), str)
        }
        template = named.get("default")
    jinja = folder / "chat_template.jinja"
    if _present(jinja, "the chat template must be a UTF-8 text file"):
        try:
            template = read_text(jinja, "chat template")
        except UnicodeDecodeError as e:  # hunt 62: the codec's own words
            raise ModelLoadError(
                f"{str(jinja)!r} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                f"{e.start:,}); the chat template must be a UTF-8 text file"
            ) from None
    return (template if isinstance(template, str) and template else None), tokens


@dataclasses.dataclass(frozen=True, eq=False)
class LoadedModel:
    name: str
    path: Path
    config: Any  # wse_models.ModelConfig
    params: Any  # the functional parameter pytree
    tokenizer: Any  # ByteTokenizer | HFTokenizer | None (ids only)
    eos_token_ids: tuple[int, ...] = ()  # generation stops on these (see `eos_token_ids`)


def resolve_model_dir(path: str | Path) -> Path:
    """The folder holding config.json: `path` itself or its `hf/` export."""
    path = Path(path)
    if path.exists() and not path.is_dir():  # hunt 56: a file was said not to exist
        raise ModelLoadError(
            f"model directory {str(path)!r} is a file; give the folder holding config.json "
            "(an HF-format directory or a `wse train` model_dir)"
        )
    if not path.is_dir():
        raise ModelLoadError(f"model directory {str(path)!r} does not exist")
    for candidate in (path, path / "hf"):
        if (candidate / "config.json").is_file():
            return candidate
    for cfg in (path / "config.json", path / "hf" / "config.json"):
        if why := not_regular(cfg):  # hunt 60: a FIFO or folder config.json was "missing"
            raise ModelLoadError(f"{str(cfg)!r} {why}; config.json must be a JSON file")
    if any(path.glob("*.safetensors")):
        raise ModelLoadError(
            f"{str(path)!r} has safetensors but no config.json: an HF-format directory needs "
            "both (the config says which model the tensors belong to)"
        )
    raise ModelLoadError(
        f"{str(path)!r} is neither an HF-format directory (config.json + safetensors) nor a "
        "`wse train` model_dir with an hf/ export"
    )


def _read_tokenizer(path: Path) -> HFTokenizer:
    """The tokenizer at `path`, read once per version of its files: a command checks it before
    the weights (`check_tokenizer_file`) and `load_model` takes the same object."""
    stamps = []
    for f in (path, path.parent / "tokenizer_config.json", path.parent / "chat_template.jinja"):
        st = f.stat() if f.is_file() else None
        stamps.append((st.st_size, st.st_mtime_ns) if st else None)
    return _tokenizer_of(str(path), tuple(stamps))


@functools.lru_cache(maxsize=4)
def _tokenizer_of(path: str, stamps: tuple) -> HFTokenizer:
    del stamps  # the cache key: the files' sizes and times
    try:
        return HFTokenizer(Path(path))
    except WseError:  # its own words, naming the file at fault (hunt 62: tokenizer_config.json's
        raise  # problems were said to be tokenizer.json's)
    except Exception as err:  # tokenizers raises a bare Exception for a bad file
        why = " ".join(str(err).split())[:300]
        raise ModelLoadError(f"cannot read {path!r}: {why}") from None


def check_tokenizer_file(path: str | Path) -> None:
    """Refuse an unreadable tokenizer.json of the model in `path` (HF `tokenizers`, no JAX):
    a command checks it before it loads the weights; a missing or odd model dir is left to
    `load_model`."""
    root = Path(path)
    try:
        folder = resolve_model_dir(root)
    except ModelLoadError:
        return
    for candidate in (folder / "tokenizer.json", root / "tokenizer.json"):
        if _present(candidate, _TOKENIZER_IS):
            _read_tokenizer(candidate)
            return


def _tokenizer(folder: Path, root: Path, vocab_size: int, required: bool):
    for candidate in (folder / "tokenizer.json", root / "tokenizer.json"):
        if _present(candidate, _TOKENIZER_IS):
            return _read_tokenizer(candidate)
    if vocab_size >= 256:
        return ByteTokenizer()
    if not required:
        return None
    raise ModelLoadError(
        f"{str(folder)!r} has no tokenizer.json and its vocabulary ({vocab_size} ids) is too "
        "small for the byte-level fallback (needs >= 256); add a tokenizer.json or pass "
        "--prompt-ids"
    )


def read_tokenizer(path: str | Path, vocab_size: int, *, required: bool = True) -> Any:
    """The tokenizer `load_model` gives the model in `path` (config.json's `vocab_size`),
    without the weights or JAX (None when not `required` and there is none)."""
    root = Path(path)
    return _tokenizer(resolve_model_dir(root), root, vocab_size, required)


def read_weights(path: str | Path) -> dict[str, Any]:
    """Every tensor of the model in `path` read once with NumPy, no JAX imported, after its
    config.json is checked within the file limits (`check_config_file`: a deep or huge one
    is refused before a byte of data is read): a NaN or infinite weight, a damaged or
    truncated file, is refused here (`ModelLoadError`, one line); `load_model(path,
    weights=...)` takes these arrays (and empties the dict)."""
    from wse_core.host.tensor_files import read_tensors

    folder = resolve_model_dir(path)
    _config_json(folder)
    try:
        return read_tensors(folder)
    except WseError as err:
        raise ModelLoadError(f"cannot load the model in {str(folder)!r}: {err}") from None


def load_model(
    path: str | Path,
    *,
    dtype: str = "float32",
    tokenizer_required: bool = True,
    weights: dict[str, Any] | None = None,
) -> LoadedModel:
    """Config, parameters and tokenizer of the model in `path` (see the module contract);
    with `tokenizer_required=False` a model without a usable tokenizer gets None; `weights`:
    `read_weights(path)`, taken (not read again)."""
    import wse_models

    root = Path(path)
    folder = resolve_model_dir(root)
    try:
        model = wse_models.from_pretrained(folder, dtype=dtype, tensors=weights)
    except WseError as err:
        raise ModelLoadError(f"cannot load the model in {str(folder)!r}: {err}") from None
    config = model.config
    tokenizer = read_tokenizer(root, config.vocab_size, required=tokenizer_required)
    name = config.name or root.resolve().name
    eos = eos_token_ids(folder, tokenizer, config.vocab_size)
    return LoadedModel(name, folder, config, model.params(), tokenizer, eos)


def eos_token_ids(folder: Path, tokenizer: Any, vocab_size: int) -> tuple[int, ...]:
    """The model's end-of-sequence ids, where transformers and vLLM look for them: config.json
    and generation_config.json "eos_token_id" (an id or a list), and the tokenizer's eos_token
    (tokenizer_config.json); ids outside the vocabulary are dropped (none can be sampled).
    A file that is there but cannot be read, or an eos_token_id that is no id or list of ids,
    is a ModelLoadError (hunt 62: an unparsable generation_config.json was passed over, so
    generation ran past the model's end tokens, and `true` was taken as id 1)."""
    ids: list[int] = []
    for name in ("config.json", "generation_config.json"):
        path = folder / name
        if not _present(path, f"{name} must be a JSON file (or absent)"):
            continue
        try:
            config = _json_file(path)
        except (OSError, ValueError) as e:
            why = " ".join(str(e).split())[:200]
            raise ModelLoadError(f"cannot read {str(path)!r}: {why}; fix or remove it") from None
        value = config.get("eos_token_id") if isinstance(config, dict) else None
        listed = value if isinstance(value, list) else [] if value is None else [value]
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in listed):
            raise ModelLoadError(
                f"{str(path)!r} has eos_token_id {value!r:.60}; it must be a token id (an "
                "integer) or a list of them"
            )
        ids += listed
    eos = getattr(tokenizer, "template_vars", {}).get("eos_token")
    if eos is not None:
        ids.append(tokenizer.vocab().get(eos))
    return tuple(dict.fromkeys(i for i in ids if isinstance(i, int) and 0 <= i < vocab_size))


def check_draft(target: LoadedModel, draft: LoadedModel) -> None:
    """Refuse a draft that does not share the target's vocabulary."""
    tv, dv = target.config.vocab_size, draft.config.vocab_size
    if tv != dv:
        raise ModelLoadError(
            f"draft/target vocabulary mismatch: the draft {draft.name!r} has {dv} ids, the "
            f"target {target.name!r} has {tv}; the draft must use the target's tokenizer"
        )
    tt, dt = target.tokenizer, draft.tokenizer
    if type(tt) is not type(dt) or (tt is not None and tt.vocab() != dt.vocab()):
        raise ModelLoadError(
            f"draft/target vocabulary mismatch: {draft.name!r} and {target.name!r} have "
            "different tokenizers (token tables differ); use a draft trained with the "
            "target's tokenizer"
        )


def truncated_model(model: LoadedModel, n_layers: int) -> LoadedModel:
    """A draft made of the first `n_layers` layers of `model` (same embedding, head and
    tokenizer): the cheapest matched draft of a target."""
    import wse_models

    if not 1 <= n_layers <= model.config.n_layers:
        raise ModelLoadError(f"a truncated draft needs 1..{model.config.n_layers} layers")
    config = model.config.replace(n_layers=n_layers, name=f"{model.name}-first{n_layers}")
    params = dict(model.params)
    params["layers"] = wse_models.layer_range(model.params["layers"], 0, n_layers)
    return dataclasses.replace(model, name=config.name, config=config, params=params)


def read_config(path: str | Path) -> Any:
    """The model's `wse_models.ModelConfig` from its config.json alone (no weights read)."""
    folder = resolve_model_dir(path)
    d = _config_json(folder)  # within the file limits, before JAX is imported
    import wse_models

    try:
        return wse_models.config_from_hf(d)
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise _config_error(folder, err) from None


def check_config_file(path: str | Path) -> None:
    """Refuse a config.json past the file limits (size, JSON depth) when `path` holds one,
    with no JAX imported; a missing or odd model dir is left to `read_config`."""
    try:
        folder = resolve_model_dir(path)
    except ModelLoadError:
        return
    _config_json(folder)


def _config_json(folder: Path) -> dict[str, Any]:
    try:
        d = _json_file(folder / "config.json")
    except (OSError, ValueError) as err:
        raise _config_error(folder, err) from None
    if not isinstance(d, dict):
        raise _config_error(folder, ValueError("config.json must hold a JSON object"))
    return d


def _config_error(folder: Path, err: BaseException) -> ModelLoadError:
    why = " ".join(str(err).split())
    return ModelLoadError(f"cannot read {str(folder / 'config.json')!r}: {why}")
