"""Integrators as jax-md's: velocity Verlet (`nve`), Langevin (`nvt_langevin`) and
Nosé–Hoover (`nvt_nose_hoover`), each returning `IntegratorFns(init_fn, step_fn)` over an
`MdState` pytree (`wse_hpc.md.state`); and seeded Maxwell–Boltzmann velocities. LAMMPS
`metal` units: A, ps, eV, amu, K, bar.

Contract: the factories close over the kernel (`EamFns`; with `lists`, the neighbour-list
kernel `ListFns`), the masses per species (amu) and the timestep (fs), and return pure
functions: `init_fn(atoms, geo) -> MdState` evaluates the forces of the positions (building
the lists) with the bath at rest; `step_fn(state, geo, key) -> MdState` is one timestep as
LAMMPS orders it: [Nosé–Hoover half step] half kick + drift (`fix nve` initial_integrate),
swap sweep (the map stays local; with neighbour lists only when they are rebuilt, every
`nbrs.every` steps, each PE checking its own atom's displacement in between), EAM forces,
Langevin forces (LAMMPS `fix langevin`: -m v / damp + sqrt(24 kB T m / (damp dt)) (u - 1/2)
per component, u uniform per atom from `key` folded with the atom's id: the step's key is the
run's seed folded with the step, so a draw is keyed by (seed, step, atom id) and does not
depend on where the atom sits or on how the run is cut into chunks), half kick [Nosé–Hoover
half step]. `state.eam` is the step's force evaluation (its overflow flag: the shell
re-plans).
`integrator(thermostat, ...)` picks the factory a `Thermostat` names.

Nosé–Hoover is LAMMPS's `fix nvt temp T T Tdamp tchain M`: a chain of M thermostats
(`Thermostat.chain`, 3 by default as LAMMPS's; 1: one thermostat variable), velocities xi
(1/ps) and positions eta, masses Q_0 = Nf kB T Tdamp^2 (Nf = 3N - 3) and Q_k = kB T Tdamp^2,
integrated by the symmetric Trotter split of `FixNH::nhc_temp_integrate` around the
velocity-Verlet step (`wse_hpc.md.nose_hoover.chain_half`; with M = 1: xi += dt/4 G;
v *= exp(-xi dt/2); eta += xi dt/2; xi += dt/4 G with G = (2 KE - Nf kB T) / Q). The kinetic
energy is a fabric reduction over the PEs; the chain is a few scalars every PE updates alike.
The conserved quantity is etotal + `bath_energy(bath, thermostat, n_atoms)` (LAMMPS
`ecouple`, `nose_hoover.chain_energy`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from wse_core import fabric
from wse_core.errors import WseError, require_int, shown_setting
from wse_core.hw.wafer import Wafer

from wse_hpc.md.eam import EamFns, EamOutput, Geometry
from wse_hpc.md.neighbours import ListFns, Neighbours
from wse_hpc.md.nose_hoover import (
    TCHAIN_DEFAULT,
    ChainMasses,
    chain_energy,
    chain_half,
    chain_masses,
)
from wse_hpc.md.state import Atoms, Bath, MdState
from wse_hpc.md.units import BOLTZ_EV_K, FTM2V, MVV2E, NKTV2P

__all__ = [
    "BOLTZ_EV_K",
    "MVV2E",
    "FTM2V",
    "NKTV2P",
    "Thermostat",
    "IntegratorFns",
    "nve",
    "nvt_langevin",
    "nvt_nose_hoover",
    "integrator",
    "maxwell_boltzmann",
    "bath_energy",
    "atom_uniforms",
]


@dataclasses.dataclass(frozen=True)
class Thermostat:
    """`kind` "none" (NVE), "langevin" or "nose-hoover" at `temperature_K` with damping time
    `damp_fs` (LAMMPS's `damp` of fix langevin, `Tdamp` of fix nvt); `chain`: the
    Nosé–Hoover chain's length (LAMMPS's `tchain`, default 3; 1: a single thermostat)."""

    kind: str = "none"
    temperature_K: float = 0.0
    damp_fs: float = 100.0
    chain: int = TCHAIN_DEFAULT

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise WseError(
                f"unknown thermostat {self.kind!r}; use one of {', '.join(repr(k) for k in KINDS)}"
            )
        if self.kind == "langevin" and not (self.temperature_K >= 0 and self.damp_fs > 0):
            raise WseError("langevin needs --temperature-K >= 0 and a positive damping time")
        if self.kind == "nose-hoover" and not (self.temperature_K > 0 and self.damp_fs > 0):
            raise WseError("nose-hoover needs --temperature-K > 0 and a positive Tdamp")
        what = "the Nose-Hoover chain length (--tchain, LAMMPS's tchain)"
        require_int(what, self.chain, 1, MAX_CHAIN)


KINDS = ("none", "langevin", "nose-hoover")
MAX_CHAIN = 100  # a chain unrolls into the step (LAMMPS's users run 1 to ~10)


class InitFn(Protocol):
    def __call__(self, atoms: Atoms, geo: Geometry) -> MdState: ...


class StepFn(Protocol):
    def __call__(self, state: MdState, geo: Geometry, key: jax.Array) -> MdState: ...


class IntegratorFns(NamedTuple):
    init_fn: InitFn
    step_fn: StepFn


# a thermostat's hooks on the Verlet step: a half step around it (atoms, bath, masses), and
# an extra force (atoms, masses, key)
HalfFn = Callable[[Atoms, Bath, jax.Array], tuple[Atoms, Bath]]
NoiseFn = Callable[[Atoms, jax.Array, jax.Array], jax.Array]


class _Forces(NamedTuple):
    """The force evaluation of `init_fn` (no swaps) and of each step (swaps and lists
    rebuilt at the cadence, else each PE's displacement check; forces)."""

    first: Callable[[Atoms, Geometry], tuple[Neighbours | None, EamOutput]]
    again: Callable[
        [Atoms, Geometry, Neighbours | None], tuple[Atoms, Neighbours | None, EamOutput]
    ]


def _per_species(atoms: Atoms, values: jax.Array) -> jax.Array:
    """The per-species value (a mass, or its inverse) of each PE's atom, (R, C, 1)."""
    return jnp.take(values, jnp.maximum(atoms.species, 0))[..., None]


def _kick(atoms: Atoms, inv_masses: jax.Array, half_dt_ps: float, held: jax.Array) -> Atoms:
    """v += dt/2 F / m, as a multiply by the PE's 1/m (`inv_masses`: per species, computed
    once in float64): the PE divides nothing per step."""
    dv = half_dt_ps * FTM2V * atoms.force * _per_species(atoms, inv_masses)
    return atoms._replace(velocity=atoms.velocity + jnp.where(held[..., None], dv, 0.0))


def _full_window(fns: EamFns) -> _Forces:
    def first(atoms, geo):
        return None, fns.forces_fn(atoms, geo)

    def again(atoms, geo, nbrs):
        atoms = fns.sort_fn(atoms, geo)
        return atoms, None, fns.forces_fn(atoms, geo)

    return _Forces(first, again)


def _listed(fns: EamFns, lists: ListFns) -> _Forces:
    def first(atoms, geo):
        nbrs, over = lists.build_fn(atoms, geo)
        return nbrs, lists.forces_fn(atoms, geo, nbrs)._replace(overflow=over)

    def rebuild(atoms, nbrs, geo):
        atoms = fns.sort_fn(atoms, geo)
        new, over = lists.build_fn(atoms, geo)
        kept = new._replace(builds=nbrs.builds + 1, every=nbrs.every, drift2=nbrs.drift2)
        return atoms, kept, over

    def keep(atoms, nbrs, geo):
        nbrs = lists.track_fn(atoms, nbrs._replace(age=nbrs.age + 1))
        return atoms, nbrs, jnp.bool_(False)

    def again(atoms, geo, nbrs):  # the cadence is a count: no fabric decides a rebuild
        due = nbrs.age + 1 >= nbrs.every
        atoms, nbrs, over = jax.lax.cond(due, rebuild, keep, atoms, nbrs, geo)
        return atoms, nbrs, lists.forces_fn(atoms, geo, nbrs)._replace(overflow=over)

    def kept(atoms, geo, nbrs):  # `again` when no rebuild is due (`ListFns.rebuild` False)
        atoms, nbrs, over = keep(atoms, nbrs, geo)
        return atoms, nbrs, lists.forces_fn(atoms, geo, nbrs)._replace(overflow=over)

    return _Forces(first, again if lists.rebuild else kept)


def _dt_ps(dt_fs: float) -> float:
    if not dt_fs > 0:
        raise WseError(f"the timestep must be positive, got dt = {dt_fs} fs")
    return dt_fs / 1000.0


def _verlet(
    fns: EamFns,
    masses_amu: Sequence[float],
    dt_ps: float,
    lists: ListFns | None,
    half_fn: HalfFn | None = None,
    noise_fn: NoiseFn | None = None,
    chain: int = 1,
) -> IntegratorFns:
    """Velocity Verlet with a thermostat's hooks (see the module docstring); `chain`: the
    bath's length."""
    masses_np = np.asarray(masses_amu, dtype=np.float64)
    inv_masses_np = 1.0 / masses_np
    forces = _full_window(fns) if lists is None else _listed(fns, lists)

    def init_fn(atoms: Atoms, geo: Geometry) -> MdState:
        nbrs, out = forces.first(atoms, geo)
        dtype = atoms.position.dtype
        return MdState(
            atoms._replace(force=out.forces.astype(dtype)), Bath.at_rest(dtype, chain), nbrs, out
        )

    def step_fn(state: MdState, geo: Geometry, key: jax.Array) -> MdState:
        atoms, bath = state.atoms, state.bath
        masses = jnp.asarray(masses_np, atoms.position.dtype)
        inv_masses = jnp.asarray(inv_masses_np, atoms.position.dtype)
        held = atoms.species >= 0
        if half_fn is not None:
            atoms, bath = half_fn(atoms, bath, masses)
        atoms = _kick(atoms, inv_masses, 0.5 * dt_ps, held)
        drift = jnp.where(held[..., None], dt_ps * atoms.velocity, 0.0)
        atoms, nbrs, out = forces.again(
            atoms._replace(position=atoms.position + drift), geo, state.nbrs
        )
        held = atoms.species >= 0
        f = out.forces if noise_fn is None else out.forces + noise_fn(atoms, masses, key)
        atoms = _kick(
            atoms._replace(force=jnp.where(held[..., None], f, 0.0)), inv_masses, 0.5 * dt_ps, held
        )
        if half_fn is not None:
            atoms, bath = half_fn(atoms, bath, masses)
        return MdState(atoms, bath, nbrs, out)

    return IntegratorFns(init_fn, step_fn)


def nve(
    fns: EamFns, masses_amu: Sequence[float], dt_fs: float, *, lists: ListFns | None = None
) -> IntegratorFns:
    """Velocity Verlet (LAMMPS `fix nve`) with `fns`' forces (`lists`: over neighbour
    lists); `masses_amu` per species, `dt_fs` the timestep."""
    return _verlet(fns, masses_amu, _dt_ps(dt_fs), lists)


def atom_uniforms(key: jax.Array, atom_id: jax.Array, dtype) -> jax.Array:
    """(R, C, 3) uniforms in [0, 1), each PE's drawn from `key` folded with its atom's id
    (`jax.random.fold_in`; an empty PE's -1 as 0, masked by the caller): an atom's draw
    follows the atom, never the PE it sits on (hunt 81: drawn per PE, a Langevin run's
    trajectory changed with the swaps and re-maps that move atoms between PEs, and so with
    --thermo-every). One draw per PE, elementwise over the placed (R, C) field."""

    def draw(i):
        return jax.random.uniform(jax.random.fold_in(key, i), (3,), dtype=dtype)

    return jax.vmap(jax.vmap(draw))(jnp.maximum(atom_id, 0))


def _langevin_fn(temperature_K: float, damp_ps: float, dt_ps: float) -> NoiseFn:
    def noise_fn(atoms: Atoms, masses: jax.Array, key: jax.Array) -> jax.Array:
        m = _per_species(atoms, masses)
        gamma1 = -m / damp_ps / FTM2V
        gamma2 = (
            jnp.sqrt(m)
            * math.sqrt(24.0 * BOLTZ_EV_K * temperature_K / damp_ps / dt_ps / MVV2E)
            / FTM2V
        )
        u = atom_uniforms(key, atoms.atom_id, atoms.position.dtype) - 0.5
        return gamma1 * atoms.velocity + gamma2 * u

    return noise_fn


def nvt_langevin(
    fns: EamFns,
    masses_amu: Sequence[float],
    dt_fs: float,
    *,
    temperature_K: float,
    damp_fs: float,
    lists: ListFns | None = None,
) -> IntegratorFns:
    """Velocity Verlet with LAMMPS's `fix langevin T T damp` forces (uniform noise drawn
    per atom from each step's key and the atom's id, `atom_uniforms`)."""
    Thermostat("langevin", temperature_K, damp_fs)  # its checks
    dt_ps = _dt_ps(dt_fs)
    noise_fn = _langevin_fn(temperature_K, damp_fs / 1000.0, dt_ps)
    return _verlet(fns, masses_amu, dt_ps, lists, noise_fn=noise_fn)


def _nh_masses(thermostat: Thermostat, n_atoms: int) -> ChainMasses:
    """LAMMPS's fix nvt masses of `thermostat`'s chain for `n_atoms` atoms."""
    t, damp = thermostat.temperature_K, thermostat.damp_fs
    return chain_masses(t, damp, n_atoms, thermostat.chain, BOLTZ_EV_K)


def bath_energy(bath: Bath, thermostat: Thermostat, n_atoms: int) -> float:
    """LAMMPS's `ecouple` of fix nvt (eV, `nose_hoover.chain_energy`); 0 without Nosé–Hoover."""
    if thermostat.kind != "nose-hoover":
        return 0.0
    xi, eta = (np.asarray(v, dtype=np.float64).reshape(-1) for v in bath)
    return chain_energy(xi, eta, _nh_masses(thermostat, n_atoms))


def _nose_hoover_fn(wafer: Wafer, masses_nh: ChainMasses, dt_ps: float) -> HalfFn:
    """FixNH::nhc_temp_integrate: a symmetric half step of the chain (`chain_half`), the
    velocities scaled by exp(-xi_0 dt / 2). 2 KE is one fabric sum over the PEs."""

    def half_fn(atoms: Atoms, bath: Bath, masses: jax.Array) -> tuple[Atoms, Bath]:
        m = _per_species(atoms, masses)[..., 0]
        held = atoms.species >= 0
        vv = jnp.sum(atoms.velocity**2, axis=-1)
        ke2 = MVV2E * fabric.reduce(wafer, jnp.where(held, m * vv, 0.0), "sum")  # 2 KE, eV
        xi, eta, scale = chain_half(bath.xi, bath.eta, ke2, masses_nh, dt_ps)
        atoms = atoms._replace(velocity=atoms.velocity * scale.astype(atoms.velocity.dtype))
        return atoms, Bath(xi.astype(bath.xi.dtype), eta.astype(bath.eta.dtype))

    return half_fn


def nvt_nose_hoover(
    fns: EamFns,
    masses_amu: Sequence[float],
    dt_fs: float,
    *,
    thermostat: Thermostat,
    n_atoms: int,
    wafer: Wafer,
    lists: ListFns | None = None,
) -> IntegratorFns:
    """Velocity Verlet inside LAMMPS's `fix nvt temp T T Tdamp tchain M` (the module
    docstring) with `thermostat`'s target T, Tdamp and chain M (`Thermostat.chain`, LAMMPS's
    default 3); `n_atoms` sets the degrees of freedom, `wafer` the kinetic-energy sum."""
    if thermostat.kind != "nose-hoover":
        raise WseError(f"nvt_nose_hoover needs a nose-hoover thermostat, got {thermostat.kind!r}")
    if n_atoms < 2:
        raise WseError("nose-hoover needs at least 2 atoms")
    dt_ps = _dt_ps(dt_fs)
    half_fn = _nose_hoover_fn(wafer, _nh_masses(thermostat, n_atoms), dt_ps)
    return _verlet(fns, masses_amu, dt_ps, lists, half_fn=half_fn, chain=thermostat.chain)


def integrator(
    thermostat: Thermostat,
    fns: EamFns,
    masses_amu: Sequence[float],
    dt_fs: float,
    *,
    wafer: Wafer,
    n_atoms: int,
    lists: ListFns | None = None,
) -> IntegratorFns:
    """The factory `thermostat` names (the shell's choice), with its target and damping."""
    if thermostat.kind == "none":
        return nve(fns, masses_amu, dt_fs, lists=lists)
    t, damp = thermostat.temperature_K, thermostat.damp_fs
    if thermostat.kind == "langevin":
        return nvt_langevin(fns, masses_amu, dt_fs, temperature_K=t, damp_fs=damp, lists=lists)
    return nvt_nose_hoover(
        fns, masses_amu, dt_fs, thermostat=thermostat, n_atoms=n_atoms, wafer=wafer, lists=lists
    )


def _finite_at_least_zero(value: object) -> bool:
    """A real number (a 0-d array too, not a str) that is finite and >= 0."""
    if isinstance(value, (str, bytes)):
        return False
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return math.isfinite(v) and v >= 0


def maxwell_boltzmann(masses_amu: np.ndarray, temperature_K: float, seed: int) -> np.ndarray:
    """Velocities (N, 3) in A/ps: Gaussian, zero total momentum, scaled to exactly T with
    3N - 3 degrees of freedom (as LAMMPS `velocity ... dist gaussian mom yes`)."""
    m = np.asarray(masses_amu, dtype=np.float64)[:, None]
    n = m.shape[0]
    if not _finite_at_least_zero(temperature_K):  # hunt 78: NaN / inf gave NaN / inf velocities
        raise WseError(
            f"temperature must be a finite number >= 0 K, got {shown_setting(temperature_K)}"
        )
    if not (np.isfinite(m).all() and (m > 0).all()):  # hunt 78: a mass of 0 gave NaN
        bad = m[~(np.isfinite(m) & (m > 0))][0]
        raise WseError(f"masses must be finite and > 0 amu, got {bad:g}")
    v = np.random.default_rng(seed).normal(size=(n, 3)) / np.sqrt(m)
    v -= (m * v).sum(0) / m.sum()
    if temperature_K == 0 or n < 2:
        return np.zeros_like(v)
    t_now = (m * v * v).sum() * MVV2E / ((3 * n - 3) * BOLTZ_EV_K)
    return v * math.sqrt(temperature_K / t_now)
