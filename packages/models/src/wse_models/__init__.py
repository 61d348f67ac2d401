"""wse_models: the decoder-only transformer family shared by the trainer and inference.

Contract (other packages code against exactly this; see the models issue):

- `ModelConfig` — frozen kw-only dataclass: arch ("gpt2" | "llama"), vocab_size, d_model,
  n_layers, n_heads, n_kv_heads, d_ff, max_seq_len, norm_eps, rope_theta, tie_embeddings,
  dtype (compute: "float32" | "bfloat16"), param_dtype. Methods: `num_params()`,
  `param_bytes(dtype=None)`, `layer_params()` (per layer), `flops_per_token(seq_len)`,
  `kv_bytes_per_token(dtype=None)`. `preset_config(name)` / `PRESETS`: "tiny-gpt2",
  "tiny-llama", "gpt2-124m", "gpt2-355m", "gpt2-774m", "gpt2-1.5b", "llama3-1b", "llama3-3b",
  "llama3-8b", "llama3-70b", "llama3-405b".
- Functional core over a params pytree (nested dicts of arrays):
  `init_params(config, key)` -> {"embed": ..., "layers": <leaves stacked on a leading
  n_layers axis>, "final": ...};
  `embed(config, params, tokens, positions)` -> h [b, s, d];
  `apply_layer(config, layer_params, h, positions, cache=None)` -> (h, cache) for ONE layer
  (layer_params = `layer_slice(params["layers"], i)`; cache = that layer's `LayerCache` or None);
  `apply_layers(config, stacked_layer_params, h, positions, cache=None)` -> (h, cache), a
  `lax.scan` over any contiguous range of layers (`layer_range(params["layers"], i, j)`);
  `unembed(config, params, h)` -> logits [b, s, vocab] (final norm and head);
  `forward(config, params, tokens, positions=None, cache=None)` -> (logits, cache).
- KV cache: `init_cache(config, batch, max_len, dtype=None)` -> `KVCache` (stacked per layer;
  each batch row has its own positions so rows may be at different lengths). Tokens at
  `positions` [b, t] are written into the cache and attend to every cached position <= their
  own; prefill then one or several tokens per step give the logits of a full forward pass.
- `Transformer` — a flax NNX module holding config and params: `model(tokens)` -> logits;
  `model.params()` gives the functional pytree.
- HF format: `from_pretrained(path)` -> Transformer; `save_pretrained(model, path)`.

Additions beyond the contract (implemented here; the contract above is unchanged):

- `ModelConfig`: optional `head_dim`, `rope_scaling` (`RopeScaling`, Llama 3.1+ "llama3"),
  `mlp_activation` ("gelu" | "silu" | "relu" | "relu2"; default the arch's own; HF's
  `activation_function` / `hidden_act`), `.relu_like`, `name`; `.hd`, `.replace(**kw)`,
  `embed_params()`, `final_params()`, `matmul_params()`,
  `layer_bytes(dtype)`, `attn_flops_per_token(seq_len)`, `train_flops_per_token(seq_len)`.
  Dtypes are strings; `dtype_bytes(name)`.
- Params: `param_shapes(config)` (ShapeDtypeStructs, nothing allocated), `cast_params`,
  `tree_num_params`, `layer_update(stacked, i, layer)`; `layer_slice` / `layer_range` also
  cut a `KVCache` (layer_slice gives a `LayerCache`). `write_cache`, `default_positions`,
  `rope_inv_freq`. A negative position is a padding token: not written to the cache.
  `forward`, `embed` and `Transformer` refuse (ModelError) ids outside the vocabulary and
  positions past the gpt2 table or the cache where they see the values (not under `jit`):
  `decoder.check_inputs`. `init_params` takes one PRNG key; `cast_params` / `init_cache` a
  floating dtype.
- `Transformer(config, rngs=nnx.Rngs(params=0))` or `Transformer(config, params=tree)`;
  `model.step(tokens, positions, cache)` -> (logits, cache); `model.num_params()`.
- HF: `load_params(path, config)`, `save_params(config, params, path, max_shard_bytes=)`,
  `config_from_hf(dict)`, `config_to_hf(config)`, `hf_tensor_names(config)`.
- `segment_ids=` on `apply_layer(s)` / `forward`: documents packed in a row attend within
  themselves; `count_zeros=True` also returns the MLP hidden activation's exact zeros per
  layer. `wse_models.sparsity`: `zero_counts`, `zero_fraction(params, config, tokens)` (the
  measured per-layer sparsity of a checkpoint, which the cost model prices).
- Errors (all `wse_core.errors.WseError`): `ModelError`, `ModelConfigError`, `CheckpointError`;
  `renamed_fields(message, names)` calls config fields by the names the user's file has.
- `wse_models.layer`: one layer cut at its matrix products — `layer_matrices(config)`, the
  stages between the products (`attention_input`, `attention_mix`, `mlp_input`,
  `mlp_hidden`, `layer_output`) and `product` (x @ w in the compute dtype, hand-written
  VJP), whose composition is `apply_layer`; the trainer streams a matrix in column chunks
  through them.
- `wse_models.testing`: tiny configs and random `transformers` oracles for tests.
- Meshes: the functions run under `jax.jit` on meshes with Explicit axes (jax.make_mesh's
  default) with the batch sharded over a data axis and parameters replicated.
"""

