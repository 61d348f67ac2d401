"""Hunt 72, HF folders read as transformers and vLLM read them.

Broken before:
1. a Llama 3 `rope_parameters` without original_max_position_embeddings took 8192 (Llama 3's
   own); transformers 5 fills it with max_position_embeddings
   (`standardize_rope_params`), so a 64-position model's logits were far from its. Oracle:
   transformers' logits of the same folder (or, without transformers, its documented rule);
2. `tie_word_embeddings: true` with an lm_head.weight that is not the embedding ran on the
   embedding (vLLM's choice, kept) without a word; transformers 5 warns and uses lm_head.
   Now one note names tie_word_embeddings and the largest difference (NumPy's);
3. a GPTQ folder (`quantization_config`, qweight/qzeros/scales) was refused by its tensors
   ("missing tensor ...q_proj.weight"); now by its quantization_config, before any tensor.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest
import wse_models as wm
from safetensors.numpy import load_file, save_file
from wse_models.testing import random_tokens, tiny_config

# fp32 on both sides; the residual is summation order (torch vs XLA), as test_models_hf's
TOL = 1e-4
WEIGHT_SCALE = 4.0  # on init_params' weights (std 0.02): logits of order 1-10
SCALED = wm.RopeScaling(factor=8.0, original_max_position_embeddings=16)


def _saved(path: Path, **overrides) -> wm.ModelConfig:
    """A tiny random Llama saved in `path`, its weights scaled so logits are of order 1-10
    (as `wse_models.testing.hf_model`'s): a RoPE detail shows."""
    config = tiny_config("llama", **overrides)
    params = jax.tree.map(lambda x: x * WEIGHT_SCALE, wm.init_params(config, jax.random.key(3)))
    wm.save_params(config, params, path)
    return config


def _edit_config(path: Path, edit) -> None:
    cfg = json.loads((path / "config.json").read_text())
    edit(cfg)
    (path / "config.json").write_text(json.dumps(cfg))


def _edit_tensors(path: Path, edit) -> None:
    f = path / "model.safetensors"
    tensors = dict(load_file(f))
    edit(tensors)
    save_file(tensors, f)


def _drop_omp(cfg: dict) -> None:
    for key in ("rope_parameters", "rope_scaling"):
        cfg[key].pop("original_max_position_embeddings")


def test_llama3_rope_without_original_max_positions_takes_max_position_embeddings(tmp_path):
    config = _saved(tmp_path, rope_theta=500000.0, rope_scaling=SCALED)
    _edit_config(tmp_path, _drop_omp)
    model = wm.from_pretrained(tmp_path)
    scaling = model.config.rope_scaling
    assert scaling.original_max_position_embeddings == config.max_seq_len == 64  # before: 8192
    toks = random_tokens(config, 1, 24, seed=5)
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    import torch

    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert hf.config.rope_parameters["original_max_position_embeddings"] == 64
    with torch.no_grad():
        want = hf(input_ids=torch.from_numpy(np.asarray(toks, np.int64))).logits.numpy()
    np.testing.assert_allclose(model(toks), want, atol=TOL, rtol=0)
    old = model.config.replace(rope_scaling=wm.RopeScaling(factor=8.0))  # 8192, as before
    before = wm.Transformer(old, params=model.params())(toks)
    assert np.abs(np.asarray(before) - want).max() > 100 * TOL  # the case tells them apart


def test_a_tied_config_with_a_different_lm_head_says_so_and_runs_on_the_embedding(tmp_path, capsys):
    config = _saved(tmp_path, tie_embeddings=True)
    plain = wm.from_pretrained(tmp_path)
    assert capsys.readouterr().err == ""
    rng = np.random.default_rng(7)
    noise = rng.normal(0.0, 0.01, (config.vocab_size, config.d_model)).astype(np.float32)

    def add_head(t):
        t["lm_head.weight"] = t["model.embed_tokens.weight"] + noise

    _edit_tensors(tmp_path, add_head)
    emb = load_file(tmp_path / "model.safetensors")["model.embed_tokens.weight"]
    want = np.abs(emb.astype(np.float64) - (emb + noise).astype(np.float64)).max()
    model = wm.from_pretrained(tmp_path)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("note: ")  # before: nothing
    assert "tie_word_embeddings" in err[0] and f"max |difference| {want:.3g} " in err[0]
    toks = random_tokens(config, 1, 8, seed=2)
    np.testing.assert_array_equal(model(toks), plain(toks))  # vLLM's: the embedding

    def copy_head(t):
        t["lm_head.weight"] = t["model.embed_tokens.weight"].copy()

    _edit_tensors(tmp_path, copy_head)
    wm.from_pretrained(tmp_path)
    assert capsys.readouterr().err == ""  # a copy of the embedding: nothing to say


def _gptq(tensors: dict) -> None:
    """q_proj of every layer as GPTQ packs it: int32 qweight, qzeros and fp16 scales."""
    for name in [k for k in tensors if k.endswith("q_proj.weight")]:
        out, inp = tensors.pop(name).shape
        stem = name.removesuffix(".weight")
        tensors[f"{stem}.qweight"] = np.zeros((inp // 8, out), np.int32)
        tensors[f"{stem}.qzeros"] = np.zeros((1, out // 8), np.int32)
        tensors[f"{stem}.scales"] = np.ones((1, out), np.float16)


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_a_quantized_folder_is_refused_by_its_quantization_config(tmp_path, method):
    _saved(tmp_path)
    _edit_tensors(tmp_path, _gptq)
    qc = {"quant_method": method, "bits": 4, "group_size": 128}
    _edit_config(tmp_path, lambda c: c.update(quantization_config=qc))
    want = (
        f"quantized checkpoints (quantization_config: {method}) are not supported: give the "
        "dequantized fp16/bf16/fp32 weights"
    )
    with pytest.raises(wm.CheckpointError) as err:
        wm.from_pretrained(tmp_path)  # before: missing tensor '...q_proj.weight'
    assert str(err.value) == want
    from wse_models.hf_config import checkpoint_dtype

    with pytest.raises(wm.CheckpointError, match="quantization_config"):
        checkpoint_dtype(json.loads((tmp_path / "config.json").read_text()))  # read first
    (tmp_path / "model.safetensors").write_bytes(b"not read")
    with pytest.raises(wm.CheckpointError, match="quantization_config"):
        wm.from_pretrained(tmp_path)  # refused before a tensor is read
    _edit_config(tmp_path, lambda c: c.update(quantization_config=None))  # null: not quantized
    assert checkpoint_dtype(json.loads((tmp_path / "config.json").read_text())) == "float32"
