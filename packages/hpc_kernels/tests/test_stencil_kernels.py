"""7-point kernels against NumPy references, the heat eigenmode's exact decay, defects."""

import jax
import numpy as np
import pytest
from wse_hpc.stencil import face_coefficients, heat, jacobi, laplacian7, max_stable_dt
from wse_hpc.stencil import reference as ref
from wse_hpc.stencil.kernels import iterate_padded, pad_z
from wse_hpc.stencil.runs import exact_solution
from wse_hpc.stencil.testing import random_field, small_grid

# fp32 kernels against fp64 NumPy: a few roundings of O(1/h^2) terms, relative to the max.
RTOL32 = 1e-6
SHAPE = (9, 11, 10)  # the 2 x 4 and 4 x 2 meshes divide neither 9 nor 11


def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize("mesh", [(2, 4), (4, 2)])
@pytest.mark.parametrize("boundary", ["dirichlet", "periodic"])
def test_laplacian7_matches_numpy(mesh, boundary):
    g = small_grid(SHAPE, boundary=boundary, mesh_shape=mesh)
    u0 = random_field(SHAPE)
    got = g.gather(jax.jit(laplacian7(g))(g.place(u0, "u")))
    want = ref.laplacian7_np(
        u0.astype(np.float32).astype(np.float64), g.spacing, boundary == "periodic"
    )
    assert _rel(got, want) < RTOL32


@pytest.mark.parametrize("boundary", ["dirichlet", "periodic"])
def test_variable_coefficient_laplacian_matches_numpy(boundary):
    g = small_grid(SHAPE, boundary=boundary)
    u0 = random_field(SHAPE, 1).astype(np.float32).astype(np.float64)
    kappa = (1.5 + random_field(SHAPE, 2)).astype(np.float32).astype(np.float64)
    apply = jax.jit(lambda u, k: laplacian7(g)(u, face_coefficients(g, k)))
    got = g.gather(apply(g.place(u0, "u"), g.place(kappa, "u")))
    want = ref.laplacian7_var_np(u0, kappa, g.spacing, boundary == "periodic")
    assert _rel(got, want) < 4 * RTOL32


def test_jacobi_sweep_matches_numpy():
    g = small_grid(SHAPE, {"u": "fp32", "f": "fp32"})
    u0, f0 = (random_field(SHAPE, s).astype(np.float32).astype(np.float64) for s in (3, 4))
    step = jax.jit(jacobi(g))
    got = g.gather(step(g.place(u0, "u"), g.place(f0, "f")))
    assert _rel(got, ref.jacobi_np(u0, f0, g.spacing)) < RTOL32


@pytest.mark.parametrize("boundary", ["dirichlet", "periodic"])
def test_heat_eigenmode_decays_exactly(boundary):
    g = small_grid((8, 10, 12), boundary=boundary)
    u0 = exact_solution(g, "heat")
    dt = 0.5 * max_stable_dt(g, 1.0)
    m = 2 if boundary == "periodic" else 1
    lam = sum(4 / h**2 * np.sin(m * np.pi * h / 2) ** 2 for h in g.spacing)
    steps = 30
    run = jax.jit(lambda u: jax.lax.fori_loop(0, steps, lambda i, a: heat(g, dt=dt)(a), u))
    got = g.gather(run(g.place(u0, "u")))
    want = (1 - dt * lam) ** steps * u0
    # 30 steps of fp32 rounding on O(1) values; the decay itself is ~0.7 of the start.
    assert np.abs(got - want).max() < 2e-6


def test_unstable_heat_step_is_refused():
    g = small_grid((8, 8, 8))
    with pytest.raises(ValueError, match="unstable"):
        heat(g, dt=2 * max_stable_dt(g, 1.0))


def test_results_do_not_depend_on_defects():
    u0 = random_field(SHAPE, 5)
    clean = small_grid(SHAPE)
    broken = small_grid(SHAPE, defect_seed=3)
    assert broken.wafer.defects is not None and broken.wafer.defects.num_dead > 0
    outs = [g.gather(jax.jit(laplacian7(g))(g.place(u0, "u"))) for g in (clean, broken)]
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("boundary", ["dirichlet", "periodic"])
def test_ping_pong_padded_sweeps_equal_plain_steps(boundary):
    g = small_grid(SHAPE, {"u": "fp32", "f": "fp32"}, boundary=boundary)
    u0, f0 = random_field(SHAPE, 11), random_field(SHAPE, 12)
    u, f = g.place(u0, "u"), g.place(f0, "f")
    steps = 5  # odd: the last sweep runs outside the pairs
    plain = jax.jit(lambda u, f: jax.lax.fori_loop(0, steps, lambda i, a: jacobi(g)(a, f), u))(u, f)
    padded_step = jacobi(g, padded=True)
    run = jax.jit(
        lambda u, f: iterate_padded(g, lambda a: padded_step(a, f), steps)((pad_z(g, u),) * 2)
    )
    got = g.gather(run(u, f)[0])
    np.testing.assert_allclose(got[:, :, 1:-1], g.gather(plain), rtol=0, atol=1e-6)
    if boundary == "dirichlet":
        assert not got[:, :, [0, -1]].any()  # zero ghosts stay zero
