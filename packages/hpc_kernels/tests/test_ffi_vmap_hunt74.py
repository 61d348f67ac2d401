"""Hunt 74: `jax.vmap` over a program that calls the PEs' numba kernels through XLA's FFI
raised NotImplementedError (an `ffi_call` without `vmap_method`). Each kernel is per example,
so it is vmapped as a loop (`vmap_method="sequential"`, as `wse_models.sdpa_cpu`).

The oracles: SciPy's direct solve of the 7-point system for each right-hand side, each
single (unbatched) solve, and NumPy's `take` for the TLR kernel's row gather."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse.linalg as spla
from wse_hpc.stencil import pe_dots
from wse_hpc.stencil import reference as ref
from wse_hpc.stencil.bicgstab import bicgstab, scale_for
from wse_hpc.stencil.testing import random_field, small_grid
from wse_hpc.tlrmvm import pe_kernels

SHAPE = (8, 6, 10)
# fp32 BiCGSTAB to tol 1e-6 on a well-conditioned 480-unknown Poisson system: the final
# relative error against the fp64 direct solve stays within a few times the tolerance
SOLVE_RTOL = 2e-5


def _grid():
    g = small_grid(SHAPE, {"x": "fp32", "b": "fp32"})
    probe = g.place(np.zeros(SHAPE, np.float32), "b")
    if not pe_dots.available(g.wafer, [(probe, probe)]):
        pytest.skip("pe_dots needs numba and a CPU mesh")
    return g


@pytest.mark.cpu_devices
def test_vmapped_bicgstab_equals_single_solves_and_scipy():
    g = _grid()
    rhs = [random_field(SHAPE, seed).astype(np.float32) for seed in (0, 1)]
    solve = bicgstab(g, precision="fp32", tol=1e-6, maxiter=300)
    sigma = scale_for(g, max(float(np.abs(b).max()) for b in rhs))
    singles = [jax.jit(solve)(g.place(b, "b"), None, sigma) for b in rhs]
    batch = jnp.stack([g.place(b, "b") for b in rhs])
    both = jax.jit(jax.vmap(lambda b: solve(b, None, sigma)))(batch)
    a = ref.poisson_matrix(g.shape, g.spacing).tocsc()
    for i, b in enumerate(rhs):
        want = spla.spsolve(a, b.ravel().astype(np.float64)).reshape(SHAPE)
        got = g.gather(both.x[i])
        assert int(both.iterations[i]) == int(singles[i].iterations)
        np.testing.assert_allclose(got, g.gather(singles[i].x), rtol=1e-6, atol=1e-7)
        assert np.abs(got - want).max() / np.abs(want).max() < SOLVE_RTOL


@pytest.mark.cpu_devices
@pytest.mark.skipif(not pe_kernels.available(), reason="numba is not installed")
def test_vmapped_tlr_gather_rows_is_numpy_take():
    rng = np.random.default_rng(3)
    src = rng.standard_normal((3, 11, 6)).astype(np.float32)
    at = rng.integers(0, 11, (3, 17)).astype(np.int32)
    got = np.asarray(jax.jit(jax.vmap(pe_kernels.gather_rows))(src, at))
    np.testing.assert_array_equal(got, np.take_along_axis(src, at[..., None], axis=1))
