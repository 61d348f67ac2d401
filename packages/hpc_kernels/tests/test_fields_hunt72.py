"""Hunt 72's field-equation holes, each against an independent oracle.

1. `wse hpc swe`'s energy drift was fp32 cancellation: the total energy less the rest energy
   g M^2 / 2, the wave ~2.7e-4 of the total, printed unsigned (n 64, 200 steps: 7.8e-3 where
   float64 of the same fields gives -7.9e-4). Oracle: the wave energy of the gathered fields
   in float64 NumPy.
2. The Rayleigh-Benard default step left out forward Euler's central-flux bound
   dt <= 2 min(nu, kappa) / U^2 and blew up at Ra 1e7 and 1e8 on 64 x 32. Oracle: the von
   Neumann amplification factor of the linearised step, computed over the grid's
   wavenumbers and every flow direction at |U| = 1.
3. The pressure solve stopped at a fixed 500 iterations, unsaid. Oracle for the new cap:
   SciPy's Jacobi-preconditioned CG on the same Neumann Poisson matrix in float64.
4. A Rayleigh-Benard restart differed from the uninterrupted run by an fp32 ulp of T.
   Oracle: the uninterrupted run, bit for bit.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
import scipy.sparse as sp
from jax import lax
from scipy.sparse.linalg import cg as scipy_cg
from wse_core import PRESETS
from wse_hpc.fields import FieldError, field_grid
from wse_hpc.fields.grid import Bc, Field
from wse_hpc.fields.runs import CfdConfig, run_cfd
from wse_hpc.fields.swe import SweConfig, run_swe, shallow_water, swe_state

# -- 1. shallow water's wave energy ---------------------------------------------------------


def _hump_run(n: int, steps: int, g: float, cfl: float = 0.4, amplitude: float = 0.1):
    """The fields of `run_swe`'s case, built here from its definition (a Gaussian hump of
    `amplitude` on depth 1, CFL over sqrt(g (1 + amplitude)))."""
    grid = field_grid(PRESETS["small"], (n, n, 1), periodic=(True, True, True))
    x = (np.arange(n) + 0.5) / n
    X, Y = np.meshgrid(x, x, indexing="ij")
    h0 = 1.0 + amplitude * np.exp(-((X - 0.5) ** 2 + (Y - 0.5) ** 2) / 0.02)
    zero = np.zeros((n, n, 1))
    s0 = swe_state(grid, h0[..., None], zero, zero)
    step = shallow_water(grid, g=g, dt=float(cfl / n / np.sqrt(g * (1 + amplitude))))
    s1 = jax.jit(lambda s: lax.fori_loop(0, steps, lambda i, x: step(x), s))(s0)
    return [{k: grid.gather(getattr(s, k))[..., 0].astype(np.float64) for k in "huv"}
            for s in (s0, s1)]  # fmt: skip


def _wave_energy_np(f: dict, g: float, depth: float) -> float:
    """sum(h (u^2 + v^2) / 2 + g (h - H)^2 / 2) / n^2 in float64, each velocity's square
    averaged from the two faces of a centre (u on + x faces: u[i] and u[i - 1])."""
    h, u, v = f["h"], f["u"], f["v"]
    ke = 0.5 * (u**2 + np.roll(u**2, 1, 0)) + 0.5 * (v**2 + np.roll(v**2, 1, 1))
    return float((0.5 * h * ke + 0.5 * g * (h - depth) ** 2).sum() / h.size)


def test_swe_energy_drift_is_the_float64_change_of_the_wave_energy():
    """Before: 8.9e-3 unsigned (fp32 noise of the total); float64 says -8.62e-3 here."""
    n, steps, g = 32, 200, 9.81
    run = run_swe(PRESETS["small"], SweConfig(n=n, steps=steps, g=g))
    f0, f1 = _hump_run(n, steps, g)
    np.testing.assert_allclose(run.h, f1["h"], rtol=0, atol=1e-6)  # the same run
    depth = f0["h"].mean()
    e0, e1 = _wave_energy_np(f0, g, depth), _wave_energy_np(f1, g, depth)
    want = (e1 - e0) / e0
    assert want < 0  # the scheme damps this wave (the signed figure says so)
    assert abs(run.energy_drift - want) < 1e-3 * abs(want), (run.energy_drift, want)


# -- 2. the Rayleigh-Benard default step ----------------------------------------------------


def _amplification(dt: float, diffusivity: float, spacing, speed: float = 1.0) -> float:
    """max |G| of forward Euler on q_t + U . grad q = D lap q with centred differences, over
    the wavenumbers a grid of 64 cells a side resolves (32 in 3D) and U of `speed` in 72
    directions (x 8 elevations in 3D):
    G = 1 - dt D sum_a (4 / h_a^2) sin^2(t_a / 2) - i dt sum_a U_a sin(t_a) / h_a."""
    m = 64 if len(spacing) == 2 else 32
    t = 2 * np.pi * np.arange(-m // 2, m // 2 + 1) / m
    grids = np.meshgrid(*([t] * len(spacing)), indexing="ij")
    worst = 0.0
    for phi in np.linspace(0, np.pi, 72, endpoint=False):
        for psi in np.linspace(0, np.pi, 8, endpoint=False) if len(spacing) == 3 else [None]:
            if psi is None:
                vel = (speed * np.cos(phi), speed * np.sin(phi))
            else:
                c = np.cos(psi)
                vel = (speed * c * np.cos(phi), speed * c * np.sin(phi), speed * np.sin(psi))
            real = 1 - dt * diffusivity * sum(
                4 / h**2 * np.sin(th / 2) ** 2 for th, h in zip(grids, spacing, strict=True)
            )
            imag = dt * sum(
                u * np.sin(th) / h for u, th, h in zip(vel, grids, spacing, strict=True)
            )
            worst = max(worst, float(np.abs(real + 1j * imag).max()))
    return worst


@pytest.mark.parametrize(
    ("ra", "pr", "shape"),
    [(1e4, 1.0, (64, 32, 1)), (1e4, 0.71, (64, 32, 1)), (1e5, 0.71, (64, 32, 1)),
     (1e7, 1.0, (64, 32, 1)), (1e8, 1.0, (64, 32, 1)), (1e6, 7.0, (16, 16, 8))],
)  # fmt: skip
def test_the_rayleigh_benard_default_step_is_von_neumann_stable(ra, pr, shape):
    """Before: the default 0.0156 at Ra 1e7 and 1e8 had |G| up to 1.21 and 1.22 at |U| = 1
    (the runs blew up at steps 1,100 and 800); at Ra 1e5 (Pr 1) 1.09."""
    from wse_hpc.fields.convection import stable_dt

    aspect = 2.0
    d3 = shape[2] > 1
    lengths = (aspect, aspect, 1.0) if d3 else (aspect, 1.0)
    spacing = tuple(L / n for L, n in zip(lengths, shape, strict=False))
    dt = stable_dt(shape, aspect, ra, pr)
    nu, kappa = (ra / pr) ** -0.5, (ra * pr) ** -0.5
    for diffusivity in (nu, kappa):  # u and theta, both advected centrally
        assert _amplification(dt, diffusivity, spacing) <= 1 + 1e-12, diffusivity


def test_the_default_step_at_ra_1e4_is_half_the_central_flux_bound():
    """nu = kappa = 0.01 at Ra 1e4, Pr 1: 2 nu / U^2 = 0.02 binds (diffusion allows 0.0244)."""
    from wse_hpc.fields.convection import stable_dt

    assert stable_dt((64, 32, 1), 2.0, 1e4, 1.0) == pytest.approx(0.5 * 2 * 0.01, rel=1e-12)


def test_a_step_beyond_the_central_flux_bound_is_refused():
    """--dt 0.01 at Ra 1e7 passed the diffusion and CFL limits (0.0625) and blew up."""
    cfg = CfdConfig(case="rayleigh-benard", grid=(16, 8, 1), spec=PRESETS["small"], steps=1,
                    ra=1e7, dt=0.01)  # fmt: skip
    limit = 2 * (1e7) ** -0.5
    with pytest.raises(FieldError, match=r"central advection 2 min\(nu, kappa\) / U\^2") as e:
        run_cfd(cfg)
    assert f"limit {limit:.4g}" in str(e.value)


# -- 3. the pressure solve's iteration cap --------------------------------------------------


def _neumann_poisson(n: int) -> sp.csr_matrix:
    """-lap on n x n cell centres of the unit square, zero normal gradient on every wall."""
    t = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tolil()
    t[0, 0] = t[n - 1, n - 1] = 1
    t = t.tocsr() * n * n
    eye = sp.identity(n, format="csr")
    return (sp.kron(t, eye) + sp.kron(eye, t)).tocsr()


def _template(n: int) -> Field:
    grid = field_grid(PRESETS["wse2"], (n, n, 1))
    bc = (Bc("neumann"), Bc("neumann"), Bc("neumann"))
    return Field(grid.wafer.zeros((1,)), grid, "c", bc)


@pytest.mark.parametrize("n", [32, 64])
def test_the_cg_cap_covers_what_scipy_cg_needs(n):
    """The rule (no floor) is at least the iterations SciPy's Jacobi-PCG takes on the same
    matrix in float64 from random zero-mean right-hand sides, and grows as n."""
    from wse_hpc.fields.solvers import cg_iteration_cap

    a = _neumann_poisson(n)
    m = sp.diags(1 / a.diagonal())
    rng = np.random.default_rng(0)
    counts: list[int] = []

    def count(x) -> None:
        counts[-1] += 1

    for _ in range(3):
        b = rng.standard_normal(n * n)
        b -= b.mean()
        counts.append(0)
        _, info = scipy_cg(a, b, rtol=1e-6, maxiter=100_000, M=m, callback=count)
        assert info == 0
    worst = max(counts)
    cap = cg_iteration_cap(_template(n), 1e-6, floor=1)
    assert worst <= cap, (worst, cap)
    assert cap < 20 * worst  # a bound, not a wild one
    assert cg_iteration_cap(_template(4 * n), 1e-6, floor=1) / cap > 3.5  # O(n)


def test_solves_stopped_at_the_cap_are_counted_and_said(monkeypatch):
    """With the cap forced to 5 (a cavity from rest needs ~50 on 16 x 16), every solve stops
    short: the report counts them, and the warning names the solver, cap and residual."""
    import wse_hpc.fields.flow as flow
    from wse_hpc.fields.runs import unconverged

    cfg = CfdConfig(case="cavity", grid=(16, 16, 1), spec=PRESETS["small"], steps=3)
    free = run_cfd(cfg).report.extra
    assert free["unconverged_solves"] == 0 and unconverged(free) is None
    assert free["cg_iterations_per_step"] > 5
    monkeypatch.setattr(flow, "cg_iteration_cap", lambda template, tol: 5)
    x = run_cfd(cfg).report.extra
    assert x["cg_max_iterations"] == 5 and x["cg_iterations_per_step"] == 5
    assert x["unconverged_solves"] == 3 and x["cg_worst_residual"] > x["cg_tolerance"]
    line = unconverged(x)
    assert line is not None
    assert "3 of 3 pressure solves (Jacobi-PCG)" in line and "5-iteration cap" in line
    assert f"{x['cg_worst_residual']:.3g}" in line


# -- 4. a Rayleigh-Benard restart -----------------------------------------------------------


def test_a_rayleigh_benard_restart_is_bitwise_the_uninterrupted_run(tmp_path):
    """20 + 20 steps equal 40 bit for bit (before: T off by 1.19e-7, an fp32 ulp of T)."""
    kw = dict(case="rayleigh-benard", grid=(16, 8, 1), spec=PRESETS["small"], output_every=20)
    straight = run_cfd(CfdConfig(steps=40, out_dir=tmp_path / "a", **kw))
    run_cfd(CfdConfig(steps=20, out_dir=tmp_path / "b", **kw))
    again = run_cfd(CfdConfig(steps=20, out_dir=tmp_path / "b", restart=True, **kw))
    assert again.report.extra["restarted_from_step"] == 20
    with (
        np.load(tmp_path / "a" / "step_0000040.npz") as a,
        np.load(tmp_path / "b" / "step_0000040.npz") as b,
    ):
        for name in "uvwpT":
            np.testing.assert_array_equal(b[name], a[name], err_msg=name)
    for name, want in straight.fields.items():
        np.testing.assert_array_equal(again.fields[name], want, err_msg=name)
    assert math.isclose(again.history[-1][2], straight.history[-1][2], rel_tol=0)
