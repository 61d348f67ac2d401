"""The wafer EAM kernel: one atom per PE, neighbour data by fabric multicast over a window.

Contract: `eam(wafer, pot, plan)` returns an `EamFns` of pure functions over `Atoms`.

- `forces_fn(atoms, geometry) -> EamOutput`: phase 1 multicasts (position, species) over the
  window of (2 k_rows + 1) x (2 k_cols + 1) PEs (E/W first, then N/S of the gathered row
  window), each PE sums its density and computes F'(rho); phase 2 multicasts F'(rho) over the
  same window and each PE sums its force, energy (F(rho) + phi / 2) and virial. Interpolation
  is LAMMPS's (same knots, same clamps). `overflow` is True when some atom's neighbours
  within the cutoff may lie outside the window: the coverage test bounds, with column and row
  extremes gathered by fabric reductions and doubling shifts, the distance from every atom to
  every PE outside its window, so a True is never missed (never silently wrong); the shell
  then re-plans a larger window or re-maps.
- `sort_fn(atoms, geometry) -> Atoms`: one odd-even transposition sweep that swaps atoms between
  neighbouring PEs (rows by x, then columns by y), so the map stays local as atoms move; a
  swap moves the atom's packed record (`Atoms.record`, NFIELDS words).

Positions are kept unwrapped (distances use the minimum image), so the order of atoms along
rows and columns never jumps at the box boundary. The box is orthorhombic and periodic; every
side must exceed twice the cutoff.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from wse_core import fabric
from wse_core.errors import SramBudgetError, WseError
from wse_core.hw.wafer import Wafer

from wse_hpc.md.mapping import NFIELDS, SPECIES
from wse_hpc.md.potentials import MIN_KNOTS, EamPotential
from wse_hpc.md.splines import splines_for
from wse_hpc.md.state import Atoms, ForcesFn, SortFn

__all__ = [
    "EamPlan",
    "EamOutput",
    "EamFns",
    "Geometry",
    "eam",
    "geometry",
    "sram_plan",
    "table_bytes",
    "knots_that_fit",
]


@dataclasses.dataclass(frozen=True)
class EamPlan:
    """Static choices: the neighbour window, the box and the float dtype; for neighbour
    lists (`wse_hpc.md.neighbours`) the skin, one candidate capacity per row offset, the most
    atoms any device block holds (`active`, 0: not known; the list kernel then computes
    every PE of a block, empty ones included) and the rebuild cadence a build starts with
    (steps per build)."""

    k_rows: int
    k_cols: int
    box_A: tuple[float, float, float]
    dtype: str = "float32"
    skin_A: float = 0.0
    caps: tuple[int, ...] = ()
    active: int = 0
    rebuild_every: int = 10

    @property
    def window_pes(self) -> int:
        return (2 * self.k_rows + 1) * (2 * self.k_cols + 1)


class Geometry(NamedTuple):
    """Placed int32 fields of each PE's logical row and column index."""

    row: jax.Array
    col: jax.Array


class EamOutput(NamedTuple):
    forces: jax.Array  # (rows, cols, 3) eV/A
    energy: jax.Array  # (rows, cols) eV per atom
    virial: jax.Array  # (rows, cols) eV, sum of r_ij . f_ij / 2 over j
    overflow: jax.Array  # () bool


class EamFns(NamedTuple):
    forces_fn: ForcesFn
    sort_fn: SortFn


def geometry(wafer: Wafer) -> Geometry:
    return Geometry(*wafer.pe_coords())


