"""A CFD run's settings: `CfdConfig`, and `check_config`, the checks `run_cfd` makes before
it builds or compiles anything.

Contract: `check_config(cfg) -> CfdConfig` raises `FieldError` naming the setting, what was
given and what is allowed, for what `wse hpc cfd` refuses at its command line (as
`wse_hpc.stencil.config.check_config` does for a stencil run), and returns the config as the
run holds it: `out_dir` a `Path`, `grid` a tuple of Python ints. Counts are Python or NumPy
integers (not bool: hunt 72, steps 2.5 or True were JAX TypeErrors inside the loop); the
physics lies within the CLI's ranges (`RANGES`, `DT_MIN`; hunt 77: `ra=1e-100` ran 5.9 s,
then "blew up ... give a smaller --dt"); `spec` is a `WaferSpec`, `grid` three positive
integers and `out_dir` None, a str or a path (hunt 77: a str out_dir was an AttributeError
after all the steps had run, `grid=(8, 8)` an IndexError, `spec="wse2"` an AttributeError,
and `grid=(8.0, 8, 1)` ran). `steps` past `wse_core.host.limits`' time_steps, and the step
files past step_files, are refused (LimitError) as the CLI refuses them. The case's own
checks (the step's limit, the grid against the wafer's PEs and SRAM) follow where the case
is built.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from wse_core import WaferSpec
from wse_core.errors import is_finite, is_int, require_int, shown_setting, suggest
from wse_core.host import limits

from wse_hpc.fields.grid import FieldError
from wse_hpc.stencil.config import INT32_MAX

__all__ = ["CASES", "DT_MIN", "RANGES", "TIME_SCHEMES", "CfdConfig", "check_config"]

CASES = ("rayleigh-benard", "cavity")
TIME_SCHEMES = ("euler", "rk3")
# The physics' ranges, closed, as `wse hpc cfd` declares them (its options' comments give
# why; a test holds the two equal): Ra from 1 (three decades under convection's onset, the
# fluid only conducts; 1e-100 made nu = (Ra / Pr)^-1/2 inf in float32) to 1e17 (the highest
# measured; 1e308 made kappa 0 in float32), Pr 1e-6..1e6, width / height 1e-3..1e3, Re
# 1e-3..1e9.
RANGES = {"ra": (1.0, 1e17), "pr": (1e-6, 1e6), "aspect": (1e-3, 1e3), "re": (1e-3, 1e9)}
DT_MIN = 1e-9  # below ~1e-7 of the run's time a float32 step no longer advances it


@dataclasses.dataclass(frozen=True, kw_only=True)
class CfdConfig:
    case: str
    grid: tuple[int, int, int]
    spec: WaferSpec
    steps: int = 100
    ra: float = 1e4
    pr: float = 1.0
    aspect: float = 2.0
    re: float = 100.0
    dt: float | None = None
    time_scheme: str = "euler"  # cavity only: "euler" or "rk3" (`FlowSpec.time_scheme`)
    output_every: int = 0  # 0: only at the end (when out_dir is given)
    out_dir: str | os.PathLike | None = None  # a Path once checked (`check_config`)
    restart: bool = False
    mesh_shape: tuple[int, int] | None = None
    defect_seed: int | None = None


def _check_choices(cfg: CfdConfig) -> None:
    if cfg.case not in CASES:
        near = suggest(cfg.case, CASES) if isinstance(cfg.case, str) else ""
        raise FieldError(
            f"unknown case {shown_setting(cfg.case)}{near}; use one of {', '.join(CASES)}"
        )
    if cfg.time_scheme not in TIME_SCHEMES:
        raise FieldError(
            f"unknown time_scheme {shown_setting(cfg.time_scheme)}; use 'euler' or 'rk3'"
        )
    if not isinstance(cfg.spec, WaferSpec):
        raise FieldError(
            f"spec must be a WaferSpec (wse_core.preset(NAME) gives one), got "
            f"{type(cfg.spec).__name__} {shown_setting(cfg.spec)}"
        )
    grid = cfg.grid
    if not (isinstance(grid, tuple | list) and len(grid) == 3 and all(is_int(n) for n in grid)
            and min(grid) >= 1):  # fmt: skip
        raise FieldError(
            f"grid must be three positive integers (NX, NY, NZ; NZ 1: 2D), got "
            f"{shown_setting(grid)}"
        )


def _check_physics(cfg: CfdConfig) -> None:
    for name, (low, high) in RANGES.items():
        value = getattr(cfg, name)
        if not (is_finite(value) and low <= value <= high):
            raise FieldError(
                f"{name} must be a finite number in [{low:g}, {high:g}] (as --{name}), got "
                f"{shown_setting(value)}"
            )
    if cfg.dt is not None and not (is_finite(cfg.dt) and cfg.dt >= DT_MIN):
        raise FieldError(
            f"dt must be a finite number >= {DT_MIN:g} (None: the case's default), got "
            f"{shown_setting(cfg.dt)}"
        )


def _out_dir(cfg: CfdConfig) -> Path | None:
    if cfg.out_dir is None or isinstance(cfg.out_dir, Path):
        return cfg.out_dir
    if isinstance(cfg.out_dir, str | os.PathLike) and isinstance(os.fspath(cfg.out_dir), str):
        return Path(cfg.out_dir)
    raise FieldError(
        f"out_dir must be a folder's path (a str or pathlib.Path) or None, got "
        f"{type(cfg.out_dir).__name__} {shown_setting(cfg.out_dir)}"
    )


def check_config(cfg: CfdConfig) -> CfdConfig:
    """Refuse settings `run_cfd` cannot run as asked (module docstring); the config with
    `out_dir` a Path and `grid` a tuple of ints."""
    require_int("steps", cfg.steps, 0, INT32_MAX, error=FieldError)  # fori_loop's int32 count
    require_int("output_every", cfg.output_every, 0, INT32_MAX, error=FieldError)
    _check_choices(cfg)
    _check_physics(cfg)
    if not isinstance(cfg.restart, bool):
        raise FieldError(f"restart must be True or False, got {shown_setting(cfg.restart)}")
    out_dir = _out_dir(cfg)
    limits.check("time_steps", cfg.steps, "steps")
    if out_dir is not None and cfg.output_every:
        files = cfg.steps // cfg.output_every + 1
        limits.check("step_files", files, f"the count of step files of steps {cfg.steps} "
                     f"output_every {cfg.output_every}")  # fmt: skip
    nx, ny, nz = (int(n) for n in cfg.grid)
    return dataclasses.replace(cfg, out_dir=out_dir, grid=(nx, ny, nz))
