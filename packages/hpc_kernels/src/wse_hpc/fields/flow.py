"""Incompressible Boussinesq flow by a projection method on the MAC grid (2D and 3D).

    du/dt + (u . grad) u = -grad p + nu lap u + b T e_v,   div u = 0,
    dT/dt + u . grad T   = kappa lap T,

with e_v the vertical axis (Y on a 2D grid, Z on a 3D one). With `stratification` G the
temperature carried is theta, the departure from the conduction profile T0 - G z: its
equation gains + G w and the buoyancy of the profile (a pure gradient) is left in the
pressure; this keeps fp32 rounding of the O(1) profile out of a small perturbation's
growth (the Rayleigh-Benard onset) and makes theta's wall values zero.

Chorin's projection, first order in time: u* = u + dt (-(u . grad) u + nu lap u + b T e_v)
(advection in conservative form, central fluxes; temperature by `advect` with the chosen
scheme), then the pressure Poisson -lap phi = -div u* / dt solved on the fabric by
Jacobi-PCG with its null space (constants: Neumann walls / periodic sides) removed, and
u = u* - dt grad phi, so div u = 0 to the CG tolerance, within an iteration cap that scales
with the grid (`solvers.cg_iteration_cap`, unless `cg_maxiter` is given; hunt 72: a fixed
500 stopped every solve on 256 x 256 short, unsaid): a step carries its solve's iterations
and residual (`cg_iterations`, `cg_residual`) and `FlowFns.cg_maxiter` the cap, so the shell
can count the solves that stopped at it unconverged. `time_scheme="rk3"` replaces the
Euler predictor by Shu & Osher's SSP-RK3 (J. Comput. Phys. 77, 1988) on the same right-hand
side with the last step's pressure gradient lagged in each stage, then removed before the
projection (u* = u3 + dt grad p^n): three right-hand sides and one Poisson solve per step.
Its steady states are the Euler scheme's (at a steady state every stage returns u), and its
step is bounded by central advection's CFL, dt (|u|/hx + |v|/hy) <= sqrt(3), and explicit
diffusion's 2.51 / (nu * 4 d / h^2), where forward Euler with central fluxes needs
dt <= 2 nu / U^2 whatever the grid (its von Neumann factor at small wavenumbers). Walls:
`no_slip` (u = 0), a lid `dirichlet(0, U)` on the tangential velocity.

`boussinesq(grid, spec)` returns `FlowFns(init_fn, step_fn)` over a `FlowState` pytree, the
jax-md way; the shell (`wse_hpc.fields.runs`, `wse hpc cfd`) jits and loops.
Diagnostics: `nusselt` (1 + <w T> / kappa for unit height and unit temperature drop, the steady
volume-averaged heat flux), `kinetic_energy` (1/2 <|u|^2>), `divergence_max`.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from wse_hpc.fields.grid import Bc, Field, FieldError, FieldGrid
from wse_hpc.fields.operators import (
    advect,
    axes,
    divergence,
    enforce,
    face_gradient,
    interpolate,
    laplacian,
    max_abs,
    mean,
    neighbour,
)
from wse_hpc.fields.solvers import cg, cg_iteration_cap, jacobi_preconditioner, poisson

__all__ = [
    "FlowFns",
    "FlowSpec",
    "FlowState",
    "boussinesq",
    "divergence_max",
    "kinetic_energy",
    "nusselt",
    "vertical_axis",
]

_LOC = ("x", "y", "z")


@dataclasses.dataclass(frozen=True)
class FlowSpec:
    """The physics and numerics of one run (nondimensional)."""

    nu: float  # kinematic viscosity (1/Re; Pr in diffusive units)
    kappa: float  # thermal diffusivity (1 in diffusive units; 0: no temperature equation)
    buoyancy: float  # b in b T e_v (Ra Pr in diffusive units)
    dt: float
    velocity_bc: tuple[tuple[Bc, Bc, Bc], ...]  # one per component
    temperature_bc: tuple[Bc, Bc, Bc]
    scheme: str = "central"  # temperature advection
    stratification: float = 0.0  # G: T is the departure from a conduction profile -G z
    cg_tol: float = 1e-6
    cg_maxiter: int | None = None  # None: `solvers.cg_iteration_cap` of the grid
    time_scheme: str = "euler"  # or "rk3" (see the module docstring)


class FlowState(NamedTuple):
    velocity: tuple[Field, ...]  # MAC faces: u on x faces, v on y faces (w on z faces)
    p: Field  # pressure (the projection's phi), zero mean
    T: Field
    cg_iterations: jax.Array  # int32, of the last step's Poisson solve
    # fp32 true ||b - A p|| / ||b|| of the solve, b the divergence less its mean (`solvers.cg`)
    cg_residual: jax.Array


class FlowFns(NamedTuple):
    init_fn: object
    step_fn: object
    cg_maxiter: int = 0  # the pressure solve's iteration cap (a step at it may not converge)


def vertical_axis(grid: FieldGrid) -> int:
    return axes(grid)[-1]


def _momentum_advection(vel: tuple[Field, ...], a: int) -> Field:
    """(u . grad) u_a in conservative form on u_a's face: d(u_a u_b)/dx_b, central."""
    ua, grid = vel[a], vel[a].grid
    out = None
    for b in axes(grid):
        h = grid.spacing[b]
        if b == a:  # u_a^2 at centres, differenced onto the face
            c = interpolate(ua, a)
            f = c * c
            d = (neighbour(f, a, 1) - f.data) / h
        else:  # u_a u_b on the (a, b) edge, differenced along b back onto u_a's face
            ua_e = ua.like(0.5 * (ua.data + neighbour(ua, b, 1)))
            ub = vel[b]
            ub_e = 0.5 * (ub.data + neighbour(ub, a, 1))
            g = ub.like(ua_e.data * ub_e)  # located on b faces along b: walls read 0
            d = (g.data - neighbour(g, b, -1)) / h
        out = d if out is None else out + d
    return ua.like(out)


