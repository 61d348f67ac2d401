"""The functional decoder: shapes, causality, KV cache == full forward, layer-by-layer == scan."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import wse_models as wm
from wse_models.testing import random_tokens, tiny_config

ARCHS = ["gpt2", "llama"]
# fp32 everywhere; differences come only from summation order (scan vs loop, cache length).
TOL = 2e-5


@pytest.fixture(scope="module", params=ARCHS)
def model(request):
    """Config, params, jitted forward, tokens [2, 12] and their full-forward logits."""
    c = tiny_config(request.param)
    p = wm.init_params(c, jax.random.key(1))
    fwd = jax.jit(partial(wm.forward, c))
    seqs = random_tokens(c, 2, 12, seed=3)
    return c, p, fwd, seqs, np.asarray(fwd(p, seqs)[0])


def test_shapes_and_causal_masking(model):
    c, p, fwd, toks, full = model
    assert full.shape == (2, 12, c.vocab_size) and full.dtype == np.float32
    assert np.isfinite(full).all()
    changed = toks.at[:, 6:].set((toks[:, 6:] + 1) % c.vocab_size)
    b = fwd(p, changed)[0]
    np.testing.assert_allclose(b[:, :6], full[:, :6], atol=TOL)
    assert float(jnp.abs(b[:, 6:] - full[:, 6:]).max()) > 1e-3


@pytest.mark.smoke
def test_layer_by_layer_equals_scan_equals_forward(model):
    c, p, _, toks, full = model
    pos = wm.default_positions(toks)
    embed, unembed = jax.jit(partial(wm.embed, c)), jax.jit(partial(wm.unembed, c))
    layer = jax.jit(partial(wm.apply_layer, c))  # one compiled function serves every layer
    h = embed(p, toks, pos)
    for i in range(c.n_layers):  # weight streaming: one layer's weights at a time
        h, _ = layer(wm.layer_slice(p["layers"], i), h, pos)
    np.testing.assert_allclose(unembed(p, h), full, atol=TOL)
    stage = jax.jit(partial(wm.apply_layers, c))
    h = embed(p, toks, pos)  # pipeline stages: ranges [0, 1) and [1, L)
    h, _ = stage(wm.layer_range(p["layers"], 0, 1), h, pos)
    h, _ = stage(wm.layer_range(p["layers"], 1, c.n_layers), h, pos)
    np.testing.assert_allclose(unembed(p, h), full, atol=TOL)


def test_vjp_through_one_layer_matches_full_grad(model):
    c, p, *_ = model
    toks = random_tokens(c, 2, 6)
    pos = wm.default_positions(toks)
    h0 = wm.embed(c, p, toks, pos)

    @jax.jit
    def streamed(lp, h):  # what the trainer does per layer: vjp of apply_layer
        out, vjp = jax.vjp(lambda lp, h: wm.apply_layer(c, lp, h, pos)[0], lp, h)
        return vjp(jnp.ones_like(out))

    @jax.jit
    def whole(layers):
        return jax.grad(lambda ls: wm.apply_layers(c, ls, h0, pos)[0].sum())(layers)

    g_lp, g_h = streamed(wm.layer_slice(p["layers"], 0), h0)
    g_full = whole(wm.layer_range(p["layers"], 0, 1))
    for a, b in zip(jax.tree.leaves(g_lp), jax.tree.leaves(g_full), strict=True):
        np.testing.assert_allclose(a, b[0], rtol=1e-4, atol=1e-6)
    assert g_h.shape == h0.shape


def test_cache_prefill_then_steps_rows_at_different_lengths(model):
    """Row 0: prompt of 3; row 1: prompt of 6. Then 1-token steps, then a 3-token step."""
    c, p, fwd, seqs, full = model  # causal: full[r, :n] are the logits of seqs[r, :n] alone
    seqs = np.asarray(seqs)
    cache = wm.init_cache(c, batch=2, max_len=16)
    toks = np.stack([np.r_[seqs[0, :3], 0, 0, 0], seqs[1, :6]])
    pos = np.stack([np.r_[0, 1, 2, -1, -1, -1], np.arange(6)])  # -1: padding, not written
    logits, cache = fwd(p, jnp.asarray(toks), jnp.asarray(pos), cache)
    np.testing.assert_allclose(logits[0, :3], full[0, :3], atol=TOL)
    np.testing.assert_allclose(logits[1], full[1, :6], atol=TOL)
    lens = [3, 6]
    for _ in range(2):  # one token per step, each row at its own position
        t = jnp.asarray([[seqs[r, lens[r]]] for r in range(2)])
        logits, cache = fwd(p, t, jnp.asarray([[n] for n in lens]), cache)
        for r in range(2):
            np.testing.assert_allclose(logits[r, 0], full[r, lens[r]], atol=TOL)
        lens = [n + 1 for n in lens]
    t = jnp.asarray([seqs[r, lens[r] : lens[r] + 3] for r in range(2)])  # verify 3 drafts
    pos = jnp.asarray([np.arange(n, n + 3) for n in lens])
    logits, cache = fwd(p, t, pos, cache)
    for r in range(2):
        np.testing.assert_allclose(logits[r], full[r, lens[r] : lens[r] + 3], atol=TOL)


def test_cache_rollback_after_rejected_drafts(model):
    """3 wrong drafts at 6..8, then true tokens at 6..7: the stale slot 8 must be masked."""
    c, p, fwd, seqs, full = model
    cache = wm.init_cache(c, batch=2, max_len=16)
    _, cache = fwd(p, seqs[:, :6], wm.default_positions(seqs[:, :6]), cache)
    drafts = (seqs[:, 6:9] + 7) % c.vocab_size
    _, cache = fwd(p, drafts, jnp.broadcast_to(jnp.arange(6, 9), (2, 3)), cache)
    pos = jnp.asarray([[6, 7, -1]] * 2)  # two accepted, one padding slot
    logits, cache = fwd(p, seqs[:, 6:9], pos, cache)
    np.testing.assert_allclose(logits[:, :2], full[:, 6:8], atol=TOL)


def test_apply_layer_with_layer_cache(model):
    c, p, fwd, toks, full = model
    cache = wm.init_cache(c, 2, 16)
    pos = wm.default_positions(toks)
    h = jax.jit(partial(wm.embed, c))(p, toks[:, :6], pos[:, :6])
    layer = jax.jit(partial(wm.apply_layer, c))
    for i in range(c.n_layers):
        lc = wm.layer_slice(cache, i)
        assert isinstance(lc, wm.LayerCache)
        h, lc = layer(wm.layer_slice(p["layers"], i), h, pos[:, :6], lc)
        cache = wm.layer_update(cache, i, lc)
    logits, _ = fwd(p, toks[:, 6:7], pos[:, 6:7], cache)
    np.testing.assert_allclose(logits[:, 0], full[:, 6], atol=TOL)


@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_compute_and_params(arch):
    c32 = tiny_config(arch)
    p32 = wm.init_params(c32, jax.random.key(2))
    toks = random_tokens(c32, 2, 9)
    ref = jax.jit(partial(wm.forward, c32))(p32, toks)[0]
    scale = float(jnp.abs(ref).max())
    for dt, pdt in [("bfloat16", "float32"), ("float32", "bfloat16")]:
        c = c32.replace(dtype=dt, param_dtype=pdt)
        p = wm.cast_params(p32, pdt)
        out = jax.jit(partial(wm.forward, c))(p, toks)[0]
        assert out.dtype == jnp.float32
        # bf16 has 8 mantissa bits: relative error ~ 2^-8 per op, a few ops deep.
        assert float(jnp.abs(out - ref).max()) < 0.05 * scale, (dt, pdt)


def test_transformer_module_and_nnx():
    import optax
    from flax import nnx

    c = tiny_config("llama")
    model = wm.Transformer(c, rngs=nnx.Rngs(params=0))
    toks = random_tokens(c, 2, 5)
    ref = jax.jit(partial(wm.forward, c))(model.params(), toks)[0]
    np.testing.assert_allclose(model(toks), ref, atol=TOL)
    assert model.config is c and model.num_params() == c.num_params()
    opt = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    loss = lambda m: jnp.mean(m(toks) ** 2)
    before = loss(model)
    step = nnx.jit(lambda m, o: o.update(m, nnx.grad(loss)(m)))
    step(model, opt)
    assert loss(model) < before


def test_bad_inputs():
    c = tiny_config("gpt2")
    p = wm.init_params(c, jax.random.key(0))
    with pytest.raises(wm.ModelError, match="batch, seq"):
        wm.forward(c, p, jnp.zeros((4,), jnp.int32))
    with pytest.raises(wm.ModelError, match="integer"):
        wm.forward(c, p, jnp.zeros((1, 4), jnp.float32))
    with pytest.raises(wm.ModelError, match="positions shape"):
        wm.forward(c, p, jnp.zeros((1, 4), jnp.int32), jnp.zeros((1, 3), jnp.int32))
    with pytest.raises(wm.ModelError, match="batch"):
        wm.forward(c, p, jnp.zeros((2, 4), jnp.int32), None, wm.init_cache(c, 3, 8))
    with pytest.raises(wm.ModelError, match="position table"):
        wm.init_cache(c, 1, c.max_seq_len + 1)
    with pytest.raises(wm.ModelError, match="out of range"):
        wm.layer_slice(p["layers"], c.n_layers)


def test_module_refuses_positions_out_of_range():
    c = tiny_config("gpt2")
    model = wm.Transformer(c, params=wm.init_params(c, jax.random.key(0)))
    with pytest.raises(wm.ModelError, match="position table"):
        model(jnp.zeros((1, c.max_seq_len + 1), jnp.int32))
    cache = wm.init_cache(c, 1, 4)
    with pytest.raises(wm.ModelError, match="cache max_len of 4"):
        model.step(jnp.zeros((1, 2), jnp.int32), jnp.asarray([[3, 4]]), cache)
