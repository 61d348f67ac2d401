"""Shared helpers for the MD tests and the benchmark: small perturbed crystals and the
LAMMPS potential files used as local test data (never shipped).

The potential directory is, in order: `$WSE_LAMMPS_POTENTIALS`; LAMMPS's own
`$LAMMPS_POTENTIALS`; `share/lammps/potentials` beside the `lmp` on PATH (a Debian or conda
install); the `potentials` folder the Debian package `lammps-data` lists (`dpkg -L`). None
when none exists: the tests that need it skip, saying why (`lammps_potentials_missing`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from wse_hpc.md.lattice import Structure, crystal

__all__ = [
    "perturbed",
    "lammps_potential",
    "lammps_potentials_dir",
    "lammps_potentials_missing",
    "POTENTIALS_ENV",
]

POTENTIALS_ENV = "WSE_LAMMPS_POTENTIALS"


def perturbed(
    kind: str,
    symbol: str,
    a_A: float,
    cells,
    sigma_A: float,
    seed: int,
    symbols: tuple[str, ...] | None = None,
) -> Structure:
    """A crystal with Gaussian displacements, wrapped into the box; `symbols` alternates
    the species atom by atom."""
    s = crystal(kind, symbol, a_A, cells)
    rng = np.random.default_rng(seed)
    s.positions_A = np.mod(
        s.positions_A + rng.normal(scale=sigma_A, size=s.positions_A.shape), s.box_A
    )
    if symbols:
        s.symbols = np.array([symbols[i % len(symbols)] for i in range(s.num_atoms)])
    return s


def _debian_potentials() -> list[Path]:
    """The `potentials` folders `dpkg -L lammps-data` lists (none without dpkg)."""
    if shutil.which("dpkg") is None:
        return []
    listing = subprocess.run(
        ["dpkg", "-L", "lammps-data"], capture_output=True, text=True, check=False
    ).stdout
    return [Path(line) for line in listing.splitlines() if line.endswith("/potentials")]


@functools.cache
def lammps_potentials_dir() -> Path | None:
    """The first existing potential directory of the module docstring's order, or None."""
    candidates = [os.environ.get(POTENTIALS_ENV), os.environ.get("LAMMPS_POTENTIALS")]
    lmp = shutil.which("lmp")
    if lmp is not None:
        candidates.append(str(Path(lmp).resolve().parent.parent / "share/lammps/potentials"))
    paths = [Path(c) for c in candidates if c] + _debian_potentials()
    return next((p for p in paths if p.is_dir()), None)


def lammps_potential(name: str) -> Path | None:
    """The LAMMPS potential file `name` (e.g. "Cu_u3.eam"), or None when it is not found."""
    folder = lammps_potentials_dir()
    p = folder / name if folder is not None else None
    return p if p is not None and p.is_file() else None


def lammps_potentials_missing(name: str) -> str | None:
    """Why `lammps_potential(name)` is None (a skip reason), or None when it is found."""
    if lammps_potential(name) is not None:
        return None
    folder = lammps_potentials_dir()
    where = f"{folder} has no {name}" if folder else "no LAMMPS potential directory found"
    return (
        f"{where}: install lammps-data (apt-get install lammps-data) or set "
        f"{POTENTIALS_ENV} to a folder holding {name}"
    )
