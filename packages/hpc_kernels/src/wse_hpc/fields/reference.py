"""The field operators' scheme in plain NumPy (float64): the oracle of the emulated fields.

Arrays are `(nx, ny, nz)`; `bc` is three `Bc`s; `loc` is "c" or a face axis "x" / "y" / "z";
the rules are the ones `wse_hpc.fields.operators` states, written here independently with
`np.roll` and explicit ghost values, no fabric.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wse_hpc.fields.grid import Bc

__all__ = [
    "advect_np",
    "divergence_np",
    "face_gradient_np",
    "gradient_np",
    "interpolate_np",
    "laplacian_np",
    "neighbour_np",
]

_LOC = ("x", "y", "z")


def _axes(u: np.ndarray) -> tuple[int, ...]:
    return (0, 1) if u.shape[2] == 1 else (0, 1, 2)


def neighbour_np(u: np.ndarray, axis: int, sign: int, bc: Sequence[Bc], loc: str) -> np.ndarray:
    """u at index i + sign along axis, periodic wrap or the wall's ghost value."""
    out = np.roll(u, -sign, axis=axis)
    b = bc[axis]
    if b.kind == "periodic":
        return out
    edge = [slice(None)] * 3
    edge[axis] = 0 if sign < 0 else u.shape[axis] - 1  # type: ignore[call-overload]
    here = u[tuple(edge)]
    wall = b.lo if sign < 0 else b.hi
    if loc == _LOC[axis]:
        ghost = np.full_like(here, wall) if b.kind == "dirichlet" else here
    elif b.kind == "dirichlet":
        ghost = 2 * wall - here
    else:
        ghost = here
    out[tuple(edge)] = ghost
    return out


def laplacian_np(u, h, bc, loc="c"):
    return sum(
        (neighbour_np(u, a, 1, bc, loc) - 2 * u + neighbour_np(u, a, -1, bc, loc)) / h[a] ** 2
        for a in _axes(u)
    )


def gradient_np(u, h, bc):
    return tuple(
        (neighbour_np(u, a, 1, bc, "c") - neighbour_np(u, a, -1, bc, "c")) / (2 * h[a])
        for a in _axes(u)
    )


def face_gradient_np(p, axis, h, bc):
    return (neighbour_np(p, axis, 1, bc, "c") - p) / h[axis]


def divergence_np(vel, h, bcs, locs):
    out = 0.0
    for a, u, bc, loc in zip(_axes(vel[0]), vel, bcs, locs, strict=True):
        if loc == _LOC[a]:
            out = out + (u - neighbour_np(u, a, -1, bc, loc)) / h[a]
        else:
            out = out + (neighbour_np(u, a, 1, bc, loc) - neighbour_np(u, a, -1, bc, loc)) / (
                2 * h[a]
            )
    return out


def interpolate_np(u, axis, bc, loc):
    if loc == "c":
        return 0.5 * (u + neighbour_np(u, axis, 1, bc, "c"))
    return 0.5 * (u + neighbour_np(u, axis, -1, bc, loc))


def advect_np(f, vel, h, bc, vbcs, locs, scheme):
    """u . grad f: flux form on face velocities, collocated differences on centred ones."""
    out = 0.0
    for a, u, vbc, loc in zip(_axes(f), vel, vbcs, locs, strict=True):
        fp = neighbour_np(f, a, 1, bc, "c")
        fm = neighbour_np(f, a, -1, bc, "c")
        if loc == _LOC[a]:
            face = 0.5 * (f + fp) if scheme == "central" else np.where(u > 0, f, fp)
            flux = u * face
            out = out + (flux - neighbour_np(flux, a, -1, vbc, loc)) / h[a]
        elif scheme == "central":
            out = out + u * (fp - fm) / (2 * h[a])
        else:
            out = out + np.where(u > 0, u * (f - fm) / h[a], u * (fp - f) / h[a])
    return out
