"""A model directory for inference: a directory -> config, parameters, a tokenizer, an engine.

Contract. `load_model(path)` accepts an HF-format directory (config.json + safetensors, read
by `wse_models.from_pretrained`) or a `wse train` model_dir whose `hf/` subfolder holds that
export. The tokenizer is `tokenizer.json` of the same folder (HF `tokenizers`); without one,
a byte-level tokenizer (id = UTF-8 byte) is used only if the vocabulary has >= 256 ids, else
`ModelLoadError`. The chat template and the bos/eos tokens are read as transformers saves
them, from the tokenizer's folder (`wse_inference.tokenizer_config`). `eos_token_ids` are
the ids generation stops on (config.json, generation_config.json, the tokenizer's
eos_token); the tokenizer decodes without special tokens, as vLLM does. `read_weights(path)`
reads every tensor with NumPy and no JAX (a command refuses NaN or infinite weights, an FP8
checkpoint, a header listing more tensors than config.json's layers can use, before JAX
loads, and hands the arrays to `load_model(path, weights=...)`: read once).
`read_config(path)` reads only config.json, so that
`wse_inference.host_memory.check_host_memory(config, rows=..., max_context=...)` can refuse
a serving size (parameters plus KV cache rows) that the host cannot hold before JAX builds
anything (weights already read are passed as `held_bytes`: MemAvailable no longer counts
them). `check_draft(target, draft)` refuses a draft whose vocabulary differs from the
target's (size, or the token tables where the draft's folder has a tokenizer.json: without
one it runs on the target's, as in vLLM). Errors are `WseError`s with one line.

A `wse train` export older than its run folder's newest checkpoint is loaded with one note
on stderr, once per process (`wse_inference.run_export`; hunt 68: after a stopped resume the
older export was served without a word).

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
from wse_core.host.readers import not_regular, read_text

from wse_inference.engine import ByteTokenizer
from wse_inference.model_files import ModelLoadError, json_file, present
from wse_inference.run_export import say_once, stale_export
from wse_inference.tokenizer_config import SIDE_FILES, read_tokenizer_config

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


class HFTokenizer:
    """An HF `tokenizers.Tokenizer` behind the engine's `Tokenizer` protocol, with the chat
    template and special tokens saved beside it (`wse_inference.tokenizer_config`:
    `chat_template`, None when there is none; `template_vars`, bos_token and eos_token)."""

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
        side = read_tokenizer_config(path.parent)
        self._chat_template, self.template_vars, self._template_error = side
        self.max_token_bytes = _max_token_bytes(self._tok)

    @property
    def chat_template(self) -> str | None:
        """The folder's Jinja chat template (None: none); ModelLoadError where its templates
        hold none to use, raised when a chat needs it as transformers raises it (`wse infer
        serve` renders a chat at start: refused then, unless given --chat-template)."""
        if self._template_error is not None:
            raise ModelLoadError(self._template_error)
        return self._chat_template

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
            say_once(stale_export(candidate))
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
    for f in (path, *(path.parent / name for name in SIDE_FILES)):
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
        if present(candidate, _TOKENIZER_IS):
            _read_tokenizer(candidate)
            return


def _tokenizer(folder: Path, root: Path, vocab_size: int, required: bool):
    for candidate in (folder / "tokenizer.json", root / "tokenizer.json"):
        if present(candidate, _TOKENIZER_IS):
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
    n_layers = _n_layers(_config_json(folder))
    try:  # n_layers: a header listing far more tensors is refused unparsed (hunt 64)
        return read_tensors(folder, n_layers=n_layers)
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
        if not present(path, f"{name} must be a JSON file (or absent)"):
            continue
        try:
            config = json_file(path)
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
    # a draft folder without tokenizer.json runs on the target's tokenizer, as vLLM's drafts
    # do (hunt 64: its byte-level fallback was "different tokenizers")
    if isinstance(dt, HFTokenizer) and tt is not None and tt.vocab() != dt.vocab():
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
        d = json_file(folder / "config.json")
    except (OSError, ValueError) as err:
        raise _config_error(folder, err) from None
    if not isinstance(d, dict):
        raise _config_error(folder, ValueError("config.json must hold a JSON object"))
    return d


def _n_layers(config: dict[str, Any]) -> int | None:
    """config.json's layer count as transformers names it (Llama's num_hidden_layers,
    GPT-2's n_layer), read without JAX; None where it is no count (`read_config` refuses
    it) or absent."""
    value = config.get("num_hidden_layers", config.get("n_layer"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _config_error(folder: Path, err: BaseException) -> ModelLoadError:
    why = " ".join(str(err).split())
    return ModelLoadError(f"cannot read {str(folder / 'config.json')!r}: {why}")
