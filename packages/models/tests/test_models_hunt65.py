"""Hunt 65: the functional model API as a notebook calls it. Broken before: `forward` with an
id outside 0..vocab_size-1 (or -1) gave NaN logits (the gather fills with NaN) and, for gpt2,
a sequence or position past the position table did too; a position past the KV cache was
silently not written; `forward(cfg, p, [[1, 2]])` was an AttributeError ('list' has no
ndim); `init_params(cfg, 0)` was JAX's "invalid PRNG key data" from inside the compiled
program; `init_cache(cfg, 1.5, 8)` failed in jnp.zeros; `cast_params(p, "int8")` turned
every weight into 0. Each is now a `ModelError` naming the input, before any compile; the
checks of values run on the host only (never under jit, where the decoders check prompts)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import wse_models as wm
from wse_models.testing import tiny_config


@pytest.fixture(scope="module")
def gpt2():
    c = tiny_config("gpt2")  # vocab 97, max_seq_len 64
    return c, wm.init_params(c, jax.random.key(0))


@pytest.fixture(scope="module")
def llama():
    c = tiny_config("llama")  # vocab 101, max_seq_len 64
    return c, wm.init_params(c, jax.random.key(1))


def _ids(*rows):
    return jnp.asarray(rows, jnp.int32)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (_ids([1, 2, 3, 97]), "token id 97 is outside the vocabulary 0..96"),
        (_ids([1, -1]), "token id -1 is outside the vocabulary 0..96"),
        (np.asarray([[5, 10**6]]), "token id 1000000 is outside the vocabulary 0..96"),
        ([[1, 2]], "tokens must be a 2-D integer array [batch, seq], got list"),
    ],
)
def test_forward_refuses_ids_outside_the_vocabulary(gpt2, tokens, message):
    c, p = gpt2
    with pytest.raises(wm.ModelError) as err:
        wm.forward(c, p, tokens)
    assert str(err.value) == message


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_forward_refuses_positions_past_the_table_or_the_cache(gpt2, llama, arch):
    c, p = gpt2 if arch == "gpt2" else llama
    if arch == "gpt2":  # 65 tokens at 0..64: position 64 has no row in the table (was NaN)
        with pytest.raises(wm.ModelError, match="position 64 is past the gpt2 position table"):
            wm.forward(c, p, jnp.ones((1, 65), jnp.int32))
        with pytest.raises(wm.ModelError, match="position 64 is past the gpt2 position table"):
            wm.forward(c, p, _ids([1, 2]), _ids([0, 64]))
    cache = wm.init_cache(c, 1, 8)
    with pytest.raises(wm.ModelError, match="position 8 is past the cache max_len of 8"):
        wm.forward(c, p, _ids([1, 2]), _ids([7, 8]), cache)  # slot 8: silently not written
    with pytest.raises(wm.ModelError, match="position 8 is past the cache max_len of 8"):
        wm.forward(c, p, jnp.ones((1, 9), jnp.int32), None, cache)
    with pytest.raises(wm.ModelError, match="positions must be integers, got dtype float32"):
        wm.forward(c, p, _ids([1, 2]), jnp.asarray([[0.0, 1.0]]))


def test_valid_inputs_give_the_same_logits_eager_and_under_jit(gpt2):
    """The oracle: a padding position (-1) and the last table row still run, and the eager
    (checked) forward equals the jitted one, whose values are never read on the host."""
    c, p = gpt2
    toks, pos = _ids([5, 96, 0]), _ids([63, -1, 0])
    eager = np.asarray(wm.forward(c, p, toks, pos)[0])
    jitted = np.asarray(jax.jit(lambda t, q: wm.forward(c, p, t, q)[0])(toks, pos))
    assert np.isfinite(eager).all()
    np.testing.assert_array_equal(eager, jitted)
    model = wm.Transformer(c, params=p)
    with pytest.raises(wm.ModelError, match="token id 97 is outside the vocabulary"):
        model(_ids([97]))  # the module checks on the host before its jitted forward


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (0, "key must be one jax.random.key(seed), got int 0"),
        (np.zeros(2, np.float32), "got float32 array of shape (2,)"),
        (jax.random.split(jax.random.key(0)), "got key<fry> array of shape (2,)"),
    ],
)
def test_init_params_refuses_what_is_not_one_key(key, message):
    with pytest.raises(wm.ModelError) as err:
        wm.init_params(tiny_config("gpt2"), key)
    assert message in str(err.value)


def test_init_params_takes_a_typed_or_raw_key_alike():
    c = tiny_config("gpt2")
    typed = wm.init_params(c, jax.random.key(3))
    raw = wm.init_params(c, jax.random.PRNGKey(3))  # the same threefry bits
    for a, b in zip(jax.tree.leaves(typed), jax.tree.leaves(raw), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    shapes = jax.eval_shape(lambda: wm.init_params(c, jax.random.key(0)))  # traced key: fine
    assert shapes["embed"]["tok"].shape == (97, 32)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1.5, 8), "cache batch must be a whole number, got float 1.5"),
        ((1, True), "cache max_len must be a whole number, got bool True"),
        (
            (1, 8, "int8"),
            "init_cache needs a floating dtype (float32, bfloat16, float16), got 'int8'",
        ),
    ],
)
def test_init_cache_refuses_fractional_sizes_and_integer_dtypes(args, message):
    with pytest.raises(wm.ModelError) as err:
        wm.init_cache(tiny_config("gpt2"), *args)
    assert str(err.value) == message
    assert wm.init_cache(tiny_config("gpt2"), np.int64(1), 8, "bfloat16").k.dtype == jnp.bfloat16


@pytest.mark.parametrize("dtype", ["int8", "int32", "bool", "bf16", None])
def test_cast_params_refuses_a_dtype_that_is_not_floating(gpt2, dtype):
    with pytest.raises(wm.ModelError, match="cast_params needs a floating dtype"):
        wm.cast_params(gpt2[1], dtype)


def test_cast_params_to_bfloat16_equals_numpys_cast(gpt2):
    c, p = gpt2
    got = wm.cast_params(p, "bfloat16")
    for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(got), strict=True):
        assert b.dtype == jnp.bfloat16
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a).astype(jnp.bfloat16))
