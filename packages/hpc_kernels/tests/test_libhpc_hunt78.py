"""Hunt 78: `wse_hpc` used as a library by a JAX researcher.

1. `stencil.bicgstab` on its defaults (mixed, sigma=1.0) returned x = 0 as converged for
   b ~ 1e-7 (sigma D^-1 b flushed to zero in fp16, so r_0 = 0 met the stop test) and, for
   b ~ 1, x all NaN beside a finite residual. sigma now defaults to `scale_for`'s from max|b|
   (inside the solve), a start that under- or overflows the working precision is flagged
   (`sigma_fault`), never converged, and a non-finite x comes with a NaN residual.
   Oracle: SciPy's sparse solve of the same 7-point matrix; the true residual in fp64.
2. TLR-MVM refused bfloat16 (ml_dtypes' kind 'V'); oracle: the product in fp64 NumPy.
3. `StencilGrid.place` dropped a complex array's imaginary part (only NumPy's warning).
4. `md.maxwell_boltzmann` took NaN / inf temperatures and a mass of 0 (NaN velocities).
5. The SRAM refusal of the potential's tables named only the CLI's --potential-knots.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import scipy.sparse.linalg as spla
from wse_core import WseError, preset
from wse_core.hw.wafer import build_wafer
from wse_hpc.md import maxwell_boltzmann
from wse_hpc.md.eam import EamPlan, sram_plan
from wse_hpc.md.resample import resample
from wse_hpc.md.zhou04 import zhou04
from wse_hpc.stencil import bicgstab, reference, scale_for
from wse_hpc.stencil.placement import StencilError
from wse_hpc.stencil.testing import small_grid
from wse_hpc.tlrmvm.compress import compress
from wse_hpc.tlrmvm.engine import TlrEngine

SHAPE = (9, 11, 13)  # the hunt's grid


def _true_residual(a, b: np.ndarray, x: np.ndarray) -> float:
    """||b - A x|| / ||b|| in fp64 (A SciPy's 7-point matrix)."""
    return float(np.linalg.norm(b.ravel() - a @ x.ravel().astype(np.float64)) / np.linalg.norm(b))


# -- hole 1: bicgstab's default scaling and its fp16 start --------------------------------------
@pytest.mark.parametrize("scale", [1.0, 1e-7, 1e4])
def test_default_sigma_solves_any_scale_of_b(scale):
    g = small_grid(SHAPE, {"b": "fp32"})
    a = reference.poisson_matrix(g.shape, g.spacing).tocsc()
    b = np.random.default_rng(0).standard_normal(SHAPE) * scale
    res = jax.jit(bicgstab(g))(g.place(b, "b"))  # mixed, tol 1e-6, sigma picked from b
    x = g.gather(res.x)
    assert bool(res.converged) and not bool(res.sigma_fault) and int(res.iterations) > 0
    # fp16 vectors: the recurrence meets 1e-6, the truth sits near fp16's rounding (the
    # hunt measured 2e-4 with scale_for's sigma); x = 0 would give 1, NaN would give NaN
    assert _true_residual(a, b, x) < 1e-3
    exact = spla.spsolve(a, b.ravel()).reshape(SHAPE)
    assert np.linalg.norm(x - exact) / np.linalg.norm(exact) < 1e-2


def test_default_sigma_is_scale_for_of_max_b():
    g = small_grid(SHAPE, {"b": "fp32"})
    b = np.random.default_rng(1).standard_normal(SHAPE) * 3e-5
    solve = jax.jit(bicgstab(g))
    picked = solve(g.place(b, "b"))
    given = solve(g.place(b, "b"), None, scale_for(g, float(np.abs(b).max())))
    assert int(picked.iterations) == int(given.iterations)
    np.testing.assert_array_equal(g.gather(picked.x), g.gather(given.x))


def test_an_underflowed_start_is_flagged_never_converged():
    g = small_grid(SHAPE, {"b": "fp32"})
    b = np.random.default_rng(0).standard_normal(SHAPE) * 1e-7
    res = jax.jit(bicgstab(g))(g.place(b, "b"), None, 1.0)  # the old default: flushed to 0
    assert bool(res.sigma_fault) and bool(res.breakdown) and not bool(res.converged)
    assert int(res.iterations) == 0
    x = g.gather(res.x)
    # x = 0 and its residual, ||b - 0|| / ||b|| = 1, as the truth says
    a = reference.poisson_matrix(g.shape, g.spacing).tocsc()
    assert not x.any() and float(res.residual) == _true_residual(a, b, x) == 1.0


def test_an_overflowed_start_and_a_traced_zero_sigma_are_flagged():
    g = small_grid(SHAPE, {"b": "fp32"})
    b = g.place(np.random.default_rng(0).standard_normal(SHAPE), "b")
    solve = jax.jit(bicgstab(g))
    for sigma in (2.0**40, 0.0, float("nan")):  # 2^40 D^-1 b is past fp16's 6.5e4
        res = solve(b, None, jnp.float32(sigma))
        assert bool(res.sigma_fault) and not bool(res.converged), sigma
        assert np.isfinite(g.gather(res.x)).all()  # x = 0, never NaN


@pytest.mark.parametrize("sigma", [0, -1.0, float("inf"), "1"])
def test_a_sigma_number_that_cannot_scale_is_refused(sigma):
    g = small_grid(SHAPE, {"b": "fp32"})
    b = g.place(np.ones(SHAPE), "b")
    with pytest.raises(StencilError, match=r"^sigma must be a positive finite number") as e:
        bicgstab(g)(b, None, sigma)
    assert "\n" not in str(e.value)


def test_a_nan_x_never_comes_with_a_finite_residual():
    g = small_grid(SHAPE, {"b": "fp32"})
    b = np.random.default_rng(0).standard_normal(SHAPE)
    for sigma in (1.0, 2.0**-4, 2.0**4, 2.0**8):  # 1.0: the hunt's all-NaN x
        res = jax.jit(bicgstab(g))(g.place(b, "b"), None, sigma)
        x = g.gather(res.x)
        assert np.isfinite(x).all() == np.isfinite(float(res.residual)), sigma
        assert not (bool(res.converged) and not np.isfinite(x).all())


# -- hole 2: bfloat16 into TLR-MVM -------------------------------------------------------------
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_tlrmvm_takes_bfloat16_as_float16(dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 48)).astype(dtype)
    x = rng.standard_normal((48, 2)).astype(dtype)
    eng = TlrEngine.build(compress(a, nb=8, threshold=1e-5), preset("wse2"), batch=2)
    want = a.astype(np.float64) @ x.astype(np.float64)  # bfloat16 -> fp64 is exact
    got = eng.matvec(x)
    assert got.dtype == np.float32
    # compression within 1e-5 of ||A||_F plus fp32 rounding: 1e-4 of ||A x|| leaves 10x room
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-4
    got_jax = eng.matvec(jnp.asarray(x))  # a JAX array of the same dtype
    np.testing.assert_array_equal(got_jax, got)


