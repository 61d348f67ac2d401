"""The PEs' column sums of BiCGSTAB's dot products as a CPU kernel (`stencil.pe_dots`),
against NumPy's fp64 sums of the same fp32 fields, and `fused_dot` through it against the
XLA reduction it replaces; the fabric records the same traffic either way."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import fabric
from wse_hpc.stencil import pe_dots
from wse_hpc.stencil.bicgstab import fused_dot
from wse_hpc.stencil.testing import random_field, small_grid

# fp32 sums of 12 products each (per PE), then of the PEs: a few ulps of the largest terms
FP32_SUM_RTOL = 1e-5


def _grid(shape):
    g = small_grid(shape, {"a": "fp32", "b": "fp32"})
    if not pe_dots.available(g.wafer, [_pair(g)]):
        pytest.skip("pe_dots needs numba and a CPU mesh")
    return g


def _pair(g, seed=0):
    a = g.place(random_field(g.shape, seed).astype(np.float32), "a")
    b = g.place(random_field(g.shape, seed + 1).astype(np.float32), "b")
    return a, b


@pytest.mark.parametrize("pairs", [1, 2])
def test_local_sums_match_numpy_per_pe(pairs):
    g = _grid((10, 6, 12))
    a, b = _pair(g)
    got = jax.jit(lambda a, b: pe_dots.local_dots(g.wafer, [(a, b), (b, b)][:pairs]))(a, b)
    ga, gb = (g.gather(f).astype(np.float64) for f in (a, b))
    want = [np.sum(ga * gb, axis=2), np.sum(gb * gb, axis=2)][:pairs]
    have = np.asarray(got)[: g.shape[0], : g.shape[1]]
    for k in range(pairs):
        np.testing.assert_allclose(have[..., k], want[k], rtol=FP32_SUM_RTOL, atol=1e-5)


def test_fused_dot_through_the_kernel_matches_xla_and_records_the_same(monkeypatch):
    g = _grid((10, 6, 12))
    a, b = _pair(g)
    pairs = lambda a, b: [(a, b), (a, a)]
    kernel = jax.jit(lambda a, b: fused_dot(g, pairs(a, b)))(a, b)
    sent = fabric.count(g.wafer, lambda a, b: fused_dot(g, pairs(a, b)), a, b)
    monkeypatch.setattr(pe_dots, "available", lambda *args: False)
    xla = jax.jit(lambda a, b: fused_dot(g, pairs(a, b)))(a, b)
    assert fabric.count(g.wafer, lambda a, b: fused_dot(g, pairs(a, b)), a, b) == sent
    ga, gb = (g.gather(f).astype(np.float64) for f in (a, b))
    want = [np.sum(ga * gb), np.sum(ga * ga)]
    np.testing.assert_allclose(np.asarray(kernel), want, rtol=FP32_SUM_RTOL)
    np.testing.assert_allclose(np.asarray(kernel), np.asarray(xla), rtol=FP32_SUM_RTOL)


def test_fp16_fields_are_widened_exactly():
    g = _grid((10, 6, 12))
    a, b = (f.astype(jnp.float16) for f in _pair(g))
    got = jax.jit(lambda a, b: pe_dots.local_dots(g.wafer, [(a, b)]))(a, b)
    ga, gb = (g.gather(f).astype(np.float64) for f in (a, b))
    have = np.asarray(got)[: g.shape[0], : g.shape[1], 0]
    np.testing.assert_allclose(have, np.sum(ga * gb, axis=2), rtol=FP32_SUM_RTOL, atol=1e-5)


def test_not_available_for_other_dtypes_or_three_pairs():
    g = small_grid((4, 4, 4), {"a": "fp32"}, mesh_shape=(1, 1))
    x = jnp.zeros((*g.wafer.padded_shape, 4), jnp.float32)
    assert not pe_dots.available(g.wafer, [(x.astype(jnp.bfloat16), x)])
    assert not pe_dots.available(g.wafer, [(x, x)] * 3)


@pytest.mark.parametrize("pairs", [1, 2])
def test_fp16_fields_read_by_the_kernel_equal_widening_first(pairs):
    """All-fp16 pairs are read as fp16 by the kernel (widened element by element); the sums
    are bit for bit those of the fp32 kernel on the fields widened by XLA first, subnormals
    included; a pair mixing fp16 and fp32 is widened by XLA."""
    g = _grid((10, 6, 12))
    a, b = (f.astype(jnp.float16) for f in _pair(g))
    a = a.at[0, 0, :3].set(jnp.float16(6e-8)).at[1, 0, :2].set(jnp.float16(-3e-6))
    f32 = lambda f: f.astype(jnp.float32)
    half = lambda a, b: [(a, b), (b, a)][:pairs]
    got = jax.jit(lambda a, b: pe_dots.local_dots(g.wafer, half(a, b)))(a, b)
    want = jax.jit(lambda a, b: pe_dots.local_dots(g.wafer, half(f32(a), f32(b))))(a, b)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    mixed = jax.jit(lambda a, b: pe_dots.local_dots(g.wafer, [(a, f32(b))]))(a, b)
    np.testing.assert_array_equal(np.asarray(mixed)[..., 0], np.asarray(want)[..., 0])
