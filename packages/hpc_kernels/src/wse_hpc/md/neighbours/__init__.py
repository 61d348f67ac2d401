"""Per-PE neighbour candidate lists: each PE evaluates the EAM splines only for the atoms of
its window that lie within cutoff + skin (a Verlet list in PE coordinates).

Contract: `neighbour_fns(wafer, pot, plan) -> ListFns` of pure functions over placed fields;
`plan.caps` (one capacity per row offset -k_rows .. k_rows of the window, then the total
M of candidates per PE) and `plan.skin_A` must be set (`neighbour_plan.list_caps` picks them on
the host).

- `build_fn(atoms, geo) -> (Neighbours, overflow)`: one marching multicast of (position,
  species) over the whole window; each PE keeps, per row offset, the window columns of the
  atoms within cutoff + skin (at most `caps[offset]` of them, lowest column first), then
  packs them into M candidates (row offsets in march order), with their species and its
  own position at build time. `overflow` is True when a PE found more candidates than a
  capacity, or when the window's coverage test (`eam.window_overflow` at cutoff + skin) fails: the
  shell then re-plans (never silently wrong).
- Rebuild cadence: the step rebuilds the lists every `nbrs.every` steps (`plan.rebuild_every`
  at a build; the shell may change it between its segments of whole list lifetimes,
  `segments`), whatever the atoms did:
  deciding from the atoms' motion would take a wafer-wide reduction every step.
- `track_fn(atoms, nbrs) -> Neighbours`: each PE's own check, no fabric: `drift2` keeps the
  largest squared displacement of its atom from its build position seen at any step. The
  lists are exact while every atom stays within skin / 2 of its build position (any pair
  within the cutoff then was within cutoff + skin at the build). Skin 0 (LAMMPS's
  `neighbor 0.0`): exact only when rebuilt at every step, the cadence the shell starts it
  at (`simulate.initial_every`); at a longer one any move runs the segment again.
- `drift_fn(nbrs) -> ()`: the largest `drift2` on the wafer (one fabric max reduction), run by
  the shell at each thermo row and segment end: above (skin / 2)^2 some step used stale
  lists (LAMMPS would count a "dangerous build"), and the shell runs the segment again with
  a shorter cadence (never silently wrong).
- `forces_fn(atoms, geo, nbrs) -> EamOutput`: phase 1 multicasts positions over the window
  rows -depth .. depth (depth = the farthest row offset with a capacity); each PE sums its
  density from its candidates and computes F'(rho). Phase 2 multicasts F' and each PE sums
  its force, energy and virial with the pair geometry phase 1 computed (`Pairs`: on the
  wafer kept in SRAM; the emulator keeps it with the density slopes when a block's PEs are
  one chunk, else computes the same values again from the positions' window). One interval
  lookup per pair serves the density, its slope and the pair spline; 1/r is one inverse
  square root of r^2 per pair.

What the wafer moves and what the emulator materializes: on the wafer each multicast is the
marching multicast of Santos et al. (row windows E and W, then steps N and S; 4 words per
PE for a build over the whole window, 3 then 1 in a force evaluation), and each PE keeps
its candidates' values as the slabs pass. The emulator never copies the window to every PE:
`fabric.window_apply` extends each device's block by the window margin (one exchange per
side at block edges) and each PE reads its candidates from that region by index (stored at
build time as `Neighbours.index`), `CHUNK` PEs at a time so the pair arrays stay in cache.
The values a PE computes with are bit for bit those the full multicast would bring it; the
traffic ledger records the whole multicast (words, hops, latency) as the wafer moves it. A
build tests every window slot in place (a bit mask of window columns per row offset).

Empty PEs do no pair work: with `plan.active` set (`neighbour_plan.active_per_block`: the most atoms
any device block holds), a build stores each block's lists with its atom-holding PEs first
(`Neighbours.order` names them) and the forces evaluate only those `active` rows of each
block, not the block's empty and padding PEs (a 256-atom crystal on 17 x 17 PEs: 11% of the
pairs). Atoms never move onto empty PEs (swaps pair two atoms), so a block's count holds
for the plan's life (a re-plan re-maps and counts again); a build that finds more is an
overflow all the same.

Atoms stay on their PEs between builds; `sort_fn` (swaps) runs only before a build. The
build kernel and the static structure the kernels close over (`ListSpec`, derived once per
plan) are in `wse_hpc.md.neighbours.build`; here are the forces and the factory.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from wse_core import fabric
from wse_core.hw.wafer import Wafer

from wse_hpc.md import pe_pairs
from wse_hpc.md.eam import EamOutput, EamPlan, Geometry, window_overflow
from wse_hpc.md.neighbours.build import (
    ListSpec,
    list_spec,
    march_order,
    min_image,
    pe_kernels,
    select,
    select_half,
)
from wse_hpc.md.potentials import EamPotential
from wse_hpc.md.state import Atoms, BuildFn, DriftFn, ListForcesFn, TrackFn

__all__ = [
    "Neighbours",
    "ListFns",
    "neighbour_fns",
    "march_order",
]

# PEs whose pairs are evaluated together (their working set stays in cache). 4096 against
# 2048: a 4,000-atom step 12.0 ms against 13.2 (one chunk: phase 1's geometry kept for
# phase 2), 32,000 atoms 151 against 171 ms (bench_md --cores 1 crystals, one run each)
CHUNK = 4096


class Neighbours(NamedTuple):
    # (R, C, M) int32: where each candidate's PE sits in its block's window region of rows
    # -depth .. depth (`fabric.window_apply`'s region, flattened). With `plan.active` the
    # lists of a block are stored in `order`: its h-th row (block row-major) holds the list
    # of the block's PE `order[h]`
    index: jax.Array
    valid: jax.Array  # (R, C, M) bool
    species: jax.Array  # (R, C, M) int32 of the candidate
    ref: jax.Array  # (R, C, 3) the PE's position at build time (not reordered)
    builds: jax.Array  # () int32: rebuilds since the first build (the step counts them)
    age: jax.Array  # () int32: steps since the last build
    every: jax.Array  # () int32: the rebuild cadence (steps per build)
    drift2: jax.Array  # (R, C) A^2: the PE's largest squared displacement since the build
    # (R, C) int32: per block, the flat block index of the PE whose list row h holds: the
    # atom-holding PEs first, in row-major order (the identity without `plan.active`)
    order: jax.Array


class ListFns(NamedTuple):
    build_fn: BuildFn
    track_fn: TrackFn
    drift_fn: DriftFn
    forces_fn: ListForcesFn
    kernels: tuple[str, ...] = ()  # the FFI targets (numba PE kernels) they call
    # False: a step with these lists never rebuilds them (for steps the shell knows have no
    # rebuild due: the same numbers as the cadence's step, a program without the build)
    rebuild: bool = True


def _by_chunks(fn, size: int, *flat: jax.Array):
    """fn over n PEs, `size` at a time: flat are (n, ...) arrays, fn gets their (size, ...)
    parts and returns (size, ...) arrays, assembled to (n, ...); the last chunk overlaps the
    one before (recomputes a few PEs) instead of padding."""
    n = flat[0].shape[0]
    size = min(size, n)
    count = -(-n // size)
    starts = jnp.minimum(jnp.arange(count, dtype=jnp.int32) * size, n - size)

    def one(start):
        return fn(*(jax.lax.dynamic_slice_in_dim(f, start, size) for f in flat))

    if count == 1:  # no loop for a single chunk
        return fn(*flat)
    tail = n - (count - 1) * size

    def assemble(o):
        return jnp.concatenate([o[:-1].reshape((-1,) + o.shape[2:]), o[-1, size - tail :]])

    return jax.tree.map(assemble, jax.lax.map(one, starts))


def _on_active(fn, active: int, lists, own, order, size: int = CHUNK):
    """fn (by chunks) over the first `active` list rows of a block and the own values of
    the PEs they belong to (`order`). `lists` are (br, bc, M) blocks stored in `order`,
    `own` per PE; fn returns (per-PE results, per-candidate results): the first scattered
    back to (br, bc, ...), 0 on the block's other PEs, the second stored as the lists are
    (rows past `active` 0)."""
    br, bc = order.shape
    n = br * bc

    def flat(a):
        return a.reshape((n,) + a.shape[2:])

    def shaped(o):
        return o.reshape((br, bc) + o.shape[1:])

    if active >= n:  # every PE (lists in row-major order)
        out = _by_chunks(fn, size, *map(flat, lists), *map(flat, own))
        return jax.tree.map(shaped, out)
    at = flat(order)[:active]
    rows = [flat(a)[:active] for a in lists]
    per_pe, per_candidate = _by_chunks(
        fn, size, *rows, *(jnp.take(flat(a), at, axis=0) for a in own)
    )

    def scatter(o):
        return shaped(jnp.zeros((n,) + o.shape[1:], o.dtype).at[at].set(o, unique_indices=True))

    def stored(o):
        return shaped(jnp.concatenate([o, jnp.zeros((n - active,) + o.shape[1:], o.dtype)]))

    return jax.tree.map(scatter, per_pe), jax.tree.map(stored, per_candidate)


def _build(spec: ListSpec, atoms: Atoms, geo: Geometry) -> tuple[Neighbours, jax.Array]:
    """`build_fn`: the window multicast of (position, species), `select` on each block."""
    wafer, kr, kc = spec.wafer, spec.plan.k_rows, spec.plan.k_cols
    pos, held = atoms.position, atoms.species >= 0
    window = atoms.tagged_positions()
    if spec.pe is not None and spec.pe.half:  # one device: each pair's list entry once
        ids = _block_ids(wafer, geo)
        fields = (pos, held, geo.row, geo.col, ids)
        fn, kept = functools.partial(select_half, spec), (ids,)
    else:
        fields, fn, kept = (pos, held, geo.row, geo.col), functools.partial(select, spec), ()
    index, sp_j, count, over, order = fabric.window_apply(
        wafer, window, kr, kc, fn, *fields, kept=kept
    )
    over = fabric.reduce(wafer, (over & held).astype(jnp.int32), "max") > 0
    over = over | window_overflow(wafer, atoms, spec.plan, spec.cutoff + spec.skin)
    nbrs = Neighbours(
        index=index,
        valid=jnp.arange(spec.total) < count[..., None],
        species=jnp.maximum(sp_j, 0).astype(jnp.int32),
        ref=pos,
        builds=jnp.int32(0),
        age=jnp.int32(0),
        every=jnp.int32(spec.plan.rebuild_every),
        drift2=jnp.zeros(held.shape, pos.dtype),
        order=order,
    )
    return nbrs, over


def _block_ids(wafer: Wafer, geo: Geometry) -> jax.Array:
    """Each PE's flat index in its device block (int32): on one device, which PE of a pair
    evaluates it (the larger); emulator bookkeeping, not sent on the wafer."""
    return (geo.row * wafer.block_shape[1] + geo.col).astype(jnp.int32)


def _track(atoms: Atoms, nbrs: Neighbours) -> Neighbours:
    """`track_fn`: the PE's own displacement check (no fabric). The squares summed as
    three planes, not a reduction over the last axis: XLA:CPU ran that (R, C, 3) sum as a
    YNNPACK fusion, 280 us a step at 4,000 atoms (a loaded machine; 5 us without it)."""
    d = atoms.position - nbrs.ref
    dx, dy, dz = (d[..., i] for i in range(3))
    d2 = jnp.where(atoms.species >= 0, dx * dx + dy * dy + dz * dz, 0.0)
    return nbrs._replace(drift2=jnp.maximum(nbrs.drift2, d2))


def _drift(spec: ListSpec, nbrs: Neighbours) -> jax.Array:
    """`drift_fn`: the largest squared displacement since a build on the wafer (A^2)."""
    return fabric.reduce(spec.wafer, nbrs.drift2, "max")


class Pairs(NamedTuple):
    """The geometry of n PEs' candidates, each (n, M): what phase 1 computes once per pair
    and phase 2 reuses (the PE keeps it in SRAM; the emulator keeps it when a block is one
    chunk, else recomputes the same values)."""

    dx: jax.Array  # A, minimum image
    dy: jax.Array
    dz: jax.Array
    r: jax.Array  # A (1 where not valid)
    inv_r: jax.Array  # 1/A
    valid: jax.Array  # bool: a candidate within the cutoff
    k: jax.Array  # int32: the knot interval of r
    p: jax.Array  # its fraction


def _pairs(spec: ListSpec, at, valid, pos, planes) -> Pairs:
    """The pair geometry of n PEs to their candidates (at: their flat places in the window
    region whose x, y, z planes are given). 1/r is one inverse square root of r^2 (on the
    PE: Newton iterations on the FMAC datapath, `perf.PAIR_GEOMETRY`), r = r^2 / r: no
    square root and no division per pair."""
    box, cutoff = spec.box, spec.cutoff
    d = [
        q.reshape(-1).at[at].get(mode="promise_in_bounds") - pos[:, i, None]
        for i, q in enumerate(planes)
    ]
    d = [min_image(di, box[i]) for i, di in enumerate(d)]
    r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2]
    valid = valid & (r2 < cutoff * cutoff)
    r2 = jnp.where(valid, r2, 1.0)
    inv_r = jax.lax.rsqrt(r2)
    r = r2 * inv_r
    k, p = spec.spl.locate_r(r)  # one interval lookup per pair, for every spline
    return Pairs(*d, r, inv_r, valid, k, p)


def _density(spec: ListSpec, region, index, valid, sp_j, order, pos, sp_i):
    """Phase 1 on a block, CHUNK PEs at a time: F'(rho) and the embedding energy, and
    per candidate what phase 2 needs when kept (`spec.keep_pairs`): the pair geometry and
    the densities' slopes rho_j' (and rho_i' with several elements)."""
    spl = spec.spl
    planes = [region[..., i] for i in range(3)]

    def chunk(at, valid, sp_j, pos, sp_i):
        if spec.pe is not None:  # the PEs' own loops (a CPU)
            rho = pe_pairs.density(spec.pe, region.reshape(-1, 3), (at, valid, sp_j), pos, sp_i)
            return spl.embed(rho, sp_i), ()
        g = _pairs(spec, at, valid, pos, planes)
        rho_j = spl.density(sp_j, sp_i[:, None], g.k, g.p)
        rho = jnp.sum(jnp.where(g.valid, rho_j, 0.0), axis=-1)
        if not spec.keep_pairs:
            return spl.embed(rho, sp_i), ()
        slopes = spl.density_slope(sp_j, sp_i[:, None], g.k, g.p)
        if len(spec.pot.elements) > 1:
            slopes = jnp.stack([slopes, spl.density_slope(sp_i[:, None], sp_j, g.k, g.p)], -1)
        return spl.embed(rho, sp_i), (g, slopes)

    lists = (index, valid, sp_j)
    return _on_active(chunk, spec.active, lists, (pos, sp_i), order, spec.chunk)


def _force(spec: ListSpec, fp_region, *rest):
    """Phase 2 on a block: forces, pair energy and virial. rest: with `spec.keep_pairs`
    (index, sp_j, the 8 fields of `Pairs`, slopes, order, pos, sp_i, fp); else (the
    positions' region, index, valid, sp_j, order, pos, sp_i, fp): the geometry again."""
    fp_flat = fp_region.reshape(-1)
    if spec.keep_pairs:
        lists, (order, *own) = rest[:11], rest[11:]
    else:
        planes = [rest[0][..., i] for i in range(3)]
        lists, (order, *own) = rest[1:4], rest[4:]

    def chunk(at, *cand_and_own):
        *cand, pos, sp_i, fp = cand_and_own
        if spec.keep_pairs:
            sp_j, g, s = cand[0], Pairs(*cand[1:9]), cand[9]
            both = (s[..., 0], s[..., 1]) if s.ndim == 3 else (s, s)
        elif spec.pe is not None:  # the PEs' own loops (a CPU)
            xyz, fpr = rest[0].reshape(-1, 3), fp_flat
            return pe_pairs.force(spec.pe, xyz, fpr, (at, *cand), (pos, sp_i, fp)), ()
        else:
            valid, sp_j = cand
            g, both = _pairs(spec, at, valid, pos, planes), None
        fp_j = fp_flat.at[at].get(mode="promise_in_bounds")
        psip, phi = spec.spl.pair(fp[:, None], fp_j, sp_i[:, None], sp_j, g.k, g.p, g.inv_r, both)
        psip = jnp.where(g.valid, psip, 0.0)
        scale = psip * g.inv_r
        f = jnp.stack([jnp.sum(scale * di, axis=-1) for di in (g.dx, g.dy, g.dz)], axis=-1)
        pair_e = 0.5 * jnp.sum(jnp.where(g.valid, phi, 0.0), axis=-1)
        return (f, pair_e, -0.5 * jnp.sum(psip * g.r, axis=-1)), ()

    return _on_active(chunk, spec.active, lists, tuple(own), order, spec.chunk)[0]


def _half(spec: ListSpec, pos, sp_i, geo: Geometry, nbrs: Neighbours):
    """Both phases on one device's block with each pair once (`pe_pairs.density_half`,
    `force_half`): the same window multicasts; the block indices of the region's PEs come
    with them (emulator bookkeeping, not sent on the wafer)."""
    wafer, depth, kc, pe, active = spec.wafer, spec.depth, spec.plan.k_cols, spec.pe, spec.active
    ids = _block_ids(wafer, geo)
    lists = (nbrs.index, nbrs.valid, nbrs.species)

    def density(region, ids_region, *fields):
        *lists, order, pos, sp_i = fields
        regions = (region, ids_region)
        rho, cut = pe_pairs.density_half(pe, regions, lists, order, (pos, sp_i), active)
        return spec.spl.embed(rho, sp_i), cut

    (fp, emb), cut = fabric.window_apply(
        wafer, pos, depth, kc, density, *lists, nbrs.order, pos, sp_i, kept=(ids,)
    )

    def force(fp_region, pos_region, ids_region, *fields):
        *lists, places, count, order, pos, sp_i, fp = fields
        regions = (pos_region, fp_region, ids_region)
        cut = (places, count)
        return pe_pairs.force_half(pe, regions, lists, cut, order, (pos, sp_i, fp), active)

    own = (*cut, nbrs.order, pos, sp_i, fp)
    return emb, fabric.window_apply(wafer, fp, depth, kc, force, *lists, *own, kept=(pos, ids))


def _forces(spec: ListSpec, atoms: Atoms, geo: Geometry, nbrs: Neighbours) -> EamOutput:
    """`forces_fn`: phase 1 (`_density`) over the positions' window, phase 2 (`_force`)
    over F''s (each pair once with `pe_pairs` on one core: `_half`)."""
    wafer, depth, kc = spec.wafer, spec.depth, spec.plan.k_cols
    density, force = functools.partial(_density, spec), functools.partial(_force, spec)
    pos, sp = atoms.position, atoms.species
    held = sp >= 0
    sp_i = jnp.maximum(sp.astype(jnp.int32), 0)
    lists = (nbrs.index, nbrs.valid, nbrs.species)
    own = (nbrs.order, pos, sp_i)
    if spec.pe is not None and spec.pe.half:
        emb, (forces, pair_e, virial) = _half(spec, pos, sp_i, geo, nbrs)
        energy = jnp.where(held, emb + pair_e, 0.0)
        forces = jnp.where(held[..., None], forces, 0.0)
        return EamOutput(forces, energy, jnp.where(held, virial, 0.0), jnp.bool_(False))
    # phase 1: the candidates' positions (the window multicast, filtered)
    (fp, emb), kept = fabric.window_apply(wafer, pos, depth, kc, density, *lists, *own)
    # phase 2: their F' (with the geometry phase 1 kept, or the positions' window again)
    if spec.keep_pairs:
        g, slopes = kept
        args, again = (nbrs.index, nbrs.species, *g, slopes), ()
    else:
        args, again = lists, (pos,)
    forces, pair_e, virial = fabric.window_apply(
        wafer, fp, depth, kc, force, *args, *own, fp, kept=again
    )
    energy = jnp.where(held, emb + pair_e, 0.0)
    forces = jnp.where(held[..., None], forces, 0.0)
    return EamOutput(forces, energy, jnp.where(held, virial, 0.0), jnp.bool_(False))


def neighbour_fns(wafer: Wafer, pot: EamPotential, plan: EamPlan) -> ListFns:
    """Build, displacement checks and list forces for `pot` with `plan`'s window, caps and
    rebuild cadence."""
    spec = list_spec(wafer, pot, plan, CHUNK)

    def build_fn(atoms: Atoms, geo: Geometry) -> tuple[Neighbours, jax.Array]:
        return _build(spec, atoms, geo)

    def drift_fn(nbrs: Neighbours) -> jax.Array:
        return _drift(spec, nbrs)

    def forces_fn(atoms: Atoms, geo: Geometry, nbrs: Neighbours) -> EamOutput:
        return _forces(spec, atoms, geo, nbrs)

    return ListFns(build_fn, _track, drift_fn, forces_fn, pe_kernels(spec))
