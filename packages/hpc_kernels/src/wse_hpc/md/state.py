"""The MD state as pytrees, and the types of the kernels' functions.

Contract: `Atoms` holds one atom per PE as placed fields `(rows, cols, ...)` (padded like
every wafer field): unwrapped positions (A), velocities (A/ps), forces (eV/A), species
index (int32, -1 on an empty PE) and atom id (int32). `Atoms.of(record)` reads
`wse_hpc.md.mapping`'s packed `(rows, cols, NFIELDS)` record (the host's layout, and the
message one swap moves between PEs) and `Atoms.record()` writes it; both are exact.
`Bath` is the Nosé–Hoover chain (`wse_hpc.md.nose_hoover`; zeros for the other
integrators). `MdState` is what an integrator's `init_fn` returns and its `step_fn` carries
(`wse_hpc.md.integrate`): the atoms, the bath, the neighbour lists (None for the
full-window kernel) and the last force evaluation (`EamOutput`: per-atom energy, virial,
and the overflow flag the shell acts on).
The Protocols type the functions `EamFns` (`eam`) and `ListFns` (`neighbours`) hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from wse_hpc.md.mapping import ATOM_ID, FORCE, POS, SPECIES, VEL

if TYPE_CHECKING:
    from wse_hpc.md.eam import EamOutput, Geometry
    from wse_hpc.md.neighbours import Neighbours

__all__ = [
    "Atoms",
    "Bath",
    "MdState",
    "ForcesFn",
    "SortFn",
    "BuildFn",
    "TrackFn",
    "DriftFn",
    "ListForcesFn",
]


class Atoms(NamedTuple):
    position: jax.Array  # (R, C, 3) A, unwrapped
    velocity: jax.Array  # (R, C, 3) A/ps
    force: jax.Array  # (R, C, 3) eV/A
    species: jax.Array  # (R, C) int32, -1 on an empty PE
    atom_id: jax.Array  # (R, C) int32, -1 on an empty PE

    @classmethod
    def of(cls, record) -> Atoms:
        """The fields of a packed (R, C, NFIELDS) record (NumPy or placed)."""
        return cls(
            record[..., POS],
            record[..., VEL],
            record[..., FORCE],
            record[..., SPECIES].astype(jnp.int32),
            record[..., ATOM_ID].astype(jnp.int32),
        )

    def record(self) -> jax.Array:
        """The packed (R, C, NFIELDS) record, in the positions' dtype."""
        dtype = self.position.dtype
        tags = jnp.stack([self.species, self.atom_id], axis=-1).astype(dtype)
        return jnp.concatenate([self.position, self.velocity, self.force, tags], axis=-1)

    def tagged_positions(self) -> jax.Array:
        """(R, C, 4): x, y, z and the species (as a float), what a window multicast sends."""
        sp = self.species[..., None].astype(self.position.dtype)
        return jnp.concatenate([self.position, sp], axis=-1)


class Bath(NamedTuple):
    xi: jax.Array  # (M,) 1/ps: the chain's velocities (element 0 acts on the atoms)
    eta: jax.Array  # (M,): their positions

    @classmethod
    def at_rest(cls, dtype=jnp.float32, chain: int = 1) -> Bath:
        return cls(jnp.zeros((chain,), dtype), jnp.zeros((chain,), dtype))


class MdState(NamedTuple):
    atoms: Atoms
    bath: Bath
    nbrs: Neighbours | None  # None: the full-window kernel
    eam: EamOutput  # the last force evaluation (its forces without Langevin's)


class ForcesFn(Protocol):
    def __call__(self, atoms: Atoms, geo: Geometry) -> EamOutput: ...


class SortFn(Protocol):
    def __call__(self, atoms: Atoms, geo: Geometry) -> Atoms: ...


class BuildFn(Protocol):
    def __call__(self, atoms: Atoms, geo: Geometry) -> tuple[Neighbours, jax.Array]: ...


class TrackFn(Protocol):
    def __call__(self, atoms: Atoms, nbrs: Neighbours) -> Neighbours: ...


class DriftFn(Protocol):
    def __call__(self, nbrs: Neighbours) -> jax.Array: ...


class ListForcesFn(Protocol):
    def __call__(self, atoms: Atoms, geo: Geometry, nbrs: Neighbours) -> EamOutput: ...
