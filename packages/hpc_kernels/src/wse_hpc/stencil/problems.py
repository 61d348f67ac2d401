"""The stencil problems' static parts, shared by the shell (`runs`) and the cost experiments.

Per kind: the fields placed in PE SRAM (`place_jacobi`, `place_bicgstab`, `place_wave`: the
plans `runs` executes and `experiments` prices at full size, SRAM ledger first), the
manufactured solution on the unit cube (`exact_solution`), and the kernels exactly as the
runs apply them, for the cost model to trace (`bicgstab_spmv`, `wave_block_fn`). Host-side
only: nothing here runs under `jit` except the returned kernels.
"""

from __future__ import annotations

import numpy as np
from wse_core.hw.spec import DTYPE_BYTES

from wse_hpc.stencil.kernels import laplacian7
from wse_hpc.stencil.placement import StencilGrid, place_grid
from wse_hpc.stencil.wave import RADIUS, laplacian25

__all__ = [
    "bicgstab_spmv",
    "default_block_z",
    "exact_solution",
    "place_bicgstab",
    "place_jacobi",
    "place_wave",
    "wave_block_fn",
]


def exact_solution(grid: StencilGrid, kind: str) -> np.ndarray:
    """The manufactured solution used by `kind` (fp64, (nx, ny, nz))."""
    x, y, z = np.meshgrid(*grid.coords(), indexing="ij")
    if kind == "bicgstab":
        return np.sin(np.pi * x) * np.sin(2 * np.pi * y) * np.sin(np.pi * z) * np.exp(x + z)
    k = 2 * np.pi if grid.boundary == "periodic" else np.pi
    return np.sin(k * x) * np.sin(k * y) * np.sin(k * z)


def place_jacobi(wafer, shape, dtype: str, boundary: str = "dirichlet") -> StencilGrid:
    """Jacobi / heat fields u, u_next, f (heat: no f) plus one Z ghost plane at each end."""
    return place_grid(
        wafer,
        shape,
        {"u": dtype, "u_next": dtype, "f": dtype},
        boundary=boundary,
        buffers_for=lambda n: 4 * DTYPE_BYTES[dtype],
    )


def place_bicgstab(
    wafer, shape, precision: str, *, pair: bool, boundary: str = "dirichlet"
) -> StencilGrid:
    """BiCGSTAB with reliable updates (`refine`): the Krylov vectors r, r^, p, v, s, t in the
    vector dtype (fp16 for mixed); b, x and the group's correction d (which also holds the
    true residual during an update) in fp32; x_lo in fp32 when x is a pair."""
    vec = "fp16" if precision == "mixed" else "fp32"
    inner = dict.fromkeys(("r", "rhat", "p", "v", "s", "t"), vec)
    outer = dict.fromkeys(("b", "x", "d", *(("x_lo",) if pair else ())), "fp32")
    return place_grid(wafer, shape, {**inner, **outer}, boundary=boundary)


def bicgstab_spmv(grid: StencilGrid):
    """The SpMV the solver applies (D^-1 A folded into the coefficients)."""
    from wse_hpc.stencil.kernels import diagonal

    return laplacian7(grid, scale=1.0 / float(diagonal(grid)))


def default_block_z(nz: int, cap: int = 64) -> int:
    """The largest divisor of nz not above `cap`."""
    return max(d for d in range(1, min(nz, cap) + 1) if nz % d == 0)


def place_wave(wafer, shape, block_z: int, boundary: str = "dirichlet") -> StencilGrid:
    """u_prev, u and the velocity in fp32, and a buffer of 16 received halo values per cell
    of a Z block of `block_z` plus the ghost planes."""
    return place_grid(
        wafer,
        shape,
        {"u_prev": "fp32", "u": "fp32", "velocity": "fp32"},
        boundary=boundary,
        radius=RADIUS,
        buffers_for=lambda n: 16 * 4 * min(block_z, n) + 8 * 2 * 4,
    )


def wave_block_fn(grid: StencilGrid):
    """One Z block's stencil, as the step runs it (traced by the cost model)."""
    return lambda block: laplacian25(grid, block, block.shape[2] - 2 * RADIUS)
