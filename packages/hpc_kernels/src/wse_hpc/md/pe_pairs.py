"""The PEs' own pair loops as CPU kernels (numba), called from the jitted force evaluation
through XLA's typed FFI: what each PE's program does with its candidate list, one kernel
call per device block (`neighbours`'s forces on a CPU).

Why: XLA:CPU evaluates the list kernel as some twenty passes over (PEs, M candidates)
arrays, each materialized (the table gathers feed several consumers), and every candidate
pays the splines; about half of the M candidates are beyond the cutoff at any step (Cu fcc:
~42 of 88). These kernels walk each PE's list once per phase, keep its sums in registers
and evaluate the splines only for the candidates within the cutoff, as LAMMPS does for its
list. The numbers are the list kernel's: the same candidates, LAMMPS's splines
(`md.splines`, the same tables), float32; sums of a PE's pairs in list order.

Contract: `pair_kernel(spl, box, cutoff_A, pot, devices) -> PairKernel` (the tables and
constants, made once per plan); `density(kernel, xyz, lists, pos, sp_i) -> rho (n,)` and
`force(kernel, xyz, fpr, lists, own) -> (f (n, 3), pair energy (n,), virial (n,))` with
xyz (Nr, 3) the window region's positions, fpr (Nr,) its F', lists = (index, valid, sp_j)
(n, M) the PEs' candidates (places in the region), own = (pos (n, 3), sp_i (n,), fp_i (n,))
(`density` takes pos and sp_i). `available()` says whether numba is there; `neighbours` runs
the XLA list kernel where it is not, off the CPU or in float64. numba compiles the kernels
on first use (~10 s) and caches them beside the source (or in its user cache).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from wse_core.errors import WseError
from wse_core.host.pe_ffi import available, register

from wse_hpc.md import pe_compile
from wse_hpc.md.pair_words import PLACE_MASK, SPECIES_SHIFT
from wse_hpc.md.potentials import EamPotential
from wse_hpc.md.splines import Splines

__all__ = [
    "PairKernel",
    "available",
    "pair_kernel",
    "density",
    "force",
    "density_half",
    "force_half",
]


class PairKernel(NamedTuple):
    rhor: jax.Array  # (K, 4) float32: the density's cubic coefficients per knot
    z2r: jax.Array  # (K, 4) float32: r phi's
    cf: jax.Array  # (8,) float32: box (3) A, 1 / box (3) 1/A, cutoff^2 A^2, 1 / dr 1/A
    ci: jax.Array  # (2,) int32: knots per r table, elements
    half: bool  # each pair once, by the PE of the larger block index (one device)


def _target(name: str) -> str:
    """The FFI target of a kernel, compiled (numba) and registered with XLA on first use;
    only named inside `pe_compile.deferred()` (the shell registers it before XLA compiles)."""
    return f"wse_md_{name}" if pe_compile.deferring() else _registered(name)


@functools.cache
def _registered(name: str) -> str:
    from wse_hpc.md import pe_pairs_numba

    pe_compile.wait(f"wse_md_{name}")  # a helper compiling it into numba's cache, if any
    return register(f"wse_md_{name}", pe_pairs_numba.handler(name))


def pair_kernel(
    spl: Splines, box: jax.Array, cutoff_A: float, pot: EamPotential, devices: int
) -> PairKernel:
    """The tables and constants the kernels read, for `spl` (float32) in `box` (3,); on one
    device each pair once, on several each block's PEs with their full lists."""
    inv_box = 1.0 / box  # as `neighbours.build.min_image` computes it
    if len(pot.elements) >> (31 - SPECIES_SHIFT):  # `cut` packs a species in 7 bits
        raise WseError(f"{len(pot.elements)} elements are past the pair kernels' 127")
    cut2, inv_dr = np.float32(cutoff_A * cutoff_A), np.float32(1.0 / pot.dr)
    cf = jnp.concatenate([box, inv_box, jnp.asarray([cut2, inv_dr], jnp.float32)])
    ci = jnp.asarray([pot.nr, len(pot.elements)], jnp.int32)
    rhor, z2r = (jnp.asarray(t).T.copy() for t in (spl.tables.rhor, spl.tables.z2r))
    return PairKernel(rhor, z2r, cf, ci, half=devices == 1)


