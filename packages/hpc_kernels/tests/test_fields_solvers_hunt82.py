"""Hunt 82: `fields.bicgstab` / `cg` on an operator with wall values, and BiCGSTAB's breakdowns.

B. A field's Dirichlet wall values make `x -> -laplacian(x.with_bc(dirichlet(1, 0), ...))`
   affine (A(0) = 288 at the wall cells of 12 x 10). Both solvers ran it as if linear: with
   b = 0 BiCGSTAB returned x = 2.845, 2.616, ... (the solution is 0.958, 0.875, ...) with
   `converged` True and `residual` 0.0 after 1,000 iterations (the residual was defined 0
   where ||b|| = 0), CG returned x = 0; b = 1e-3 left residual 8e4. Now the walls' constant
   is moved into the right-hand side (`wse_hpc.fields.affine.split`, L x = b - A(0)), and a
   residual where b - A(0) = 0 is the absolute ||b - A x||.
C. On a skew-symmetric operator (central advection, periodic) BiCGSTAB breaks down at its
   first step ((b, A b) = 0); `SolveResult` said only `converged` False and residual 1.0, and
   for b = A y the solve restarted into the same breakdown for all 200 iterations. SciPy's
   bicgstab returns info -11. Now `SolveResult.breakdowns` and `info` (SciPy's: < 0 broke
   down) say so, and the solve stops after its restart breaks down again.

Oracles: the operators assembled here as SciPy sparse matrices with their boundary terms
(cell-centred ghosts: u_ghost = 2 g - u at a Dirichlet wall of value g, u_ghost = u at a
Neumann one; not the package's NumPy scheme), `scipy.sparse.linalg.spsolve`, SciPy's
`bicgstab` / `cg` info, NumPy's pinv.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from wse_core import preset
from wse_hpc.fields import advect, dirichlet, field_grid, laplacian, neumann
from wse_hpc.fields.affine import split
from wse_hpc.fields.solvers import BREAKDOWN_INFO, bicgstab, cg, poisson

pytestmark = pytest.mark.timeout(900)

TOL = 1e-6
SHAPE = (12, 10, 1)
WALLS = (dirichlet(1.0, 0.0), neumann(), neumann())  # u = 1 at x = 0, 0 at x = 1


def _second_difference(n: int, h: float, kind: str) -> sp.csr_matrix:
    """d^2/dx^2 on n cells with the wall rows of `kind` (their ghost folded in)."""
    d = sp.diags([np.ones(n - 1), -2.0 * np.ones(n), np.ones(n - 1)], [-1, 0, 1]).tolil()
    corner = {"dirichlet": -3.0, "neumann": -1.0}[kind]
    d[0, 0] = d[n - 1, n - 1] = corner
    return (d / h**2).tocsr()


def _laplace_system(grid, lo: float, hi: float):
    """(L, c): -laplacian with Dirichlet (lo, hi) in x, Neumann in y is A u = L u + c."""
    (nx, ny, _), (hx, hy, _) = grid.shape, grid.spacing
    dxx, dyy = _second_difference(nx, hx, "dirichlet"), _second_difference(ny, hy, "neumann")
    lap = sp.kron(dxx, sp.identity(ny)) + sp.kron(sp.identity(nx), dyy)
    wall = np.zeros(nx)
    wall[0], wall[-1] = 2.0 * lo / hx**2, 2.0 * hi / hx**2  # the ghosts' 2 g / h^2
    return (-lap).tocsc(), -np.kron(wall, np.ones(ny))


def _walls_operator(x):
    return -laplacian(x.with_bc(WALLS))


@pytest.fixture(scope="module")
def grid():
    return field_grid(preset("small"), SHAPE)


@pytest.mark.parametrize("method", ["bicgstab", "cg"])
def test_wall_values_solve_the_walls_problem(grid, method):
    """b = 0 (the hunt's: Laplace with u = 1 and 0 at the walls) and a random b: x is
    SciPy's spsolve of L x = b - c, within the bound its true residual gives (||x - x*||
    <= ||L^-1|| ||b - A x||), the residual reported is the fp64 one of the returned x
    relative to ||b - c|| (x = 0's) to fp32 rounding, converged, info 0."""
    big_l, c = _laplace_system(grid, 1.0, 0.0)
    inv_norm = 1.0 / spla.svds(big_l, k=1, which="SM", return_singular_vectors=False)[0]
    solver = {"bicgstab": bicgstab, "cg": cg}[method](_walls_operator, tol=TOL, maxiter=1000)
    solve = jax.jit(solver)
    for seed, scale in ((0, 0.0), (1, 50.0)):
        bv = scale * np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)
        res = solve(grid.field("b", bv, bc=WALLS))
        rhs = bv.astype(np.float64).ravel() - c
        want = spla.spsolve(big_l, rhs)
        x = np.asarray(res.x.numpy(), np.float64).ravel()
        truth = np.linalg.norm(rhs - big_l @ x)
        assert np.linalg.norm(x - want) <= inv_norm * truth * (1 + 1e-9)
        assert truth / np.linalg.norm(rhs) <= TOL
        # fp32's ||b - A x|| beside fp64's: both below tol, within fp32's rounding of A x
        assert float(res.residual) == pytest.approx(truth / np.linalg.norm(rhs), abs=2e-7)
        assert bool(res.converged) and int(res.info) == 0 and int(res.breakdowns) == 0
        if scale == 0.0:  # the oracle itself: Laplace's u = 1 - x at the cell centres
            exact = 1.0 - (np.arange(SHAPE[0]) + 0.5) / SHAPE[0]
            assert np.abs(want.reshape(SHAPE)[:, :, 0] - exact[:, None]).max() < 1e-9


