"""The MLP activations with a hand-written VJP (`layer.ACTIVATIONS`: GELU, SiLU keep only
their input) against autodiff of the plain jax.nn functions: values and gradients."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_models import layer

PLAIN = {"gelu": partial(jax.nn.gelu, approximate=True), "silu": jax.nn.silu}


@pytest.mark.parametrize("name", sorted(PLAIN))
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_activation_and_its_gradient_equal_autodiff(name, dtype):
    x = (4 * jax.random.normal(jax.random.key(0), (8, 64))).astype(dtype)
    g = jax.random.normal(jax.random.key(1), (8, 64)).astype(dtype)
    ours, plain = layer.ACTIVATIONS[name], PLAIN[name]

    def value_and_grad(f):  # both jitted: the same XLA fusions of the same operations
        return jax.jit(lambda a, ct: (f(a), jax.vjp(f, a)[1](ct)[0]))(x, g)

    for a, b in zip(value_and_grad(ours), value_and_grad(plain), strict=True):
        np.testing.assert_array_equal(np.float32(a), np.float32(b))
    _, vjp = jax.vjp(ours, x)
    # what the backward keeps: the input alone
    kept = [a for a in jax.tree.leaves(vjp) if hasattr(a, "shape") and a.shape == x.shape]
    assert len(kept) == 1