def boussinesq(grid: FieldGrid, spec: FlowSpec) -> FlowFns:
    """`init_fn(velocity, T) -> FlowState` and `step_fn(state) -> state` (see the module)."""
    dims, v_axis = len(axes(grid)), vertical_axis(grid)
    # The step's work columns beside the user's fields: the PCG vectors and preconditioner,
    # the Poisson right-hand side and the intermediate velocities u*.
    for name in ("cg.r", "cg.p", "cg.z", "cg.Ap", "cg.inverse_diagonal", "poisson.rhs"):
        grid.declare(name)
    for c in "uvw"[:dims]:
        grid.declare(f"{c}_star")
        if spec.time_scheme == "rk3":  # the stages u1, u2 beside u and u*
            grid.declare(f"{c}_rk1")
            grid.declare(f"{c}_rk2")
    if spec.time_scheme == "rk3" and spec.kappa:
        grid.declare("T_rk1")
        grid.declare("T_rk2")
    p_bc = tuple(Bc("periodic") if per else Bc("neumann") for per in grid.periodic)
    template = Field(grid.wafer.zeros((grid.nz,)), grid, "c", p_bc)
    maxiter = spec.cg_maxiter or cg_iteration_cap(template, spec.cg_tol)
    solve = cg(
        poisson(template),
        tol=spec.cg_tol,
        maxiter=maxiter,
        precondition=jacobi_preconditioner(template),
        nullspace=True,
    )

    def init_fn(velocity, T) -> FlowState:
        vel = tuple(enforce(v) for v in velocity)
        return FlowState(vel, template, T, jnp.int32(0), jnp.float32(0.0))

    if spec.time_scheme not in ("euler", "rk3"):
        raise FieldError(f"unknown time scheme {spec.time_scheme!r}; use 'euler' or 'rk3'")

    def tendencies(vel, T, p):
        """d(velocity)/dt (less grad p, when p is given) and dT/dt of the explicit terms."""
        dv = []
        for a in range(dims):
            rhs = spec.nu * laplacian(vel[a]) - _momentum_advection(vel, a)
            if a == v_axis and spec.buoyancy:
                rhs = rhs + spec.buoyancy * interpolate(T, a).data
            if p is not None:
                rhs = rhs - face_gradient(p, a).data
            dv.append(rhs)
        if not spec.kappa:
            return dv, None
        dT = spec.kappa * laplacian(T) - advect(T, vel, spec.scheme)
        if spec.stratification:
            dT = dT + spec.stratification * interpolate(vel[v_axis], v_axis).data
        return dv, dT

    def euler(vel, T, p):
        dv, dT = tendencies(vel, T, p)
        vel = tuple(enforce(u + spec.dt * d) for u, d in zip(vel, dv, strict=True))
        return vel, (T if dT is None else T + spec.dt * dT)

    def blend(w, a, b):  # w a + (1 - w) b, stage by stage
        vel = tuple(enforce(x * w + y * (1.0 - w)) for x, y in zip(a[0], b[0], strict=True))
        return vel, (a[1] * w + b[1] * (1.0 - w)) if spec.kappa else a[1]

    def predict(s: FlowState):
        if spec.time_scheme == "euler":
            return euler(s.velocity, s.T, None)
        u0 = (s.velocity, s.T)
        u1 = euler(*u0, s.p)
        u2 = blend(0.75, u0, euler(*u1, s.p))
        vel, T = blend(1.0 / 3.0, u0, euler(*u2, s.p))
        dt_grad = [spec.dt * face_gradient(s.p, a).data for a in range(dims)]
        return tuple(enforce(u + g) for u, g in zip(vel, dt_grad, strict=True)), T

    def step_fn(s: FlowState) -> FlowState:
        new, T = predict(s)
        div = divergence(*new)
        res = solve((-1.0 / spec.dt) * div.with_bc(p_bc), s.p)
        vel = tuple(enforce(u - spec.dt * face_gradient(res.x, a).data) for a, u in enumerate(new))
        return FlowState(vel, res.x, T, res.iterations, res.residual)

    return FlowFns(init_fn, step_fn, maxiter)


def nusselt(s: FlowState, kappa: float = 1.0) -> jax.Array:
    """1 + <w T> / kappa: the volume-averaged vertical heat flux over the conductive one,
    for unit height and unit temperature drop."""
    a = vertical_axis(s.T.grid)
    w = s.velocity[a]
    return 1.0 + mean(w * interpolate(s.T, a).data) / kappa


def kinetic_energy(s: FlowState) -> jax.Array:
    """1/2 <|u|^2> over the grid (face values, each component on its own faces)."""
    return 0.5 * sum(mean(v * v) for v in s.velocity)


def divergence_max(s: FlowState) -> jax.Array:
    return max_abs(divergence(*s.velocity))
