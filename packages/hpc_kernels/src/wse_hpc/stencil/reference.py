"""NumPy / SciPy references for the stencil kernels: the oracles of tests and benchmarks.

Same conventions as the wafer kernels (`wse_hpc.stencil.kernels`, `.wave`): A = -div grad
with 7 points, zero values outside a Dirichlet grid, wrapped values on a periodic one.
All functions take and return NumPy arrays of shape (nx, ny, nz).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = [
    "jacobi_np",
    "laplacian25_np",
    "laplacian7_np",
    "laplacian7_var_np",
    "poisson_matrix",
    "shifted",
]


def shifted(u: np.ndarray, axis: int, offset: int, periodic: bool) -> np.ndarray:
    """u at index i + offset along `axis` (zero outside unless periodic)."""
    if periodic:
        return np.roll(u, -offset, axis=axis)
    out = np.zeros_like(u)
    n = u.shape[axis]
    src = [slice(None)] * u.ndim
    dst = [slice(None)] * u.ndim
    if offset > 0:
        src[axis], dst[axis] = slice(offset, n), slice(0, n - offset)
    else:
        src[axis], dst[axis] = slice(0, n + offset), slice(-offset, n)
    out[tuple(dst)] = u[tuple(src)]
    return out


def laplacian7_np(u: np.ndarray, spacing, periodic: bool = False) -> np.ndarray:
    """A u for the constant-coefficient 7-point operator."""
    out = np.zeros_like(u)
    for axis, h in enumerate(spacing):
        nb = shifted(u, axis, 1, periodic) + shifted(u, axis, -1, periodic)
        out += (2 * u - nb) / h**2
    return out


def jacobi_np(u: np.ndarray, f: np.ndarray, spacing, periodic: bool = False) -> np.ndarray:
    """One Jacobi sweep for A u = f."""
    off = np.zeros_like(u)
    diag = 0.0
    for axis, h in enumerate(spacing):
        off += (shifted(u, axis, 1, periodic) + shifted(u, axis, -1, periodic)) / h**2
        diag += 2 / h**2
    return (f + off) / diag


def laplacian25_np(u: np.ndarray, spacing, coeffs, periodic: bool = False) -> np.ndarray:
    """The 25-point (radius 4) operator L8 u."""
    out = np.zeros_like(u)
    for axis, h in enumerate(spacing):
        acc = coeffs[0] * u
        for j in range(1, len(coeffs)):
            acc = acc + coeffs[j] * (shifted(u, axis, j, periodic) + shifted(u, axis, -j, periodic))
        out += acc / h**2
    return out


def poisson_matrix(shape, spacing) -> sp.csr_matrix:
    """The 7-point Dirichlet operator A as a CSR matrix (C order over (nx, ny, nz))."""
    mats = []
    for n, h in zip(shape, spacing, strict=True):
        mats.append(sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]) / h**2)
    eye = [sp.identity(n) for n in shape]
    a = (
        sp.kron(sp.kron(mats[0], eye[1]), eye[2])
        + sp.kron(sp.kron(eye[0], mats[1]), eye[2])
        + sp.kron(sp.kron(eye[0], eye[1]), mats[2])
    )
    return a.tocsr()


def laplacian7_var_np(u: np.ndarray, kappa: np.ndarray, spacing, periodic=False) -> np.ndarray:
    """A u for A = -div(k grad) with face k the mean of the two cells (a boundary face takes
    its cell's k), as in `wse_hpc.stencil.kernels.face_coefficients`."""
    out = np.zeros_like(u)
    for axis, h in enumerate(spacing):
        for off in (1, -1):
            nb = shifted(u, axis, off, periodic)
            k_nb = shifted(kappa, axis, off, periodic)
            if not periodic:
                k_nb = k_nb + (shifted(np.ones_like(kappa), axis, off, False) == 0) * kappa
            out += (kappa + k_nb) / 2 * (u - nb) / h**2
    return out
