"""Test support shared by every package: NumPy oracles of the fabric ops and mesh shapes.

These are plain-NumPy statements of what each fabric op means on the logical grid, written
independently of `wse_core.fabric`, so a test compares the sharded result with them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MESH_SHAPES", "np_shift", "np_multicast", "available_meshes"]

# Mesh shapes the tests exercise with 8 virtual CPU devices.
MESH_SHAPES = ((1, 1), (2, 4), (4, 2))

_AXIS_SIGN = {"N": (0, -1), "S": (0, +1), "E": (1, +1), "W": (1, -1)}


def np_shift(x: np.ndarray, direction: str, distance: int = 1, boundary: str = "zero"):
    """out[p] = x[p - sign * distance] along the direction's axis; zero or wrapped outside."""
    axis, sign = _AXIS_SIGN[direction]
    n = x.shape[axis]
    src = np.arange(n) - sign * distance
    if boundary == "periodic":
        return np.take(x, src % n, axis=axis)
    out = np.take(x, np.clip(src, 0, n - 1), axis=axis)
    bad = (src < 0) | (src >= n)
    index = [slice(None)] * x.ndim
    index[axis] = bad
    out[tuple(index)] = 0
    return out


def np_multicast(x: np.ndarray, direction: str, k: int, boundary: str = "zero"):
    """(rows, cols, k, ...): entry j is the value j + 1 PEs upstream."""
    return np.stack([np_shift(x, direction, j + 1, boundary) for j in range(k)], axis=2)


def available_meshes(num_devices: int) -> list[tuple[int, int]]:
    return [m for m in MESH_SHAPES if m[0] * m[1] <= num_devices]
