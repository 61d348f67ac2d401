"""`wse hpc md`'s inputs checked against each other before anything runs: the thermostat's
options (declared: `THERMOSTATS`, `TCHAIN`; checked: `check_bath`), a second file after
--potential (`MdGroup`), the --out name (`check_out_name`), the structure (`read_structure`:
a file or a --lattice crystal, sized against the wafer and the host) and where the
velocities come from (`check_velocities`). Each refusal is one line (`fail`, exit 2); NumPy
only, so they come before JAX's import (hunt 57)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from wse_cli.errors import WseGroup, fail
from wse_cli.options import number, typed

__all__ = [
    "THERMOSTATS",
    "TCHAIN",
    "MdGroup",
    "check_bath",
    "check_out_name",
    "check_velocities",
    "read_potential_for",
    "read_structure",
]


# hunt 71: "LAMMPS fix nvt" alone was read as its default chain of 3 while the integrator held
# one; hunt 74: the chain is --tchain, 3 by default as LAMMPS's
THERMOSTATS = ("none (NVE) | langevin (LAMMPS fix langevin) | nose-hoover (LAMMPS fix nvt: "
               "a chain of --tchain thermostats, 3 as LAMMPS's default)")  # fmt: skip
TCHAIN = number(
    3,
    "--tchain",
    help="Nose-Hoover chain length (LAMMPS fix nvt's tchain keyword, default 3; 1: a single "
    "thermostat). A --out frame carries the chain; continue it with the same --tchain.",
    kind=int,
    ge=1,
    le=100,  # wse_hpc.md.integrate.MAX_CHAIN: the chain unrolls into the step
)


class MdGroup(WseGroup):
    """`wse hpc md`'s group: a word after --potential's file is no subcommand, --potential
    takes one file a time (hunt 73: `--potential Cu.eam Ni.eam` said "No such command
    'Ni.eam'")."""

    def resolve_command(self, ctx: typer.Context, args: list[str]):  # type: ignore[override]
        if args and args[0] not in self.commands and ctx.params.get("potential"):
            fail(
                f"{args[0]!r} is no argument of `wse hpc md`: --potential takes one file; repeat "
                "--potential for each funcfl file (--potential a.eam --potential b.eam)"
            )
        return super().resolve_command(ctx, args)


def check_bath(ctx: typer.Context, thermostat: str, temperature_k: float | None) -> None:
    """A thermostat needs its target, and --damp-fs a thermostat (hunt 65: langevin without
    --temperature-K ran a bath at 0 K without a word; --damp-fs under none changed nothing).
    LAMMPS's fix langevin and fix nvt take Tstart Tstop as required arguments."""
    if thermostat in ("langevin", "nose-hoover") and temperature_k is None:
        fail(f"--thermostat {thermostat} needs --temperature-K (its target)")
    if thermostat == "none" and typed(ctx, "damp_fs"):
        fail("--damp-fs applies to --thermostat langevin or nose-hoover")
    if thermostat != "nose-hoover" and typed(ctx, "tchain"):
        fail(f"--tchain applies to --thermostat nose-hoover (LAMMPS fix nvt), not {thermostat}")


def read_structure(path, lattice, element, a, cells, dtype, spec, notes=None):
    """The input structure; its atoms are checked against the wafer's PEs and the host
    memory before the crystal (or the run) is allocated. `notes` gets a line when the
    file's positions were shifted by its Origin (hunt 68: OVITO's key was ignored), when
    atoms outside the periodic box were wrapped into it, as LAMMPS's read_data does (hunt 73:
    they were refused), and when its velocities are a LAMMPS dump extxyz's vel:R:3, read in
    A/ps (hunt 82: read as GPUMD's A/fs)."""
    from wse_hpc.md import crystal
    from wse_hpc.md.lattice import check_box, wrap_into_box
    from wse_hpc.md.sizing import check_atoms, check_crystal
    from wse_hpc.md.xyz import read_frames

    if (path is None) == (lattice is None):
        fail("give either --structure FILE.xyz or --lattice with --element, --a and --cells")
    if path is not None:
        _refuse_lattice_options(element, a, cells)
        if not path.is_file():
            from wse_core.host.readers import not_regular

            fail(f"structure file {str(path)!r} {not_regular(path) or 'does not exist'}")
        s, origin, lammps = read_frames(path)[-1]
        if lammps and s.velocities_A_ps is not None and notes is not None:  # hunt 82
            notes.append(
                f"{path.name}: a LAMMPS dump extxyz (its Timestep= key): vel:R:3 read in A/ps, "
                "LAMMPS units metal (GPUMD's vel:R:3, with no Timestep=, is A/fs)"
            )
        if origin.any() and notes is not None:
            notes.append(
                f"{path.name}: positions shifted by -Origin ({', '.join(f'{v:g}' for v in origin)}"
                ") A into the box [0, L), where the run and --out keep them"
            )
        check_atoms(s.num_atoms, dtype, spec)
        if (wrapped := wrap_into_box(s)) and notes is not None:
            notes.append(
                f"{path.name}: {wrapped:,} atom{'s' if wrapped > 1 else ''} outside the periodic "
                "box [0, L) wrapped to their images inside (as LAMMPS's read_data remaps them)"
            )
        check_box(s)  # before JAX's import (hunt 57); the run checks the closest pair
        return s
    if element is None or a is None or cells is None or None in cells:
        fail("--lattice needs --element, --a and --cells NX NY NZ")
    if not element.strip():
        fail("--element must name an element (e.g. Cu), got an empty string")
    if min(cells) < 1:
        fail(f"--cells must be positive integers, got {' '.join(map(str, cells))}")
    check_crystal(lattice, cells, dtype, spec)
    return crystal(lattice, element, a, cells)


def _refuse_lattice_options(element, a, cells) -> None:
    """--structure's atoms come from the file: a --lattice crystal's options given with it
    were dropped without a word (hunt 65)."""
    options = {"--element": element, "--a": a, "--cells": cells}
    if given := [name for name, value in options.items() if value is not None]:
        names = given[0] if len(given) == 1 else f"{', '.join(given[:-1])} and {given[-1]}"
        verb, them = ("builds", "it") if len(given) == 1 else ("build", "them")
        fail(f"{names} {verb} a --lattice crystal; leave {them} out with --structure")


OUT_SUFFIXES = (".xyz", ".extxyz", ".xyz.gz", ".extxyz.gz")


def check_out_name(out: Path | None) -> None:
    """--out names what it writes: extended XYZ, gzipped for .gz (hunt 68: `t.lammpstrj`,
    `t.dump`, `t.data` and `t.xyz.gz` were plain extended XYZ that tools choosing their
    reader by the suffix, zcat and ASE, could not read)."""
    if out is None or str(out) == os.devnull or out.name.lower().endswith(OUT_SUFFIXES):
        return
    stem = out.name.split(".")[0] or "traj"
    fail(
        f"--out {out}: wse writes extended XYZ: name it *.xyz or *.extxyz (*.xyz.gz to gzip "
        f"it), then convert it: a LAMMPS data file of the last frame with `ase convert -n -1 "
        f"-o lammps-data {stem}.xyz {stem}.data --write-args velocities=True`, a LAMMPS dump "
        "with OVITO's export"
    )


def check_velocities(ctx, s, path, thermostat, temperature_k, create) -> bool:
    """Whether the run draws its velocities (LAMMPS's `velocity all create`): when
    --temperature-K is given and the structure has none, or with --create-velocities; a
    file's velocities are kept otherwise. Refused: --create-velocities without its
    temperature, an NVE --temperature-K that would do nothing, and --seed where nothing is
    drawn (hunt 68, as --damp-fs is under --thermostat none)."""
    has = s.velocities_A_ps is not None
    name = path.name if path is not None else "the --lattice crystal"
    if create and temperature_k is None:
        fail("--create-velocities draws velocities at --temperature-K: give it (e.g. 300)")
    draw = temperature_k is not None and (create or not has)
    if has and not draw and thermostat == "none" and temperature_k is not None:
        fail(
            f"--temperature-K {temperature_k:g} does nothing here: {name}'s velocities are kept "
            "(LAMMPS draws new ones only with `velocity all create`) and --thermostat none has "
            f"no target; add --create-velocities to draw new ones at {temperature_k:g} K, or "
            "leave --temperature-K out"
        )
    if typed(ctx, "seed") and not draw and thermostat != "langevin":
        keeps = f"keeps {name}'s velocities" if has else "starts from zero velocities"
        fail(f"--seed applies to drawn velocities or --thermostat langevin; this run {keeps} "
             "and draws nothing")  # fmt: skip
    return draw


def read_potential_for(
    s, paths: list[Path], knots: int | None, notes: list[str], *, temperature_k=None, seed=0
):
    """The potential of `paths` with only the elements `s` uses (hunt 68: NiAlH_jea on pure
    Ni was refused for Al's and H's tables), resampled to `knots` (--potential-knots) with a
    line in `notes` saying what that costs on `s`: where its forces vanish by symmetry (a
    --lattice crystal), on a copy displaced as at the run's --temperature-K, with its --seed
    (the command's own options; hunt 76: "force 1.6e-15 eV/A" on the perfect lattice)."""
    from wse_hpc.md import read_potential

    species = list(dict.fromkeys(s.symbols.tolist()))  # names a funcfl file of atomic number 0
    pot = read_potential(paths[0] if len(paths) == 1 else paths, species=species)
    s.species(pot.elements)  # every element has parameters: refused before the first line
    pot = pot.restricted(set(s.symbols.tolist()))
    _note_masses(s, pot, notes)
    if knots is None:
        return pot
    from wse_hpc.md.resample import resample, resample_cost

    new = resample(pot, knots)
    notes.append(resample_cost(pot, new, s, temperature_K=temperature_k, seed=seed).line())
    return new


def _note_masses(s, pot, notes: list[str]) -> None:
    """A line when the file's masses column differs from the potential's masses, which the
    run uses (LAMMPS's pair_coeff sets them; hunt 73: nothing said that ASE momenta were
    divided by the other masses)."""
    if s.masses_amu is None:
        return
    import numpy as np

    ours = np.asarray(pot.masses_amu)[s.species(pot.elements)]
    differ = np.nonzero(~np.isclose(s.masses_amu, ours, rtol=1e-6, atol=0.0))[0]
    if differ.size == 0:
        return
    i = int(differ[0])
    read = (
        "; velocities from momenta:R:3 were read with the file's"
        if s.velocities_A_ps is not None
        else ""
    )
    notes.append(
        f"the structure's masses:R:1 differ from the potential's ({s.symbols[i]}: "
        f"{s.masses_amu[i]:g} in the file, {ours[i]:g} amu in {pot.source}; {differ.size:,} "
        f"atoms): the run uses the potential's, as LAMMPS's pair_coeff sets them{read}"
    )
