"""Hunt 78's review of `stencil.bicgstab`'s default sigma (mixed precision, warm starts).

1. sigma came from max|b| even with an x0: a warm start's r_0 = b - A x0 (~1e-3 b) fell
   through fp16's underflow as it converged, x all NaN, residual NaN (b ~ 1, 1e-7, 1e-3,
   1e3); from x0 = the exact solution, 5-8 iterations then NaN. With an x0 the solve now
   iterates on the correction from 0 with sigma from max|r_0| (as `refine._sigma` from
   ||r||). Oracles: SciPy's sparse solve, SciPy's bicgstab from the same x0.
2. A breakdown returned NaN x where finite iterates had existed (sigma = 1 on b ~ 1: all
   NaN); now the iterate kept at the last chunk start (every `replace_every` iterations),
   with its true residual, and (hunt 79) a next pass from it. Oracle: the true residual
   of the returned x in fp64.
3. An r_0 partly flushed to zero in fp16 is a `sigma_fault` when the flushed entries held
   more than FLUSH_SHARE (fp16's eps) of ||r_0||. Oracle: the fp32 norm of the entries
   NumPy's float16 turns to zero.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import scipy.sparse.linalg as spla
from wse_hpc.stencil import bicgstab, reference, scale_for
from wse_hpc.stencil.kernels import diagonal
from wse_hpc.stencil.testing import small_grid

SHAPE = (9, 11, 13)  # the review's grid


def _problem(scale: float, seed: int = 0):
    g = small_grid(SHAPE, {"b": "fp32"})
    a = reference.poisson_matrix(g.shape, g.spacing).tocsc()
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(SHAPE) * scale
    exact = spla.spsolve(a, b.ravel()).reshape(SHAPE)
    near = (exact * (1 + 1e-3 * rng.standard_normal(SHAPE))).astype(np.float32)
    return g, a, b, exact, near


def _true_residual(a, b: np.ndarray, x: np.ndarray) -> float:
    return float(np.linalg.norm(b.ravel() - a @ x.ravel().astype(np.float64)) / np.linalg.norm(b))


def _scipy_count(a, b: np.ndarray, x0: np.ndarray, rtol: float) -> int:
    """SciPy's fp64 BiCGSTAB iterations from x0 by its own rule, ||r|| <= rtol ||b|| (hunt
    79: this stack's rule too; before, the solver stopped at rtol ||r_0|| and this count
    shifted SciPy's rtol to match)."""
    x0 = x0.ravel().astype(np.float64)
    count = [0]
    tick = lambda xk: count.__setitem__(0, count[0] + 1)
    spla.bicgstab(a, b.ravel(), x0=x0, rtol=rtol, atol=0.0, maxiter=1000, callback=tick)
    return count[0]


# -- hole 1: a warm start's sigma comes from r_0 ---------------------------------------------
@pytest.mark.parametrize("scale", [1.0, 1e-7, 1e-3, 1e3])
def test_a_warm_start_converges_as_scipy_from_the_same_x0(scale):
    g, a, b, exact, near = _problem(scale)
    res = jax.jit(bicgstab(g))(g.place(b, "b"), g.place(near, "b"))  # mixed, tol 1e-6
    x = g.gather(res.x)
    assert np.isfinite(x).all() and not bool(res.sigma_fault)  # HEAD: all NaN
    assert bool(res.converged) != bool(res.breakdown)
    # measured 4-6e-7 converged, at most 2.1e-6 over 32 draws (8 seeds x 4 scales, 2 x 4
    # mesh) with the 2 that met an fp16 near-breakdown (alpha ~ 1e3, then NaN) and returned
    # their kept iterate; from x = 0 the same solve's floor is 2e-4 (fp16's rounding of b)
    assert _true_residual(a, b, x) < 1e-5
    if bool(res.converged):  # 1 x 1 mesh: all 4; 2 x 4: 1e3 breaks down at iteration 19
        # true residual <= 1e-6 ||b||: the error within cond(A) ~ 60 x that (x0 was 1e-3 off)
        assert np.linalg.norm(x - exact) / np.linalg.norm(exact) < 6e-5
        # fp16 rounding moves mixed counts (test_stencil_solvers: up to 1.375x SciPy's fp64)
        assert int(res.iterations) <= 1.5 * _scipy_count(a, b, near, 1e-6)


