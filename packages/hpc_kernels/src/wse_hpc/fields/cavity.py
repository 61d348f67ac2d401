"""The lid-driven cavity (Ghia, Ghia & Shin 1982) on the field layer, and its benchmark table.

`cavity(spec, n, re, ...)` builds the unit square (`n x n` cells, no-slip walls, the lid
y = 1 moving at U = 1), runs `wse_hpc.fields.flow.boussinesq` without temperature until the
velocity changes by less than `steady_tol` per unit time (or `t_max`), and returns the
centreline profiles: u(y) on x = 1/2 and v(x) on y = 1/2, interpolated linearly (the walls'
values included) to Ghia's tabulated points.

GHIA: Ghia, Ghia & Shin, "High-Re solutions for incompressible flow using the Navier-Stokes
equations and a multigrid method", J. Comput. Phys. 48 (1982) 387-411, Table I (u along the
vertical centreline) and Table II (v along the horizontal centreline), Re = 100 and 1000;
typed from the paper, points at y (x) = node index / 128 of their 129 x 129 grid.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from wse_core import WaferSpec

from wse_hpc.fields.flow import FlowSpec, boussinesq, kinetic_energy
from wse_hpc.fields.grid import FieldError, dirichlet, field_grid, neumann, no_slip

__all__ = ["GHIA", "CavityResult", "cavity", "cavity_case", "centrelines"]

GHIA_Y = (1.0, 0.9766, 0.9688, 0.9609, 0.9531, 0.8516, 0.7344, 0.6172, 0.5, 0.4531, 0.2813,
          0.1719, 0.1016, 0.0703, 0.0625, 0.0547, 0.0)  # fmt: skip
GHIA_X = (1.0, 0.9688, 0.9609, 0.9531, 0.9453, 0.9063, 0.8594, 0.8047, 0.5, 0.2344, 0.2266,
          0.1563, 0.0938, 0.0781, 0.0703, 0.0625, 0.0)  # fmt: skip
GHIA = {
    100: {
        "u": (1.0, 0.84123, 0.78871, 0.73722, 0.68717, 0.23151, 0.00332, -0.13641, -0.20581,
              -0.21090, -0.15662, -0.10150, -0.06434, -0.04775, -0.04192, -0.03717, 0.0),
        "v": (0.0, -0.05906, -0.07391, -0.08864, -0.10313, -0.16914, -0.22445, -0.24533,
              0.05454, 0.17527, 0.17507, 0.16077, 0.12317, 0.10890, 0.10091, 0.09233, 0.0),
    },
    1000: {
        "u": (1.0, 0.65928, 0.57492, 0.51117, 0.46604, 0.33304, 0.18719, 0.05702, -0.06080,
              -0.10648, -0.27805, -0.38289, -0.29730, -0.22220, -0.20196, -0.18109, 0.0),
        "v": (0.0, -0.21388, -0.27669, -0.33714, -0.39188, -0.51550, -0.42665, -0.31966,
              0.02526, 0.32235, 0.33075, 0.37095, 0.32627, 0.30353, 0.29012, 0.27485, 0.0),
    },
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class CavityResult:
    u_centre: np.ndarray  # u at GHIA_Y on x = 1/2
    v_centre: np.ndarray  # v at GHIA_X on y = 1/2
    steps: int
    time: float
    change: float  # max |du| / dt at the end (steadiness)
    kinetic_energy: float
    fields: dict[str, np.ndarray]


def centrelines(u: np.ndarray, v: np.ndarray, lid: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """u(y) on x = 1/2 and v(x) on y = 1/2 at Ghia's points from MAC fields (n x n, n even)."""
    n = u.shape[0]
    if n % 2:
        raise FieldError(f"the cavity grid must be even to hold the centrelines, got {n}")
    h, mid = 1.0 / n, n // 2 - 1  # face index mid sits at 1/2
    centres = (np.arange(n) + 0.5) * h
    ys = np.concatenate([[0.0], centres, [1.0]])
    u_line = np.concatenate([[0.0], u[mid, :], [lid]])
    v_line = np.concatenate([[0.0], v[:, mid], [0.0]])
    return np.interp(GHIA_Y, ys, u_line), np.interp(GHIA_X, ys, v_line)


def cavity_case(spec: WaferSpec, shape, *, re: float, dt: float | None = None,
                mesh_shape=None, defect_seed=None):  # fmt: skip
    """The lid-driven cavity: `(grid, flow_spec, fns, state)` on the unit square or cube
    (no-slip walls, the lid at y = 1 moving along x at U = 1; 3D: z walls too)."""
    if not re > 0:
        raise FieldError(f"the Reynolds number must be positive, got {re}")
    nx, ny, nz = shape
    h, nu = 1.0 / max(nx, ny), 1.0 / re
    dt = dt or 0.8 * min(0.25 * h * h / nu, h, 2 * nu)  # diffusion, CFL (U = 1), Euler-central
    grid = field_grid(spec, shape, mesh_shape=mesh_shape, defect_seed=defect_seed)
    zb = no_slip() if nz > 1 else neumann()
    walls = (no_slip(), no_slip(), zb)
    lid = (no_slip(), dirichlet(0.0, 1.0), zb)
    d = 3 if nz > 1 else 2
    flow = FlowSpec(nu=nu, kappa=0.0, buoyancy=0.0, dt=dt, velocity_bc=(lid, walls, walls)[:d],
                    temperature_bc=(neumann(), neumann(), neumann()))  # fmt: skip
    fns = boussinesq(grid, flow)
    vel = tuple(grid.field("uvw"[a], 0.0, loc="xyz"[a], bc=flow.velocity_bc[a]) for a in range(d))
    return grid, flow, fns, fns.init_fn(vel, grid.field("T", 0.0))


def cavity(
    spec: WaferSpec,
    n: int,
    re: float,
    *,
    dt: float | None = None,
    t_max: float = 40.0,
    steady_tol: float = 1e-4,
    chunk: int = 200,
    mesh_shape: tuple[int, int] | None = None,
    defect_seed: int | None = None,
) -> CavityResult:
    """Run the cavity to steady state; see the module docstring."""
    grid, flow, fns, state = cavity_case(spec, (n, n, 1), re=re, dt=dt, mesh_shape=mesh_shape,
                                         defect_seed=defect_seed)  # fmt: skip
    dt = flow.dt

    @jax.jit
    def advance(s):
        s = lax.fori_loop(0, chunk - 1, lambda i, x: fns.step_fn(x), s)
        nxt = fns.step_fn(s)
        du = jnp.max(jnp.stack([jnp.max(jnp.abs(a.data - b.data)) for a, b in
                                zip(nxt.velocity, s.velocity, strict=True)]))  # fmt: skip
        return nxt, du / dt

    steps, change = 0, np.inf
    while steps * dt < t_max and change > steady_tol:
        state, du = advance(state)
        steps, change = steps + chunk, float(du)
    ug, vg = grid.gather(state.velocity[0])[..., 0], grid.gather(state.velocity[1])[..., 0]
    uc, vc = centrelines(ug, vg)
    return CavityResult(uc, vc, steps, steps * dt, change, float(kinetic_energy(state)),
                        {"u": ug, "v": vg, "p": grid.gather(state.p)[..., 0]})  # fmt: skip
