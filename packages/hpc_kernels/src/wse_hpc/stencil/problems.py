"""The stencil problems' static parts, shared by the shell (`runs`) and the cost experiments.

Per kind: the fields placed in PE SRAM (`place_jacobi`, `place_bicgstab`, `place_wave`: the
plans `runs` executes and `experiments` prices at full size, SRAM ledger first), the
manufactured solution on the unit cube (`exact_solution`), and the kernels exactly as the
runs apply them, for the cost model to trace (`bicgstab_spmv`, `wave_block_fn`). Host-side
only: nothing here runs under `jit` except the returned kernels.
"""

from __future__ import annotations

import numpy as np
from wse_core.errors import SramBudgetError
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


# wave25's SRAM beside its three fp32 fields (u_prev, u, velocity: 12 B a cell): 16 received
# halo values (4 neighbours x radius 4) of 4 B for each cell of a Z block, and 8 B x 2 x 4 of
# the block's ghost planes
WAVE_FIELD_BYTES = 3 * 4  # B per cell of the Z column
HALO_BUFFER_BYTES = 16 * 4  # B per cell of the Z block
GHOST_BYTES = 8 * 2 * 4  # B per PE
DEFAULT_BLOCK_CAP = 64  # cells: `default_block_z`'s largest block


def _wave_buffers(block_z: int, nz: int) -> int:
    return HALO_BUFFER_BYTES * min(block_z, nz) + GHOST_BYTES


def place_wave(wafer, shape, block_z: int | None, boundary: str = "dirichlet") -> StencilGrid:
    """u_prev, u and the velocity in fp32, and a buffer of 16 received halo values per cell
    of a Z block of `block_z` (None: `default_block_z(nz)`) plus the ghost planes.

    Over the budget, the refusal names what overflows and a value that is then accepted
    (hunt 82: "a Z column of 1000 does not fit ... the largest nz that fits is 618" where
    64,000 of the 76,064 B were the block's halo buffers, and nz = 618 was then refused for
    the block of 1000): where a smaller block fits beside this column, the halo buffers'
    bytes and the largest --block-z that fits at this nz; else the largest nz that fits with
    this block (at most that nz where the block is longer, as the block must lie in 1..nz)."""
    nz = shape[2] if len(shape) == 3 else 0
    b = default_block_z(nz) if block_z is None and nz >= 1 else block_z
    try:
        return place_grid(
            wafer,
            shape,
            {"u_prev": "fp32", "u": "fp32", "velocity": "fp32"},
            boundary=boundary,
            radius=RADIUS,
            buffers_for=lambda n: _wave_buffers(b, n),
        )
    except SramBudgetError:
        raise SramBudgetError(_wave_refusal(wafer, nz, b, given=block_z is not None)) from None


def _wave_refusal(wafer, nz: int, b: int, *, given: bool) -> str:
    """Why a wave25 plan of a Z column of `nz` in Z blocks of `b` (`given`: by the caller,
    else the default) does not fit, and a setting that is then accepted (`place_wave`)."""
    free, note = wafer.sram.free_bytes(), wafer.sram.reserve_note()
    column, buffers, block = WAVE_FIELD_BYTES * nz, _wave_buffers(b, nz), min(b, nz)
    best_b = min(nz, (free - column - GHOST_BYTES) // HALO_BUFFER_BYTES)
    cap = b if given else DEFAULT_BLOCK_CAP  # a default block is at most 64 at any nz
    best = wafer.sram.largest(lambda n: WAVE_FIELD_BYTES * n + _wave_buffers(cap, n), lo=1)
    what = (
        f"a Z block of {block} does not fit beside a Z column of {nz}"
        if best_b >= 1
        else f"a Z column of {nz} does not fit"
    )
    head = (
        f"{what}: the 16 halo buffers of the Z block need {buffers} B per PE ({HALO_BUFFER_BYTES}"
        f" B a cell of the block and {GHOST_BYTES} B of ghost planes) and the 3 fields of the "
        f"column {column} B, {column + buffers} B in all, but {free} B are free on the "
        f"{wafer.spec.name} PEs{note}"
    )
    if not given:  # every nz up to `best` fits whatever its default block
        nz_advice = f"every nz up to {best} fits with its default Z block (at most 64 cells)"
    elif best >= b:
        nz_advice = f"the largest nz that fits with a Z block of {b} is {best}"
    else:  # the block must lie in 1..nz: at `best` it is refused unless shortened
        nz_advice = f"the largest nz that fits is {best}, with a Z block of at most {best}"
    if best_b >= 1:  # the block is the lever
        return (
            f"{head}; the largest Z block (--block-z) that fits at nz = {nz} is {best_b} "
            f"(or: {nz_advice})"
        )
    return f"{head}; {nz_advice}"


def wave_block_fn(grid: StencilGrid):
    """One Z block's stencil, as the step runs it (traced by the cost model)."""
    return lambda block: laplacian25(grid, block, block.shape[2] - 2 * RADIUS)
