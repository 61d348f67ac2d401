"""CG, Jacobi-PCG and BiCGSTAB on the fabric against dense NumPy solves of the same matrices.

The matrix of each operator is built column by column from the NumPy scheme
(`wse_hpc.fields.reference`), so the oracle shares no code with the fabric path.
"""

import jax
import numpy as np
import pytest
from wse_core import PRESETS
from wse_hpc.fields import (
    advect,
    bicgstab,
    cg,
    dirichlet,
    field_grid,
    jacobi_preconditioner,
    laplacian,
    neumann,
    periodic,
    poisson,
)
from wse_hpc.fields import reference as ref
from wse_hpc.fields.grid import Bc

SHAPE = (7, 9, 4)  # 2 x 4 and 4 x 2 divide neither 7 nor 9
SLOW = pytest.mark.slow  # each solver compiles for ~10 s here: one mesh in the default suite
TOL = 1e-6  # the solvers' recurrence tolerance; the error bound below follows from cond(A)


def _matrix(op, shape):
    n = int(np.prod(shape))
    cols = [op(np.eye(n)[:, j].reshape(shape)).ravel() for j in range(n)]
    return np.stack(cols, axis=1)


def _grid(bcs, mesh, defect_seed=None):
    per = tuple(b.kind == "periodic" for b in bcs)
    return field_grid(
        PRESETS["small"], SHAPE, periodic=per, mesh_shape=mesh, defect_seed=defect_seed
    )


def _rhs(seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, SHAPE).astype(np.float32).astype(np.float64)


@pytest.mark.parametrize(
    "mesh", [(2, 4), pytest.param((1, 1), marks=SLOW), pytest.param((4, 2), marks=SLOW)]
)
@pytest.mark.parametrize("kind", ["periodic", "neumann"])
@pytest.mark.parametrize("pcg", [False, True])
def test_poisson_null_space_zero_mean(mesh, kind, pcg):
    """Singular Poisson (all periodic / all Neumann): the zero-mean solution of the
    projected right-hand side, equal to the pseudo-inverse's."""
    bcs = (periodic(),) * 3 if kind == "periodic" else (neumann(),) * 3
    g = _grid(bcs, mesh, defect_seed=5 if pcg else None)
    b0 = _rhs()
    b = g.field("b", b0, bc=bcs)
    pre = jacobi_preconditioner(b) if pcg else None
    res = jax.jit(cg(poisson(b), tol=TOL, maxiter=400, precondition=pre, nullspace=True))(b)
    x = g.gather(res.x)
    hom = tuple(Bc(c.kind) for c in bcs)
    a = -_matrix(lambda e: ref.laplacian_np(e, g.spacing, hom), SHAPE)
    want = (np.linalg.pinv(a) @ (b0 - b0.mean()).ravel()).reshape(SHAPE)
    assert abs(x.mean()) < 1e-6 * np.abs(want).max()
    # ||x - x*|| <= cond * tol * ||x*||-ish; cond(A on zero-mean) ~ 1e2 here, fp32 rounding.
    assert np.abs(x - want).max() < 2e-4 * np.abs(want).max()
    assert float(res.residual) <= TOL


@pytest.mark.cpu_devices  # a 2 x 4 mesh of CPU devices
def test_pcg_needs_fewer_iterations_with_walls():
    """Dirichlet and Neumann walls make the diagonal vary: Jacobi PCG converges in fewer
    iterations than CG to the same solution."""
    bcs = (dirichlet(1.0, 0.0), neumann(), dirichlet(0.0, 2.0))
    g = _grid(bcs, (2, 4))
    b0 = _rhs(1)
    b = g.field("b", b0, bc=bcs)
    plain = jax.jit(cg(poisson(b), tol=TOL, maxiter=500))(b)
    pre = jax.jit(cg(poisson(b), tol=TOL, maxiter=500, precondition=jacobi_preconditioner(b)))(b)
    hom = tuple(Bc(c.kind) for c in bcs)
    a = -_matrix(lambda e: ref.laplacian_np(e, g.spacing, hom), SHAPE)
    want = np.linalg.solve(a, b0.ravel()).reshape(SHAPE)
    for r in (plain, pre):
        assert np.abs(g.gather(r.x) - want).max() < 1e-4 * np.abs(want).max()
    assert int(pre.iterations) < int(plain.iterations)


@pytest.mark.parametrize(
    "mesh", [(4, 2), pytest.param((1, 1), marks=SLOW), pytest.param((2, 4), marks=SLOW)]
)
def test_bicgstab_periodic_advection_diffusion(mesh):
    """Implicit upwind advection-diffusion (non-symmetric) on a periodic box:
    (I + dt (c . grad - nu lap)) x = b, against a dense solve."""
    bcs = (periodic(),) * 3
    g = _grid(bcs, mesh)
    dt, nu = 0.01, 0.05
    vel0 = [np.full(SHAPE, c) for c in (1.0, -0.5, 0.25)]
    vel = [g.field(f"c{i}", v, bc=bcs) for i, v in enumerate(vel0)]

    def apply_fn(x):
        return x + dt * (advect(x, vel, "upwind") - nu * laplacian(x))

    def apply_np(e):
        adv = ref.advect_np(e, vel0, g.spacing, bcs, (bcs,) * 3, ("c",) * 3, "upwind")
        return e + dt * (adv - nu * ref.laplacian_np(e, g.spacing, bcs))

    b0 = _rhs(2)
    res = jax.jit(bicgstab(apply_fn, tol=TOL, maxiter=300))(g.field("b", b0, bc=bcs))
    want = np.linalg.solve(_matrix(apply_np, SHAPE), b0.ravel()).reshape(SHAPE)
    assert np.abs(g.gather(res.x) - want).max() < 1e-5 * np.abs(want).max()
    assert float(res.residual) <= TOL


@pytest.mark.cpu_devices  # a 2 x 4 mesh of CPU devices
def test_bicgstab_neumann_and_dirichlet_walls_is_the_stencil_solver():
    """The fields' BiCGSTAB is the stencil's (`refine` over `field_operator`): implicit
    diffusion (I - dt nu lap) x = b with Neumann and Dirichlet walls and a periodic axis,
    against a dense solve, with dead PEs; the residual it reports is the true one."""
    bcs = (neumann(), dirichlet(0.0, 0.0), periodic())
    g = _grid(bcs, (2, 4), defect_seed=5)
    dt_nu = 0.02
    hom = tuple(Bc(c.kind) for c in bcs)

    def apply_fn(x):
        return x - dt_nu * laplacian(x.like(x.data, bc=hom))

    b0 = _rhs(3)
    b = g.field("b", b0, bc=bcs)
    res = jax.jit(bicgstab(apply_fn, tol=TOL, maxiter=300))(b)
    a = _matrix(lambda e: e - dt_nu * ref.laplacian_np(e, g.spacing, hom), SHAPE)
    want = np.linalg.solve(a, b0.ravel()).reshape(SHAPE)
    x = g.gather(res.x)
    assert np.abs(x - want).max() < 1e-5 * np.abs(want).max()
    true = np.linalg.norm(a @ x.ravel() - b0.ravel()) / np.linalg.norm(b0)
    assert float(res.residual) <= TOL and true <= 2 * TOL
