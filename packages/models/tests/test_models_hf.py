"""HF-format checkpoints: logits equal transformers' (fp32, 1e-4), round trips, bad inputs.

The oracle is a tiny random `transformers` model built here (nothing is downloaded); those
tests skip when torch/transformers are not installed. Bad-input tests need neither.
"""

import copy
import json
from functools import partial
from pathlib import Path

import jax
import numpy as np
import pytest
import wse_models as wm
from safetensors.flax import load_file, save_file
from wse_models.testing import hf_logits, hf_model, random_tokens, tiny_config

# fp32 on both sides; the residual is summation order (torch vs XLA), ~1e-6 on these sizes.
TOL = 1e-4
CASES = {
    "gpt2": tiny_config("gpt2"),
    "llama": tiny_config("llama"),
    # OPT-style ReLU and Primer's squared ReLU (HF activation_function / hidden_act)
    "gpt2-relu": tiny_config("gpt2", mlp_activation="relu"),
    "llama-relu2": tiny_config("llama", mlp_activation="relu2"),
    # Llama 3.1+ RoPE scaling with positions past original_max_position_embeddings, tied head.
    "llama3-scaled-tied": tiny_config(
        "llama",
        tie_embeddings=True,
        rope_theta=500000.0,
        rope_scaling=wm.RopeScaling(factor=4.0, original_max_position_embeddings=16),
    ),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def hf_dir(request, tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    config = CASES[request.param]
    model = hf_model(config, seed=1)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path, max_shard_size="20KB")  # several shards + index
    return config, model, path


def test_hf_checkpoint_logits_match_transformers(hf_dir):
    config, hf, path = hf_dir
    assert (path / "model.safetensors.index.json").exists()
    model = wm.from_pretrained(path)
    assert model.config.replace(name="") == config.replace(name="")
    toks = random_tokens(config, 2, 24, seed=4)
    np.testing.assert_allclose(model(toks), hf_logits(hf, toks), atol=TOL, rtol=0)


def test_gradients_match_transformers(hf_dir, tmp_path):
    """d(sum(logits * R))/d(every weight) equals torch autograd's (the decoder's backward is
    hand-written for speed). The torch gradients are saved in place of the weights, so the
    checkpoint loader maps them to our layout."""
    import torch

    config, hf, path = hf_dir
    hf = copy.deepcopy(hf)  # the fixture's model is shared: leave it as it was
    toks = random_tokens(config, 2, 24, seed=6)
    r = np.random.default_rng(0).standard_normal((2, 24, config.vocab_size)).astype(np.float32)
    hf.zero_grad()
    logits = hf(input_ids=torch.from_numpy(np.asarray(toks, dtype=np.int64))).logits
    (logits * torch.from_numpy(r)).sum().backward()
    with torch.no_grad():
        for q in hf.parameters():
            q.copy_(q.grad)
    hf.save_pretrained(tmp_path)
    theirs = wm.load_params(tmp_path, config)
    params = wm.load_params(path, config)
    ours = jax.jit(jax.grad(lambda p: (wm.forward(config, p, toks)[0] * r).sum()))(params)
    # one scale for all: some gradients are zero up to round-off (e.g. the key bias's:
    # softmax ignores a per-row constant), so a per-tensor relative test would test noise
    scale = max(float(np.abs(b).max()) for b in jax.tree.leaves(theirs))
    pairs = zip(jax.tree_util.tree_leaves_with_path(ours), jax.tree.leaves(theirs), strict=True)
    for (name, a), b in pairs:
        np.testing.assert_allclose(a, b, atol=1e-5 * scale, rtol=0, err_msg=str(name))


def test_save_pretrained_loads_in_transformers(hf_dir, tmp_path):
    import transformers

    config, _, path = hf_dir
    ours = wm.Transformer(config, rngs=None, params=wm.init_params(config, jax.random.key(7)))
    wm.save_pretrained(ours, tmp_path, max_shard_bytes=30_000)
    assert len(list(tmp_path.glob("*.safetensors"))) > 1
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).float().eval()
    toks = random_tokens(config, 2, 20, seed=5)
    np.testing.assert_allclose(hf_logits(theirs, toks), ours(toks), atol=TOL, rtol=0)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("param_dtype", ["float32", "bfloat16"])
