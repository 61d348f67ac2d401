"""Synthetic seismic-like operators: frequency-domain Green's functions between two surfaces.

Contract: `green_operator(n=..., freq_hz=...)` returns the complex64 n x n matrix
G[r, s] = exp(-2πi f |x_r - x_s| / c) / (4π |x_r - x_s|) between n source points on the
surface z = 0 and n receiver points on a parallel surface at `depth_m`, in a homogeneous
medium of velocity `velocity_m_per_s`. Points lie on a regular grid of spacing `spacing_m`
(the first n points of a ceil(sqrt(n))-wide grid) and are ordered along a Z-order (Morton)
curve so that each tile of consecutive points is a compact patch: that locality is what makes
the tiles low-rank, as the Hilbert ordering does in the seismic TLR-MVM papers.
`green_operators(freqs_hz=...)` stacks one matrix per frequency, the slices of a
multi-dimensional convolution operator. `load_matrix(path)` reads any `.npy` matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from wse_hpc.tlrmvm.compress import TlrError, check_matrix

__all__ = ["morton_order", "surface_points", "green_operator", "green_operators", "load_matrix"]


def morton_order(ix: np.ndarray, iy: np.ndarray) -> np.ndarray:
    """Indices that sort integer grid points (ix, iy) along the Z-order curve."""
    code = np.zeros(ix.shape, np.int64)
    for bit in range(16):
        code |= ((ix >> bit) & 1) << (2 * bit) | ((iy >> bit) & 1) << (2 * bit + 1)
    return np.argsort(code, kind="stable")


def surface_points(n: int, spacing_m: float) -> np.ndarray:
    """(n, 2) horizontal coordinates in metres, Morton-ordered."""
    if n <= 0:
        raise TlrError(f"the operator size n must be positive, got {n}")
    side = int(np.ceil(np.sqrt(n)))
    iy, ix = np.divmod(np.arange(n), side)
    order = morton_order(ix, iy)
    return np.stack([ix[order], iy[order]], axis=1).astype(np.float64) * spacing_m


def green_operator(
    *,
    n: int,
    freq_hz: float = 15.0,
    spacing_m: float = 20.0,
    depth_m: float = 400.0,
    velocity_m_per_s: float = 2000.0,
) -> np.ndarray:
    """One frequency slice, (n, n) complex64 (rows: receivers at depth, cols: sources)."""
    xy = surface_points(n, spacing_m)
    dx = xy[:, None, 0] - xy[None, :, 0]
    dy = xy[:, None, 1] - xy[None, :, 1]
    r = np.sqrt(dx * dx + dy * dy + depth_m * depth_m)
    g = np.exp(-2j * np.pi * freq_hz * r / velocity_m_per_s) / (4 * np.pi * r)
    return (g * depth_m).astype(np.complex64)  # scaled so entries are O(0.1)


def green_operators(*, n: int, freqs_hz: Sequence[float], **kwargs: float) -> np.ndarray:
    """(len(freqs_hz), n, n) complex64: one slice per frequency."""
    return np.stack([green_operator(n=n, freq_hz=f, **kwargs) for f in freqs_hz])


def load_matrix(path: str | Path) -> np.ndarray:
    """A 2-D real or complex matrix from a `.npy` file, checked like any operator."""
    try:
        a = np.load(Path(path), allow_pickle=False)
    except (OSError, ValueError) as e:
        raise TlrError(f"cannot read matrix {str(path)!r}: {e}") from None
    return check_matrix(a)
