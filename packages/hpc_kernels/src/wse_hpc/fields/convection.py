"""Rayleigh-Benard convection on the field layer: the case, its onset and its Nusselt number.

Free-fall units (as Dedalus's Rayleigh-Benard example): height 1, temperature drop 1,
nu = (Ra / Pr)^-1/2, kappa = (Ra Pr)^-1/2, buoyancy 1; T = 1 on the bottom wall (y = 0 in 2D,
z = 0 in 3D), 0 on the top, no-slip walls, periodic sides of width `aspect`. The initial
state is conduction (T = 1 - z) plus a small deterministic perturbation. The state carries
theta = T - (1 - z) (`FlowSpec.stratification` = 1): `full_temperature` adds the profile
back; the Nusselt number 1 + <w theta> / kappa is the same (<w> vanishes on every level).

- `rayleigh_benard(spec, grid, RbCase(ra=, pr=, ...))` -> `(grid, FlowSpec, FlowFns, state)`.
- `growth_rate(...)`: d ln(KE) / 2 dt of the linear perturbation, after the transient, in
  units of 1 / the free-fall time; `onset(...)` the Ra where it crosses zero (secant on ln Ra
  between two bracketing runs): rigid-rigid Ra_c = 1707.76 at wavenumber 3.117
  (Chandrasekhar 1961) in a box one critical wavelength wide.
- `nusselt_run(spec, shape, NusseltConfig(...))`: the time-averaged Nusselt number over
  the last part of a run.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from wse_core import WaferSpec

from wse_hpc.fields.flow import FlowSpec, boussinesq, kinetic_energy, nusselt
from wse_hpc.fields.grid import FieldError, dirichlet, field_grid, neumann, no_slip, periodic

__all__ = [
    "conduction_profile",
    "full_temperature",
    "theta_from",
    "CRITICAL_ASPECT",
    "RA_CRITICAL",
    "RbCase",
    "growth_rate",
    "NusseltConfig",
    "nusselt_run",
    "rayleigh_benard",
]

RA_CRITICAL = 1707.76  # rigid-rigid onset (Chandrasekhar 1961)
K_CRITICAL = 3.117  # its wavenumber
CRITICAL_ASPECT = 2 * math.pi / K_CRITICAL


def stable_dt(shape, aspect: float, ra: float, pr: float, u_max: float = 1.0) -> float:
    """0.5 of the explicit limits: diffusion h^2 / (2 d max(nu, kappa)), advection h / U,
    and forward Euler with central fluxes' 2 min(nu, kappa) / U^2 (`flow`'s module
    docstring: its von Neumann factor |1 - dt nu k^2 + i dt U k| at small k exceeds 1 above
    it, whatever the grid; both u and theta are advected centrally), U the free-fall
    velocity 1, the unit of these variables (measured max |u| on 64 x 32: 0.96 at Ra 1e7
    to t 41, 1.04 at 1e8 to t 30, both runs stable at this step).
    Hunt 72: the bound was left out, and the default step 0.0156 blew up at Ra 1e7 (step
    1,100) and 1e8 (step 800) on 64 x 32; at Ra 1e4 it moves the default 0.0122 -> 0.01."""
    nu, kappa = (ra / pr) ** -0.5, (ra * pr) ** -0.5
    d = 3 if shape[2] > 1 else 2
    h = min(aspect / shape[0], 1.0 / (shape[d - 1]), aspect / shape[1] if d == 3 else 1.0)
    central = 2 * min(nu, kappa) / u_max**2
    return 0.5 * min(h * h / (2 * d * max(nu, kappa)), h / u_max, central)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RbCase:
    """A Rayleigh-Benard case: Ra, Pr, width / height, the step (None: `stable_dt`), the
    initial perturbation's amplitude, the PE mesh and the defect draw."""

    ra: float
    pr: float
    aspect: float = 2.0
    dt: float | None = None
    amplitude: float = 1e-3
    mesh_shape: tuple[int, int] | None = None
    defect_seed: int | None = None


def rayleigh_benard(spec: WaferSpec, shape: tuple[int, int, int], case: RbCase):
    """The Rayleigh-Benard case: `(grid, flow_spec, fns, state)` (see the module)."""
    ra, pr, aspect, dt, amplitude = case.ra, case.pr, case.aspect, case.dt, case.amplitude
    mesh_shape, defect_seed = case.mesh_shape, case.defect_seed
    if not (ra > 0 and math.isfinite(ra)):
        raise FieldError(f"the Rayleigh number must be positive, got {ra}")
    if not (pr > 0 and math.isfinite(pr)) or not (aspect > 0 and math.isfinite(aspect)):
        raise FieldError(f"Pr and the aspect ratio must be positive, got {pr}, {aspect}")
    d3 = shape[2] > 1
    lengths = (aspect, aspect, 1.0) if d3 else (aspect, 1.0, 1.0)
    per = (True, True, False) if d3 else (True, False, False)
    grid = field_grid(spec, shape, periodic=per, lengths=lengths, mesh_shape=mesh_shape,
                      defect_seed=defect_seed)  # fmt: skip
    side, other = periodic(), (neumann() if not d3 else no_slip())
    wall_bc = (side, side, no_slip()) if d3 else (side, no_slip(), other)
    t_bc = (side, side, dirichlet()) if d3 else (side, dirichlet(), neumann())  # theta
    nu, kappa = (ra / pr) ** -0.5, (ra * pr) ** -0.5
    dt = dt or stable_dt(shape, aspect, ra, pr)
    flow = FlowSpec(nu=nu, kappa=kappa, buoyancy=1.0, dt=dt,
                    velocity_bc=(wall_bc,) * (3 if d3 else 2), temperature_bc=t_bc,
                    stratification=1.0)  # fmt: skip
    x, y, z = grid.centres()
    X, Y, Z = np.meshgrid(x, y, z, indexing="ij")
    height = Z if d3 else Y
    fns = boussinesq(grid, flow)
    bump = np.sin(math.pi * height) * np.cos(2 * math.pi * X / aspect)
    if d3:
        bump = bump * (1 + 0.5 * np.cos(2 * math.pi * Y / aspect))
    T = grid.field("T", amplitude * bump, bc=t_bc)  # theta: T - (1 - z)
    vel = tuple(grid.field("uvw"[a], 0.0, loc="xyz"[a], bc=wall_bc) for a in range(3 if d3 else 2))
    return grid, flow, fns, fns.init_fn(vel, T)


