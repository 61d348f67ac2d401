"""An MD run's start, checked: the settings (`check_config`: whole step counts, a finite
temperature below the blow-up one, dtype 'float32' or 'float64', a 64-bit seed), the
structure and options (`prepare`: atoms in the box, no overlaps, dt, skin, damping, the
velocities — drawn at `config.temperature_K` when it is set, as LAMMPS's `velocity all
create`, else the structure's own unless they are past `EXPLODED_TEMPERATURE_K`, else zero),
the Nosé–Hoover bath a continued run starts with (`start_bath`: the structure's, written by the
run that made it, when its velocities are kept), the step it starts at (`first_step`: the
structure's, as LAMMPS's read_restart keeps the timestep, or `config.first_step`, LAMMPS's
reset_timestep), the one line that says which (`start_line`) and the wafer of one atom per PE
(`md_wafer`: `config.grid` or `mapping.choose_grid`, without `config.mesh_shape` on at most
one device per MIN_PES_PER_DEVICE PEs). `wse_hpc.md.simulate.run_md` starts with them."""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
from wse_core.errors import PlacementError, WseError, is_finite, require_int, shown_setting
from wse_core.hw.wafer import Wafer, build_wafer

from wse_hpc.md import mapping, plan_cache
from wse_hpc.md.config import MdConfig
from wse_hpc.md.integrate import maxwell_boltzmann
from wse_hpc.md.lattice import Structure, check_structure, closest_pair, wrap_into_box
from wse_hpc.md.potentials import EamPotential
from wse_hpc.md.state import Bath
from wse_hpc.md.thermo import kinetic
from wse_hpc.md.xyz import NOSE_HOOVER_KEYS

# Without a mesh_shape, one process spreads the grid over at most one device per this many
# PEs: smaller blocks pay more for their halo exchanges than a second core gives back
# (bench_md on 2 cores: 4k atoms 0.95M atom-steps/s on 1 device, 0.73M on 2; 32k atoms
# 0.79M on 1, 1.37M on 2).
MIN_PES_PER_DEVICE = 8192

# A temperature no EAM metal run reaches while it is physical: 20x the hottest melting point
# of the shipped potentials' elements (W, 3,695 K) is ~7.4e4 K; past it the atoms have flown
# apart (a time step far too long for the forces), so the run stops instead of reporting it.
EXPLODED_TEMPERATURE_K = 1e5

DTYPES = ("float32", "float64")
INT32_MAX = 2**31 - 1
SEED_MAX = 2**63 - 1  # NumPy's and jax.random.key's seeds are 64-bit signed integers
STEP_MAX = 2**63 - 1  # LAMMPS's timestep is a bigint (int64): the last step a run may reach


def _stored_closest_pair(x: np.ndarray, box: np.ndarray):
    """`lattice.closest_pair`, stored on disk by the positions as the plans are (`plan_cache`):
    a periodic k-d tree, ~0.45 s of a warm start with scipy.spatial's import."""
    return plan_cache.cached("pair", (x, box), functools.partial(closest_pair, x, box))


def in_box(structure: Structure) -> Structure:
    """`structure` with its atoms outside the periodic box [0, L) at their images inside
    (`lattice.wrap_into_box`, as LAMMPS remaps atoms on read_data and at a run's start, and
    as `wse hpc md` reads a file; hunt 74: the API refused what the CLI ran), a copy when any
    moved: the caller's structure is left as given."""
    x, box = structure.positions_A, structure.box_A
    if not np.any((x < 0) | (x >= box)):  # NaN and a bad box: `check_box`'s refusals
        return structure
    moved = dataclasses.replace(structure, positions_A=np.array(x, dtype=np.float64))
    wrap_into_box(moved)
    return moved


def prepare(structure: Structure, pot: EamPotential, config: MdConfig):
    check_structure(structure, pair_fn=_stored_closest_pair)  # `config`: `check_config` first
    bath = config.thermostat
    if bath.kind != "none" and bath.damp_fs < config.dt_fs:  # the drag would overshoot: NaN
        raise WseError(
            f"--damp-fs {bath.damp_fs:g} is shorter than the timestep ({config.dt_fs:g} fs): the "
            f"{bath.kind} damping time must be at least one step (LAMMPS advises ~100 steps)"
        )
    species = structure.species(pot.elements)
    masses = np.asarray(pot.masses_amu)
    vel = structure.velocities_A_ps
    if config.temperature_K is not None:
        vel = maxwell_boltzmann(masses[species], config.temperature_K, config.seed)
    elif vel is not None:
        refuse_hot_start(masses[species], vel)
    if vel is None:
        vel = np.zeros_like(structure.positions_A)
    return species, masses, vel