def test_tlrmvm_still_refuses_records():
    from wse_hpc.tlrmvm.compress import TlrError

    with pytest.raises(TlrError, match="must hold real or complex numbers"):
        compress(np.zeros((8, 8), dtype=[("a", "f4")]), nb=4, threshold=1e-3)


# -- hole 3: a complex field ---------------------------------------------------------------------
@pytest.mark.parametrize("make", [np.ones, jnp.ones])
def test_place_refuses_a_complex_field(make):
    g = small_grid((3, 4, 5), {"b": "fp32"})
    with pytest.raises(StencilError, match=r"^field 'b' holds complex values") as e:
        g.place(make((3, 4, 5)) * (1 + 2j), "b")
    assert "\n" not in str(e.value)


# -- hole 4: maxwell_boltzmann's temperature and masses ------------------------------------------
@pytest.mark.parametrize(
    ("masses", "temperature", "match"),
    [
        ([63.5, 107.9], float("nan"), "temperature must be a finite number >= 0 K, got nan"),
        ([63.5, 107.9], float("inf"), "temperature must be a finite number >= 0 K, got inf"),
        ([63.5, 107.9], -1.0, "temperature must be a finite number >= 0 K"),
        ([63.5, 0.0], 300.0, "masses must be finite and > 0 amu, got 0"),
        ([63.5, float("nan")], 300.0, "masses must be finite and > 0 amu, got nan"),
    ],
)
def test_maxwell_boltzmann_refuses_what_has_no_velocities(masses, temperature, match):
    with pytest.raises(WseError, match=f"^{match}"):
        maxwell_boltzmann(np.array(masses), temperature, 0)


def test_maxwell_boltzmann_still_gives_the_temperature_asked():
    m = np.full(500, 63.546)
    v = maxwell_boltzmann(m, np.float64(300.0), 3)
    mvv2e, kb = 1.0364269e-4, 8.617343e-5  # LAMMPS metal units: amu A^2/ps^2 -> eV; eV/K
    t = (m[:, None] * v * v).sum() * mvv2e / ((3 * len(m) - 3) * kb)
    assert t == pytest.approx(300.0, rel=1e-6)


# -- hole 5: the library's route past the tables' SRAM refusal -----------------------------------
def test_the_tables_refusal_names_the_library_route_and_it_fits():
    pot = zhou04(["Cu"], knots=10_000)
    wafer = build_wafer(preset("small"), grid=(8, 8), devices=jax.devices("cpu")[:1])
    plan = EamPlan(k_rows=3, k_cols=3, box_A=(30.0, 30.0, 30.0), caps=(8, 8, 8, 40))
    with pytest.raises(Exception, match=r"wse_hpc\.md\.resample\.resample\(potential, (\d+)\)"):
        sram_plan(wafer, pot, plan)
    try:
        sram_plan(wafer, pot, plan)
    except Exception as e:  # noqa: BLE001 - the line is what is read
        line = str(e)
    assert "\n" not in line
    fit = int(line.rsplit("resample(potential, ", 1)[1].rstrip(")"))
    assert f"--potential-knots {fit} " in line  # the CLI's route, the same count
    sram_plan(wafer, resample(pot, fit), plan)  # the named call fits
