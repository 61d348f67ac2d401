"""The chunked head (`wse_trainer.head`) against autodiff of optax's cross-entropy on the
whole logits (`wse_models.unembed`), tied and untied, in one chunk and in several."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import wse_models
from wse_trainer import head as head_mod

BATCH, SEQ = 2, 24  # 48 tokens
VOCAB = 96


def _oracle(model, scale, head_w, h, targets):
    def loss_fn(w, x):
        logits = wse_models.unembed(model, w, x).astype(jnp.float32)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
        return ce.sum() * scale

    loss, (g_w, g_h) = jax.value_and_grad(loss_fn, argnums=(0, 1))(head_w, h)
    return loss, g_w, g_h


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("chunk_bytes", [1 << 30, 16 * VOCAB * 4])  # one chunk; 16 rows
def test_head_equals_autodiff_of_the_whole_logits(tie, chunk_bytes, monkeypatch):
    monkeypatch.setattr(head_mod, "CHUNK_LOGIT_BYTES", chunk_bytes)
    model = wse_models.preset_config(
        "tiny-gpt2", d_model=32, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=64,
        vocab_size=VOCAB, max_seq_len=SEQ, tie_embeddings=tie,
    )  # fmt: skip
    params = wse_models.init_params(model, jax.random.key(0))
    head_w = {"final": params["final"], "embed": params["embed"]}
    h = jax.random.normal(jax.random.key(1), (BATCH, SEQ, 32), jnp.float32)
    targets = jax.random.randint(jax.random.key(2), (BATCH, SEQ), 0, VOCAB)
    scale = 1.0 / (BATCH * SEQ)
    rows = head_mod.chunk_rows(BATCH * SEQ, VOCAB)
    assert rows == (BATCH * SEQ if chunk_bytes > 1 << 20 else 16)
    got = jax.jit(head_mod.head_loss(model, scale))(head_w, h, targets)
    want = _oracle(model, scale, head_w, h, targets)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-7)


def test_chunk_rows_divides_the_tokens_within_the_byte_cap():
    cap = head_mod.CHUNK_LOGIT_BYTES // (4 * 2048)  # rows of V 2048 fp32 logits that fit
    assert head_mod.chunk_rows(2048, 2048) == cap == 512
    assert head_mod.chunk_rows(300, 2048) == 300  # fits whole
    assert head_mod.chunk_rows(1031, 2048) == 1031  # a prime: no divisor >= MIN_CHUNK_ROWS fits
    rows = head_mod.chunk_rows(1000, 50257)  # GPT-2's vocabulary: a few rows at a time
    assert 1000 % rows == 0 and rows * 50257 * 4 <= head_mod.CHUNK_LOGIT_BYTES