def conduction_profile(grid) -> np.ndarray:
    """T0 = 1 - z on the grid's centres in float64 (z: the vertical axis, Y in 2D),
    broadcastable against an `(nx, ny, nz)` field."""
    _, y, z = grid.centres()
    height = z[None, None, :] if grid.dims == 3 else y[None, :, None]
    return 1.0 - np.asarray(height, np.float64)


def full_temperature(grid, theta: np.ndarray) -> np.ndarray:
    """T = theta + (1 - z) in float64, the fp32 state theta taken exactly: `theta_from`
    gets theta back bit for bit (hunt 72: T = fp32(theta + 1) - z rounded theta away in the
    sum, and a restart's T differed from the uninterrupted run's by 1.2e-7)."""
    return np.asarray(theta, np.float64) + conduction_profile(grid)


def theta_from(grid, full: np.ndarray) -> np.ndarray:
    """The fp32 state theta of a full temperature T: (T - (1 - z)) in float64, rounded once.
    For T written by `full_temperature` the float64 difference is theta within the sum's
    rounding, half a float64 ulp of T (<= 1.2e-16 for T < 2), so the fp32 theta is the one
    written wherever that is under half theta's fp32 ulp, |theta| > ~2e-9, and where
    theta is 0; a smaller theta may come back one fp32 ulp off (1e-16 of T)."""
    return (np.asarray(full, np.float64) - conduction_profile(grid)).astype(np.float32)


def _runner(fns, flow: FlowSpec, chunk: int):
    @jax.jit
    def run(s):
        def body(i, c):
            st, ke, nu_sum = c
            st = fns.step_fn(st)
            return st, ke.at[i].set(kinetic_energy(st)), nu_sum + nusselt(st, flow.kappa)

        ke0 = jnp.zeros((chunk,), jnp.float32)
        return lax.fori_loop(0, chunk, body, (s, ke0, jnp.float32(0.0)))

    return run


def growth_rate(spec, shape, case: RbCase, *, t_skip=10.0, t_fit=10.0) -> float:
    """The perturbation's growth rate: half the slope of ln KE over `t_fit` after `t_skip`
    (the case's amplitude replaced by 1e-4, inside the linear regime)."""
    case = dataclasses.replace(case, amplitude=1e-4)
    grid, flow, fns, s = rayleigh_benard(spec, shape, case)
    n_skip, n_fit = int(round(t_skip / flow.dt)), int(round(t_fit / flow.dt))
    s, _, _ = _runner(fns, flow, n_skip)(s)
    _, ke, _ = _runner(fns, flow, n_fit)(s)
    t = flow.dt * np.arange(1, n_fit + 1)
    return float(np.polyfit(t, np.log(np.asarray(ke, np.float64)), 1)[0] / 2)


def onset(spec, shape, case: RbCase, *, ra_lo: float, ra_hi: float, **kw) -> float:
    """Ra where the growth rate crosses zero, by the secant in ln Ra between two runs of
    `case` at `ra_lo` and `ra_hi` (its own Ra unused)."""
    s_lo, s_hi = (growth_rate(spec, shape, dataclasses.replace(case, ra=r), **kw)
                  for r in (ra_lo, ra_hi))  # fmt: skip
    if not s_lo < 0 < s_hi:
        raise FieldError(f"Ra {ra_lo}..{ra_hi} does not bracket the onset ({s_lo}, {s_hi})")
    a, b = math.log(ra_lo), math.log(ra_hi)
    return math.exp(a - s_lo * (b - a) / (s_hi - s_lo))


@dataclasses.dataclass(frozen=True, kw_only=True)
class NusseltConfig:
    """A Nusselt-number run: the case's Ra, Pr and aspect, its end time and averaging window
    (free-fall times), steps per jitted call and the PE mesh."""

    ra: float
    pr: float
    aspect: float = 2.0
    t_end: float = 200.0
    t_avg: float = 50.0
    chunk: int = 500
    mesh_shape: tuple[int, int] | None = None


def nusselt_run(spec, shape, cfg: NusseltConfig) -> tuple[float, object]:
    """The Nusselt number averaged over the last `t_avg` free-fall times of a run to
    `t_end`, and the final state."""
    case = RbCase(ra=cfg.ra, pr=cfg.pr, aspect=cfg.aspect, amplitude=1e-2,
                  mesh_shape=cfg.mesh_shape)  # fmt: skip
    grid, flow, fns, s = rayleigh_benard(spec, shape, case)
    run = _runner(fns, flow, cfg.chunk)
    steps, total, count = 0, 0.0, 0
    while steps * flow.dt < cfg.t_end:
        s, _, nu_sum = run(s)
        steps += cfg.chunk
        if steps * flow.dt > cfg.t_end - cfg.t_avg:
            total, count = total + float(nu_sum), count + cfg.chunk
    return total / max(count, 1), s
