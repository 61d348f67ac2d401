"""The stencil shell: builds a problem, jits and times the kernels, attaches predictions.

`run_stencil(StencilConfig(...))` is what `wse hpc stencil`, the benchmark, the experiments and
the demo call. It places the grid (SRAM ledger first; `problems.place_*` are the plans the
experiments price at full size), builds the problem (below), compiles before timing (the
measured wall time excludes compilation), runs many steps per jitted call (a `lax.fori_loop`
per chunk; BiCGSTAB with refinement is one `lax.while_loop`) and returns a `StencilRun`: the
placed grid it ran on, the final field and `.report`, the `wse_core.RunReport` of the run:
the measured wall time beside the predicted wafer time of the same run (`wse_hpc.stencil.perf`
priced on that grid, dtype, Z block and traced traffic), and in `extra` the history, the final
figures, the rates and a z-slice of the solution (`slice_xy`, at most 64 x 64). The rates are
the whole run's, measured and predicted alike: the cells of every step (iteration) over its
seconds, a solve's start, reliable updates and restarts included, as its FLOP/s;
`predicted_s_per_step` is one step's (one BiCGSTAB iteration's) alone.

Problems (on the unit cube). Each "final" figure names its reference (hunt 71: "exact" meant
the continuous solution for jacobi, the scheme's own decay for heat and the discrete
solution for bicgstab):
- jacobi: Poisson A u = f with u = sin(pi x) sin(pi y) sin(pi z) (Dirichlet; 2 pi for
  periodic) and f = -lap u; history: relative residual; final:
  `max_error_vs_continuous_solution`, against that u (its discretisation error included).
- heat: the same eigenmode as initial data, explicit Euler (diffusivity 1) at half the stable
  step; history and final `max_deviation_from_scheme_decay`: against the scheme's own mode
  decay (1 - dt lambda_h)^n u0, lambda_h the discrete eigenvalue (rounding only); final also
  `scheme_amplitude` (1 - dt lambda_h)^n, `time` n dt and `heat_equation_amplitude`
  exp(-lambda t), lambda = 3 (m pi)^2 the continuous one (m = 1, periodic 2): the heat
  equation's, from which the scheme departs by its discretisation error (28% at 8 x 6 x 5
  periodic, t = 0.1).
- bicgstab: A x = A u_exact for a non-separable u_exact (a discrete manufactured solution),
  solved by BiCGSTAB with reliable updates (`wse_hpc.stencil.refine`) that stops on the true
  residual; history: the recurrence residual relative to ||b||; `true_history`: the true
  residual at each check; `converged` and, when false, `reason` (one line); final
  `max_error_vs_discrete_solution`: against u_exact, the discrete system's own solution.
- wave25: Ricker point source at the centre, two velocity layers (1.0 and 1.5), 40% of the
  stable step; history: max |u|.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from wse_core import RunReport
from wse_core.cost.perf import Phases, Timing
from wse_core.host.runtime import wall_s
from wse_core.hw.spec import DTYPE_BYTES

from wse_hpc.stencil import perf
from wse_hpc.stencil.config import KINDS, StencilConfig, check_config
from wse_hpc.stencil.detours import detour_assumption
from wse_hpc.stencil.kernels import (
    heat,
    iterate_padded,
    jacobi,
    laplacian7,
    max_stable_dt,
    norm,
    pad_z,
)
from wse_hpc.stencil.periodic import periodic_assumption
from wse_hpc.stencil.placement import StencilError, StencilGrid, grid_wafer, place_grid
from wse_hpc.stencil.problems import (
    bicgstab_spmv,
    default_block_z,
    exact_solution,
    place_bicgstab,
    place_jacobi,
    place_wave,
    wave_block_fn,
)
from wse_hpc.stencil.reach import reason
from wse_hpc.stencil.refine import CERTIFY_FLOOR, PAIR_BELOW, refine
from wse_hpc.stencil.traffic import bicgstab_traffic, run_traffic
from wse_hpc.stencil.wave import max_stable_dt as wave_dt
from wse_hpc.stencil.wave import wave25

__all__ = [
    "KINDS",
    "StencilConfig",
    "StencilRun",
    "bicgstab_request",
    "exact_solution",
    "place_bicgstab",
    "place_wave",
    "run_stencil",
]

Progress = Callable[[int, int], None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class StencilRun:
    """What `run_stencil` returns: the placed grid the run used (its plan: shape, dtype,
    wafer and SRAM ledger), the final field on it and the run's `report`."""

    grid: StencilGrid
    field: jax.Array  # u (jacobi, heat, wave25) or x (bicgstab's high part), as placed
    report: RunReport


