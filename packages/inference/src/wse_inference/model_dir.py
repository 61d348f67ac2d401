"""A model directory for inference: a directory -> config, parameters, a tokenizer, an engine.

Contract. `load_model(path)` accepts an HF-format directory (config.json + safetensors, read
by `wse_models.from_pretrained`) or a `wse train` model_dir whose `hf/` subfolder holds that
export. The tokenizer is `tokenizer.json` of the same folder (HF `tokenizers`), else the
folder's slow tokenizer files as `wse_inference.hf_tokenizer.slow_tokenizer` reads or refuses
them (a GPT-2 vocab.json + merges.txt is read; a tokenizer.model is refused); with no
tokenizer files at all, a byte-level tokenizer (id = UTF-8 byte) is used only if the
vocabulary has >= 256 ids, else `ModelLoadError`. The chat template and the bos/eos tokens
are read as transformers saves them, from the tokenizer's folder
(`wse_inference.tokenizer_config`). `eos_token_ids` are the ids generation stops on
(config.json, generation_config.json, the tokenizer's eos_token); the tokenizer decodes
without special tokens, as vLLM does; `LoadedModel.sampling_defaults` are
generation_config.json's (`wse_inference.generation_config`). `read_weights(path)` reads
every tensor with NumPy and no JAX (a command refuses NaN or infinite weights, a value that
overflows the dtype config.json holds them in, an FP8 checkpoint, a header listing more
tensors than config.json's layers can use, before JAX loads, and hands the arrays to
`load_model(path, weights=...)`: read once).
`read_config(path)` reads only config.json, so that
`wse_inference.host_memory.check_host_memory(config, rows=..., max_context=...)` can refuse
a serving size (parameters plus KV cache rows) that the host cannot hold before JAX builds
anything (weights already read are passed as `held_bytes`: MemAvailable no longer counts
them). `check_draft(target, draft)` refuses a draft whose vocabulary differs from the
target's (size, or the token tables where the draft's folder has a tokenizer.json: without
one it runs on the target's, as in vLLM). Errors are `WseError`s with one line.

A `wse train` export older than its run folder's newest checkpoint is loaded with one note
on stderr, once per process (`wse_inference.run_export`; hunt 68: after a stopped resume the
older export was served without a word); a run folder with no export is refused naming its
newest checkpoint and the rerun that exports it (hunt 77).

The `Engine` a directory serves is built by `wse_inference.load.load_engine` (the engines
import this module, so it builds none of them).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from wse_core.errors import WseError
from wse_core.host.readers import not_regular

from wse_inference import generation_config
from wse_inference.engine import ByteTokenizer
from wse_inference.generation_config import sampling_defaults
from wse_inference.hf_tokenizer import HFTokenizer, read_tokenizer_file, slow_tokenizer
from wse_inference.model_files import ModelLoadError, json_file, present
from wse_inference.run_export import say_once, stale_export, unexported_run

__all__ = [
    "ModelLoadError",
    "cli_settings",
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


_TOKENIZER_IS = "tokenizer.json must be an HF tokenizers JSON file (or absent: byte-level)"


@dataclasses.dataclass(frozen=True, eq=False)
class LoadedModel:
    name: str
    path: Path
    config: Any  # wse_models.ModelConfig
    params: Any  # the functional parameter pytree
    tokenizer: Any  # ByteTokenizer | HFTokenizer | None (ids only)
    eos_token_ids: tuple[int, ...] = ()  # generation stops on these (see `eos_token_ids`)
    # generation_config.json's, where a request leaves a setting out (`generation_config`)
    sampling_defaults: dict[str, Any] = dataclasses.field(default_factory=dict)
    # the tokenizer's eos_token (vLLM's model EOS, whose stop_reason is null; the others of
    # `eos_token_ids` report their id, as vLLM's generation-config stop ids); None: every
    # one of `eos_token_ids` is taken as the model's EOS
    eos_token_id: int | None = None


def cli_settings(model_dir: str | Path, **given: Any) -> dict[str, Any]:
    """`generation_config.cli_settings` for the model folder of `model_dir` (none when it has
    none: loading it refuses it in its own words)."""
    try:
        folder: Path | None = resolve_model_dir(model_dir)
    except ModelLoadError:
        folder = None
    return generation_config.cli_settings(folder, **given)


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
    if why := unexported_run(path):  # hunt 77: a run killed during its export
        raise ModelLoadError(why)
    raise ModelLoadError(
        f"{str(path)!r} is neither an HF-format directory (config.json + safetensors) nor a "
        "`wse train` model_dir with an hf/ export"
    )


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
            read_tokenizer_file(candidate)
            return


def _tokenizer(folder: Path, root: Path, vocab_size: int, required: bool):
    for candidate in (folder / "tokenizer.json", root / "tokenizer.json"):
        if present(candidate, _TOKENIZER_IS):
            return read_tokenizer_file(candidate)
    try:  # vocab.json + merges.txt, or a refusal of the other tokenizer files (hunt 69)
        slow = slow_tokenizer(folder, _config_json(folder).get("model_type"))
    except ModelLoadError:
        if required:
            raise
        return None  # ids only (--prompt-ids, a draft): no tokenizer is read
    if slow is not None:
        return slow
    if vocab_size >= 256:  # no tokenizer files at all
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
    config = _config_json(folder)
    dtype = _held_dtype(folder, config)  # an int8 or float8 config.json: refused unread
    try:  # n_layers: a header listing far more tensors is refused unparsed (hunt 64); dtype:
        # a value its cast makes inf, read in F64 as 1e300 (hunt 69)
        return read_tensors(folder, n_layers=_n_layers(config), dtype=dtype)
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
    defaults = sampling_defaults(folder)
    primary = tokenizer_eos_id(tokenizer, config.vocab_size)
    return LoadedModel(name, folder, config, model.params(), tokenizer, eos, defaults, primary)


def tokenizer_eos_id(tokenizer: Any, vocab_size: int) -> int | None:
    """The id of the tokenizer's eos_token (tokenizer_config.json), vLLM's `eos_token_id`:
    None without a tokenizer, an eos_token, or one in the vocabulary."""
    eos = getattr(tokenizer, "template_vars", {}).get("eos_token")
    i = tokenizer.vocab().get(eos) if eos is not None else None
    return i if isinstance(i, int) and 0 <= i < vocab_size else None


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
    ids.append(tokenizer_eos_id(tokenizer, vocab_size))
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
    """The model's `wse_models.ModelConfig` from its config.json alone (no weights read); a
    dtype held in another (float16 in float32) is said once on stderr."""
    folder = resolve_model_dir(path)
    d = _config_json(folder)  # within the file limits, before JAX is imported
    import wse_models
    from wse_models.hf_config import dtype_note

    try:
        config = wse_models.config_from_hf(d)
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise _config_error(folder, err) from None
    say_once(dtype_note(d))  # float16 run and priced as float32: said (hunt 69)
    return config


def _held_dtype(folder: Path, config: dict[str, Any]) -> str:
    """The dtype the weights are held in (`wse_models.hf_config.checkpoint_dtype`, no JAX);
    an int8 or float8 config.json is refused before a byte of data is read."""
    from wse_models.errors import CheckpointError
    from wse_models.hf_config import checkpoint_dtype

    try:
        return checkpoint_dtype(config)
    except CheckpointError as err:
        raise ModelLoadError(f"cannot load the model in {str(folder)!r}: {err}") from None


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
