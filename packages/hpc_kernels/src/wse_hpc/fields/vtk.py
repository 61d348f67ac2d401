"""Fields as legacy VTK (STRUCTURED_POINTS, binary big-endian float32): ParaView opens them.

`write_vtk(path, arrays, spacing)` writes cell data on an (nx, ny, nz) grid of cells: the
velocity (u, v, w averaged from their MAC faces to the cell centres; the wall below index 0
taken as zero) as the vector `velocity`, and every other array as a scalar. `read_vtk` reads
such a file back (the round-trip test's oracle).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

__all__ = ["read_vtk", "to_centres", "write_vtk"]


def to_centres(face: np.ndarray, axis: int) -> np.ndarray:
    """The mean of a MAC face field's two faces around each cell (zero below index 0)."""
    below = np.concatenate([np.zeros_like(np.take(face, [0], axis)), face], axis=axis)
    below = np.take(below, range(face.shape[axis]), axis)
    return 0.5 * (face + below)


def _block(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a.transpose(2, 1, 0), ">f4").tobytes()  # x fastest


def write_vtk(path: Path, arrays: Mapping[str, np.ndarray], spacing) -> None:
    u = arrays["u"]
    nx, ny, nz = u.shape
    vel = np.stack([to_centres(arrays[n], a) for a, n in enumerate("uvw")], axis=-1)
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
