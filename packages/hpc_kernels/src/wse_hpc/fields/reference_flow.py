"""The field layer's 2D projection step in float64 NumPy: the oracle of `wse_hpc.fields.flow`
(tests) and the NumPy contender of bench/bench_cfd.py and bench/bench_cavity.py.

Written from the operators of `wse_hpc.fields.reference` (np.roll and explicit ghosts, no
fabric) in the order `flow.boussinesq` applies them: u* from viscosity, central momentum
fluxes and the buoyancy of theta (forward Euler, or SSP-RK3 with the last pressure gradient
lagged in each stage and removed before the projection); the pressure Poisson solved exactly
(a SciPy sparse LU of the Neumann / periodic Laplacian with one value pinned, then the mean
removed) where the wafer runs Jacobi-PCG to its tolerance; the projection; theta by central
fluxes plus the conduction profile's w term.

- `rayleigh_benard_np(grid, dt, ra=, pr=, aspect=)`: free-fall units as
  `wse_hpc.fields.convection` (periodic x, no-slip walls at y = 0, 1).
- `cavity_np(n, dt, re=, time_scheme=)`: `wse_hpc.fields.cavity`'s unit square, lid y = 1.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import factorized

from wse_hpc.fields.grid import Bc
from wse_hpc.fields.reference import advect_np, divergence_np, laplacian_np, neighbour_np

__all__ = ["cavity_np", "rayleigh_benard_np"]

_LOCS = ("x", "y")


def _poisson_solver(nx: int, ny: int, h, pbc):
    """phi with lap phi = rhs and zero mean: the Neumann / periodic 5-point Laplacian from 1D
    second differences, one value pinned (the null space), then the mean removed."""

    def second(n, hh, bc):
        d = sp.diags([np.ones(n - 1), -2 * np.ones(n), np.ones(n - 1)], [-1, 0, 1]).tolil()
        if bc.kind == "periodic":
            d[0, n - 1] = d[n - 1, 0] = 1.0
        else:  # neumann: the ghost equals the edge value
            d[0, 0] = d[n - 1, n - 1] = -1.0
        return d.tocsc() / hh**2

    a = sp.kron(second(nx, h[0], pbc[0]), sp.identity(ny)) + sp.kron(
        sp.identity(nx), second(ny, h[1], pbc[1]))  # fmt: skip
    a = (a + sp.csc_matrix(([1.0], ([0], [0])), shape=a.shape)).tocsc()
    lu = factorized(a)

    def solve(rhs):
        phi = lu(rhs.ravel()).reshape(nx, ny, 1)
        return phi - phi.mean()

    return solve


def _flow_step(shape, h, dt, *, nu, bcs, pbc, time_scheme="euler", theta=None):
    """`step(u, v, th) -> (u, v, th, p)` (th may be None): the 2D momentum, projection and
    (optional) theta update. `theta` is `(kappa, tbc)` for Rayleigh-Benard's buoyant theta
    with the conduction profile's w term; `bcs` is the velocity BCs per component."""
    nx, ny = shape
    solve = _poisson_solver(nx, ny, h, pbc)

    def nb(x, ax, s, c, loc):
        return neighbour_np(x, ax, s, bcs[c], loc)

    def adv(vel, a):
        c = vel[a]
        out = 0.0
        for b in (0, 1):
            if b == a:
                cc = 0.5 * (c + nb(c, a, -1, a, _LOCS[a]))
                f = cc * cc
                out = out + (neighbour_np(f, a, 1, bcs[a], "c") - f) / h[a]
            else:
                ce = 0.5 * (c + nb(c, b, 1, a, _LOCS[a]))
                we = 0.5 * (vel[b] + nb(vel[b], a, 1, b, _LOCS[b]))
                g = ce * we
                out = out + (g - nb(g, b, -1, b, _LOCS[b])) / h[b]
        return out

    def enforce(x, a):  # the + wall face of a face field along its own, bounded axis
        if bcs[a][a].kind == "dirichlet":
            idx = [slice(None)] * 3
            idx[a] = -1
            x[tuple(idx)] = bcs[a][a].hi
        return x

    def grad(p, a):
        return (neighbour_np(p, a, 1, pbc, "c") - p) / h[a]

    def tendencies(vel, th, p):
        dv = []
        for a in (0, 1):
            d = nu * laplacian_np(vel[a], h, bcs[a], _LOCS[a]) - adv(vel, a)
            if a == 1 and theta is not None:
                d = d + 0.5 * (th + neighbour_np(th, 1, 1, theta[1], "c"))
            if p is not None:
                d = d - grad(p, a)
            dv.append(d)
        if theta is None:
            return dv, None
        kappa, tbc = theta
        vcen = 0.5 * (vel[1] + nb(vel[1], 1, -1, 1, "y"))
        dth = kappa * laplacian_np(th, h, tbc) - advect_np(
            th, vel, h, tbc, bcs, _LOCS, "central") + vcen  # fmt: skip
        return dv, dth

    def euler(vel, th, p):
        dv, dth = tendencies(vel, th, p)
        vel = tuple(enforce(u + dt * d, a) for a, (u, d) in enumerate(zip(vel, dv, strict=True)))
        return vel, (th if dth is None else th + dt * dth)

    def blend(w, x, y):
        pairs = enumerate(zip(x[0], y[0], strict=True))
        vel = tuple(enforce(w * p + (1 - w) * q, a) for a, (p, q) in pairs)
        return vel, (None if x[1] is None else w * x[1] + (1 - w) * y[1])

    def step(u, v, th, p=None):
        if time_scheme == "euler":
            vel, th = euler((u, v), th, None)
        else:
            p0 = np.zeros_like(u) if p is None else p
            x0 = ((u, v), th)
            x1 = euler(*x0, p0)
            x2 = blend(0.75, x0, euler(*x1, p0))
            vel, th = blend(1.0 / 3.0, x0, euler(*x2, p0))
            vel = tuple(enforce(w + dt * grad(p0, a), a) for a, w in enumerate(vel))
        div = divergence_np(vel, h, bcs, _LOCS)
        phi = solve(div / dt)
        vel = tuple(enforce(w - dt * grad(phi, a), a) for a, w in enumerate(vel))
        return vel[0], vel[1], th, phi

    return step