def test_round_trip_is_exact(arch, param_dtype, tmp_path):
    config = tiny_config(arch, param_dtype=param_dtype, tie_embeddings=arch == "llama")
    params = wm.init_params(config, jax.random.key(3))
    files = wm.save_params(config, params, tmp_path)
    assert [f.name for f in files] == ["config.json", "model.safetensors"]
    back = wm.from_pretrained(tmp_path)
    assert back.config.replace(name="") == config
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(back.params()), strict=True):
        assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b))


def test_gpt2_file_without_transformer_prefix(tmp_path):
    """The released GPT-2 safetensors were saved from GPT2Model: names lack 'transformer.'."""
    config = tiny_config("gpt2")
    params = wm.init_params(config, jax.random.key(0))
    wm.save_params(config, params, tmp_path)
    f = tmp_path / "model.safetensors"
    tensors = {k.removeprefix("transformer."): v for k, v in load_file(f).items()}
    tensors["h.0.attn.bias"] = np.tril(np.ones((1, 1, 8, 8), np.float32))  # old causal buffer
    save_file(tensors, f)
    back = wm.from_pretrained(tmp_path)
    fwd = jax.jit(partial(wm.forward, config))
    toks = random_tokens(config, 1, 5)
    np.testing.assert_array_equal(back(toks), fwd(params, toks)[0])


# ---- bad inputs: a named error, never a silently wrong model --------------------------------


@pytest.fixture
def saved(tmp_path):
    config = tiny_config("llama")
    wm.save_params(config, wm.init_params(config, jax.random.key(0)), tmp_path)
    return tmp_path


def _edit_tensors(path: Path, edit) -> None:
    f = path / "model.safetensors"
    tensors = dict(load_file(f))
    edit(tensors)
    save_file(tensors, f)


def _edit_config(path: Path, **changes) -> None:
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def test_missing_tensor(saved):
    _edit_tensors(saved, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(wm.CheckpointError, match=r"missing tensor 'model.layers.1.mlp.up_proj"):
        wm.from_pretrained(saved)


def test_wrong_shape(saved):
    def edit(t):
        t["model.norm.weight"] = t["model.norm.weight"][:10]

    _edit_tensors(saved, edit)
    with pytest.raises(wm.CheckpointError, match=r"'model.norm.weight' has shape \(10,\)"):
        wm.from_pretrained(saved)


def test_unexpected_tensor(saved):
    def edit(t):
        t["model.layers.3.input_layernorm.weight"] = t["model.norm.weight"]

    _edit_tensors(saved, edit)
    with pytest.raises(wm.CheckpointError, match="does not use.*layers.3"):
        wm.from_pretrained(saved)


def test_config_mismatching_tensors(saved):
    _edit_config(saved, hidden_size=32)
    with pytest.raises(wm.CheckpointError, match="has shape"):
        wm.from_pretrained(saved)


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"model_type": "bert", "architectures": ["BertModel"]}, "unsupported architecture"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
        ({"attention_bias": True}, "attention_bias=True"),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, "rope_type='yarn'"),
    ],
)
def test_unsupported_options_are_named(saved, changes, match):
    _edit_config(saved, **changes)
    with pytest.raises(wm.CheckpointError, match=match):
        wm.from_pretrained(saved)


def test_missing_files(saved, tmp_path):
    with pytest.raises(wm.CheckpointError, match="does not exist"):
        wm.from_pretrained(tmp_path / "nope")
    (saved / "model.safetensors").unlink()
    with pytest.raises(wm.CheckpointError, match="no \\*.safetensors"):
        wm.from_pretrained(saved)
    (saved / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}})
    )
    with pytest.raises(wm.CheckpointError, match="missing from"):
        wm.from_pretrained(saved)
    (saved / "config.json").unlink()
    with pytest.raises(wm.CheckpointError, match="no config.json"):
        wm.from_pretrained(saved)


