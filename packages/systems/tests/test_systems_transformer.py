"""`wse_systems.transformer`: the one parameter formula against published totals (GPT-2 small
with its biases, Llama 3.1 8B) and a count by hand; `DecoderCounts` is a `DecoderShape`."""

import dataclasses

import pytest
from wse_systems.transformer import (
    LLAMA31_8B,
    DecoderCounts,
    DecoderShape,
    kv_values_per_token,
    layer_params,
    matmul_params,
    num_params,
)

GPT2_SMALL = DecoderCounts(
    name="gpt2", arch="gpt2", vocab_size=50257, d_model=768, n_layers=12, n_heads=12,
    n_kv_heads=12, d_ff=3072, max_seq_len=1024, tie_embeddings=True,
)  # fmt: skip


def test_gpt2_small_is_the_published_124m_with_its_biases():
    # HF's GPT2LMHeadModel(gpt2).num_parameters() = 124,439,808 (tied head counted once)
    assert num_params(GPT2_SMALL) == 124_439_808
    d, ff = 768, 3072
    weights = 4 * d * d + 2 * d * ff
    biases = 3 * d + d + ff + d  # c_attn (q, k, v), c_proj, c_fc, mlp c_proj
    norms = 2 * 2 * d  # ln_1, ln_2: scale and bias
    assert layer_params(GPT2_SMALL) == weights + biases + norms


def test_llama31_8b_is_the_published_count():
    # Meta's Llama 3.1 8B: 8,030,261,248 parameters (HF model card / safetensors index)
    assert num_params(LLAMA31_8B) == 8_030_261_248
    assert LLAMA31_8B.num_params() == num_params(LLAMA31_8B)
    assert (
        matmul_params(LLAMA31_8B)
        == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 128256 * 4096
    )
    assert kv_values_per_token(LLAMA31_8B) == 32 * 2 * 8 * 128


def test_counts_by_hand_and_the_protocol():
    tiny = DecoderCounts(
        name="t", arch="llama", vocab_size=10, d_model=4, n_layers=1, n_heads=2,
        n_kv_heads=1, d_ff=6, max_seq_len=8,
    )  # fmt: skip
    # embed 40; layer: q 16 + k 8 + v 8 + o 16 + MLP 3 x 24 + norms 8 = 128; final 4 + head 40
    assert num_params(tiny) == 40 + 128 + 44
    assert num_params(dataclasses.replace(tiny, tie_embeddings=True)) == 40 + 128 + 4
    explicit = dataclasses.replace(tiny, head_dim=4)  # 2 heads of 4 on d 4
    assert explicit.hd == 4 and kv_values_per_token(explicit) == 2 * 4
    assert isinstance(tiny, DecoderShape)


def test_model_config_is_a_decoder_shape_with_the_same_counts():
    wse_models = pytest.importorskip("wse_models")
    cfg = wse_models.preset_config("gpt2-124m")
    assert isinstance(cfg, DecoderShape)
    assert cfg.num_params() == num_params(cfg) == 124_439_808
    assert cfg.kv_bytes_per_token("bfloat16") == 2 * kv_values_per_token(cfg)