def start_bath(structure: Structure, config: MdConfig) -> Bath | None:
    """The Nosé–Hoover bath (xi, eta) the structure's frame carries (`Structure.info`, from
    the --out of the run that made it), for a Nosé–Hoover run that keeps its velocities, so
    the run goes on as if never stopped (hunt 68: the bath started at rest); else None (at
    rest, as LAMMPS's fix nvt starts without a restart file). A bath of another chain length
    than `config.thermostat.chain` is a WseError naming the --tchain that continues it."""
    kept = config.temperature_K is None and structure.velocities_A_ps is not None
    if config.thermostat.kind != "nose-hoover" or not kept:
        return None
    if not all(k in structure.info for k in NOSE_HOOVER_KEYS):
        return None
    xi, eta = (
        np.atleast_1d(np.asarray(structure.info[k], dtype=config.dtype)) for k in NOSE_HOOVER_KEYS
    )
    if xi.size != config.thermostat.chain:
        raise WseError(
            f"the structure carries a Nose-Hoover chain of {xi.size} (its run's --tchain) and "
            f"this run's is {config.thermostat.chain}: give --tchain {xi.size} to continue that "
            "run, or --create-velocities to start a new one"
        )
    return Bath(xi, eta)


def first_step(structure: Structure, config: MdConfig) -> int:
    """The step the run starts at: `config.first_step` (LAMMPS's `reset_timestep N`), else
    the structure's (a frame's step= or Timestep=: LAMMPS's read_restart keeps the timestep,
    hunt 82: a continued run restarted its Step column at 0), else 0; WseError where the
    run's last step would be past STEP_MAX."""
    given = config.first_step if config.first_step is not None else structure.step
    first = 0 if given is None else given
    name = "first_step" if config.first_step is not None else "the structure's step"
    require_int(name, first, 0, STEP_MAX - config.steps)
    return int(first)


def _steps_line(structure: Structure, config: MdConfig, source: str) -> str:
    """Where the step count starts, when it is not 0 or was set (`first_step`)."""
    first = first_step(structure, config)
    if config.first_step is not None:
        return f"; steps from {first} (reset_timestep {first})"
    if first == 0:
        return ""
    return (
        f"; steps from {first}, {source}'s step (as LAMMPS's read_restart; --reset-timestep N "
        "counts from N)"
    )


_BATH_NAMES = {"langevin": ("Langevin", "damp"), "nose-hoover": ("Nose-Hoover", "Tdamp")}


def _bath_lammps(thermostat) -> str:
    """What the bath is in LAMMPS's words: `fix nvt ... tchain M` (hunt 71: tchain 1 and the
    default chain of 3 give very different runs, 606.8 K against 218.9 K)."""
    if thermostat.kind != "nose-hoover":
        return ""
    m = thermostat.chain
    return f", LAMMPS fix nvt tchain {m}: " + (
        "one chain element" if m == 1 else f"a chain of {m} thermostats"
    )


def start_line(
    structure: Structure, pot: EamPotential, config: MdConfig, source: str = "the structure"
) -> str:
    """Where the run's velocities come from (drawn, the structure's, or none) and the
    thermostat's target, in one line (`source` names the structure): "velocities from
    t.xyz (334.9 K); Nose-Hoover target 600 K (Tdamp 100 fs, LAMMPS fix nvt tchain 3: a
    chain of 3 thermostats)", and the step it starts at where that is not 0 or was set
    ("; steps from 400, t.xyz's step ...")."""
    vel, t_set = structure.velocities_A_ps, config.temperature_K
    masses = np.asarray(pot.masses_amu)[structure.species(pot.elements)]
    with np.errstate(over="ignore", invalid="ignore"):  # `prepare` refuses what overflows
        t_file = None if vel is None else kinetic(masses, vel)[1]
    if t_set is not None:
        line = f"velocities drawn at {t_set:g} K (seed {config.seed}, zero total momentum)"
        line += "" if t_file is None else f", replacing {source}'s ({t_file:.1f} K)"
    elif t_file is not None:
        line = f"velocities from {source} ({t_file:.1f} K)"
        if (bath := start_bath(structure, config)) is not None:
            xi, eta = (" ".join(f"{float(x):.6g}" for x in v) for v in bath)
            line += f" and its Nose-Hoover bath (xi {xi} 1/ps, eta {eta})"
    else:
        line = f"velocities zero: {source} has none"
    bath = config.thermostat
    if bath.kind in _BATH_NAMES:
        name, damp = _BATH_NAMES[bath.kind]
        lammps = _bath_lammps(bath)
        line += f"; {name} target {bath.temperature_K:g} K ({damp} {bath.damp_fs:g} fs{lammps})"
    return line + _steps_line(structure, config, source)


