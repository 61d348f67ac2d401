"""ReLU-like MLPs and their measured zeros; packed documents (segment ids).

Oracle for the zero counts: each layer's MLP pre-activation recomputed in float64 NumPy from
the weights (`np_mlp_preactivation`); ReLU and ReLU^2 are 0 exactly where it is <= 0. fp32
and float64 can disagree on the sign of a pre-activation within round-off of zero, so the
measured count must lie between the NumPy counts of `pre < -band` and `pre <= band`, with
band = 1e-4 x the pre-activation's scale (fp32 round-off of these d <= 64 dot products is
~1e-6 relative); on these sizes the band holds at most a few entries.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import wse_models as wm
from wse_models.sparsity import zero_fraction
from wse_models.testing import np_mlp_preactivation, random_tokens, tiny_config

CASES = [("gpt2", "relu"), ("gpt2", "relu2"), ("llama", "relu"), ("llama", "relu2")]


def _layer_inputs(config, params, tokens, positions, segment_ids=None):
    """Each layer's input h [b, t, d], from the JAX layers run one by one."""
    h = wm.embed(config, params, tokens, positions)
    out = []
    for i in range(config.n_layers):
        out.append(np.asarray(h))
        h = wm.apply_layer(config, wm.layer_slice(params["layers"], i), h, positions,
                           segment_ids=segment_ids)[0]  # fmt: skip
    return out


@pytest.mark.parametrize("arch,act", CASES)
def test_zero_fraction_equals_numpy_count(arch, act):
    c = tiny_config(arch, mlp_activation=act)
    assert c.relu_like
    p = wm.init_params(c, jax.random.key(2))
    toks = random_tokens(c, 3, 10, seed=5)
    pos = wm.default_positions(toks)
    measured = zero_fraction(p, c, np.asarray(toks), rows_per_call=2)  # 2 calls, 1 padded row
    counts = np.asarray(jax.jit(partial(wm.sparsity.zero_counts, c))(p, toks))
    for i, h in enumerate(_layer_inputs(c, p, toks, pos)):
        pre = np_mlp_preactivation(c, wm.layer_slice(p["layers"], i), h, pos)
        band = 1e-4 * np.abs(pre).max()
        lo, hi = int((pre < -band).sum()), int((pre <= band).sum())
        assert lo <= counts[i] <= hi and hi - lo <= 3, (i, lo, counts[i], hi)
        assert measured[i] == counts[i] / pre.size
    assert 0.3 < measured.mean() < 0.7  # random weights: about half the signs negative


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_dense_model_reports_about_zero(arch):
    c = tiny_config(arch)
    assert c.mlp_activation == ("gelu" if arch == "gpt2" else "silu") and not c.relu_like
    p = wm.init_params(c, jax.random.key(2))
    frac = zero_fraction(p, c, np.asarray(random_tokens(c, 2, 12, seed=1)))
    assert frac.shape == (c.n_layers,) and frac.max() < 1e-3


def test_padding_positions_are_not_counted():
    c = tiny_config("gpt2", mlp_activation="relu")
    p = wm.init_params(c, jax.random.key(0))
    toks = random_tokens(c, 1, 8)
    fn = jax.jit(partial(wm.sparsity.zero_counts, c))
    full = np.asarray(fn(p, toks[:, :5]))
    pos = jnp.where(jnp.arange(8) < 5, jnp.arange(8), -1)[None].astype(jnp.int32)
    np.testing.assert_array_equal(np.asarray(fn(p, toks, pos)), full)


def test_dense_forward_unchanged_by_count_flag():
    """The count is a side output: logits are the same with and without it."""
    c = tiny_config("llama", mlp_activation="relu2")
    p = wm.init_params(c, jax.random.key(0))
    toks = random_tokens(c, 2, 9)
    a = wm.forward(c, p, toks)[0]
    b, _, zeros = wm.forward(c, p, toks, count_zeros=True)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert zeros.shape == (c.n_layers,) and zeros.dtype == jnp.int32


def test_activation_config_and_hf_names():
    with pytest.raises(wm.ModelConfigError, match="mlp_activation='rleu'.*relu"):
        tiny_config("gpt2", mlp_activation="rleu")
    assert tiny_config("gpt2") == tiny_config("gpt2", mlp_activation="gelu")
    for arch, key in (("gpt2", "activation_function"), ("llama", "hidden_act")):
        for act, name in (("relu", "relu"), ("relu2", "relu2"), ("gelu", "gelu_new")):
            c = tiny_config(arch, mlp_activation=act)
            d = wm.config_to_hf(c)
            assert d[key] == name
            assert wm.config_from_hf(d) == c.replace(param_dtype="float32")
    with pytest.raises(wm.CheckpointError, match="activation_function='gelu'"):
        wm.config_from_hf({**wm.config_to_hf(tiny_config("gpt2")), "activation_function": "gelu"})


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_packed_segments_equal_documents_run_alone(arch):
    """Three documents packed in one row with positions restarting per document give each
    document's logits run alone (fp32, summation order only: 2e-5 as the decoder tests)."""
    c = tiny_config(arch)
    p = wm.init_params(c, jax.random.key(3))
    lens = (5, 9, 3)
    docs = [random_tokens(c, 1, n, seed=i)[0] for i, n in enumerate(lens)]
    row = jnp.concatenate(docs)[None]
    seg = jnp.concatenate([jnp.full(n, i, jnp.int32) for i, n in enumerate(lens)])[None]
    pos = jnp.concatenate([jnp.arange(n, dtype=jnp.int32) for n in lens])[None]
    packed = np.asarray(wm.forward(c, p, row, pos, segment_ids=seg)[0][0])
    alone = np.concatenate([np.asarray(wm.forward(c, p, d[None])[0][0]) for d in docs])
    np.testing.assert_allclose(packed, alone, atol=2e-5)
    with pytest.raises(wm.ModelError, match="segment_ids"):
        wm.forward(c, p, row, pos, wm.init_cache(c, 1, 32), segment_ids=seg)
