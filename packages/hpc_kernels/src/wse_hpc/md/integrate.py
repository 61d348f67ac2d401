"""Integrators over the packed per-PE state: velocity Verlet (NVE), Langevin (NVT), and
seeded Maxwell–Boltzmann velocities. LAMMPS `metal` units: A, ps, eV, amu, K, bar.

Contract: `verlet(fns, masses_amu, dt_fs, thermostat)` returns `step_fn(state, geo, key) ->
(state, EamOutput)`, one timestep as LAMMPS orders it: half kick + drift (`fix nve`
initial_integrate), swap sweep (the map stays local), EAM forces, Langevin forces (LAMMPS
`fix langevin`: -m v / damp + sqrt(24 kB T m / (damp dt)) (u - 1/2) per component, u uniform
per PE and step), half kick. The state must carry the forces of its positions (compute them
once with `with_forces` before the first step).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from wse_core.errors import WseError

from wse_hpc.md.eam import EamFns, EamOutput, Geometry
from wse_hpc.md.mapping import FORCE, POS, SPECIES, VEL

__all__ = [
    "BOLTZ_EV_K",
    "MVV2E",
    "FTM2V",
    "NKTV2P",
    "Thermostat",
    "verlet",
    "with_forces",
    "maxwell_boltzmann",
]

BOLTZ_EV_K = 8.617343e-5  # LAMMPS metal units
MVV2E = 1.0364269e-4  # amu A^2 / ps^2 -> eV
FTM2V = 1.0 / 1.0364269e-4  # eV / (A amu) -> A / ps^2
NKTV2P = 1.6021765e6  # eV / A^3 -> bar


@dataclasses.dataclass(frozen=True)
class Thermostat:
    """`kind` "none" (NVE) or "langevin" at `temperature_K` with damping time `damp_fs`."""

    kind: str = "none"
    temperature_K: float = 0.0
    damp_fs: float = 100.0

    def __post_init__(self) -> None:
        if self.kind not in ("none", "langevin"):
            raise WseError(f"unknown thermostat {self.kind!r}; use 'none' or 'langevin'")
        if self.kind == "langevin" and not (self.temperature_K >= 0 and self.damp_fs > 0):
            raise WseError("langevin needs --temperature-K >= 0 and a positive damping time")


def _mass(state, masses_amu: jax.Array):
    sp = jnp.maximum(state[..., SPECIES].astype(jnp.int32), 0)
    return jnp.take(masses_amu, sp)[..., None]


def with_forces(state: jax.Array, out: EamOutput) -> jax.Array:
    return state.at[..., FORCE].set(out.forces.astype(state.dtype))


def _kick(state, masses, half_dt_ps: float, held):
    dv = half_dt_ps * FTM2V * state[..., FORCE] / _mass(state, masses)
    return state.at[..., VEL].add(jnp.where(held[..., None], dv, 0.0))


def _langevin(state, masses, thermo: Thermostat, dt_ps: float, key, logical: tuple[int, int]):
    m = _mass(state, masses)
    damp_ps = thermo.damp_fs / 1000.0
    gamma1 = -m / damp_ps / FTM2V
    gamma2 = (
        jnp.sqrt(m)
        * math.sqrt(24.0 * BOLTZ_EV_K * thermo.temperature_K / damp_ps / dt_ps / MVV2E)
        / FTM2V
    )
    rows, cols = logical
    u = jax.random.uniform(key, (rows, cols, 3), dtype=state.dtype) - 0.5
    pad = [(0, state.shape[0] - rows), (0, state.shape[1] - cols), (0, 0)]
    return gamma1 * state[..., VEL] + gamma2 * jnp.pad(u, pad)


def verlet(fns: EamFns, masses_amu, dt_fs: float, thermostat: Thermostat, logical: tuple[int, int]):
    """The timestep function (see the module docstring)."""
    if not dt_fs > 0:
        raise WseError(f"the timestep must be positive, got dt = {dt_fs} fs")
    dt_ps = dt_fs / 1000.0
    masses_np = np.asarray(masses_amu, dtype=np.float64)

    def step_fn(state: jax.Array, geo: Geometry, key: jax.Array):
        masses = jnp.asarray(masses_np, state.dtype)
        held = state[..., SPECIES] >= 0
        state = _kick(state, masses, 0.5 * dt_ps, held)
        state = state.at[..., POS].add(jnp.where(held[..., None], dt_ps * state[..., VEL], 0.0))
        state = fns.sort_fn(state, geo)
        held = state[..., SPECIES] >= 0
        out = fns.forces_fn(state, geo)
        forces = out.forces
        if thermostat.kind == "langevin":
            forces = forces + _langevin(state, masses, thermostat, dt_ps, key, logical)
        state = state.at[..., FORCE].set(jnp.where(held[..., None], forces, 0.0))
        return _kick(state, masses, 0.5 * dt_ps, held), out

    return step_fn


def maxwell_boltzmann(masses_amu: np.ndarray, temperature_K: float, seed: int) -> np.ndarray:
    """Velocities (N, 3) in A/ps: Gaussian, zero total momentum, scaled to exactly T with
    3N - 3 degrees of freedom (as LAMMPS `velocity ... dist gaussian mom yes`)."""
    m = np.asarray(masses_amu, dtype=np.float64)[:, None]
    n = m.shape[0]
    if temperature_K < 0:
        raise WseError(f"temperature must be >= 0 K, got {temperature_K}")
    v = np.random.default_rng(seed).normal(size=(n, 3)) / np.sqrt(m)
    v -= (m * v).sum(0) / m.sum()
    if temperature_K == 0 or n < 2:
        return np.zeros_like(v)
    t_now = (m * v * v).sum() * MVV2E / ((3 * n - 3) * BOLTZ_EV_K)
    return v * math.sqrt(temperature_K / t_now)