def density(kernel: PairKernel, xyz, lists, pos, sp_i) -> jax.Array:
    """Each PE's density from its candidates within the cutoff (n,)."""
    out = jax.ShapeDtypeStruct(sp_i.shape, jnp.float32)
    call = jax.ffi.ffi_call(_target("density"), out, vmap_method="sequential")
    return call(xyz, *lists, pos, sp_i, kernel.rhor, kernel.cf, kernel.ci)


def force(kernel: PairKernel, xyz, fpr, lists, own):
    """Each PE's force (n, 3), pair energy and virial (n,) from its candidates."""
    n = own[1].shape[0]
    out = (
        jax.ShapeDtypeStruct((n, 3), jnp.float32),
        jax.ShapeDtypeStruct((n,), jnp.float32),
        jax.ShapeDtypeStruct((n,), jnp.float32),
    )
    call = jax.ffi.ffi_call(_target("force"), out, vmap_method="sequential")
    return tuple(call(xyz, fpr, *lists, *own, kernel.rhor, kernel.z2r, kernel.cf, kernel.ci))


def _rows(lists, order, own, active: int):
    """Every list row (nb, M) (the kernels read the first `active`: slicing them would copy
    them each step), the block indices of the first `active` rows' PEs and those PEs' own
    values."""
    nb = order.size
    at = order.reshape(-1)[:active]
    rows = tuple(a.reshape(nb, -1) for a in lists)
    return rows, at, tuple(jnp.take(a.reshape((nb,) + a.shape[2:]), at, axis=0) for a in own)


def density_half(kernel: PairKernel, regions, lists, order, own, active: int):
    """One device's block, each pair once: the density of every PE (br, bc) and the pairs
    each list row took within the cutoff, `cut` = (places (br, bc, M) int32, with the
    candidate's species from bit SPECIES_SHIFT up, count (br, bc) int32) for `force_half`.
    regions = (positions (Rr, Rc, 3), block indices (Rr, Rc)) of the window region; lists
    (br, bc, M) stored in `order`, as `neighbours.build.select_half` builds them (only
    candidates of a larger block index); own = (pos, sp_i) per PE."""
    rows, at, (pos, sp_i) = _rows(lists, order, own, active)
    nb, m = order.size, lists[0].shape[-1]
    places = regions[0].shape[0] * regions[0].shape[1]
    if places > PLACE_MASK:  # `cut` packs a place in 24 bits
        raise WseError(f"a window region of {places} PEs is past the pair kernels' 2^24")
    out = (
        jax.ShapeDtypeStruct((nb,), jnp.float32),
        jax.ShapeDtypeStruct((nb, m), jnp.int32),
        jax.ShapeDtypeStruct((nb,), jnp.int32),
    )
    call = jax.ffi.ffi_call(_target("density_half"), out, vmap_method="sequential")
    xyz, ids = regions[0].reshape(-1, 3), regions[1].reshape(-1)
    rho, cut, ncut = call(xyz, ids, *rows, pos, sp_i, at, kernel.rhor, kernel.cf, kernel.ci)
    return rho.reshape(order.shape), (cut.reshape(order.shape + (m,)), ncut.reshape(order.shape))


def force_half(kernel: PairKernel, regions, lists, cut, order, own, active: int):
    """One device's block, each pair once: force (br, bc, 3), pair energy and virial
    (br, bc) of the pairs `density_half` took (`cut`). regions = (positions, F', block
    indices) of the window region; lists (index, valid, sp_j); own = (pos, sp_i, fp) per PE."""
    _, at, (pos, sp_i, fp) = _rows(lists, order, own, active)
    nb = order.size
    places, count = cut[0].reshape(nb, -1), cut[1].reshape(nb)
    out = (
        jax.ShapeDtypeStruct((nb, 3), jnp.float32),
        jax.ShapeDtypeStruct((nb,), jnp.float32),
        jax.ShapeDtypeStruct((nb,), jnp.float32),
    )
    call = jax.ffi.ffi_call(_target("force_half"), out, vmap_method="sequential")
    xyz, fpr, ids = regions[0].reshape(-1, 3), regions[1].reshape(-1), regions[2].reshape(-1)
    tables = (kernel.rhor, kernel.z2r, kernel.cf, kernel.ci)
    f, e, v = call(xyz, fpr, ids, places, count, pos, sp_i, at, fp, *tables)
    return f.reshape(order.shape + (3,)), e.reshape(order.shape), v.reshape(order.shape)
