"""Hunt 75: the stencil's recurrence BiCGSTAB (`wse_hpc.stencil.bicgstab`) on b = 0 said
residual NaN (0 / 0) and, given an x0, iterated it towards zero. SciPy's `bicgstab` returns
x = 0 for b = 0 whatever x0 (its norm is 0, info 0); so does this solver now, with residual 0
and `converged` set. `converged` is True for a solve that met tol and False at the cap, as
SciPy's info (0 / > 0) says for the same system (the oracle: SciPy on the 7-point matrix of
`wse_hpc.stencil.reference`, the NumPy scheme). `--dtype fp16` is refused for bicgstab (it
ran the mixed scheme under that label)."""

import jax
import numpy as np
import pytest
import scipy.sparse.linalg as spla
from wse_core import preset
from wse_hpc.stencil import reference as ref
from wse_hpc.stencil.bicgstab import bicgstab, scale_for
from wse_hpc.stencil.config import StencilConfig
from wse_hpc.stencil.placement import StencilError
from wse_hpc.stencil.runs import bicgstab_request
from wse_hpc.stencil.testing import random_field, small_grid

SHAPE = (8, 6, 10)


def _setup():
    g = small_grid(SHAPE, {"x": "fp32", "b": "fp32"})
    return g, ref.poisson_matrix(g.shape, g.spacing).tocsr()


def test_b_zero_returns_zero_with_residual_zero_as_scipy():
    g, a = _setup()
    x0 = random_field(SHAPE, 1).astype(np.float32)
    zero = np.zeros(SHAPE)
    want, info = spla.bicgstab(a, zero.ravel(), x0=x0.ravel().astype(np.float64), rtol=1e-6)
    assert info == 0 and not want.any()
    solve = jax.jit(bicgstab(g, precision="fp32", tol=1e-6, maxiter=50))
    placed = g.place(zero.astype(np.float32), "b")
    for start in (None, g.place(x0, "x")):
        res = solve(placed, start, 1.0)
        assert not np.asarray(g.gather(res.x)).any()
        assert float(res.residual) == 0.0 and int(res.iterations) == 0
        assert bool(res.converged) and not bool(res.breakdown)


def test_converged_says_what_scipy_info_says():
    g, a = _setup()
    b = random_field(SHAPE, 0).astype(np.float32)
    solve = lambda cap: jax.jit(bicgstab(g, precision="fp32", tol=1e-6, maxiter=cap))
    sigma = scale_for(g, float(np.abs(b).max()))
    for cap in (3, 300):
        _, info = spla.bicgstab(a, b.ravel().astype(np.float64), rtol=1e-6, maxiter=cap)
        res = solve(cap)(g.place(b, "b"), None, sigma)
        assert bool(res.converged) == (info == 0), (cap, info)
        assert bool(res.converged) == (float(res.residual) <= 1e-6)


def test_fp16_bicgstab_is_refused_not_run_as_mixed():
    """`--dtype fp16` ran the mixed scheme (fp16 vectors, fp32 dots and x) under an fp16
    label; refused as mixed for jacobi is, and mixed and fp32 still map to themselves."""
    cfg = lambda dtype: StencilConfig(kind="bicgstab", grid=(8, 8, 8), spec=preset("small"),
                                      dtype=dtype)  # fmt: skip
    message = "--dtype fp16 is for jacobi/heat; bicgstab takes fp32 or mixed"
    with pytest.raises(StencilError, match=f"^{message}$"):
        bicgstab_request(cfg("fp16"))
    assert [bicgstab_request(cfg(d))[0] for d in ("mixed", "fp32")] == ["mixed", "fp32"]