def test_a_zero_right_hand_side_after_the_walls_means_x_zero_solves_it(grid):
    """b = A(0) exactly: b - A(0) = 0, so x = 0 (as SciPy for b = 0), residual 0 measured
    absolutely (||b - A 0||), converged, after 0 iterations."""
    b = _walls_operator(grid.field("z", 0.0, bc=WALLS))
    for solver in (bicgstab(_walls_operator, tol=TOL), cg(_walls_operator, tol=TOL)):
        res = jax.jit(solver)(b)
        assert float(jnp.abs(res.x.data).max()) == 0.0
        assert float(res.residual) == 0.0 and bool(res.converged) and int(res.iterations) == 0


def test_a_linear_operator_is_not_split(grid):
    """The probe A(0) runs on the host: a linear operator is solved as before (no lift, so
    its program and price are unchanged); an affine one's lift is A(0)."""
    b = grid.field("b", 1.0, bc=WALLS)
    op, lift = split(poisson(b), b)
    assert lift is None and op is not None
    op, lift = split(_walls_operator, b)
    big_l, c = _laplace_system(grid, 1.0, 0.0)
    np.testing.assert_allclose(np.asarray(lift.numpy(), np.float64).ravel(), c, rtol=1e-6)


def test_cg_nullspace_on_an_affine_operator_is_its_linear_parts(grid):
    """All-Neumann Poisson plus a source s: A x = -lap x + s is affine and singular on the
    constants. nullspace=True was refused (A 1 = s != 0); it now solves L x = b - s in the
    least-squares sense of least norm, NumPy's pinv."""
    bcs = (neumann(),) * 3
    rng = np.random.default_rng(3)
    s = rng.standard_normal(SHAPE).astype(np.float32)
    b = grid.field("b", rng.standard_normal(SHAPE).astype(np.float32), bc=bcs)
    lap = poisson(b)
    source = b.like(jnp.asarray(s))

    def op(x):
        return lap(x) + source.data

    res = jax.jit(cg(op, tol=TOL, maxiter=500, nullspace=True))(b)
    (nx, ny, _), (hx, hy, _) = grid.shape, grid.spacing
    dxx, dyy = _second_difference(nx, hx, "neumann"), _second_difference(ny, hy, "neumann")
    big_l = -(sp.kron(dxx, sp.identity(ny)) + sp.kron(sp.identity(nx), dyy)).toarray()
    rhs = b.numpy().astype(np.float64).ravel() - s.astype(np.float64).ravel()
    want = np.linalg.pinv(big_l) @ rhs
    x = np.asarray(res.x.numpy(), np.float64).ravel()
    assert bool(res.converged)
    assert np.abs(x - want).max() <= 1e-4 * np.abs(want).max()  # tol 1e-6 x cond ~ 1e2


# -- C: breakdowns --------------------------------------------------------------------------
def _advection(x):
    """Central advection at velocity (1, 0) on a periodic grid: skew-symmetric."""
    vx, vy = x.like(jnp.ones_like(x.data)), x.like(jnp.zeros_like(x.data))
    return advect(x, (vx, vy), "central")


def test_a_breakdown_is_reported_as_scipy_reports_it():
    """Central advection, periodic 8 x 8: (r, A r) = 0 for every r. A random b and a b in
    A's range: SciPy's bicgstab on the assembled matrix returns info < 0 (breakdown); ours
    too (BREAKDOWN_INFO), with its breakdowns counted, a message that says so, and after 2
    breakdowns (one restart) instead of the cap."""
    n = 8
    g = field_grid(preset("small"), (n, n, 1), periodic=(True, True, False))
    eye = np.eye(n)
    d = (np.roll(eye, 1, 1) - np.roll(eye, -1, 1)) * (n / 2.0)  # 1 / (2 h), h = 1 / n
    a = np.kron(d, eye)
    assert np.abs(a + a.T).max() == 0.0  # skew-symmetric
    rng = np.random.default_rng(0)
    y = rng.standard_normal(n * n)
    got = _advection(g.field("y", y.reshape(n, n, 1).astype(np.float32))).numpy().ravel()
    np.testing.assert_allclose(got, a @ y, atol=1e-5)  # the field operator is `a`
    solve = jax.jit(bicgstab(_advection, tol=TOL, maxiter=200))
    for rhs in (rng.standard_normal(n * n), a @ y):
        _, info = spla.bicgstab(a, rhs, rtol=TOL, maxiter=200)
        assert info < 0
        res = solve(g.field("b", rhs.reshape(n, n, 1).astype(np.float32)))
        assert int(res.info) == BREAKDOWN_INFO and not bool(res.converged)
        assert int(res.breakdowns) == 2 and int(res.iterations) <= 3
        assert res.message().startswith("broke down after")


def test_cg_cap_is_scipys_info():
    """Not converged at the cap: info = the iterations done, as SciPy's cg (info = maxiter)."""
    g = field_grid(preset("small"), SHAPE)
    bcs = (dirichlet(), neumann(), neumann())
    bv = np.random.default_rng(5).standard_normal(SHAPE)
    big_l, _ = _laplace_system(g, 0.0, 0.0)
    _, info = spla.cg(big_l, bv.ravel(), rtol=TOL, maxiter=3)
    res = jax.jit(cg(poisson(g.field("t", 0.0, bc=bcs)), tol=TOL, maxiter=3))(
        g.field("b", bv.astype(np.float32), bc=bcs)
    )
    assert info == 3 and int(res.info) == 3 and not bool(res.converged)
    assert res.message().startswith("not converged after 3 iterations")