def rayleigh_benard_np(grid, dt, *, ra, pr, aspect):
    """The 2D Rayleigh-Benard step of `wse_hpc.fields.flow` in float64 NumPy: returns
    `(step(u, v, theta) -> (u, v, theta), kappa)` on an `(nx, ny)` grid."""
    nx, ny = grid
    h = (aspect / nx, 1.0 / ny, 1.0)
    nu, kappa = (ra / pr) ** -0.5, (ra * pr) ** -0.5
    per, wall, neu = Bc("periodic"), Bc("dirichlet"), Bc("neumann")
    vbc, tbc, pbc = (per, wall, neu), (per, wall, neu), (per, neu, neu)
    flow = _flow_step((nx, ny), h, dt, nu=nu, bcs=(vbc, vbc), pbc=pbc, theta=(kappa, tbc))

    def step(u, v, th):
        return flow(u, v, th)[:3]

    return step, kappa


def cavity_np(n: int, dt: float, *, re: float, time_scheme: str = "euler"):
    """The 2D lid-driven cavity step of `wse_hpc.fields.cavity` in float64 NumPy:
    `step(u, v, p) -> (u, v, p)` on `n x n` cells (p: the last pressure, rk3's lag)."""
    h = (1.0 / n, 1.0 / n, 1.0)
    wall, neu = Bc("dirichlet"), Bc("neumann")
    ubc, vbc, pbc = (wall, Bc("dirichlet", 0.0, 1.0), neu), (wall, wall, neu), (neu, neu, neu)
    flow = _flow_step((n, n), h, dt, nu=1.0 / re, bcs=(ubc, vbc), pbc=pbc,
                      time_scheme=time_scheme)  # fmt: skip

    def step(u, v, p):
        u, v, _, p = flow(u, v, None, p)
        return u, v, p

    return step
