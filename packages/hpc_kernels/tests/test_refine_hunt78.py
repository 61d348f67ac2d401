"""refine's sigma is a power of two (its rescale sigma' / sigma is exact, as its docstring
says): jitted `jnp.exp2(13.)` on a CPU is 8192.0039 (hunt libapi78's fixer)."""

from __future__ import annotations

import importlib
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

refine = importlib.import_module("wse_hpc.stencil.refine")  # the module, not the function


@pytest.mark.parametrize("bound", [1.0, 3.7, 1e-3])
def test_sigma_is_an_exact_power_of_two(bound):
    rf = types.SimpleNamespace(bound_per_r=bound)
    rnorms = jnp.asarray(np.logspace(-30, 30, 241), jnp.float32)
    sigma = np.asarray(jax.jit(jax.vmap(lambda r: refine._sigma(rf, r)))(rnorms))
    mantissa, _ = np.frexp(sigma)
    assert np.all(mantissa == 0.5), sigma[mantissa != 0.5][:5]  # the oracle: NumPy's frexp
    # and the power the docstring names: the nearest to TARGET_MAGNITUDE / (||r|| bound)
    want = np.log2(refine.TARGET_MAGNITUDE / (np.float64(rnorms) * bound))
    inside = (want > -126) & (want < 127)
    assert np.all(np.abs(np.log2(sigma[inside]) - want[inside]) <= 0.5 + 1e-6)
