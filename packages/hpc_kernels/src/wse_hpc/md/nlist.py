"""Per-PE neighbour candidate lists: each PE evaluates the EAM splines only for the atoms of
its window that lie within cutoff + skin (a Verlet list in PE coordinates).

Contract: `neighbour_fns(wafer, pot, plan) -> ListFns` of pure functions over placed fields;
`plan.caps` (one capacity per row offset -k_rows .. k_rows of the window, then the total
M of candidates per PE) and `plan.skin_A` must be set (`list_caps` picks them on the host).

- `build_fn(state, geo) -> (Neighbours, overflow)`: one marching multicast of (position,
  species) over the whole window; each PE keeps, per row offset, the window columns of the
  atoms within cutoff + skin (at most `caps[offset]` of them), then packs them into M
  candidates, each named by its window slot (`fabric.window`'s numbering over the rows
  -depth .. depth, depth = the farthest row offset with a capacity), with their species and
  its own position at build time. `overflow` is True when a PE found more candidates than a
  capacity, or when the window's coverage test (`eam._overflow` at cutoff + skin) fails: the
  shell then re-plans (never silently wrong).
- `moved_fn(state, nbrs) -> bool`: some atom moved more than skin / 2 since the build (a
  fabric max reduction); the lists stay exact until then (any pair within the cutoff now was
  within cutoff + skin at the build), so the step rebuilds them when this is True.
- `forces_fn(state, geo, nbrs) -> EamOutput`: phase 1 brings each PE its candidates'
  positions, sums its density and computes F'(rho); phase 2 brings it their F' (the PE kept
  the displacements and the spline interval of each pair from phase 1) and sums forces,
  energy and virial. One interval lookup per pair serves the density, its slope and the pair
  spline.

What the wafer moves and what the emulator materializes: on the wafer each phase is the
marching multicast of Santos et al. over the window rows -depth .. depth (row windows E and
W, then `depth` steps N and S; 3 words then 1 word per PE), and each PE keeps its
candidates' values as the slabs pass. The emulator delivers only the candidate slots
(`fabric.window`: one halo exchange at device-block edges, then a gather by slot), so a PE
computes with bit-for-bit the values the full multicast would bring it, while the traffic
ledger records the whole multicast (words, hops, latency) as the wafer moves it.

Atoms stay on their PEs between builds; `sort_fn` (swaps) runs only before a build.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.spatial import cKDTree
from wse_core import fabric
from wse_core.errors import WseError
from wse_core.wafer import Wafer

from wse_hpc.md.eam import (
    EamOutput,
    EamPlan,
    Geometry,
    _coeffs,
    _locate,
    _overflow,
    _row_window,
    _slope,
    _tables,
    _value,
)
from wse_hpc.md.mapping import SPECIES
from wse_hpc.md.potentials import EamPotential

__all__ = ["Neighbours", "ListFns", "neighbour_fns", "list_caps", "march_order"]

barrier = jax.lax.optimization_barrier


class Neighbours(NamedTuple):
    slot: jax.Array  # (R, C, M) int32: window slot of each candidate (`fabric.window` numbering)
    valid: jax.Array  # (R, C, M) bool
    species: jax.Array  # (R, C, M) int32 of the candidate
    ref: jax.Array  # (R, C, 3) the PE's position at build time
    builds: jax.Array  # () int32: rebuilds since the first build (the step counts them)


class ListFns(NamedTuple):
    build_fn: object
    moved_fn: object
    forces_fn: object


def march_order(k_rows: int) -> list[int]:
    """Row offsets in the order the march delivers them: own row, then -1, +1, -2, +2, ..."""
    out = [0]
    for d in range(1, k_rows + 1):
        out += [-d, d]
    return out


def list_caps(
    state_np: np.ndarray,
    box_A,
    reach_A: float,
    k_rows: int,
    k_cols: int,
    headroom: float = 1.25,
) -> tuple[int, ...]:
    """Capacities for a mapped state: one per row offset (-k_rows .. k_rows), then the total
    M: the most atoms within `reach_A` any PE has at that offset (in all), times `headroom`,
    plus 2, at most the window's 2 k_cols + 1 columns per offset; 0 beyond the farthest
    offset in use. Host side, with a periodic k-d tree."""
    box = np.asarray(box_A, dtype=np.float64)
    held = state_np[..., SPECIES] >= 0
    rr, _ = np.nonzero(held)
    pos = np.mod(np.asarray(state_np[held][:, :3], dtype=np.float64), box)
    pos = np.where(pos >= box, 0.0, pos)
    pairs = cKDTree(pos, boxsize=box).query_pairs(reach_A, output_type="ndarray")
    rows, n_off = state_np.shape[0], 2 * k_rows + 1
    counts = np.zeros(pos.shape[0] * n_off, dtype=np.int64)
    for a, b in ((0, 1), (1, 0)):
        d = (rr[pairs[:, b]] - rr[pairs[:, a]] + rows // 2) % rows - rows // 2
        keep = np.abs(d) <= k_rows
        counts += np.bincount(pairs[keep, a] * n_off + d[keep] + k_rows, minlength=counts.size)
    counts = counts.reshape(-1, n_off)
    most = counts.max(axis=0) if pos.size else np.zeros(n_off, np.int64)
    caps = np.minimum(np.ceil(most * headroom).astype(np.int64) + 2, 2 * k_cols + 1)
    used = np.nonzero(most > 0)[0]
    reach = int(np.abs(used - k_rows).max()) if used.size else 0
    caps[np.abs(np.arange(n_off) - k_rows) > reach] = 0
    total = int(np.ceil(counts.sum(axis=1).max(initial=0) * headroom)) + 2
    return tuple(int(c) for c in caps) + (min(total, int(caps.sum())),)


def _segments(caps: tuple[int, ...], k_rows: int) -> dict[int, tuple[int, int]]:
    """Row offset -> (first slot, capacity), slots in march order."""
    out, start = {}, 0
    for off in march_order(k_rows):
        out[off] = (start, caps[off + k_rows])
        start += caps[off + k_rows]
    return out


def _march(wafer: Wafer, row: jax.Array, depth: int, visit) -> None:
    """The marching multicast of row windows (as `eam._march`, unrolled): `visit(slab,
    offset)` sees every slab as it passes."""
    visit(row, 0)
    up = down = row
    for d in range(1, depth + 1):
        up = fabric.shift(wafer, up, "S", boundary="periodic")  # from d rows up
        down = fabric.shift(wafer, down, "N", boundary="periodic")  # from d rows down
        visit(up, -d)
        visit(down, d)


def _compact(ok: jax.Array, cap: int, *values: jax.Array):
    """The first `cap` True entries of each PE's ok (R, C, L): their positions, the values
    there (R, C, cap) each, and the count of True (R, C). With the inclusive cumulative sum
    cs, the (s + 1)-th True sits at #{j : cs_j <= s} (a sum of comparisons, no search)."""
    n = ok.shape[-1]
    cs = jnp.cumsum(ok.astype(jnp.int32), axis=-1)
    s = jnp.arange(cap, dtype=jnp.int32)[:, None]
    at = jnp.sum((cs[..., None, :] <= s).astype(jnp.int32), axis=-1)  # (R, C, cap)
    at = jnp.minimum(at, n - 1)
    picked = [at] + [jnp.take_along_axis(v, at, axis=-1) for v in values]
    return picked, cs[..., -1]