def test_a_warm_start_from_the_exact_solution_stays_there():
    g, a, b, exact, _ = _problem(1.0)
    x0 = exact.astype(np.float32)
    res = jax.jit(bicgstab(g))(g.place(b, "b"), g.place(x0, "b"))
    x = g.gather(res.x)
    assert bool(res.converged) and np.isfinite(x).all()
    # x0's own truth is 6.6e-8 (fp32 rounding); measured 8.0e-8 after (was all NaN)
    assert _true_residual(a, b, x) < 1e-6


def test_the_default_sigma_with_x0_is_scale_for_of_max_r0():
    g, a, b, _, near = _problem(3e-5, seed=1)
    r0 = b.ravel() - a @ near.ravel().astype(np.float64)
    solve = jax.jit(bicgstab(g))
    picked = solve(g.place(b, "b"), g.place(near, "b"))
    given = solve(g.place(b, "b"), g.place(near, "b"), scale_for(g, float(np.abs(r0).max())))
    assert int(picked.iterations) == int(given.iterations)
    np.testing.assert_array_equal(g.gather(picked.x), g.gather(given.x))


def test_an_fp32_warm_start_meets_spsolve():
    g, a, b, exact, near = _problem(1.0)
    res = jax.jit(bicgstab(g, precision="fp32"))(g.place(b, "b"), g.place(near, "b"))
    x = g.gather(res.x)
    assert bool(res.converged)
    # ||r|| <= 1e-6 ||b|| (SciPy's rule; ||r_0|| ~ 1e-3 ||b||)
    assert _true_residual(a, b, x) < 1e-6
    assert int(res.iterations) <= 1.1 * _scipy_count(a, b, near, 1e-6) + 1


# -- hole 2: a breakdown keeps a finite iterate ----------------------------------------------
@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0, 8.0, 32.0])  # HEAD: all-NaN x at each
def test_a_breakdown_returns_the_kept_iterate_never_nan(sigma):
    g, a, b, _, _ = _problem(1.0)
    res = jax.jit(bicgstab(g))(g.place(b, "b"), None, sigma)
    x = g.gather(res.x)
    assert bool(res.breakdown) and not bool(res.sigma_fault) and np.isfinite(x).all()
    # the residual is the returned x's true one (hunt 79: not the recurrence's), and
    # converged says it met tol: the kept iterate's true residual (2.1e-4 .. 1.0e-3, fp16's
    # rounding of b) starts a second pass with its own sigma, which meets 1e-6
    truth = _true_residual(a, b, x)
    assert float(res.residual) == pytest.approx(truth, rel=1e-2, abs=1e-7)
    assert bool(res.converged) == (truth <= 1e-6 * (1 + 1e-2))
    assert truth < 1e-2  # far better than x = 0 (1.0)


# -- hole 3: an r_0 partly flushed to zero in fp16 -------------------------------------------
@pytest.mark.parametrize("peak", [1e-4, 1e-2])
def test_a_partly_flushed_start_is_a_fault_past_fp16s_eps(peak):
    g = small_grid(SHAPE, {"b": "fp32"})
    inv_d = 1.0 / float(diagonal(g))
    want = np.full(SHAPE, 2e-8)  # below 2^-25: fp16 rounds it to 0
    want[4, 5, 6] = peak
    b = (want / inv_d).astype(np.float32)
    # the oracle: sigma = 1 D^-1 b in fp32, the entries float16 turns to 0, their fp32 norm
    r32 = b * np.float32(inv_d)
    lost = r32[(r32.astype(np.float16) == 0) & (r32 != 0)]
    share = np.linalg.norm(lost) / np.linalg.norm(r32)
    expect = bool(share > np.finfo(np.float16).eps)  # 1e-4: share 7e-3; 1e-2: 7e-5
    res = jax.jit(bicgstab(g))(g.place(b, "b"), None, 1.0)
    assert bool(res.sigma_fault) == expect == (peak < 1e-3)
    if expect:  # no iteration ran: x = 0, residual 1, as the truth says
        assert int(res.iterations) == 0 and not g.gather(res.x).any()
        assert float(res.residual) == 1.0
    else:
        assert int(res.iterations) > 0
