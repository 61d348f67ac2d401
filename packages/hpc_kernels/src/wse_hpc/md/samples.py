"""The 801,792-atom crystals of Santos et al. (arXiv:2405.07898) and their plans on a wafer.

Contract. `slab(element, pot, cells_z)` is the sample as we read the published map: a
(001) slab `cells_z` cells thick of fcc Cu or bcc W / Ta, laid so that the tile map
(`mapping.initial_map`) is exact on the GRID of 696 x 1152 PEs (= 801,792: one atom per PE,
no empty PE): each projected lattice site holds `cells_z` atoms, one tile of th x tw PEs
(th * tw = cells_z), fcc with 2 site lines per cell along x and y, bcc with 2 along x and 1
along y. `cube(element, pot)` is the near-cubic crystal of the same atoms that the
emulator's own defaults map onto a near-square grid (`mapping.choose_grid`; the tile
`TILES[0]`, where `choose_tile` would start: its search over TILES takes about a minute
per tile at this size and is left out).
`plan(sample, spec)` plans either on a wafer spec (the map, the window for cutoff + skin, the
list capacities: host side, nothing allocated); a sample larger than the wafer keeps the
grid's rows and is priced with the spec's per-PE costs (`fits` False). It is `layout` (the
grid on the spec: the wafer, and whether it fits) and `window` (the plan on that grid, which
depends on nothing else of the spec: one crystal planned once for wafers of the same grid).

What the paper's text gives and what it does not (its body was not reachable here, only its
abstract; REFERENCES.md lists the inputs): 801,792 atoms of W, Cu and Ta; one atom per core;
a locality-preserving 3D -> 2D map, atom swaps, a systolic marching multicast, neighbour
lists. Not given (assumed, and swept by `wse_hpc.studies.santos24_md`): the slab's thickness
(CELLS_Z: the thinnest whose box exceeds twice the cutoff, which the emulator's minimum
image needs), its lattice orientation, the grid (696 x 1152 is our inference from the atom
count: it factors exactly and fits WSE-3's 762 x 1176), the temperature (THERMAL_SIGMA_A:
~300 K displacements) and the list skin (`MdConfig.skin_A`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import numpy as np
from wse_core import WaferSpec
from wse_core.hw.wafer import Wafer, build_wafer

from wse_hpc.md import mapping, resample
from wse_hpc.md.config import MdConfig
from wse_hpc.md.eam import EamPlan
from wse_hpc.md.lattice import Structure
from wse_hpc.md.neighbour_plan import plan_window, reach_pairs
from wse_hpc.md.testing import perturbed

__all__ = [
    "ATOMS",
    "GRID",
    "CELLS_Z",
    "KINDS",
    "CUBES",
    "THERMAL_SIGMA_A",
    "Sample",
    "Planned",
    "lattice_A",
    "tile_for",
    "slab",
    "cube",
    "layout",
    "window",
    "plan",
    "max_hits",
]

ATOMS = 801_792
GRID = (696, 1152)  # PE rows, columns: 696 x 1152 = 801,792
CELLS_Z = 4  # assumption: the slab's thickness in cells (swept)
KINDS = {"Cu": "fcc", "W": "bcc", "Ta": "bcc"}
# the near-cubic crystals of 801,792 atoms: fcc 64 x 58 x 54 cells (x 4), bcc 87 x 72 x 64 (x 2)
CUBES = {"Cu": (64, 58, 54), "W": (87, 72, 64), "Ta": (87, 72, 64)}
# the displacements of a ~300 K crystal (0.07 A rms per axis), for the map and the lists
THERMAL_SIGMA_A = resample.THERMAL_SIGMA_A


class Sample(NamedTuple):
    """A crystal, its pairs within cutoff + skin (by atom id) and the grid and tile its map
    uses (None: the emulator's defaults on the wafer)."""

    element: str
    geometry: str  # "slab <n> cells" or "cube"
    structure: Structure
    pairs: np.ndarray
    grid: tuple[int, int] | None
    tile: tuple[int, int]


class Planned(NamedTuple):
    wafer: Wafer
    plan: EamPlan
    fits: bool


def lattice_A(pot, kind: str) -> float:
    """The cubic lattice constant: Zhou 2004 tabulates sqrt(2) r_e (fcc); bcc has 2 r_e /
    sqrt(3)."""
    a_fcc = pot.lattice_A[0]
    return a_fcc if kind == "fcc" else a_fcc * math.sqrt(2.0 / 3.0)


def tile_for(kind: str, cells_z: int) -> tuple[int, int]:
    """The most nearly square tile (th <= tw, th * tw = cells_z) whose site lines divide
    GRID: th | 348 (fcc) or 696 (bcc) rows, tw | 576 columns."""
    rows = GRID[0] // 2 if kind == "fcc" else GRID[0]
    fits = [
        (th, cells_z // th)
        for th in range(1, cells_z + 1)
        if cells_z % th == 0 and rows % th == 0 and (GRID[1] // 2) % (cells_z // th) == 0
    ]
    if not fits:
        raise ValueError(f"no tile of {cells_z} PEs lays a {kind} slab on {GRID}")
    return min(fits, key=lambda t: (abs(t[1] - t[0]), t[0] > t[1]))


def _found(element, geometry, s, pot, grid, tile, skin_A) -> Sample:
    reach = pot.cutoff_A + skin_A
    pairs = reach_pairs(s.positions_A.astype(np.float32), s.box_A, reach)
    return Sample(element, geometry, s, pairs, grid, tile)


def slab(
    element: str, pot, cells_z: int = CELLS_Z, seed: int = 0, skin_A: float = MdConfig.skin_A
) -> Sample:
    """The (001) slab of `element`, `cells_z` cells thick, laid for GRID (module docstring),
    with its pairs within the cutoff + `skin_A`."""
    kind = KINDS[element]
    th, tw = tile_for(kind, cells_z)
    nx = GRID[1] // (2 * tw)
    ny = GRID[0] // (2 * th) if kind == "fcc" else GRID[0] // th
    a = lattice_A(pot, kind)
    s = perturbed(kind, element, a, (nx, ny, cells_z), THERMAL_SIGMA_A, seed=seed)
    assert s.num_atoms == ATOMS, s.num_atoms
    return _found(element, f"slab {cells_z} cells", s, pot, GRID, (th, tw), skin_A)


def cube(element: str, pot, seed: int = 0, skin_A: float = MdConfig.skin_A) -> Sample:
    """The near-cubic crystal of `element` (CUBES), mapped as the emulator maps by default,
    with its pairs within the cutoff + `skin_A`."""
    kind = KINDS[element]
    s = perturbed(kind, element, lattice_A(pot, kind), CUBES[element], THERMAL_SIGMA_A, seed)
    assert s.num_atoms == ATOMS, s.num_atoms
    return _found(element, "cube", s, pot, None, mapping.TILES[0], skin_A)


def max_hits(sample: Sample, cutoff_A: float) -> int:
    """The most neighbours within `cutoff_A` of any atom (N_h of the busiest PE: one atom
    per PE), from the sample's pairs (found within a larger reach), by minimum image in
    float64 (one numba loop, `reach_counts_numba.hits_within`: 5-11 s in NumPy, hunt 76)."""
    from wse_hpc.md.reach_counts_numba import hits_within  # numba: imported where used

    s = sample.structure
    box = np.asarray(s.box_A, dtype=np.float64)
    pos = np.mod(np.asarray(s.positions_A, dtype=np.float64), box)
    counts = np.zeros(s.num_atoms, np.int64)
    pairs = np.ascontiguousarray(sample.pairs, dtype=np.int64)
    hits_within(np.ascontiguousarray(pos), box, pairs, float(cutoff_A) ** 2, counts)
    return int(counts.max())


def layout(grid: tuple[int, int] | None, spec: WaferSpec) -> tuple[Wafer, bool]:
    """The wafer (one device) a sample laid for `grid` (`Sample.grid`; None: the emulator's
    defaults on `spec`) is planned on, and whether it fits `spec` (module docstring)."""
    if grid is None and ATOMS <= spec.num_pes:
        grid = mapping.choose_grid(ATOMS, spec.pe_rows, spec.pe_cols)
    elif grid is None:  # the preset's rows, as many columns as the atoms need
        grid = (spec.pe_rows, -(-ATOMS // spec.pe_rows))
    fits = grid[0] <= spec.pe_rows and grid[1] <= spec.pe_cols
    if not fits:
        spec = spec.replace(pe_rows=max(grid[0], spec.pe_rows), pe_cols=max(grid[1], spec.pe_cols))
    return build_wafer(spec, grid=grid, mesh_shape=(1, 1), devices=jax.devices()[:1]), fits


def window(sample: Sample, wafer: Wafer, pot, config: MdConfig) -> EamPlan:
    """The plan of `sample` mapped onto `wafer`'s grid (`layout`): it depends on the wafer
    only through that grid. `config` gives the skin (the sample's pairs must be for it) and
    the dtype."""
    s, grid = sample.structure, (wafer.rows, wafer.cols)
    pos = mapping.rewrap(s.positions_A, s.box_A).astype(np.float32)  # as `pairs` were found
    state = mapping.pack(
        mapping.initial_map(pos, grid, s.box_A, sample.tile),
        pos,
        np.zeros(s.num_atoms, np.int32),
        dtype=np.float32,
    )
    return plan_window(state, s.box_A, pot, config, wafer, host_lists=False, pairs=sample.pairs)


def plan(sample: Sample, spec: WaferSpec, pot, config: MdConfig | None = None) -> Planned:
    """(wafer, plan, fits) for `sample` on a wafer of `spec` (module docstring); `config`
    gives the skin (the sample's pairs must be for it) and the dtype (default: MdConfig's)."""
    wafer, fits = layout(sample.grid, spec)
    return Planned(wafer, window(sample, wafer, pot, config or MdConfig(spec=spec)), fits)
