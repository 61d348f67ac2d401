"""A stencil run's settings: `StencilConfig`, and `check_config`, the checks `run_stencil`
makes before it places or compiles anything.

Contract: `check_config(cfg)` raises `StencilError` naming the setting, what was given and
what is allowed, for what `wse hpc stencil` refuses at its command line (hunt 65: the API
ran `chunks=0` as 0 steps and reported it, ignored `tol` and `block_z` on kinds that do not
use them, "converged" at once at `tol=5`, and failed inside JAX after compiling on
`steps=10.5` or `10**30`). Counts are Python or NumPy integers (not bool: `steps=True` ran
one step); settings a kind has no use for are refused, as the CLI refuses them. `steps` past
`wse_core.host.limits`' time_steps is refused (LimitError) as `--steps` is: the API and
the CLI take the same runs (hunt 67: `steps=10**8` passed here and ran for hours).
"""

from __future__ import annotations

import dataclasses
import numbers

from wse_core import WaferSpec
from wse_core.errors import is_finite, require_int, shown_setting, suggest
from wse_core.host import limits

from wse_hpc.stencil.placement import StencilError

__all__ = [
    "INT32_MAX",
    "KINDS",
    "PERIODIC_MIN_POINTS",
    "StencilConfig",
    "check_config",
    "sine_min_points",
]

KINDS = ("jacobi", "heat", "bicgstab", "wave25")
INT32_MAX = 2**31 - 1  # step counts are a lax loop's int32 bound


@dataclasses.dataclass(frozen=True, kw_only=True)
class StencilConfig:
    kind: str
    grid: tuple[int, int, int]
    spec: WaferSpec  # the wafer the run emulates and is priced on (required: no default wafer)
    steps: int | None = None  # time steps / sweeps, or BiCGSTAB's iteration cap
    tol: float | None = None  # BiCGSTAB only: the relative residual target, in (0, 1)
    dtype: str = "fp32"  # fp32 | fp16 (jacobi, heat) | mixed (bicgstab); wave25: fp32
    boundary: str = "dirichlet"
    block_z: int | None = None  # wave25's Z block, 1..NZ (default: the largest divisor <= 64)
    mesh_shape: tuple[int, int] | None = None
    defect_seed: int | None = None
    chunks: int = 10  # history points for the stepping kernels (jitted calls), >= 1


def _check_tol(cfg: StencilConfig) -> None:
    if cfg.tol is None:
        return
    if cfg.kind != "bicgstab":
        raise StencilError("tol applies to kind bicgstab only; use steps for the others")
    tol = cfg.tol
    # a relative residual target of 1 or more is met by the start (hunt 57, the CLI's lt=1)
    if not (is_finite(tol) and 0 < tol < 1):
        raise StencilError(
            f"tol must be a number in (0, 1) (a relative residual target), got {shown_setting(tol)}"
        )
    _check_certifiable(cfg.dtype, tol)


def _check_certifiable(dtype: object, tol: float) -> None:
    """Refuse a tol below what the solve's fp32 residual can certify (hunt 68: it ran the
    whole solve, then exited 1 "out of reach"). Mixed keeps b, x and the true residual in
    fp32 too, so no --dtype reaches lower."""
    from wse_hpc.stencil.reach import CERTIFY_FLOOR, least_tol

    floor = least_tol(CERTIFY_FLOOR)
    if tol <= floor:
        precision = "mixed" if dtype in ("mixed", "fp16") else "fp32"
        raise StencilError(
            f"--tol {tol:g} is below what {precision} BiCGSTAB's residual can certify "
            f"({floor:.1e}: its fp32 rounding; fp32 and mixed alike, no --dtype reaches "
            f"lower); give --tol {floor:.1e} or more"
        )


# kinds whose test field is sin(2 pi x) sin(2 pi y) sin(2 pi z) on a periodic grid
# (`problems.exact_solution`); bicgstab refuses periodic, wave25 starts from a source
SINE_KINDS = ("jacobi", "heat")
# points a periodic axis needs for the sine test field: on 2 points (x = 0, 1/2) sin(2 pi x)
# is 0 everywhere, so the problem is all zero; 3 is the fewest on which it is not
PERIODIC_MIN_POINTS = 3


def sine_min_points(kind: str, boundary: str) -> int:
    """The fewest points every axis needs for `kind`'s test field under `boundary`:
    PERIODIC_MIN_POINTS for jacobi and heat on a periodic grid, else 0 (no rule beyond the
    stencil's reach, which the placement checks). `wse hpc stencil` suggests grids by it."""
    return PERIODIC_MIN_POINTS if kind in SINE_KINDS and boundary == "periodic" else 0


def _check_periodic_grid(cfg: StencilConfig) -> None:
    """Refuse a periodic axis of fewer than 3 points for the kinds that use the sine test
    field: it vanishes at x = 0 and 1/2, so the problem is all zero (hunt 68: 2 2 2 divided
    by a zero norm; 2 8 8 reported residual 0 and error 5e-17 for solving nothing)."""
    need = sine_min_points(cfg.kind, cfg.boundary)
    grid = cfg.grid
    if isinstance(grid, tuple) and all(isinstance(n, numbers.Integral) for n in grid):
        if min(grid, default=need) < need:
            raise StencilError(
                f"a periodic axis needs at least {need} points: sin(2 pi x) vanishes on 2, so "
                f"the test problem would be all zero; got --grid {' '.join(map(str, grid))}"
            )


def _check_block_z(cfg: StencilConfig) -> None:
    if cfg.block_z is None:
        return
    if cfg.kind != "wave25":
        raise StencilError(f"block_z applies to kind wave25 only; leave it out for kind {cfg.kind}")
    require_int(
        "block_z", cfg.block_z, 1, None, error=StencilError
    )  # and at most NZ: `wave.wave25` says so


def check_config(cfg: StencilConfig) -> None:
    """Refuse settings `run_stencil` cannot run as asked (module docstring); the grid's
    shape and the wafer's SRAM are checked where the grid is placed."""
    if cfg.kind not in KINDS:
        near = suggest(cfg.kind, KINDS) if isinstance(cfg.kind, str) else ""
        raise StencilError(
            f"unknown kind {shown_setting(cfg.kind)}{near}; use one of {', '.join(KINDS)}"
        )
    if not isinstance(cfg.spec, WaferSpec):
        raise StencilError(
            f"spec must be a WaferSpec (wse_core.preset(NAME) gives one), got "
            f"{type(cfg.spec).__name__} {shown_setting(cfg.spec)}"
        )
    if cfg.steps is not None:
        require_int("steps", cfg.steps, 0, INT32_MAX, error=StencilError)
        limits.check("time_steps", cfg.steps, "steps")
    require_int("chunks", cfg.chunks, 1, error=StencilError)
    _check_tol(cfg)
    _check_block_z(cfg)
    _check_periodic_grid(cfg)
