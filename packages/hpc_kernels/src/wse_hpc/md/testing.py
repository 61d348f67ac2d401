"""Shared helpers for the MD tests and the benchmark: small perturbed crystals and the
paths of the LAMMPS potential files used as local test data (never shipped)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wse_hpc.md.lattice import Structure, crystal

__all__ = ["perturbed", "lammps_potential", "LAMMPS_POTENTIALS"]

LAMMPS_POTENTIALS = Path("/usr/share/lammps/potentials")


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


def lammps_potential(name: str) -> Path | None:
    """A potential file from Debian's lammps-data, or None when it is not installed."""
    p = LAMMPS_POTENTIALS / name
    return p if p.is_file() else None
