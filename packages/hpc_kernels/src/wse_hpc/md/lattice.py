"""Structures: atoms in a periodic orthorhombic box, and fcc / bcc / hcp crystals.

A `Structure` holds symbols (N,), positions (N, 3) in Angstrom, the box side lengths (3,) in
Angstrom (origin at 0; periodic in x, y, z) and optionally velocities (A/ps), forces (eV/A),
per-atom energies (eV) and masses (amu), `info`, the numbers an extended XYZ comment line
carries besides them (the Nosé–Hoover bath of the run that wrote it: `wse_hpc.md.xyz`), and
`images`, each atom's periodic image flags (LAMMPS's ix iy iz: the unwrapped position is
positions + images * box; a run's frames carry them, so a trajectory gives displacements).
`crystal(kind, symbol, a_A, cells)` builds `cells` = (nx, ny, nz)
conventional cells: fcc and bcc cubes of side a, hcp in its orthorhombic 4-atom cell
a x sqrt(3) a x c (ideal c/a unless given).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence

import numpy as np
from wse_core.errors import WseError, shown

__all__ = [
    "Structure",
    "crystal",
    "LATTICES",
    "check_box",
    "check_structure",
    "closest_pair",
    "wrap_into_box",
]

LATTICES = ("fcc", "bcc", "hcp")

BASIS = {
    "fcc": np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]]),
    "bcc": np.array([[0, 0, 0], [0.5, 0.5, 0.5]]),
    "hcp": np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 5 / 6, 0.5], [0, 1 / 3, 0.5]]),
}


@dataclasses.dataclass
class Structure:
    symbols: np.ndarray  # (N,) str
    positions_A: np.ndarray  # (N, 3) float64
    box_A: np.ndarray  # (3,)
    velocities_A_ps: np.ndarray | None = None
    forces_eV_A: np.ndarray | None = None
    energies_eV: np.ndarray | None = None
    masses_amu: np.ndarray | None = None  # (N,): the run's, or a file's masses column
    info: dict[str, float | tuple[float, ...]] = dataclasses.field(
        default_factory=dict
    )  # as ASE's Atoms.info
    images: np.ndarray | None = None  # (N, 3) int64, LAMMPS's ix iy iz (module docstring)
    # the time step the structure is at (a run's frame: its step; LAMMPS's ntimestep), from
    # which a run continued from it counts (`MdConfig.first_step`); None: not from a run
    step: int | None = None

    @property
    def num_atoms(self) -> int:
        return int(self.positions_A.shape[0])

    @property
    def volume_A3(self) -> float:
        return float(np.prod(self.box_A))

    def species(self, elements: Sequence[str]) -> np.ndarray:
        """Indices of each atom's symbol in `elements`; an absent element is a WseError."""
        lookup = {e: i for i, e in enumerate(elements)}
        missing = sorted(set(self.symbols.tolist()) - set(lookup))
        if missing:
            raise WseError(
                f"the potential has no parameters for {_listed(missing)} (it has "
                f"{_listed(list(elements))})"
            )
        return np.array([lookup[s] for s in self.symbols.tolist()], dtype=np.int32)


def _listed(names: Sequence[str]) -> str:
    """At most five names, each cut at 20 characters, and how many in all (hunt 61: a line
    named all 1,000 elements of a potential)."""
    head = ", ".join(m if len(m) <= 20 else m[:20] + "..." for m in names[:5])
    return head + (f", ... ({len(names):,} in all)" if len(names) > 5 else "")


def crystal(
    kind: str, symbol: str, a_A: float, cells: Sequence[int], c_A: float | None = None
) -> Structure:
    """A perfect crystal of `cells` conventional cells (fcc, bcc or hcp)."""
    if kind not in BASIS:
        raise WseError(f"unknown lattice {kind!r}; use one of {', '.join(LATTICES)}")
    if not a_A > 0:
        raise WseError(f"the lattice constant must be positive, got {a_A}")
    nx, ny, nz = _cells(cells)
    if kind == "hcp":
        cell = np.array([a_A, math.sqrt(3) * a_A, c_A or math.sqrt(8 / 3) * a_A])
    else:
        cell = np.array([a_A, a_A, a_A])
    grid = np.stack(np.meshgrid(np.arange(nx), np.arange(ny), np.arange(nz), indexing="ij"), -1)
    frac = grid.reshape(-1, 1, 3) + BASIS[kind][None]
    positions = (frac.reshape(-1, 3) * cell).astype(np.float64)
    box = cell * np.array([nx, ny, nz])
    return Structure(np.array([symbol] * len(positions)), positions, box)


