"""`layer._sdpa` on the numba kernels (`sdpa_cpu`) against its XLA formula: the same value and
the same three gradients, float round-off apart, on random inputs and masks of every kind
the model builds (causal, packed segments, a cache longer than the queries, a row with no
kept key), GQA included; and the cases the kernels leave to XLA."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from wse_models import layer, sdpa_cpu

pytestmark = pytest.mark.skipif(
    jax.default_backend() != "cpu" or not sdpa_cpu._numba(), reason="CPU and numba only"
)


def _value_and_grads(q, k, v, mask, kernels: bool, monkeypatch):
    if not kernels:
        monkeypatch.setattr(sdpa_cpu, "usable", lambda *a: False)
    f = lambda a, b, c: layer._sdpa(a, b, c, mask, lax.Precision.HIGHEST, jnp.float32)  # noqa: E731
    out, vjp = jax.jit(lambda a, b, c: jax.vjp(f, a, b, c))(q, k, v)
    d_out = jax.random.normal(jax.random.key(7), out.shape, jnp.float32)
    result = (out, *vjp(d_out))
    monkeypatch.undo()
    return result


def _causal(b, t, s):
    """Query i at position s - t + i sees keys up to it (a cache of s - t before the block)."""
    kpos, qpos = np.arange(s), np.arange(s - t, s)
    return np.broadcast_to(kpos[None, :] <= qpos[:, None], (b, t, s))


def _segments(b, t):
    """Packed sequences: causal within each segment; the last rows padding (segment -1, no
    key kept at all: a uniform mix in the value, zero gradient)."""
    ids = np.zeros((b, t), np.int32)
    for i in range(b):
        cuts = np.sort(np.random.default_rng(i).choice(np.arange(1, t - 3), 2, replace=False))
        ids[i, cuts[0] :] = 1
        ids[i, cuts[1] :] = 2
        ids[i, -2:] = -1
    same = ids[:, :, None] == ids[:, None, :]
    mask = same & np.tril(np.ones((t, t), bool)) & (ids[:, :, None] >= 0)
    return mask


CASES = {  # name: (b, KV, G, t, s, hd, mask)
    "causal": (2, 4, 1, 48, 48, 32, lambda b, t, s: _causal(b, t, s)),
    "gqa": (2, 2, 3, 21, 21, 16, lambda b, t, s: _causal(b, t, s)),
    "segments": (3, 2, 2, 40, 40, 8, lambda b, t, s: _segments(b, t)),
    "batch1_cache": (1, 1, 4, 7, 37, 12, lambda b, t, s: _causal(b, t, s)),
    "full": (2, 1, 2, 9, 30, 4, lambda b, t, s: np.ones((b, t, s), bool)),
}


@pytest.mark.parametrize("case", CASES)
def test_kernels_equal_xla(case, monkeypatch):
    b, kv, g, t, s, hd, make_mask = CASES[case]
    keys = jax.random.split(jax.random.key(list(CASES).index(case)), 3)
    q = jax.random.normal(keys[0], (b, kv, g, t, hd), jnp.float32) * 2.0
    k = jax.random.normal(keys[1], (b, kv, s, hd), jnp.float32) * 2.0
    v = jax.random.normal(keys[2], (b, kv, s, hd), jnp.float32)
    mask = jnp.asarray(make_mask(b, t, s))
    assert sdpa_cpu.usable(q, k, v, jnp.float32)
    got = _value_and_grads(q, k, v, mask, True, monkeypatch)
    want = _value_and_grads(q, k, v, mask, False, monkeypatch)
    for name, x, y in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype, name
        scale = float(jnp.max(jnp.abs(y))) + 1e-6
        np.testing.assert_allclose(
            np.asarray(x), np.asarray(y), atol=2e-6 * scale, rtol=1e-4, err_msg=name
        )


def test_kernels_are_in_the_program():
    """The kernels are what the compiled step calls (not silently the XLA formula)."""
    q = jnp.ones((1, 1, 1, 8, 8), jnp.float32)
    kv = jnp.ones((1, 1, 8, 8), jnp.float32)
    mask = jnp.asarray(_causal(1, 8, 8))
    f = lambda a: layer._sdpa(a, kv, kv, mask, lax.Precision.HIGHEST, jnp.float32).sum()  # noqa: E731
    text = jax.jit(jax.grad(f)).lower(q).as_text()
    assert "wse_models_sdpa_fwd" in text and "wse_models_sdpa_bwd" in text


@pytest.mark.parametrize(
    "dtype, hd", [(jnp.bfloat16, 8), (jnp.float32, 6)], ids=["bf16", "hd_not_multiple_of_4"]
)
def test_left_to_xla(dtype, hd):
    q = jnp.ones((1, 1, 1, 4, hd), dtype)
    kv = jnp.ones((1, 1, 4, hd), dtype)
    assert not sdpa_cpu.usable(q, kv, kv, dtype)
