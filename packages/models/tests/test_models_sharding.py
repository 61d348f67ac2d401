"""The decoder on 8-device meshes (Explicit axes, jax.make_mesh's default): batch over "data".

Oracle: the same forward on unsharded arrays. Covers the full forward on (2, 4) and (4, 2)
meshes, a KV-cached step and a gradient (what the data-parallel trainer takes).
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import wse_models as wm
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from wse_models.testing import random_tokens, tiny_config

pytestmark = pytest.mark.cpu_devices  # 8-device meshes

TOL = 2e-5  # fp32; only the reduction order differs between sharded and unsharded runs


def _place(mesh, params, toks):
    ps = jax.device_put(params, NamedSharding(mesh, P()))
    return ps, jax.device_put(toks, NamedSharding(mesh, P("data")))


@pytest.mark.parametrize("mesh_shape", [(2, 4), (4, 2)])
def test_forward_data_sharded_equals_unsharded(mesh_shape):
    c = tiny_config("gpt2")
    p, toks = wm.init_params(c, jax.random.key(0)), random_tokens(c, 4, 8)
    fwd = jax.jit(partial(wm.forward, c))
    mesh = jax.make_mesh(mesh_shape, ("data", "model"))
    ps, ts = _place(mesh, p, toks)
    out = fwd(ps, ts)[0]
    assert out.sharding.spec[0] == "data"
    np.testing.assert_allclose(out, fwd(p, toks)[0], atol=TOL)


def test_cached_step_and_grad_on_mesh():
    c = tiny_config("llama")
    p, toks = wm.init_params(c, jax.random.key(0)), random_tokens(c, 4, 8)
    mesh = jax.make_mesh((4, 2), ("data", "model"))
    ps, ts = _place(mesh, p, toks)
    step = jax.jit(partial(wm.forward, c))
    ref = step(p, toks)[0]
    with jax.set_mesh(mesh):  # a replicated cache, then one with its rows over "data"
        cache = wm.init_cache(c, 4, 8)
        logits, _ = step(ps, ts, wm.default_positions(ts), cache)
        np.testing.assert_allclose(logits, ref, atol=TOL)
        cache = jax.device_put(cache, NamedSharding(mesh, P(None, "data")))
        logits, cache = step(ps, ts, wm.default_positions(ts), cache)
        np.testing.assert_allclose(logits, ref, atol=TOL)
        assert cache.k.sharding.spec[1] == "data"

    def loss(params, t):
        return jnp.mean(wm.forward(c, params, t)[0] ** 2)

    grad = jax.jit(jax.grad(loss))
    for a, b in zip(jax.tree.leaves(grad(ps, ts)), jax.tree.leaves(grad(p, toks)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)
