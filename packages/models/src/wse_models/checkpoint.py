"""HF-format checkpoints: a directory of `config.json` + `*.safetensors` (sharded or not).

    model = from_pretrained("path/to/dir")      # GPT2LMHeadModel or LlamaForCausalLM
    save_pretrained(model, "out/dir")           # loadable by transformers' from_pretrained

Tensor names follow transformers. GPT-2 stores Conv1D weights as [in, out] (our layout) with
q, k, v fused in `c_attn`; Llama stores nn.Linear weights as [out, in] (transposed here), and
its q/k rows are already permuted by HF's converter into the rotate-half RoPE layout that
`wse_models.decoder` uses, so no permutation is applied. Every tensor is checked: a missing
tensor, a wrong shape, a weight that is not floating point (bool, integer, complex: hunt 64,
cast silently) or an unexpected tensor is a `CheckpointError` naming it; only
non-parameter buffers (GPT-2 `attn.bias`/`attn.masked_bias`, `rotary_emb.inv_freq`) and a
tied `lm_head.weight` are skipped (one that differs from the embedding is said once on
stderr: `_tied_head_note`). A quantized folder (GPTQ, AWQ) is refused by its config.json's
`quantization_config` (`hf_config.checkpoint_dtype`) before a tensor is read. Nothing is
downloaded.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from safetensors.flax import save_file
from wse_core.errors import WseError
from wse_core.host.limits import LimitError
from wse_core.host.readers import load_json, read_text
from wse_core.host.tensor_files import HF_BUFFERS, INDEX_FILE, read_tensors

from wse_models.config import ModelConfig
from wse_models.errors import CheckpointError
from wse_models.hf_config import config_from_hf, config_to_hf
from wse_models.module import Transformer
from wse_models.params import Params, param_shapes

__all__ = ["from_pretrained", "hf_tensor_names", "load_params", "save_params", "save_pretrained"]

# (hf name, our paths, kind): kind "copy" | "T" (nn.Linear) | "qkv" (GPT-2's fused c_attn)
Entry = tuple[str, tuple[tuple[str, ...], ...], str]


def _gpt2_table(c: ModelConfig) -> tuple[list[Entry], list[Entry]]:
    top = [
        ("transformer.wte.weight", (("embed", "tok"),), "copy"),
        ("transformer.wpe.weight", (("embed", "pos"),), "copy"),
        ("transformer.ln_f.weight", (("final", "norm", "scale"),), "copy"),
        ("transformer.ln_f.bias", (("final", "norm", "bias"),), "copy"),
    ]
    qkv_w = (("attn", "wq"), ("attn", "wk"), ("attn", "wv"))
    qkv_b = (("attn", "bq"), ("attn", "bk"), ("attn", "bv"))
    layer = [
        ("ln_1.weight", (("attn_norm", "scale"),), "copy"),
        ("ln_1.bias", (("attn_norm", "bias"),), "copy"),
        ("attn.c_attn.weight", qkv_w, "qkv"),
        ("attn.c_attn.bias", qkv_b, "qkv"),
        ("attn.c_proj.weight", (("attn", "wo"),), "copy"),
        ("attn.c_proj.bias", (("attn", "bo"),), "copy"),
        ("ln_2.weight", (("mlp_norm", "scale"),), "copy"),
        ("ln_2.bias", (("mlp_norm", "bias"),), "copy"),
        ("mlp.c_fc.weight", (("mlp", "w_up"),), "copy"),
        ("mlp.c_fc.bias", (("mlp", "b_up"),), "copy"),
        ("mlp.c_proj.weight", (("mlp", "w_down"),), "copy"),
        ("mlp.c_proj.bias", (("mlp", "b_down"),), "copy"),
    ]
    return top, [(f"transformer.h.{{i}}.{n}", p, k) for n, p, k in layer]


def _llama_table(c: ModelConfig) -> tuple[list[Entry], list[Entry]]:
    top = [
        ("model.embed_tokens.weight", (("embed", "tok"),), "copy"),
        ("model.norm.weight", (("final", "norm", "scale"),), "copy"),
    ]
    lin = {"self_attn.q_proj": "wq", "self_attn.k_proj": "wk", "self_attn.v_proj": "wv",
           "self_attn.o_proj": "wo"}  # fmt: skip
    layer: list[Entry] = [(f"{n}.weight", (("attn", w),), "T") for n, w in lin.items()]
    for n in ("gate", "up", "down"):
        layer.append((f"mlp.{n}_proj.weight", (("mlp", f"w_{n}"),), "T"))
    layer.append(("input_layernorm.weight", (("attn_norm", "scale"),), "copy"))
    layer.append(("post_attention_layernorm.weight", (("mlp_norm", "scale"),), "copy"))
    return top, [(f"model.layers.{{i}}.{n}", p, k) for n, p, k in layer]


def _tables(c: ModelConfig) -> tuple[list[Entry], list[Entry]]:
    top, layer = _gpt2_table(c) if c.arch == "gpt2" else _llama_table(c)
    if not c.tie_embeddings:
        top.append(("lm_head.weight", (("final", "head"),), "T"))
    return top, layer


def hf_tensor_names(config: ModelConfig) -> list[str]:
    """The HF tensor names a checkpoint of `config` holds (lm_head only when untied)."""
    top, layer = _tables(config)
    names = [n for n, _, _ in top]
    return names + [n.format(i=i) for i in range(config.n_layers) for n, _, _ in layer]


def _get(tree: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        tree = tree[k]
    return tree


def _put(tree: dict, path: tuple[str, ...], value: Any) -> None:
    for k in path[:-1]:
        tree = tree.setdefault(k, {})
    tree[path[-1]] = value


def _hf_shape(shapes: list[tuple[int, ...]], kind: str) -> tuple[int, ...]:
    if kind == "T":
        return tuple(reversed(shapes[0]))
    if kind == "qkv":
        return (*shapes[0][:-1], sum(s[-1] for s in shapes))
    return shapes[0]


def _to_ours(x: np.ndarray, kind: str, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    if kind == "T":
        return [x.T]
    if kind == "qkv":
        cuts = np.cumsum([s[-1] for s in shapes])[:-1]
        return list(np.split(x, cuts, axis=-1))
    return [x]


def _to_hf(xs: list[np.ndarray], kind: str) -> np.ndarray:
    if kind == "T":
        return xs[0].T
    if kind == "qkv":
        return np.concatenate(xs, axis=-1)
    return xs[0]


# ---- reading ----------------------------------------------------------------------------


class _Tensors:
    """Every tensor of a checkpoint directory, read once (`wse_core.host.tensor_files`), or
    the arrays a caller read that way; each is taken as it is placed, unused ones dropped."""

    def __init__(self, path: Path, arrays: dict[str, np.ndarray] | None, config: ModelConfig):
        # n_layers: a header listing far more tensors is refused before it is parsed; dtype:
        # a value the cast to param_dtype makes inf is refused as it is read (hunt 69)
        n, dt = config.n_layers, config.param_dtype
        try:
            self.arrays = read_tensors(path, n_layers=n, dtype=dt) if arrays is None else arrays
        except WseError as err:  # TensorFileError, HostMemoryError: one line
            raise CheckpointError(str(err)) from None
        self.files = dict.fromkeys(self.arrays)  # our names (keys) read as `stored`
        self.stored: dict[str, str] = {}  # our name -> name in the file, where they differ
        self.used: set[str] = set()

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in self.files:
            raise CheckpointError(f"checkpoint is missing tensor {name!r} (shape {shape})")
        stored = self.stored.get(name, name)
        got = tuple(self.arrays[stored].shape)
        if got != tuple(shape):
            raise CheckpointError(f"tensor {stored!r} has shape {got}, expected {tuple(shape)}")
        if not jnp.issubdtype(self.arrays[stored].dtype, jnp.floating):  # bfloat16 is one
            raise CheckpointError(
                f"tensor {stored!r} is {self.arrays[stored].dtype}; model weights must be "
                "floating point (F16, BF16, F32 or F64)"
            )
        self.used.add(name)
        return self.arrays.pop(stored)


def _read_hf_config(path: Path) -> dict[str, Any]:
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {str(path)!r} does not exist")
    cfg = path / "config.json"
    if not cfg.exists():
        raise CheckpointError(f"no config.json in {path}")
    try:
        d = load_json(read_text(cfg, "config.json"), str(cfg))
    except LimitError as err:
        raise CheckpointError(str(err)) from None
    except (OSError, ValueError) as err:  # JSONDecodeError, UTF-8, a key twice (hunt 59)
        raise CheckpointError(f"{cfg} is not valid JSON: {err}") from None
    if not isinstance(d, dict):
        raise CheckpointError(f"{cfg} must hold a JSON object, got {type(d).__name__}")
    return d


def _normalize(tensors: _Tensors) -> None:
    """GPT-2 files saved from GPT2Model lack the 'transformer.' prefix: add it."""
    if not any(k.startswith("transformer.") for k in tensors.files):
        tensors.stored = {
            (k if k.startswith("lm_head") else f"transformer.{k}"): k for k in tensors.files
        }
        tensors.files = dict.fromkeys(tensors.stored)


def load_params(
    path: str | os.PathLike, config: ModelConfig, *, tensors: dict[str, np.ndarray] | None = None
) -> Params:
    """The parameter pytree of the HF checkpoint in `path`, checked against `config`; with
    `tensors` (`wse_core.host.tensor_files.read_tensors(path, dtype=config.param_dtype)`, read
    before JAX by a command, each value checked to fit that dtype)
    those arrays, taken: the dict is emptied as they are placed, so no copy outlives the load."""
    tensors = _Tensors(Path(path), tensors, config)
    if config.arch == "gpt2":
        _normalize(tensors)
    shapes = jax.tree.map(lambda s: s.shape, param_shapes(config))
    top, layer = _tables(config)
    tree: dict[str, Any] = {}
    _load_entries(tensors, top, shapes, tree, {})
    per_layer: list[dict[str, Any]] = []
    for i in range(config.n_layers):
        per_layer.append({})
        layer_shapes = jax.tree.map(lambda s: s[1:], shapes["layers"], is_leaf=_is_tuple)
        _load_entries(tensors, layer, layer_shapes, per_layer[-1], {"i": i})
    tree["layers"] = jax.tree.map(lambda *xs: np.stack(xs), *per_layer)
    _check_unused(tensors, config)
    if config.tie_embeddings and "lm_head.weight" in tensors.arrays:
        _say(_tied_head_note(tensors.arrays["lm_head.weight"], tree["embed"]["tok"]))
    tensors.arrays.clear()  # what was not placed (a tied lm_head)
    dt = jnp.dtype(config.param_dtype)
    return jax.tree.map(lambda x: jnp.asarray(x, dt), tree)


def _is_tuple(x: object) -> bool:
    return isinstance(x, tuple)


def _load_entries(tensors, entries, shapes, tree, fmt: dict[str, int]) -> None:
    for name, paths, kind in entries:
        ours = [tuple(_get(shapes, p)) for p in paths]
        x = tensors.get(name.format(**fmt), _hf_shape(ours, kind))
        for p, v in zip(paths, _to_ours(x, kind, ours), strict=True):
            _put(tree, p, v)


def _check_unused(tensors: _Tensors, config: ModelConfig) -> None:
    extra = [
        k for k in tensors.files
        if k not in tensors.used and not HF_BUFFERS.search(k)
        and not (k == "lm_head.weight" and config.tie_embeddings)
    ]  # fmt: skip
    if extra:
        more = f" and {len(extra) - 5} more" if len(extra) > 5 else ""
        raise CheckpointError(
            f"checkpoint has tensors this {config.arch} config does not use: {extra[:5]}{more}"
        )


# Rows of lm_head.weight compared with the embedding at a time: at most this many float64
# values (32 MiB) held aside, whatever the vocabulary
_DIFF_VALUES = 2**22
_said: set[str] = set()


def _tied_head_note(head: np.ndarray, embed: np.ndarray) -> str | None:
    """The line said when config.json ties the embeddings but the checkpoint also holds an
    lm_head.weight that is not the embedding: the head is the embedding, as vLLM builds it
    (its Llama and GPT-2 `load_weights` skip lm_head.weight when tied); transformers 5 warns
    and keeps lm_head.weight instead (hunt 72: it was dropped without a word). None when the
    two are equal."""
    why = "the output head is the embedding, as vLLM's (transformers 5 uses lm_head.weight)"
    if head.shape != embed.shape:
        return (
            f"note: config.json's tie_word_embeddings is true: the checkpoint's lm_head.weight "
            f"(shape {tuple(head.shape)}, the embedding's {tuple(embed.shape)}) is not used; "
            f"{why}"
        )
    rows = max(1, _DIFF_VALUES // max(1, int(np.prod(head.shape[1:]))))
    diff = 0.0
    for i in range(0, head.shape[0], rows):
        a, b = (np.asarray(x[i : i + rows], np.float64) for x in (head, embed))
        diff = max(diff, float(np.max(np.abs(a - b), initial=0.0)))
    if diff == 0.0:
        return None
    return (
        f"note: config.json's tie_word_embeddings is true: the checkpoint's lm_head.weight "
        f"(max |difference| {diff:.3g} from the embedding) is not used; {why}"
    )


def _say(note: str | None) -> None:
    """`note` on stderr, once per process (as `wse_inference`'s notes of a model folder)."""
    if note is not None and note not in _said:
        _said.add(note)
        print(note, file=sys.stderr, flush=True)


def from_pretrained(
    path: str | os.PathLike,
    *,
    dtype: str = "float32",
    param_dtype: str | None = None,
    tensors: dict[str, np.ndarray] | None = None,
) -> Transformer:
    """A `Transformer` from a local HF directory (GPT-2 or Llama; compute `dtype`); `tensors`:
    its arrays already read (`load_params`)."""
    d = _read_hf_config(Path(path))
    try:
        config = config_from_hf(d, dtype=dtype, param_dtype=param_dtype)
    except WseError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as err:  # a field of a wrong type
        raise CheckpointError(
            f"{Path(path) / 'config.json'}: {type(err).__name__}: {err}"
        ) from None
    return Transformer(config, params=load_params(path, config, tensors=tensors))


# ---- writing ----------------------------------------------------------------------------


def _hf_tensors(config: ModelConfig, params: Params) -> dict[str, np.ndarray]:
    top, layer = _tables(config)
    out = {n: _to_hf([np.asarray(_get(params, p)) for p in ps], k) for n, ps, k in top}
    layers = jax.tree.map(np.asarray, params["layers"])
    for i in range(config.n_layers):
        for n, ps, k in layer:
            out[n.format(i=i)] = _to_hf([_get(layers, p)[i] for p in ps], k)
    return out


def _shards(tensors: dict[str, np.ndarray], max_shard_bytes: int) -> list[list[str]]:
    shards: list[list[str]] = [[]]
    size = 0
    for name, x in tensors.items():
        if shards[-1] and size + x.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += x.nbytes
    return shards


def save_params(
    config: ModelConfig,
    params: Params,
    path: str | os.PathLike,
    *,
    max_shard_bytes: int = 5 * 2**30,
) -> list[Path]:
    """Write config.json and safetensors (sharded over `max_shard_bytes`); return the files."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config_to_hf(config), indent=2) + "\n")
    tensors = _hf_tensors(config, params)
    shards = _shards(tensors, max_shard_bytes)
    n = len(shards)
    names = ["model.safetensors"] if n == 1 else [
        f"model-{k + 1:05d}-of-{n:05d}.safetensors" for k in range(n)
    ]  # fmt: skip
    for fname, shard in zip(names, shards, strict=True):
        arrays = {k: jnp.asarray(np.ascontiguousarray(tensors[k])) for k in shard}
        save_file(arrays, str(out / fname), metadata={"format": "pt"})
    if n > 1:
        index = {
            "metadata": {"total_size": sum(x.nbytes for x in tensors.values())},
            "weight_map": {k: f for f, s in zip(names, shards, strict=True) for k in s},
        }
        (out / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    return [out / "config.json", *(out / f for f in names)]


def save_pretrained(
    model: Transformer, path: str | os.PathLike, *, max_shard_bytes: int = 5 * 2**30
) -> list[Path]:
    """Write `model` as an HF checkpoint directory (config.json + safetensors)."""
    return save_params(model.config, model.params(), path, max_shard_bytes=max_shard_bytes)