def _cells(cells: Sequence[int]) -> tuple[int, int, int]:
    """(nx, ny, nz), or WseError: three whole counts of 1 or more, 4.0 read as 4 (hunt 65:
    4.9 was cut to 4, NaN was a traceback)."""
    seq = isinstance(cells, Sequence | np.ndarray) and not isinstance(cells, str)
    given = tuple(cells) if seq else (cells,)
    if len(given) != 3 or not all(map(_whole_count, given)):
        got = shown(" ".join(str(given).split()), quote=False)  # one line, cut at 60
        raise WseError(f"cells must be three positive integers (NX NY NZ), got {got}")
    return int(given[0]), int(given[1]), int(given[2])


def _whole_count(c: object) -> bool:
    real = isinstance(c, numbers.Real) and not isinstance(c, bool)
    return real and math.isfinite(c) and c >= 1 and int(c) == c


MAX_BOX_A = 1e6  # 0.1 mm: 10^4 x the box of the largest run that fits a wafer (~100 A)


def check_structure(s: Structure, *, min_distance_A: float = 0.5, pair_fn=None) -> None:
    """Atoms inside the box [0, L) (`check_box`) and no two closer than `min_distance_A`
    (else WseError); `pair_fn(x, box) -> (i, j, r)`, when given, is `closest_pair`'s value
    found another way (the MD shell's: stored on disk by the positions, `plan_cache`)."""
    check_box(s)
    x, box = s.positions_A, s.box_A
    i, j, r = (pair_fn or closest_pair)(x, box)
    if r < min_distance_A:
        raise WseError(f"atoms {i} and {j} overlap: {r:.4f} A apart (minimum {min_distance_A} A)")


def check_box(s: Structure) -> None:
    """Box sides in (0, MAX_BOX_A], every position finite and inside the box [0, L) (else
    WseError): NumPy only, one pass over the positions (`wse hpc md` checks a structure file
    with it before JAX is imported; the closest pair waits for the run's cached one)."""
    x, box = s.positions_A, s.box_A
    if not np.all((box > 0) & (box <= MAX_BOX_A)):  # NaN fails too
        raise WseError(
            f"box sides must be positive and at most {MAX_BOX_A:g} A, got {box.tolist()}"
        )
    bad = np.nonzero(~np.all(np.isfinite(x), axis=1))[0]
    if bad.size:
        raise WseError(
            f"atom {int(bad[0])} has position {x[bad[0]].tolist()}: positions must be finite "
            f"numbers ({bad.size} atoms are not)"
        )
    outside = np.nonzero(np.any((x < 0) | (x >= box), axis=1))[0]
    if outside.size:
        i = int(outside[0])
        raise WseError(
            f"atom {i} at {[float(f'{v:.6g}') for v in x[i]]} lies outside the box [0, L) with L = "
            f"{box.tolist()} ({outside.size} atoms outside); wrap positions into the box "
            f"(`wrap_into_box`, as LAMMPS's read_data, takes those within {MAX_BOX_A:g} A: "
            "farther, a position's place in the box is lost to rounding)"
        )


def wrap_into_box(s: Structure) -> int:
    """Put each finite position outside [0, L) at its periodic image inside, in place, as
    LAMMPS's read_data remaps atoms of a periodic box (and ASE writes pbc files unwrapped);
    returns how many atoms moved. A value that rounds to L after the wrap (-1e-17 mod L) is
    put at 0 (hunt 73: such files, and a coordinate printed as exactly L, were refused).
    Only coordinates within MAX_BOX_A (a double's spacing there: 1e-10 A) are wrapped;
    `check_box` refuses farther ones, and non-finite ones, as it refuses a bad box. The image
    flags count the boxes each moved atom crossed (a new `images` array, zeros where there
    was none), as read_data's remap counts them: the unwrapped positions stay as given."""
    x, box = s.positions_A, s.box_A
    if not np.all((box > 0) & np.isfinite(box)):
        return 0
    near = np.all(np.abs(x) <= MAX_BOX_A, axis=1)  # NaN is not near
    outside = near & np.any((x < 0) | (x >= box), axis=1)
    if outside.any():
        w = np.mod(x[outside], box)
        w = np.where(w >= box, 0.0, w)
        images = np.zeros(x.shape, np.int64) if s.images is None else s.images.astype(np.int64)
        images[outside] += np.rint((x[outside] - w) / box).astype(np.int64)
        x[outside], s.images = w, images
    return int(outside.sum())


def closest_pair(x: np.ndarray, box: np.ndarray) -> tuple[int, int, float]:
    """The closest pair under minimum image, with a cKDTree on the periodic box."""
    from scipy.spatial import cKDTree

    if len(x) < 2:
        return 0, 0, math.inf
    tree = cKDTree(np.mod(x, box), boxsize=box)
    dist, idx = tree.query(np.mod(x, box), k=2)
    i = int(np.argmin(dist[:, 1]))
    j = int(idx[i, 1]) if idx[i, 1] != i else int(idx[i, 0])  # a duplicate may come first
    return i, j, float(dist[i, 1])