def _eigenvalue(grid: StencilGrid) -> float:
    """The discrete eigenvalue of A for the mode of `exact_solution`."""
    m = 2 if grid.boundary == "periodic" else 1
    return sum(4 / h**2 * math.sin(m * math.pi * h / 2) ** 2 for h in grid.spacing)


def _timed(fn, *args) -> tuple[Any, float]:
    """Compile first, then run and time `fn(*args)` (arguments are donated)."""
    compiled = jax.jit(fn, donate_argnums=0).lower(*args).compile()
    return wall_s(compiled, *args)


def _chunked(advance, state, steps: int, chunks: int, observe, progress: Progress | None):
    """Run `steps` steps in `chunks` jitted calls of `advance(state, n)` (a loop of n steps);
    observe(state, done) after each."""
    calls = min(chunks, steps)  # a call of no steps runs nothing (chunks >= 1: `check_config`)
    sizes = [steps // calls + (i < steps % calls) for i in range(calls)] or [0]
    loops = {}
    wall, done, history = 0.0, 0, [observe(state, 0)]
    for n in sizes:
        if n not in loops:
            loop = lambda s, n=n: advance(s, n)
            loops[n] = jax.jit(loop, donate_argnums=0).lower(state).compile()
        state, call_s = wall_s(loops[n], state)
        wall += call_s
        done += n
        history.append(observe(state, done))
        if progress:
            progress(done, steps)
    return state, wall, done, history


def _steps(step_fn, state, n: int, pair: bool):
    if not pair:
        return lax.fori_loop(0, n, lambda i, a: step_fn(a), state)
    state = lax.fori_loop(0, n // 2, lambda i, a: step_fn(step_fn(a)), state)
    return step_fn(state) if n % 2 else state


def _setup(cfg: StencilConfig):
    check_config(cfg)
    return grid_wafer(cfg.spec, cfg.grid, mesh_shape=cfg.mesh_shape, defect_seed=cfg.defect_seed)


def _config_record(cfg: StencilConfig) -> dict[str, Any]:
    """The run's settings as its report records them, the wafer by its spec's name."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        key, value = (
            ("preset", cfg.spec.name) if f.name == "spec" else (f.name, getattr(cfg, f.name))
        )
        out[key] = value
    return out


def run_stencil(cfg: StencilConfig, progress: Progress | None = None) -> StencilRun:
    """Run one configured problem (see the module docstring): its grid, field and report."""
    wafer = _setup(cfg)
    runner = {
        "jacobi": _run_jacobi,
        "heat": _run_heat,
        "bicgstab": _run_bicgstab,
        "wave25": _run_wave,
    }[cfg.kind]
    return runner(cfg, wafer, progress)


def _field_dtype(cfg: StencilConfig, allowed: tuple[str, ...]) -> str:
    if cfg.dtype not in allowed:
        raise StencilError(
            f"--dtype {cfg.dtype!r} does not apply to {cfg.kind}; use one of {', '.join(allowed)}"
        )
    return cfg.dtype


def _slice(grid: StencilGrid, field: jax.Array) -> list[list[float]]:
    """The z = nz / 2 plane, every k-th point so that at most 64 x 64 remain (for figures)."""
    nx, ny, nz = grid.shape
    plane = np.asarray(grid.gather(field)[:, :, nz // 2], np.float32)
    return plane[:: -(-nx // 64), :: -(-ny // 64)].tolist()


def _grid_flops(grid: StencilGrid, phases: Phases) -> float:
    """The whole grid's flops: the busiest PE's (the phases count one PE's Z column) times
    the X x Y PEs, every one of which runs the same step (hunt 67: one PE's flops over the
    run's seconds was printed as the grid's FLOP/s, 0.000 TFLOP/s beside 5.1 Gcell/s)."""
    return phases.total_work().flops() * grid.shape[0] * grid.shape[1]


def _result(cfg, grid, phases: Phases, step: str, wall: float, done: int, field, traffic,
            **extra):  # fmt: skip
    """A finished run and its RunReport: the phases priced, the measurement, the figures,
    `traffic` the ledger's count of the exchanges priced (`wse_hpc.stencil.traffic`)."""
    cells, flops = grid.cells, _grid_flops(grid, phases)

    def figures(t: Timing) -> dict[str, Any]:
        node = t.leaf(step)
        per_step = node.seconds / node.repeat if node.repeat else node.seconds
        timed = done and t.seconds > 0
        return {
            "config": _config_record(cfg),
            "kind": cfg.kind,
            "steps": done,
            "cells": cells,
            # rates of a run with no step (`--steps 0`, a target the start meets) are None
            # (JSON null), not NaN: nothing was timed (hunt 57)
            "measured_cells_per_s": cells * done / wall if done and wall > 0 else None,
            "predicted_s_per_step": per_step,
            # the cells of every step over the whole run's seconds, as measured_cells_per_s
            # and the FLOP/s (hunt 82: per_step left BiCGSTAB's start and reliable updates
            # out, 0.7 Gcell/s printed beside 151.5 us for 3 x 20,800 cells, 0.41 Gcell/s)
            "predicted_gcells_per_s": cells * done / t.seconds / 1e9 if timed else None,
            "predicted_flops_per_s": flops / t.seconds if timed else None,
            "emulated_wafer": grid.wafer.describe(),  # not the report's own "wafer"
            "grid_detour_hops": grid.wafer.remap.extra_hops_within(*grid.shape[:2]),
            "slice_xy": _slice(grid, field),
            **extra,
        }

    report = RunReport.build(
        f"stencil {cfg.kind}",
        grid.wafer.spec,
        phases,
        measured_wall_s=wall,
        traffic=traffic,
        sram=grid.wafer.sram.summary(),
        reads=grid.wafer.sram.sized_reads(),  # the reserve decided the fit (hunt 82)
        assumptions={
            **perf.assumptions(cfg.kind),
            **_flops_note(),
            **detour_assumption(grid, cfg.kind),
            **periodic_assumption(grid),
        },
        units="solve" if cfg.kind == "bicgstab" else "run",
        extra=figures,
    )
    return StencilRun(grid=grid, field=field, report=report)


def _flops_note() -> dict[str, str]:
    return {
        "flops": "predicted_flops_per_s: the grid's flops (the kernel's op counts on one "
        "PE's Z column, FMA 2, times the X x Y PEs, all running the same step) over the "
        "predicted seconds"
    }


def _run_jacobi(cfg, wafer, progress) -> StencilRun:
    dt = _field_dtype(cfg, ("fp32", "fp16"))
    grid = place_jacobi(wafer, cfg.grid, dt, cfg.boundary)
    ue = exact_solution(grid, "jacobi")
    f = grid.place(_eigenvalue_continuous(grid) * ue, "f")
    pair = _two_buffers(grid, grid.zeros("u"))
    step, apply_a, nrm = jacobi(grid, padded=True), laplacian7(grid), norm(grid)
    fnorm = float(nrm(f))
    res_fn = jax.jit(lambda u, f: nrm(f - apply_a(u[:, :, 1:-1])))
    observe = lambda s, n: (n, float(res_fn(s[0][0], s[1])) / fnorm)
    steps = 100 if cfg.steps is None else cfg.steps
    advance = lambda s, n: (iterate_padded(grid, lambda a: step(a, s[1]), n)(s[0]), s[1])
    (pair, f), wall, done, hist = _chunked(advance, (pair, f), steps, cfg.chunks, observe, progress)
    u = pair[0][:, :, 1:-1]
    err = float(np.abs(grid.gather(u) - ue).max())
    sweep, field = jacobi(grid), perf.field_struct(grid, grid.dtype("u"))
    phases = perf.jacobi_phases(grid, sweep, done)
    traffic = run_traffic(grid, sweep, (field, field), done)
    return _result(
        cfg, grid, phases, "jacobi_sweep", wall, done, u, traffic,
        metric="relative residual", history=hist,
        final={"max_error_vs_continuous_solution": err},
    )  # fmt: skip


def _two_buffers(grid: StencilGrid, u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Two distinct Z-ghost-padded copies of u, for `iterate_padded` (donated in turn)."""
    return jax.jit(lambda a: (pad_z(grid, a), pad_z(grid, a)))(u)


def _eigenvalue_continuous(grid: StencilGrid) -> float:
    return 3 * (2 * np.pi if grid.boundary == "periodic" else np.pi) ** 2


def _run_heat(cfg, wafer, progress) -> StencilRun:
    dt_name = _field_dtype(cfg, ("fp32", "fp16"))
    grid = place_grid(
        wafer,
        cfg.grid,
        {"u": dt_name, "u_next": dt_name},
        boundary=cfg.boundary,
        buffers_for=lambda n: 4 * DTYPE_BYTES[dt_name],
    )
    u0 = exact_solution(grid, "heat")
    dt = 0.5 * max_stable_dt(grid, 1.0)
    step = heat(grid, dt=dt, padded=True)
    decay = 1 - dt * _eigenvalue(grid)
    pair = _two_buffers(grid, grid.place(u0, "u"))
    observe = lambda s, n: (
        n,
        float(np.abs(grid.gather(s[0])[:, :, 1:-1] - decay**n * u0).max()),
    )
    steps = 100 if cfg.steps is None else cfg.steps
    advance = lambda s, n: iterate_padded(grid, step, n)(s)
    pair, wall, done, hist = _chunked(advance, pair, steps, cfg.chunks, observe, progress)
    u = pair[0][:, :, 1:-1]
    final = {  # the scheme's own decay, and the heat equation's at the same time
        "max_deviation_from_scheme_decay": hist[-1][1],
        "scheme_amplitude": float(decay**done),
        "heat_equation_amplitude": math.exp(-_eigenvalue_continuous(grid) * done * dt),
        "time": done * dt,
        "dt": dt,
    }
    heat_fn = heat(grid, dt=dt)
    phases = perf.heat_phases(grid, heat_fn, done)
    traffic = run_traffic(grid, heat_fn, (perf.field_struct(grid, grid.dtype("u")),), done)
    return _result(
        cfg, grid, phases, "heat_step", wall, done, u, traffic,
        metric="max |u - (1 - dt lambda_h)^n u0|, the scheme's decay", history=hist, final=final,
    )  # fmt: skip


def bicgstab_request(cfg: StencilConfig) -> tuple[str, float, int]:
    """(precision, tol, maxiter) a BiCGSTAB run of `cfg` uses: its settings or the defaults
    (mixed: tol 1e-3; fp32: 1e-6; a 1,000-iteration cap). fp16 is refused: it ran the mixed
    scheme under an fp16 label (hunt 75), as mixed for jacobi is refused."""
    if cfg.dtype == "fp16":
        raise StencilError("--dtype fp16 is for jacobi/heat; bicgstab takes fp32 or mixed")
    precision = "mixed" if cfg.dtype == "mixed" else _field_dtype(cfg, ("fp32", "mixed"))
    tol = cfg.tol if cfg.tol is not None else (1e-3 if precision == "mixed" else 1e-6)
    return precision, tol, 1000 if cfg.steps is None else cfg.steps


def _run_bicgstab(cfg, wafer, progress) -> StencilRun:
    precision, tol, maxiter = bicgstab_request(cfg)
    pair = tol < PAIR_BELOW
    grid = place_bicgstab(wafer, cfg.grid, precision, pair=pair, boundary=cfg.boundary)
    solve = refine(grid, precision=precision, tol=tol, maxiter=maxiter, pair=pair)
    ue = exact_solution(grid, "bicgstab")
    b = jax.jit(laplacian7(grid))(grid.place(ue, "b"))
    res, wall = _timed(solve, b * 1)
    n, k = int(res.iterations), int(res.checks)
    if progress:
        progress(n, maxiter)
    x = grid.gather(res.x).astype(np.float64) + grid.gather(res.x_lo)
    true_res, converged = float(res.true_residual), bool(res.converged)
    restarts, breakdowns, rejected = int(res.restarts), int(res.breakdowns), int(res.rejected)
    final = {
        "true_residual": true_res,
        "recurrence_residual": float(res.recurrence),
        "max_error_vs_discrete_solution": float(np.abs(x - ue).max()),
        "reliable_updates": k - 1,
        "restarts": restarts,
        "breakdowns": breakdowns,
        "rejected_groups": rejected,
        "tol": tol,
    }
    hist = [(i, float(v)) for i, v in enumerate(np.asarray(res.history)[: n + 1])]
    thist = np.asarray(res.true_history)[: n + 1]
    checks = [(i, float(v)) for i, v in enumerate(thist) if np.isfinite(v)]
    # a dropped group costs a second residual (priced as an update) and a restart that
    # clears p and v (as after a breakdown)
    spmv, updates = bicgstab_spmv(grid), k - 1 + rejected
    phases = perf.bicgstab_phases(
        grid, precision, spmv, iterations=n, updates=updates,
        restarts=restarts, breakdowns=breakdowns + rejected, pair=pair,
    )  # fmt: skip
    traffic = bicgstab_traffic(grid, precision, spmv, iterations=n, updates=updates, pair=pair)
    why = None if converged else reason(
        res, cfg.grid, tol, maxiter, precision=precision, pair=pair, floor=CERTIFY_FLOOR
    )  # fmt: skip
    return _result(
        cfg, grid, phases, "bicgstab_iteration", wall, n, res.x, traffic,
        metric="recurrence residual / ||b||", history=hist, final=final,
        true_history=checks, converged=converged,
        reason=why,
        x_carry="fp32 pair (x_hi + x_lo)" if pair else "fp32",
    )  # fmt: skip


def _run_wave(cfg, wafer, progress) -> StencilRun:
    _field_dtype(cfg, ("fp32",))
    nz = cfg.grid[2]
    b = default_block_z(nz) if cfg.block_z is None else cfg.block_z
    grid = place_wave(wafer, cfg.grid, cfg.block_z, cfg.boundary)  # None: the default, b
    x = grid.coords()[0]
    vel = np.broadcast_to(np.where(x < 0.5, 1.0, 1.5)[:, None, None], grid.shape)
    dt = 0.4 * wave_dt(grid, 1.5)
    f0 = 1.0 / (8 * max(grid.spacing))  # about 8 points per wavelength at v = 1
    fns = wave25(grid, dt=dt, f0=f0, block_z=b)
    zero = grid.zeros("u")
    st = jax.jit(fns.init_fn)(zero, zero, grid.place(vel, "velocity"))
    observe = lambda s, n: (n, float(jnp.max(jnp.abs(fns.field_fn(s)))))
    steps = 50 if cfg.steps is None else cfg.steps
    advance = lambda s, n: _steps(fns.step_fn, s, n, pair=True)
    st, wall, done, hist = _chunked(advance, st, steps, cfg.chunks, observe, progress)
    block_fn = wave_block_fn(grid)
    phases = perf.wave25_phases(grid, b, block_fn, done)
    traffic = perf.wave25_traffic(grid, b, block_fn).scaled(done)
    final = {"max_abs_u": hist[-1][1], "dt": dt, "f0": f0, "block_z": b}
    return _result(
        cfg, grid, phases, "wave25_step", wall, done, fns.field_fn(st), traffic,
        metric="max |u|", history=hist, final=final,
    )  # fmt: skip
