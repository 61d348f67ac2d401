"""The field layer's 2D Rayleigh-Benard projection step in float64 NumPy: the oracle of
`wse_hpc.fields.flow` (tests) and the NumPy contender of bench/bench_cfd.py.

Written from the operators of `wse_hpc.fields.reference` (np.roll and explicit ghosts, no
fabric) in the order `flow.boussinesq` applies them: u* from viscosity, central momentum
fluxes and the buoyancy of theta; the pressure Poisson solved exactly (a SciPy sparse LU of
the Neumann / periodic Laplacian with one value pinned, then the mean removed) where the
wafer runs Jacobi-PCG to its tolerance; the projection; theta by central fluxes plus the
conduction profile's w term. Free-fall units as `wse_hpc.fields.convection`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import factorized

from wse_hpc.fields.grid import Bc
from wse_hpc.fields.reference import advect_np, divergence_np, laplacian_np, neighbour_np

__all__ = ["rayleigh_benard_np"]


def rayleigh_benard_np(grid, dt, *, ra, pr, aspect):
    """The 2D Rayleigh-Benard step of `wse_hpc.fields.flow` in float64 NumPy: returns
    `(step(u, v, theta) -> (u, v, theta), kappa)` on an `(nx, ny)` grid."""
    nx, ny = grid
    h = (aspect / nx, 1.0 / ny, 1.0)
    nu, kappa = (ra / pr) ** -0.5, (ra * pr) ** -0.5
    per, wall, neu = Bc("periodic"), Bc("dirichlet"), Bc("neumann")
    vbc, tbc, pbc = (per, wall, neu), (per, wall, neu), (per, neu, neu)
    n = nx * ny
    cols = [laplacian_np(np.eye(n)[:, j].reshape(nx, ny, 1), h, pbc).ravel() for j in range(n)]
    a = sp.csc_matrix(np.stack(cols, 1))
    a = a + sp.csc_matrix(([1.0], ([0], [0])), shape=(n, n))  # pin one value: the null space
    solve = factorized(a)

    def nb(x, ax, s, loc):
        return neighbour_np(x, ax, s, vbc, loc)

    def adv(u, v, a):
        c, w = (u, v) if a == 0 else (v, u)
        locs = ("x", "y")
        out = 0.0
        for b in (0, 1):
            if b == a:
                cc = 0.5 * (c + nb(c, a, -1, locs[a]))
                f = cc * cc
                out = out + (neighbour_np(f, a, 1, tbc, "c") - f) / h[a]
            else:
                ce = 0.5 * (c + nb(c, b, 1, locs[a]))
                we = 0.5 * (w + nb(w, a, 1, locs[b]))
                g = ce * we
                out = out + (g - nb(g, b, -1, locs[b])) / h[b]
        return out

    def step(u, v, th):
        us = u + dt * (nu * laplacian_np(u, h, vbc, "x") - adv(u, v, 0))
        vt = 0.5 * (th + neighbour_np(th, 1, 1, tbc, "c"))
        vs = v + dt * (nu * laplacian_np(v, h, vbc, "y") - adv(u, v, 1) + vt)
        vs[:, -1] = 0.0
        div = divergence_np((us, vs), h, (vbc, vbc), ("x", "y"))
        phi = solve((div / dt).ravel()).reshape(nx, ny, 1)
        phi -= phi.mean()
        u1 = us - dt * (neighbour_np(phi, 0, 1, pbc, "c") - phi) / h[0]
        v1 = vs - dt * (neighbour_np(phi, 1, 1, pbc, "c") - phi) / h[1]
        v1[:, -1] = 0.0
        vcen = 0.5 * (v + nb(v, 1, -1, "y"))
        dth = kappa * laplacian_np(th, h, tbc) - advect_np(
            th, (u, v), h, tbc, (vbc, vbc), ("x", "y"), "central") + vcen  # fmt: skip
        return u1, v1, th + dt * dth

    return step, kappa
