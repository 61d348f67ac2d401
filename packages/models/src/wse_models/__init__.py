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
"""
