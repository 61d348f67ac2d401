"""Hunt 67 (api2, holes 1 and 2): the Krylov solvers' stopping settings and their history.

Broken before:
- `wse_hpc.fields.cg` checked neither tol nor maxiter: tol NaN returned x = 0 after 0
  iterations, tol -0.5 ran as 0.5 (squared), tol 5 and maxiter 0 / -5 returned x = 0,
  maxiter 2.5 ran 3 iterations, maxiter 10**12 failed inside JAX (OverflowError);
  `fields.bicgstab` took tol 5 (x = 0) and failed inside JAX on maxiter 2.5, at the solve;
- the stencil's `bicgstab` / `refine` took tol 5 (stopped at x = 0) and maxiter 2.5;
- maxiter sized the residual histories up front: `fields.bicgstab(maxiter=10**8)` took 2.05
  GB of memory for a solve of 4 iterations, `run_stencil(kind="bicgstab", steps=10**8)`
  1.24 GB, and `StencilConfig` took steps up to 2**31 - 1 (~17 GB of history).
"""

from __future__ import annotations

import importlib

import jax
import numpy as np
import pytest
from wse_core import PRESETS
from wse_core.host.limits import LimitError
from wse_hpc.fields import bicgstab, cg, dirichlet, field_grid, poisson
from wse_hpc.fields.grid import FieldError
from wse_hpc.stencil import bicgstab as stencil_bicgstab
from wse_hpc.stencil import refine
from wse_hpc.stencil.config import StencilConfig, check_config
from wse_hpc.stencil.kernels import laplacian7
from wse_hpc.stencil.placement import StencilError
from wse_hpc.stencil.runs import exact_solution
from wse_hpc.stencil.testing import small_grid

# the module (`wse_hpc.stencil.bicgstab` as an attribute is its factory, re-exported)
bicgstab_module = importlib.import_module("wse_hpc.stencil.bicgstab")
SHAPE = (4, 4, 4)
TOL_LINE = "tol must be a number in (0, 1) (a relative residual target), got "
OVER = (
    "over the limit of 10,000,000 steps (time steps (or solver iterations) of one HPC run); "
    "set WSE_LIMIT_TIME_STEPS to lift it"
)


@pytest.fixture(scope="module")
def b():
    g = field_grid(PRESETS["small"], SHAPE, periodic=(False,) * 3)
    rhs = np.random.default_rng(0).uniform(-1, 1, SHAPE)
    return g.field("b", rhs, bc=(dirichlet(0.0, 0.0),) * 3)


@pytest.mark.parametrize("solver", [cg, bicgstab])
@pytest.mark.parametrize(
    ("settings", "line"),
    [
        ({"tol": float("nan")}, TOL_LINE + "nan"),
        ({"tol": -0.5}, TOL_LINE + "-0.5"),
        ({"tol": 5.0}, TOL_LINE + "5.0"),
        ({"tol": 1.0}, TOL_LINE + "1.0"),
        ({"tol": "1e-6"}, TOL_LINE + "'1e-6'"),
        ({"tol": True}, TOL_LINE + "True"),
        ({"maxiter": 0}, "maxiter must be an integer >= 1, got 0"),
        ({"maxiter": -5}, "maxiter must be an integer >= 1, got -5"),
        ({"maxiter": 2.5}, "maxiter must be an integer >= 1, got 2.5"),
        ({"maxiter": True}, "maxiter must be an integer >= 1, got True"),
    ],
)
def test_field_solvers_refuse_bad_stopping_settings_at_the_call(b, solver, settings, line):
    with pytest.raises(FieldError) as e:
        solver(poisson(b), **settings)
    assert str(e.value) == line


@pytest.mark.parametrize("solver", [cg, bicgstab])
def test_maxiter_past_the_iteration_limit_names_its_override(b, solver, monkeypatch):
    with pytest.raises(LimitError) as e:
        solver(poisson(b), maxiter=10**12)
    assert str(e.value) == f"maxiter is 1,000,000,000,000, {OVER}"
    monkeypatch.setenv("WSE_LIMIT_TIME_STEPS", str(10**8))
    solver(poisson(b), maxiter=10**8)  # lifted: taken (its history stays bounded, below)


def test_stencil_solvers_and_configs_share_the_rule():
    g = small_grid((4, 4, 4), {"x": "fp32", "b": "fp32"})
    for make in (stencil_bicgstab, refine):
        with pytest.raises(StencilError, match=r"^tol must be a number in \(0, 1\).*got 5$"):
            make(g, precision="fp32", tol=5)
        with pytest.raises(StencilError, match=r"^maxiter must be an integer >= 0, got 2\.5$"):
            make(g, precision="fp32", maxiter=2.5)
        make(g, precision="fp32", maxiter=0)  # a run of nothing, as `--steps 0`
    cfg = StencilConfig(kind="bicgstab", grid=(4, 4, 4), spec=PRESETS["tiny"], steps=10**8)
    with pytest.raises(LimitError) as e:
        check_config(cfg)
    assert str(e.value) == f"steps is 100,000,000, {OVER}"


def _poisson_rhs(g):
    return jax.jit(laplacian7(g))(g.place(exact_solution(g, "bicgstab"), "b"))


def test_the_residual_histories_are_bounded_whatever_the_cap(monkeypatch):
    """What the solves would allocate (traced, not run): 100,001 entries per history for a
    cap of 10**7 (40 MB each before) and, with the limit lifted, of 2**31 - 1 (8.6 GB)."""
    g = small_grid((4, 4, 4), {"x": "fp32", "b": "fp32"})
    rhs = _poisson_rhs(g)
    monkeypatch.setenv("WSE_LIMIT_TIME_STEPS", str(2**31 - 1))
    for cap in (10**7, 2**31 - 1):
        out = jax.eval_shape(refine(g, precision="fp32", maxiter=cap), rhs)
        assert out.history.shape == out.true_history.shape == (100_001,)
        out = jax.eval_shape(stencil_bicgstab(g, precision="fp32", maxiter=cap), rhs)
        assert out.history.shape == (100_001,)
    out = jax.eval_shape(refine(g, precision="fp32", maxiter=300), rhs)
    assert out.history.shape == (301,)  # a cap below the buffer: as before


def test_a_solve_past_the_history_buffer_changes_nothing_but_the_history(monkeypatch):
    """A buffer of 3 iterations against the full history of the same solve: the same x,
    iterations, checks and residuals bit for bit, and the first 4 entries of each history
    (iteration 0 and the first 3); `recurrence` is the last iteration's, not the buffer's.
    (The stencil's `bicgstab` writes its history the same way and reads nothing from it.)"""
    g = small_grid((6, 5, 6), {"x": "fp32", "b": "fp32"})
    rhs = _poisson_rhs(g)
    full = jax.jit(refine(g, precision="fp32", tol=1e-5, maxiter=200, pair=False))(rhs)
    monkeypatch.setattr(bicgstab_module, "HISTORY_ITERATIONS", 3)
    short = jax.jit(refine(g, precision="fp32", tol=1e-5, maxiter=200, pair=False))(rhs)
    n = int(full.iterations)
    assert n > 3 and bool(full.converged)
    for name in ("x", "iterations", "checks", "true_residual", "recurrence", "converged"):
        np.testing.assert_array_equal(getattr(short, name), getattr(full, name), err_msg=name)
    hist, thist = np.asarray(full.history), np.asarray(full.true_history)
    assert float(short.recurrence) == hist[n]
    np.testing.assert_array_equal(short.history, hist[:4])
    np.testing.assert_array_equal(short.true_history, thist[:4])