def table_bytes(pot: EamPotential, knots: int | None = None) -> int:
    """SRAM bytes per PE of `pot`'s tables, fp32 knot values (`sram_plan`), each table cut
    to at most `knots` knots as `wse_hpc.md.resample` cuts it (None: as they are)."""
    ne = len(pot.elements)
    n_rho_tables = ne * ne if pot.kind == "fs" else ne
    nrho, nr = (pot.nrho, pot.nr) if knots is None else (min(pot.nrho, knots), min(pot.nr, knots))
    return 4 * (ne * nrho + (n_rho_tables + ne * (ne + 1) // 2) * nr)


def knots_that_fit(pot: EamPotential, free_bytes: int) -> int:
    """The most knots per table whose tables fit `free_bytes` (0: not even MIN_KNOTS)."""
    lo, hi = MIN_KNOTS - 1, max(pot.nrho, pot.nr)  # table_bytes(lo) fits, by convention
    if table_bytes(pot, MIN_KNOTS) > free_bytes:
        return 0
    while lo < hi:  # bisection: the bytes grow with the knots
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if table_bytes(pot, mid) <= free_bytes else (lo, mid - 1)
    return lo


def sram_plan(wafer: Wafer, pot: EamPotential, plan: EamPlan) -> dict[str, int]:
    """Declare the per-PE SRAM: atom state, the marching row-window buffers, the tables and,
    with neighbour lists, the candidates.

    Tables are stored as fp32 knot values (4 B per knot); a PE rebuilds a knot's cubic from
    the six values around it, as LAMMPS's `interpolate` does, so the tables need
    (F: n_e + rho: n_e or n_e^2 + z2r: n_e (n_e + 1) / 2) knots. Over budget is a
    SramBudgetError from the ledger.
    """
    sizes = {
        "md.atom": NFIELDS * 4 + 4 * 4,  # packed state + rho, fp, energy, virial
        # marching: a PE holds its own row window and the two passing through (N and S),
        # each 2 k_cols + 1 PEs of x, y, z, species (and F' in phase 2), never the whole window
        "md.row_windows": 3 * (2 * plan.k_cols + 1) * 5 * 4,
        "md.tables": table_bytes(pot),
    }
    if plan.caps:  # neighbour lists: a column word per window slot kept, and per candidate
        # its slot, species, the geometry phase 2 reuses (displacement (3), r, 1/r, knot and
        # fraction), the density slope and F'_j
        sizes["md.neighbours"] = 4 * (sum(plan.caps[:-1]) + 11 * plan.caps[-1]) + 3 * 4
    for name in sizes:
        if any(a.name == name for a in wafer.sram.allocations):
            wafer.sram.free(name)
    for name, nbytes in sizes.items():
        # the tables are what a user can shrink (--potential-knots): told with the room the
        # neighbour lists after them leave (hunt 68: the most that "fit" then did not)
        room = wafer.sram.free_bytes() - sizes.get("md.neighbours", 0)
        if name == "md.tables" and nbytes > room:
            lists, note = "md.neighbours" in sizes, wafer.sram.reserve_note()
            raise SramBudgetError(_tables_too_big(pot, nbytes, room, lists, note))
        wafer.sram.allocate(name, nbytes)
    return sizes


def _tables_too_big(pot: EamPotential, nbytes: int, free: int, lists: bool, note: str) -> str:
    """Hunt 68: the advice was `wse hpc md potential --knots N`, which writes Zhou's 2004
    potential, not the user's file resampled; and unused elements' tables counted. Hunt 78:
    a library caller (`run_md`) has no --potential-knots: `resample.resample` is its route."""
    ne, fit = len(pot.elements), knots_that_fit(pot, free)
    head = (
        f"the tables of {pot.source or 'the potential'} need {nbytes} B per PE ({pot.nrho} x "
        f"{pot.nr} knots, {ne} element{'s' * (ne > 1)}: {', '.join(pot.elements)}) but {free} "
        f"B are free after the atom state, window buffers{' and neighbour lists' * lists}"
        f"{note}"
    )
    if not fit:
        return f"{head}; not even {MIN_KNOTS}-knot tables would fit"
    return (
        f"{head}; resample them with --potential-knots {fit} (the most that fit: each table "
        "is cut to that many knots with LAMMPS's splines, and the error it costs is printed), "
        f"or in Python wse_hpc.md.resample.resample(potential, {fit})"
    )


# -- fabric patterns -------------------------------------------------------------------------
def _row_window(wafer: Wafer, x: jax.Array, kc: int) -> jax.Array:
    """(R, C, F) -> (R, C, F, 2kc+1): the values of the PEs c - kc .. c + kc of each row,
    by a multicast west and east."""
    row = x[:, :, None]
    if kc:
        west = fabric.multicast(wafer, x, "E", kc, boundary="periodic")  # from c - 1 - j
        east = fabric.multicast(wafer, x, "W", kc, boundary="periodic")  # from c + 1 + j
        row = jnp.concatenate([west[:, :, ::-1], row, east], axis=2)
    return jnp.swapaxes(row, 2, 3)


def _march(wafer: Wafer, row: jax.Array, kr: int, acc, visit):
    """Systolic marching multicast north and south (Santos et al.): every PE's row window
    moves one PE per step, so after d steps each PE holds the row windows of the PEs d rows
    up and d rows down. `visit(acc, slab, is_own_row)` folds each slab into `acc` as it
    passes, so no PE stores more than one slab per direction."""
    acc = visit(acc, row, True)
    if kr == 0:
        return acc

    def body(_, carry):
        up, down, acc = carry
        up = fabric.shift(wafer, up, "S", boundary="periodic")  # now from d rows up
        down = fabric.shift(wafer, down, "N", boundary="periodic")  # from d rows down
        return up, down, visit(visit(acc, up, False), down, False)

    return jax.lax.fori_loop(0, kr, body, (row, row, acc))[2]


def _arc_bounds(wafer, lo_field, hi_field, k: int, direction: str, length: float):
    """Min of lo_field and max of hi_field over the PEs k + 1 .. n - k - 1 further along
    `direction`'s axis (the lines outside a +-k window), unrolled: `length` added past the
    wrap."""
    n = wafer.rows if direction == "N" else wafer.cols
    width, start = n - 2 * k - 1, k + 1
    lo = fabric.sliding_extreme(
        wafer, lo_field, "min", direction, width, start=start, wrap_add=length
    )
    hi = fabric.sliding_extreme(
        wafer, hi_field, "max", direction, width, start=start, wrap_add=length
    )
    return lo, hi - length


def window_overflow(wafer, atoms: Atoms, plan: EamPlan, cutoff: float):
    """True when some atom may have a neighbour within `cutoff` outside its window.

    x: every atom on a column outside the window lies between that arc's column extremes
    (fabric allreduce per column, then a sliding extreme along the row). y: every atom in the
    window's columns but on a row outside it lies within the extremes of that rectangle
    (sliding extremes along the row over the window's columns, then along the column over
    the row arc). A gap <= cutoff on either side is an overflow. The sliding extremes are
    `fabric.sliding_extreme` (doubling shifts on the PEs; one region per block here).
    """
    held = atoms.species >= 0
    big = jnp.asarray(jnp.inf, atoms.position.dtype)
    x, y = atoms.position[..., 0], atoms.position[..., 1]
    gaps = []
    if wafer.cols - 2 * plan.k_cols - 1 > 0:
        lo = -fabric.allreduce(wafer, jnp.where(held, -x, -big), "max", axis="col")
        hi = fabric.allreduce(wafer, jnp.where(held, x, -big), "max", axis="col")
        lo, hi = _arc_bounds(wafer, lo, hi, plan.k_cols, "W", plan.box_A[0])
        gaps.append(jnp.minimum(lo - x, x - hi))
    if wafer.rows - 2 * plan.k_rows - 1 > 0:
        kc = plan.k_cols
        lo_y, hi_y = jnp.where(held, y, big), jnp.where(held, y, -big)
        if kc:  # extremes over the window's columns c - kc .. c + kc (no unrolling in y)
            lo_y = fabric.sliding_extreme(wafer, lo_y, "min", "W", 2 * kc + 1, start=-kc)
            hi_y = fabric.sliding_extreme(wafer, hi_y, "max", "W", 2 * kc + 1, start=-kc)
        lo, hi = _arc_bounds(wafer, lo_y, hi_y, plan.k_rows, "N", plan.box_A[1])
        gaps.append(jnp.minimum(lo - y, y - hi))
    if not gaps:
        return jnp.bool_(False)
    bad = held & (functools.reduce(jnp.minimum, gaps) <= cutoff)
    return fabric.reduce(wafer, bad.astype(jnp.int32), "max") > 0


# -- the two EAM phases ----------------------------------------------------------------------
def _pairs(pos_i, sp_i, slab, box, cutoff: float, own_row: bool, kc: int):
    """Displacements (R, C, 3, M) to a slab's atoms, distances and their inverses (R, C, M)
    and the pair mask."""
    d = slab[:, :, :3] - pos_i[..., None]
    d = d - box[:, None] * jnp.round(d * (1.0 / box[:, None]))
    r2 = jnp.sum(d * d, axis=2)
    valid = (sp_i[..., None] >= 0) & (slab[:, :, 3] >= 0) & (r2 < cutoff * cutoff)
    if own_row:
        valid = valid & (jnp.arange(slab.shape[-1]) != kc)
    inv_r = jax.lax.rsqrt(jnp.where(valid, r2, 1.0))
    return d, jnp.where(valid, r2, 1.0) * inv_r, inv_r, valid


def eam(wafer: Wafer, pot: EamPotential, plan: EamPlan) -> EamFns:
    """The EAM forces and the swap sort for `pot` on `wafer` with `plan`'s window."""
    if any(b <= 2 * pot.cutoff_A for b in plan.box_A):
        raise WseError(
            f"every box side must exceed twice the cutoff ({2 * pot.cutoff_A:.3f} A); "
            f"the box is {list(plan.box_A)} A: use more cells"
        )
    kr, kc = plan.k_rows, plan.k_cols
    if 2 * kr + 1 > wafer.rows or 2 * kc + 1 > wafer.cols:
        raise WseError(f"window +-{kr} x +-{kc} PEs exceeds the {wafer.rows} x {wafer.cols} grid")
    dtype = jnp.dtype(plan.dtype)
    spl = splines_for(pot, dtype)
    cutoff = pot.cutoff_A
    box = jnp.asarray(np.array(plan.box_A), dtype)

    def species(x):
        return jnp.maximum(x.astype(jnp.int32), 0)

    def forces_fn(atoms: Atoms, geo: Geometry) -> EamOutput:
        pos, sp = atoms.position, atoms.species
        sp_i = species(sp)[..., None]

        def density(acc, slab, own_row):
            _, r, _, valid = _pairs(pos, sp, slab, box, cutoff, own_row, kc)
            k, p = spl.locate_r(r)
            rho_j = spl.density(species(slab[:, :, 3]), sp_i, k, p)
            return acc + jnp.sum(jnp.where(valid, rho_j, 0.0), axis=-1)

        row = _row_window(wafer, atoms.tagged_positions(), kc)
        rho = _march(wafer, row, kr, jnp.zeros(sp.shape, dtype), density)
        fp, emb = spl.embed(rho, species(sp))

        def force(acc, slab, own_row):  # phase 2: slab rows x, y, z, species, F'
            d, r, inv_r, valid = _pairs(pos, sp, slab, box, cutoff, own_row, kc)
            k, p = spl.locate_r(r)
            sp_j = species(slab[:, :, 3])
            psip, phi = spl.pair(fp[..., None], slab[:, :, 4], sp_i, sp_j, k, p, inv_r)
            psip = jnp.where(valid, psip, 0.0)
            f, e, v = acc
            return (
                f + jnp.sum((psip * inv_r)[:, :, None] * d, axis=-1),
                e + 0.5 * jnp.sum(jnp.where(valid, phi, 0.0), axis=-1),
                v - 0.5 * jnp.sum(psip * r, axis=-1),
            )

        packed = jnp.concatenate([atoms.tagged_positions(), fp[..., None]], axis=-1)
        zero = jnp.zeros(sp.shape, dtype)
        acc = (jnp.zeros(pos.shape, dtype), zero, zero)
        forces, pair_e, virial = _march(wafer, _row_window(wafer, packed, kc), kr, acc, force)
        energy = jnp.where(sp >= 0, emb + pair_e, 0.0)
        return EamOutput(forces, energy, virial, window_overflow(wafer, atoms, plan, cutoff))

    def sort_fn(atoms: Atoms, geo: Geometry) -> Atoms:
        record = atoms.record()
        for axis, key, parity in ((1, 0, 0), (1, 0, 1), (0, 1, 0), (0, 1, 1)):
            record = _exchange(wafer, record, axis, key, parity, geo)
        return Atoms.of(record)

    return EamFns(forces_fn, sort_fn)


def _exchange(wafer, state, axis: int, key: int, parity: int, geo: Geometry):
    """One odd-even transposition phase along `axis` of packed records: pairs (i, i + 1)
    with i % 2 == parity swap their atoms when the first has the larger `key` coordinate."""
    index = geo.col if axis == 1 else geo.row
    n = (wafer.rows, wafer.cols)[axis]
    nxt = fabric.shift(wafer, state, "W" if axis == 1 else "N")  # from index + 1
    prv = fabric.shift(wafer, state, "E" if axis == 1 else "S")  # from index - 1
    first = (index % 2 == parity) & (index + 1 < n)
    second = (index % 2 != parity) & (index >= 1)
    mine = state[..., key]
    # empty PEs stay put (atoms do not pass through them), so short columns keep their spread
    real = state[..., SPECIES] >= 0
    take_next = first & real & (nxt[..., SPECIES] >= 0) & (mine > nxt[..., key])
    take_prev = second & real & (prv[..., SPECIES] >= 0) & (prv[..., key] > mine)
    out = jnp.where(take_next[..., None], nxt, state)
    return jnp.where(take_prev[..., None], prv, out)