# The config.json files published with the released checkpoints (abridged to what matters).
GPT2_JSON = {
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12,
    "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257,
}  # fmt: skip
LLAMA31_8B_JSON = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "torch_dtype": "bfloat16", "vocab_size": 128256,
}  # fmt: skip


@pytest.mark.parametrize(
    "hf, preset, param_dtype",
    [(GPT2_JSON, "gpt2-124m", "float32"), (LLAMA31_8B_JSON, "llama3-8b", "bfloat16")],
)
def test_published_configs_map_to_presets(hf, preset, param_dtype):
    config = wm.config_from_hf(hf)
    assert config == wm.preset_config(preset, param_dtype=param_dtype, name="")
    assert wm.config_from_hf(wm.config_to_hf(config)) == config  # and back
    assert len(wm.hf_tensor_names(config)) == (148 if preset == "gpt2-124m" else 291)


def test_arrays_read_before_jax_load_bit_identically_and_are_taken(saved):
    """`from_pretrained(path, tensors=read_tensors(path))` (a command reads the arrays with
    NumPy before importing JAX) gives the same parameters, bit for bit, as reading the
    directory itself, and empties the dict (no second copy outlives the load)."""
    from wse_core.host.tensor_files import read_tensors

    arrays = read_tensors(saved)
    assert arrays
    a, b = wm.from_pretrained(saved, tensors=arrays), wm.from_pretrained(saved)
    assert arrays == {}
    la, lb = jax.tree.leaves_with_path(a.params()), jax.tree.leaves_with_path(b.params())
    assert [p for p, _ in la] == [p for p, _ in lb]
    for (path, x), (_, y) in zip(la, lb, strict=True):
        assert x.dtype == y.dtype and np.asarray(x).tobytes() == np.asarray(y).tobytes(), path


def test_a_nan_weight_is_a_checkpoint_error_naming_it(saved):
    name = "model.layers.1.self_attn.k_proj.weight"

    def edit(t):
        t[name] = t[name].at[0, 0].set(np.nan)

    _edit_tensors(saved, edit)
    with pytest.raises(wm.CheckpointError, match=rf"'{name}' in .* holds 1 NaN or infinite"):
        wm.from_pretrained(saved)


@pytest.mark.parametrize(
    ("rope", "match"),
    [({"rope_scaling": "x"}, "rope_scaling must be an object or null, got 'x'"),
     ({"rope_parameters": [1]}, "rope_parameters must be an object"),
     ({"rope_scaling": {"rope_type": "llama3"}}, "needs a factor")],
)  # fmt: skip
def test_a_rope_setting_of_the_wrong_shape_is_a_checkpoint_error(rope, match):
    # hunt 55: "x" was "dictionary update sequence element #0 has length 1", no factor a
    # KeyError 'factor'
    d = {**wm.config_to_hf(tiny_config("llama")), "rope_parameters": None, **rope}
    with pytest.raises(wm.CheckpointError, match=match):
        wm.config_from_hf(d)


@pytest.mark.parametrize(
    ("arch", "edit", "match"),
    [("llama", {"num_hidden_layers": 100_000}, r"^config\.json's num_hidden_layers must be"),
     ("llama", {"num_attention_heads": 6, "num_key_value_heads": 4},
      r"config\.json's num_attention_heads=6 must be a multiple of "
      r"config\.json's num_key_value_heads=4"),
     ("gpt2", {"n_embd": 0}, r"^config\.json's n_embd must be positive, got 0$")],
)  # fmt: skip
def test_a_config_json_refusal_names_the_key_the_file_has(arch, edit, match):
    # hunt 56: the refusal said n_layers / d_model, names config.json does not have
    d = {**wm.config_to_hf(tiny_config(arch)), **edit}
    with pytest.raises(wm.ModelConfigError, match=match):
        wm.config_from_hf(d)