def _pack(counts: jax.Array, caps: list[int], total: int):
    """Slots of the packed candidates (R, C, total) when segment i (of capacity caps[i])
    holds counts[..., i] of them at its start: candidate t lies in the segment whose
    cumulative count first exceeds t."""
    kept = jnp.minimum(counts, jnp.asarray(caps, jnp.int32))
    ends = jnp.cumsum(kept, axis=-1)  # (R, C, S)
    t = jnp.arange(total, dtype=jnp.int32)
    seg = jnp.sum(ends[..., None, :] <= t[:, None], axis=-1)  # (R, C, total)
    seg = jnp.minimum(seg, len(caps) - 1)
    first = np.concatenate([[0], np.cumsum(caps)[:-1]]).astype(np.int32)
    shift = jnp.asarray(first) - (ends - kept)  # static slot start - packed start
    slot = t + jnp.take_along_axis(shift, seg, axis=-1)
    return jnp.clip(slot, 0, int(sum(caps)) - 1), ends[..., -1]


def neighbour_fns(wafer: Wafer, pot: EamPotential, plan: EamPlan) -> ListFns:
    """Build, displacement check and list forces for `pot` with `plan`'s window and caps."""
    kr, kc = plan.k_rows, plan.k_cols
    if len(plan.caps) != 2 * kr + 2 or not plan.skin_A > 0:
        raise WseError("a neighbour-list plan needs skin_A > 0 and 2 k_rows + 2 capacities")
    dtype = jnp.dtype(plan.dtype)
    tab = _tables(pot, dtype)
    ne, nr, nrho = len(pot.elements), pot.nr, pot.nrho
    inv_dr, inv_drho, rhomax = 1.0 / pot.dr, 1.0 / pot.drho, pot.rhomax
    cutoff, skin = pot.cutoff_A, plan.skin_A
    reach2 = (cutoff + skin) ** 2
    box = jnp.asarray(np.array(plan.box_A), dtype)
    caps, total = plan.caps[:-1], plan.caps[-1]
    segs = _segments(caps, kr)
    depth = max((abs(off) for off, (_, c) in segs.items() if c), default=0)
    used_caps = [segs[off][1] for off in march_order(kr) if segs[off][1]]
    width = 2 * kc + 1
    if total == 0:
        raise WseError("no atom has a neighbour within the cutoff + skin")

    def knot(a, b, k):
        return (a * ne + b) * nr + k if ne > 1 else k

    def min_image(d, b=box):  # b: the box, shaped to broadcast along d's x, y, z axis
        return d - b * jnp.round(d * (1.0 / b))

    def build_fn(state: jax.Array, geo: Geometry):
        pos, sp = state[..., :3], state[..., SPECIES]
        held = sp >= 0
        cols, counts, species = [], [], []
        over = jnp.zeros(held.shape, jnp.bool_)  # per PE: a capacity exceeded
        js = jnp.arange(2 * kc + 1)

        def visit(slab, off):
            nonlocal over
            d = min_image(slab[:, :, :3] - pos[..., None], box[:, None])
            ok = held[..., None] & (slab[:, :, 3] >= 0) & (jnp.sum(d * d, axis=2) < reach2)
            if off == 0:
                ok = ok & (js != kc)
            cap = caps[off + kr]
            if not cap:
                over = over | jnp.any(ok, axis=-1)
                return
            (col, spj), count = _compact(ok, cap, slab[:, :, 3])
            over = over | (count > cap)
            cols.append((off + depth) * width + col)  # the slot in the depth x kc window
            counts.append(count)
            species.append(spj)

        _march(wafer, _row_window(wafer, state[..., [0, 1, 2, SPECIES]], kc), kr, visit)
        pick, count = _pack(jnp.stack(counts, axis=-1), used_caps, total)
        over = over | (count > total)
        over = fabric.reduce(wafer, (over & held).astype(jnp.int32), "max") > 0
        over = over | _overflow(wafer, state, geo, plan, cutoff + skin)
        sp_j = jnp.take_along_axis(jnp.concatenate(species, axis=2), pick, axis=2)
        nbrs = Neighbours(
            jnp.take_along_axis(jnp.concatenate(cols, axis=2), pick, axis=2),
            jnp.arange(total) < count[..., None],
            jnp.maximum(sp_j, 0).astype(jnp.int32),
            pos,
            jnp.int32(0),
        )
        return nbrs, over

    def moved_fn(state: jax.Array, nbrs: Neighbours) -> jax.Array:
        held = state[..., SPECIES] >= 0
        d = state[..., :3] - nbrs.ref
        moved = jnp.where(held, jnp.sum(d * d, axis=-1), 0.0)
        return fabric.reduce(wafer, moved, "max") > (0.5 * skin) ** 2

    def forces_fn(state: jax.Array, geo: Geometry, nbrs: Neighbours) -> EamOutput:
        pos, sp = state[..., :3], state[..., SPECIES]
        held = sp >= 0
        sp_i = jnp.maximum(sp.astype(jnp.int32), 0)[..., None]
        # phase 1: the positions of the candidates (the window multicast, filtered)
        got = fabric.window(wafer, pos, nbrs.slot, depth, kc)  # (R, C, M, 3)
        d = min_image(got - pos[:, :, None, :])
        r2 = jnp.sum(d * d, axis=-1)
        valid = nbrs.valid & (r2 < cutoff * cutoff)
        r = jnp.sqrt(jnp.where(valid, r2, 1.0))
        k, p = _locate(r, inv_dr, nr)  # one interval lookup per pair, for every spline
        # barriers: XLA CPU would otherwise fuse gathers into every consumer and redo them
        valid, r, k, p = barrier((valid, r, k, p))
        sp_j = nbrs.species
        c_rho = barrier(_coeffs(tab.rhor, knot(sp_j, sp_i, k)))  # density on i from j
        rho = jnp.sum(jnp.where(valid, _value(c_rho, p), 0.0), axis=-1)
        kf, pf = _locate(rho, inv_drho, nrho)
        cf = _coeffs(tab.frho, sp_i[..., 0] * nrho + kf if ne > 1 else kf)
        fp = _slope(cf, pf, inv_drho)
        emb = _value(cf, pf) + jnp.where(rho > rhomax, fp * (rho - rhomax), 0.0)
        fp, emb = barrier((fp, emb))

        # phase 2: F' of the candidates (their displacements and coefficients are kept)
        fp_j = barrier(fabric.window(wafer, fp, nbrs.slot, depth, kc))  # (R, C, M)
        rhojp = _slope(c_rho[:3], p, inv_dr)
        if ne > 1:
            rhoip = _slope(_coeffs(tab.rhor, knot(sp_i, sp_j, k), 3), p, inv_dr)
        else:
            rhoip = rhojp
        cz = barrier(_coeffs(tab.z2r, knot(sp_i, sp_j, k)))
        phi = _value(cz, p) / r
        phip = _slope(cz, p, inv_dr) / r - phi / r
        psip = jnp.where(valid, fp[..., None] * rhojp + fp_j * rhoip + phip, 0.0)
        forces = jnp.sum((psip / r)[..., None] * d, axis=-2)
        pair_e = 0.5 * jnp.sum(jnp.where(valid, phi, 0.0), axis=-1)
        virial = -0.5 * jnp.sum(psip * r, axis=-1)
        energy = jnp.where(held, emb + pair_e, 0.0)
        forces = jnp.where(held[..., None], forces, 0.0)
        return EamOutput(forces, energy, jnp.where(held, virial, 0.0), jnp.bool_(False))

    return ListFns(build_fn, moved_fn, forces_fn)