import importlib
from typing import Any

__all__ = [
    "ARCHS",
    "MLP_ACTIVATIONS",
    "PRESETS",
    "RELU_LIKE",
    "CheckpointError",
    "KVCache",
    "LayerCache",
    "ModelConfig",
    "ModelConfigError",
    "ModelError",
    "Params",
    "RopeScaling",
    "Transformer",
    "apply_layer",
    "apply_layers",
    "cast_params",
    "config_from_hf",
    "config_to_hf",
    "default_positions",
    "dtype_bytes",
    "embed",
    "forward",
    "from_pretrained",
    "hf_tensor_names",
    "init_cache",
    "init_params",
    "layer",
    "layer_matrices",
    "layer_range",
    "layer_slice",
    "layer_update",
    "load_params",
    "param_shapes",
    "renamed_fields",
    "preset_config",
    "rope_inv_freq",
    "save_params",
    "save_pretrained",
    "sparsity",
    "tree_num_params",
    "unembed",
    "write_cache",
]


# name -> module, imported on first use (PEP 562): reading a params file or a config.json
# (`wse train --validate-only`, `wse infer generate`'s refusals) does not wait for JAX's
# import (~1-2 s); `layer` and `sparsity` are the submodules themselves. No exported name is
# also a submodule's name, so none can be shadowed by its module (see wse_hpc.md's zhou04).
_WHERE = {
    "KVCache": "cache", "LayerCache": "cache", "init_cache": "cache", "write_cache": "cache",
    "from_pretrained": "checkpoint", "hf_tensor_names": "checkpoint",
    "load_params": "checkpoint", "save_params": "checkpoint", "save_pretrained": "checkpoint",
    "ARCHS": "config", "MLP_ACTIVATIONS": "config", "PRESETS": "config", "RELU_LIKE": "config",
    "ModelConfig": "config", "RopeScaling": "config", "dtype_bytes": "config",
    "preset_config": "config",
    "apply_layers": "decoder", "default_positions": "decoder", "embed": "decoder",
    "forward": "decoder", "unembed": "decoder",
    "CheckpointError": "errors", "ModelConfigError": "errors", "ModelError": "errors",
    "renamed_fields": "errors",
    "config_from_hf": "hf_config", "config_to_hf": "hf_config",
    "apply_layer": "layer", "layer_matrices": "layer", "rope_inv_freq": "layer",
    "Transformer": "module",
    "Params": "params", "cast_params": "params", "init_params": "params",
    "layer_range": "params", "layer_slice": "params", "layer_update": "params",
    "param_shapes": "params", "tree_num_params": "params",
}  # fmt: skip
_MODULES = ("layer", "sparsity")


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f"wse_models.{name}")
    if name in _WHERE:
        return getattr(importlib.import_module(f"wse_models.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'wse_models' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
