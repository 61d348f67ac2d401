"""Fields as legacy VTK (STRUCTURED_POINTS, binary big-endian float32): ParaView opens them.

`write_vtk(path, arrays, spacing, periodic=)` writes cell data on an (nx, ny, nz) grid of
cells: the velocity (u, v, w averaged from their MAC faces to the cell centres: face i is the
upper face of cell i, and the face below cell 0 is the wall's zero on a wall axis, the face
n - 1 on a periodic one) as the vector `velocity`, and every other array as a scalar.
`read_vtk` reads such a file back (the round-trip test's oracle).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

__all__ = ["read_vtk", "to_centres", "write_vtk"]


def to_centres(face: np.ndarray, axis: int, periodic: bool = False) -> np.ndarray:
    """The mean of a MAC face field's two faces around each cell: below index 0 the wall's
    zero, or on a `periodic` axis the face n - 1 (the same face, across the seam; hunt 71:
    zero there too halved the cells against Rayleigh-Benard's periodic sides)."""
    if periodic:
        return 0.5 * (face + np.roll(face, 1, axis))
    below = np.concatenate([np.zeros_like(np.take(face, [0], axis)), face], axis=axis)
    below = np.take(below, range(face.shape[axis]), axis)
    return 0.5 * (face + below)


def _block(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a.transpose(2, 1, 0), ">f4").tobytes()  # x fastest


def write_vtk(
    path: Path, arrays: Mapping[str, np.ndarray], spacing, *, periodic=(False,) * 3
) -> None:
    """`periodic`: the grid's periodic axes (X, Y, Z), whose faces wrap (`to_centres`)."""
    u = arrays["u"]
    nx, ny, nz = u.shape
    vel = [to_centres(arrays[n], a, bool(periodic[a])) for a, n in enumerate("uvw")]
    vel = np.stack(vel, axis=-1)
    head = (
        "# vtk DataFile Version 3.0\nwse hpc cfd\nBINARY\nDATASET STRUCTURED_POINTS\n"
        f"DIMENSIONS {nx + 1} {ny + 1} {nz + 1}\nORIGIN 0 0 0\n"
        f"SPACING {spacing[0]} {spacing[1]} {spacing[2]}\nCELL_DATA {nx * ny * nz}\n"
    )
    parts = [head.encode(), b"VECTORS velocity float\n"]
    parts.append(np.ascontiguousarray(vel.transpose(2, 1, 0, 3), ">f4").tobytes() + b"\n")
    for name, a in arrays.items():
        if name in ("u", "v", "w"):
            continue
        parts += [f"SCALARS {name} float 1\nLOOKUP_TABLE default\n".encode(), _block(a), b"\n"]
    from wse_core.host.atomic import write_atomically

    write_atomically(path, b"".join(parts))


def read_vtk(path: Path) -> dict[str, np.ndarray]:
    """The cell arrays of a file `write_vtk` wrote, as (nx, ny, nz[, 3]) float32."""
    data = Path(path).read_bytes()
    lines, pos = [], 0
    out: dict[str, np.ndarray] = {}
    dims = None
    while pos < len(data):
        end = data.index(b"\n", pos)
        line = data[pos:end].decode(errors="replace")
        pos = end + 1
        if line.startswith("DIMENSIONS"):
            dims = [int(x) - 1 for x in line.split()[1:]]
        elif line.startswith(("VECTORS", "SCALARS")):
            name, k = line.split()[1], 3 if line.startswith("VECTORS") else 1
            if k == 1:
                pos = data.index(b"\n", pos) + 1  # LOOKUP_TABLE
            n = int(np.prod(dims)) * k * 4
            a = np.frombuffer(data[pos : pos + n], ">f4").astype(np.float32)
            a = a.reshape(dims[2], dims[1], dims[0], k).transpose(2, 1, 0, 3)
            out[name] = a if k == 3 else a[..., 0]
            pos += n + 1
        lines.append(line)
    return out