def check_config(config: MdConfig) -> None:
    """WseError naming the setting, what was given and what is allowed, before anything is
    planned or compiled (hunt 65: steps 2.5 ran 3 steps, temperature_K NaN was int(nan) and
    inf compiled and then blamed dt, dtype "int32" an OverflowError, seed -1 NumPy's text)."""
    require_int("steps", config.steps, 0, INT32_MAX)  # the loop counts steps in int32
    require_int("thermo_every", config.thermo_every, 1, INT32_MAX)
    if config.rebuild_every is not None:
        require_int("rebuild_every", config.rebuild_every, 1, INT32_MAX)
    require_int("seed", config.seed, 0, SEED_MAX)
    if config.first_step is not None:  # the structure's step is checked by `first_step`
        require_int("first_step", config.first_step, 0, STEP_MAX - config.steps)
    if config.dtype not in DTYPES:  # a str: the run enables x64 by it (`simulate.run_md`)
        raise WseError(f"dtype must be 'float32' or 'float64', got {shown_setting(config.dtype)}")
    if not is_finite(config.dt_fs) or not config.dt_fs > 0:
        raise WseError(f"the timestep must be positive and finite, got dt = {config.dt_fs} fs")
    if not is_finite(config.skin_A) or not config.skin_A >= 0:  # 0: LAMMPS's neighbor 0.0
        raise WseError(
            f"the neighbour-list skin must be a finite number >= 0 A (0: lists rebuilt "
            f"every step), got {config.skin_A} A"
        )
    t = config.temperature_K
    if t is not None and not (is_finite(t) and 0 <= t < EXPLODED_TEMPERATURE_K):
        raise WseError(
            f"temperature_K must be a number in 0..{EXPLODED_TEMPERATURE_K:.0e} K (past it a "
            f"run stops as blown up), got {shown_setting(t)}"
        )


def refuse_hot_start(masses_amu: np.ndarray, vel: np.ndarray) -> None:
    """A structure's velocities whose temperature (`thermo_row`'s: 3N - 3 degrees of freedom)
    is past `EXPLODED_TEMPERATURE_K` or not finite: refused before the run (hunt 62: vx
    1e300 A/ps printed Temp inf and `"ke": Infinity`, an invalid JSON, and exit 0), naming
    the units the columns are read in (hunt 82: it told the user to give A/ps, as a LAMMPS
    dump extxyz already did)."""
    with np.errstate(over="ignore", invalid="ignore"):  # 1e300 squared: inf, refused below
        _, temp = kinetic(masses_amu, vel)
    if not temp <= EXPLODED_TEMPERATURE_K:  # NaN and inf included
        raise WseError(
            f"the structure's velocities give an initial temperature of {temp:.4g} K, past "
            f"{EXPLODED_TEMPERATURE_K:.0e} K (where a run stops as blown up); check their unit "
            "(velocities:R:3 and a LAMMPS dump extxyz's vel:R:3 are read in A/ps, GPUMD's "
            "vel:R:3 in A/fs, momenta:R:3 as ASE's) or draw new ones (--create-velocities with "
            "--temperature-K)"
        )


def _grid(n_atoms: int, config: MdConfig, spec) -> tuple[int, int]:
    if config.grid is None:
        return mapping.choose_grid(n_atoms, spec.pe_rows, spec.pe_cols)
    rows, cols = (int(g) for g in config.grid)
    if not (0 < rows <= spec.pe_rows and 0 < cols <= spec.pe_cols and rows * cols >= n_atoms):
        raise ValueError(f"grid {rows} x {cols}")
    return rows, cols


def md_wafer(n_atoms: int, config: MdConfig) -> Wafer:
    spec = config.spec
    try:
        grid = _grid(n_atoms, config, spec)
    except ValueError:
        raise PlacementError(
            f"{n_atoms} atoms need {n_atoms} PEs (one atom per PE); the {spec.name} wafer has "
            f"{spec.pe_rows} x {spec.pe_cols} = {spec.num_pes}"
            + ("" if config.grid is None else f", and a grid of {config.grid}")
            + ": use a larger --preset"
        ) from None
    devices = jax.devices()
    if config.mesh_shape is None and jax.process_count() == 1:
        devices = devices[: max(1, min(len(devices), grid[0] * grid[1] // MIN_PES_PER_DEVICE))]
    return build_wafer(
        spec,
        grid=grid,
        mesh_shape=config.mesh_shape,
        devices=devices,
        defect_seed=config.defect_seed,
    )
