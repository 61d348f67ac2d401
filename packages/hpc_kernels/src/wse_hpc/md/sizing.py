"""How big an MD run is, known before anything is allocated: atoms, PEs and host bytes.

Contract. `crystal_atoms(kind, cells)` counts a crystal's atoms; `crystal_bytes(kind, cells)`
is the peak of the host arrays `lattice.crystal` builds (its index grid, fractional and
Cartesian coordinates, symbols); `state_bytes(n_atoms, dtype, spec)` the host arrays the shell
holds for the run (the structure's per-atom arrays, the PE map, the packed per-PE state in
float64 and in the run's dtype, and its placed copy). `check_crystal` / `check_atoms` refuse
before allocating: more atoms than the spec has PEs is a `PlacementError`, more bytes than
the host has a `HostMemoryError`, each naming what would fit. The neighbour lists are
capped separately (`neighbour_plan.LIST_BUDGET_BYTES`) and are not counted here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from wse_core import WaferSpec
from wse_core.errors import PlacementError, WseError
from wse_core.host.memory import format_bytes, largest, require

from wse_hpc.md import mapping
from wse_hpc.md.lattice import BASIS, LATTICES

__all__ = ["crystal_atoms", "crystal_bytes", "state_bytes", "check_crystal", "check_atoms"]


def crystal_atoms(kind: str, cells: Sequence[int]) -> int:
    """Atoms in `cells` = (nx, ny, nz) conventional cells of `kind`."""
    if kind not in BASIS:
        raise WseError(f"unknown lattice {kind!r}; use one of {', '.join(LATTICES)}")
    return math.prod(int(c) for c in cells) * len(BASIS[kind])


def crystal_bytes(kind: str, cells: Sequence[int]) -> int:
    """Peak host bytes of `lattice.crystal`: the int64 cell grid (meshgrid and stack, 2 x
    3 x 8 B per cell, one of them alive at the peak), and per atom float64 fractional,
    scaled and cast coordinates (3 x 24 B) plus the symbol list and array (16 B)."""
    n_cells = math.prod(int(c) for c in cells)
    n = crystal_atoms(kind, cells)
    return 24 * n_cells + 72 * n + 16 * n


def state_bytes(n_atoms: int, dtype: str, spec: WaferSpec) -> int:
    """Host bytes of the run's arrays: per atom the positions, velocities (float64 x 3 each),
    symbols and species; per PE the atom map (int64), the packed state (NFIELDS float64, its
    cast to `dtype`) and the placed copy in `dtype`."""
    rows, cols = mapping.choose_grid(n_atoms, spec.pe_rows, spec.pe_cols)
    pes = rows * cols
    item = np.dtype(dtype).itemsize
    per_atom = 2 * 24 + 8 + 4
    per_pe = 8 + mapping.NFIELDS * (8 + 2 * item)
    return n_atoms * per_atom + pes * per_pe


def _check_pes(n_atoms: int, spec: WaferSpec) -> None:
    try:
        mapping.choose_grid(n_atoms, spec.pe_rows, spec.pe_cols)
    except ValueError:
        raise PlacementError(
            f"{n_atoms:,} atoms need {n_atoms:,} PEs (one atom per PE); the {spec.name} wafer "
            f"has {spec.pe_rows} x {spec.pe_cols} = {spec.num_pes:,}: use a larger --preset "
            f"or at most {spec.num_pes:,} atoms"
        ) from None


def check_atoms(n_atoms: int, dtype: str, spec: WaferSpec) -> None:
    """Refuse `n_atoms` that the spec's PEs or the host memory cannot hold."""
    _check_pes(n_atoms, spec)

    def fits(budget: int) -> str:
        n = largest(lambda k: state_bytes(k, dtype, spec), budget, hi=n_atoms)
        return f"at most {n:,} atoms fit" if n else "not even one atom fits"

    require(f"{n_atoms:,} atoms", state_bytes(n_atoms, dtype, spec), fits=fits)


def check_crystal(kind: str, cells: Sequence[int], dtype: str, spec: WaferSpec) -> None:
    """Refuse a crystal too big for the spec's PEs or the host, before building it."""
    n = crystal_atoms(kind, cells)
    _check_pes(n, spec)
    need = crystal_bytes(kind, cells) + state_bytes(n, dtype, spec)

    def cube_fits(budget: int) -> str:
        side = largest(
            lambda k: (
                crystal_bytes(kind, (k,) * 3)
                + state_bytes(crystal_atoms(kind, (k,) * 3), dtype, spec)
            ),
            budget,
            hi=max(1, int((n / len(BASIS[kind])) ** (1 / 3))),
        )
        if not side:  # a suggestion is always a crystal that passes this check
            return f"not even --cells 1 1 1 fits ({format_bytes(budget)})"
        return f"at most --cells {side} {side} {side} fit ({format_bytes(budget)})"

    require(f"{kind} --cells {' '.join(map(str, cells))} ({n:,} atoms)", need, fits=cube_fits)
