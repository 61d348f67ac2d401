"""Integrators over the packed per-PE state: velocity Verlet (NVE), Langevin and
Nosé–Hoover (NVT), and seeded Maxwell–Boltzmann velocities. LAMMPS `metal` units: A, ps, eV,
amu, K, bar.

Contract: `verlet(fns, masses_amu, dt_fs, thermostat, logical, n_atoms)` returns
`step_fn(state, geo, key, bath, nbrs) -> (state, EamOutput, bath, nbrs)`, one timestep as
LAMMPS orders it: [Nosé–Hoover half step] half kick + drift (`fix nve` initial_integrate),
swap sweep (the map stays local; with neighbour lists only when they are rebuilt, after an
atom moved more than skin / 2), EAM forces, Langevin forces (LAMMPS `fix langevin`: -m v / damp +
sqrt(24 kB T m / (damp dt)) (u - 1/2) per component, u uniform per PE and step), half kick
[Nosé–Hoover half step]. The state must carry the forces of its positions (compute them once
with `with_forces` before the first step).

Nosé–Hoover is LAMMPS's `fix nvt temp T T Tdamp tchain 1`: one thermostat variable with
velocity xi (1/ps) and position eta, mass Q = Nf kB T Tdamp^2 (Nf = 3N - 3), integrated by the
symmetric Trotter split of `FixNH::nhc_temp_integrate` (xi += dt/4 G; v *= exp(-xi dt/2);
eta += xi dt/2; xi += dt/4 G with G = (2 KE - Nf kB T) / Q) around the velocity-Verlet step.
`bath` = [xi, eta] (`initial_bath()`); the kinetic energy is a fabric reduction over the PEs.
The conserved quantity is etotal + `bath_energy(bath, thermostat, n_atoms)` (LAMMPS
`ecouple` = Nf kB T eta + Q xi^2 / 2).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from wse_core import fabric
from wse_core.errors import WseError

from wse_hpc.md.eam import EamFns, EamOutput, Geometry
from wse_hpc.md.mapping import FORCE, POS, SPECIES, VEL
from wse_hpc.md.nlist import ListFns

__all__ = [
    "BOLTZ_EV_K",
    "MVV2E",
    "FTM2V",
    "NKTV2P",
    "Thermostat",
    "verlet",
    "with_forces",
    "maxwell_boltzmann",
    "initial_bath",
    "bath_energy",
]

BOLTZ_EV_K = 8.617343e-5  # LAMMPS metal units
MVV2E = 1.0364269e-4  # amu A^2 / ps^2 -> eV
FTM2V = 1.0 / 1.0364269e-4  # eV / (A amu) -> A / ps^2
NKTV2P = 1.6021765e6  # eV / A^3 -> bar


@dataclasses.dataclass(frozen=True)
class Thermostat:
    """`kind` "none" (NVE), "langevin" or "nose-hoover" at `temperature_K` with damping time
    `damp_fs` (LAMMPS's `damp` of fix langevin, `Tdamp` of fix nvt)."""

    kind: str = "none"
    temperature_K: float = 0.0
    damp_fs: float = 100.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise WseError(
                f"unknown thermostat {self.kind!r}; use one of {', '.join(repr(k) for k in KINDS)}"
            )
        if self.kind == "langevin" and not (self.temperature_K >= 0 and self.damp_fs > 0):
            raise WseError("langevin needs --temperature-K >= 0 and a positive damping time")
        if self.kind == "nose-hoover" and not (self.temperature_K > 0 and self.damp_fs > 0):
            raise WseError("nose-hoover needs --temperature-K > 0 and a positive Tdamp")


KINDS = ("none", "langevin", "nose-hoover")


def _mass(state, masses_amu: jax.Array):
    """The per-species value (a mass, or its inverse) of each PE's atom, (R, C, 1)."""
    sp = jnp.maximum(state[..., SPECIES].astype(jnp.int32), 0)
    return jnp.take(masses_amu, sp)[..., None]


def with_forces(state: jax.Array, out: EamOutput) -> jax.Array:
    return state.at[..., FORCE].set(out.forces.astype(state.dtype))


def _kick(state, inv_masses, half_dt_ps: float, held):
    """v += dt/2 F / m, as a multiply by the PE's 1/m (`inv_masses`: per species, computed
    once in float64): the PE divides nothing per step."""
    dv = half_dt_ps * FTM2V * state[..., FORCE] * _mass(state, inv_masses)
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


def _nh_mass(thermo: Thermostat, n_atoms: int) -> tuple[float, float]:
    """(Nf kB T, Q) in eV and eV ps^2 for LAMMPS's fix nvt (t_freq = 1 / Tdamp)."""
    ke_target = max(3 * n_atoms - 3, 1) * BOLTZ_EV_K * thermo.temperature_K
    return ke_target, ke_target * (thermo.damp_fs / 1000.0) ** 2


def initial_bath(dtype=jnp.float32) -> jax.Array:
    """The thermostat state [xi (1/ps), eta] at rest."""
    return jnp.zeros((2,), dtype)


def bath_energy(bath, thermostat: Thermostat, n_atoms: int) -> float:
    """LAMMPS's `ecouple` of fix nvt (eV): Nf kB T eta + Q xi^2 / 2; 0 without Nosé–Hoover."""
    if thermostat.kind != "nose-hoover":
        return 0.0
    xi, eta = (float(v) for v in np.asarray(bath, dtype=np.float64))
    ke_target, q = _nh_mass(thermostat, n_atoms)
    return ke_target * eta + 0.5 * q * xi * xi


def _nose_hoover_half(wafer, state, masses, bath, ke_target: float, q: float, dt_ps: float):
    """FixNH::nhc_temp_integrate with one chain element: a symmetric half step of the bath,
    the velocities scaled by exp(-xi dt / 2). 2 KE is one fabric sum over the PEs."""
    m = _mass(state, masses)[..., 0]
    held = state[..., SPECIES] >= 0
    vv = jnp.sum(state[..., VEL] ** 2, axis=-1)
    ke2 = MVV2E * fabric.reduce(wafer, jnp.where(held, m * vv, 0.0), "sum")  # 2 KE, eV
    xi, eta = bath[0], bath[1]
    xi = xi + 0.25 * dt_ps * (ke2 - ke_target) / q
    scale = jnp.exp(-0.5 * dt_ps * xi)
    state = state.at[..., VEL].multiply(scale.astype(state.dtype))
    ke2 = ke2 * scale * scale
    eta = eta + 0.5 * dt_ps * xi
    xi = xi + 0.25 * dt_ps * (ke2 - ke_target) / q
    return state, jnp.stack([xi, eta]).astype(bath.dtype)


def verlet(
    fns: EamFns,
    masses_amu,
    dt_fs: float,
    thermostat: Thermostat,
    logical: tuple[int, int],
    n_atoms: int = 0,
    wafer=None,
    lists: ListFns | None = None,
):
    """The timestep function (see the module docstring); Nosé–Hoover needs `n_atoms` and
    the `wafer` (its kinetic-energy reduction). With `lists` the step carries neighbour
    lists: it sorts and rebuilds them only when an atom moved more than skin / 2, and the
    rebuild's overflow is the output's."""
    if not dt_fs > 0:
        raise WseError(f"the timestep must be positive, got dt = {dt_fs} fs")
    dt_ps = dt_fs / 1000.0
    masses_np = np.asarray(masses_amu, dtype=np.float64)
    inv_masses_np = 1.0 / masses_np
    nose_hoover = thermostat.kind == "nose-hoover"
    if nose_hoover and (wafer is None or n_atoms < 2):
        raise WseError("nose-hoover needs the wafer and at least 2 atoms")
    ke_target, q = _nh_mass(thermostat, n_atoms) if nose_hoover else (0.0, 1.0)

    def rebuild(state, nbrs, geo):
        state = fns.sort_fn(state, geo)
        new, over = lists.build_fn(state, geo)
        return state, new._replace(builds=nbrs.builds + 1), over

    def keep(state, nbrs, geo):
        return state, nbrs, jnp.bool_(False)

    def step_fn(state: jax.Array, geo: Geometry, key: jax.Array, bath: jax.Array, nbrs=None):
        masses = jnp.asarray(masses_np, state.dtype)
        inv_masses = jnp.asarray(inv_masses_np, state.dtype)
        held = state[..., SPECIES] >= 0
        if nose_hoover:
            state, bath = _nose_hoover_half(wafer, state, masses, bath, ke_target, q, dt_ps)
        state = _kick(state, inv_masses, 0.5 * dt_ps, held)
        state = state.at[..., POS].add(jnp.where(held[..., None], dt_ps * state[..., VEL], 0.0))
        if lists is None:
            state = fns.sort_fn(state, geo)
            out = fns.forces_fn(state, geo)
        else:
            moved = lists.moved_fn(state, nbrs)
            state, nbrs, over = jax.lax.cond(moved, rebuild, keep, state, nbrs, geo)
            out = lists.forces_fn(state, geo, nbrs)._replace(overflow=over)
        held = state[..., SPECIES] >= 0
        forces = out.forces
        if thermostat.kind == "langevin":
            forces = forces + _langevin(state, masses, thermostat, dt_ps, key, logical)
        state = state.at[..., FORCE].set(jnp.where(held[..., None], forces, 0.0))
        state = _kick(state, inv_masses, 0.5 * dt_ps, held)
        if nose_hoover:
            state, bath = _nose_hoover_half(wafer, state, masses, bath, ke_target, q, dt_ps)
        return state, out, bath, nbrs

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
