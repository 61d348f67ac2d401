"""The stencil shell: builds a problem, jits and times the kernels, attaches predictions.

`run_stencil(StencilConfig(...))` is what `wse hpc stencil`, the benchmark, the experiments and
the demo call. It places the grid (SRAM ledger first), builds the problem (below), compiles
before timing (`wall_s` excludes compilation), runs many steps per jitted call (a
`lax.fori_loop` per chunk; BiCGSTAB is one `lax.while_loop`) and returns a `StencilRun` with
the history, the measured cells/s and the wafer prediction per step / iteration.

Problems (on the unit cube):
- jacobi: Poisson A u = f with u = sin(pi x) sin(pi y) sin(pi z) (Dirichlet; 2 pi for
  periodic) and f = -lap u; history: relative residual; final: max error vs the exact u.
- heat: the same eigenmode as initial data, explicit Euler at half the stable step; history
  and final: max deviation from the exact discrete decay (1 - dt lambda)^n u0.
- bicgstab: A x = A u_exact for a non-separable u_exact (a discrete manufactured solution);
  history: recurrence residual; final: true residual and error vs u_exact.
- wave25: Ricker point source at the centre, two velocity layers (1.0 and 1.5), 40% of the
  stable step; history: max |u|.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from wse_core import Prediction, Traffic, preset
from wse_core.fabric import reduce as fabric_reduce

from wse_hpc.stencil import perf
from wse_hpc.stencil.bicgstab import bicgstab, scale_for
from wse_hpc.stencil.kernels import (
    heat,
    iterate_padded,
    jacobi,
    laplacian7,
    max_stable_dt,
    norm,
    pad_z,
)
from wse_hpc.stencil.placement import StencilError, StencilGrid, grid_wafer, place_grid
from wse_hpc.stencil.wave import RADIUS, wave25
from wse_hpc.stencil.wave import max_stable_dt as wave_dt

__all__ = ["KINDS", "StencilConfig", "StencilRun", "run_stencil", "exact_solution"]

KINDS = ("jacobi", "heat", "bicgstab", "wave25")
_DT = {"fp32": jnp.float32, "fp16": jnp.float16}
Progress = Callable[[int, int], None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class StencilConfig:
    kind: str
    grid: tuple[int, int, int]
    preset: str = "wse2"
    steps: int | None = None  # time steps / sweeps, or BiCGSTAB's iteration cap
    tol: float | None = None  # BiCGSTAB only
    dtype: str = "fp32"  # fp32 | fp16 (jacobi, heat) | mixed (bicgstab); wave25: fp32
    boundary: str = "dirichlet"
    block_z: int | None = None  # wave25's Z block (default: the largest divisor <= 64)
    mesh_shape: tuple[int, int] | None = None
    defect_seed: int | None = None
    chunks: int = 10  # history points for the stepping kernels


@dataclasses.dataclass
class StencilRun:
    config: StencilConfig
    metric: str  # what `history` holds
    history: list[tuple[int, float]]
    final: dict[str, float]
    steps_done: int
    wall_s: float  # timed steps only (compilation excluded)
    predicted: Prediction  # one step / iteration on the wafer
    flops_per_cell: float
    traffic: Traffic  # one step, as traced
    sram: dict[str, Any]
    wafer: dict[str, Any]
    slice_xy: np.ndarray  # the solution at z = nz // 2

    @property
    def cells(self) -> int:
        nx, ny, nz = self.config.grid
        return nx * ny * nz

    @property
    def cells_per_s(self) -> float:
        return self.cells * self.steps_done / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def predicted_gcells_per_s(self) -> float:
        return self.cells / self.predicted.seconds / 1e9

    @property
    def predicted_flops(self) -> float:
        return self.cells * self.flops_per_cell / self.predicted.seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": dataclasses.asdict(self.config),
            "metric": self.metric,
            "history": [[s, v] for s, v in self.history],
            "final": self.final,
            "steps": self.steps_done,
            "wall_s": self.wall_s,
            "measured_cells_per_s": self.cells_per_s,
            "predicted_s_per_step": self.predicted.seconds,
            "predicted_gcells_per_s": self.predicted_gcells_per_s,
            "predicted_flops_per_s": self.predicted_flops,
            "predicted": self.predicted.to_dict(),
            "traffic": self.traffic.to_dict(),
            "sram": self.sram,
            "wafer": self.wafer,
        }


def exact_solution(grid: StencilGrid, kind: str) -> np.ndarray:
    """The manufactured solution used by `kind` (fp64, (nx, ny, nz))."""
    x, y, z = np.meshgrid(*grid.coords(), indexing="ij")
    if kind == "bicgstab":
        return np.sin(np.pi * x) * np.sin(2 * np.pi * y) * np.sin(np.pi * z) * np.exp(x + z)
    k = 2 * np.pi if grid.boundary == "periodic" else np.pi
    return np.sin(k * x) * np.sin(k * y) * np.sin(k * z)


def _eigenvalue(grid: StencilGrid) -> float:
    """The discrete eigenvalue of A for the mode of `exact_solution`."""
    m = 2 if grid.boundary == "periodic" else 1
    return sum(4 / h**2 * math.sin(m * math.pi * h / 2) ** 2 for h in grid.spacing)


def _timed(fn, *args) -> tuple[Any, float]:
    """Compile first, then run and time `fn(*args)` (arguments are donated)."""
    compiled = jax.jit(fn, donate_argnums=0).lower(*args).compile()
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(*args))
    return out, time.perf_counter() - t0


def _chunked(advance, state, steps: int, chunks: int, observe, progress: Progress | None):
    """Run `steps` steps in `chunks` jitted calls of `advance(state, n)` (a loop of n steps);
    observe(state, done) after each."""
    sizes = [steps // chunks + (i < steps % chunks) for i in range(chunks)]
    sizes = [s for s in sizes if s] or [0]
    loops = {}
    wall, done, history = 0.0, 0, [observe(state, 0)]
    for n in sizes:
        if n not in loops:
            loop = lambda s, n=n: advance(s, n)
            loops[n] = jax.jit(loop, donate_argnums=0).lower(state).compile()
        t0 = time.perf_counter()
        state = jax.block_until_ready(loops[n](state))
        wall += time.perf_counter() - t0
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
    if cfg.kind not in KINDS:
        raise StencilError(f"unknown kind {cfg.kind!r}; use one of {', '.join(KINDS)}")
    if cfg.steps is not None and cfg.steps < 0:
        raise StencilError(f"steps must be >= 0, got {cfg.steps}")
    if cfg.tol is not None and not (cfg.tol > 0 and math.isfinite(cfg.tol)):
        raise StencilError(f"tol must be a positive number, got {cfg.tol}")
    return grid_wafer(
        preset(cfg.preset), cfg.grid, mesh_shape=cfg.mesh_shape, defect_seed=cfg.defect_seed
    )


def run_stencil(cfg: StencilConfig, progress: Progress | None = None) -> StencilRun:
    """Run one configured problem (see the module docstring) and report it."""
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


def _finish(cfg, grid, metric, history, final, done, wall, cost, pred, flops, field):
    nz = grid.shape[2]
    return StencilRun(
        config=cfg,
        metric=metric,
        history=history,
        final=final,
        steps_done=done,
        wall_s=wall,
        predicted=pred,
        flops_per_cell=flops,
        traffic=cost.traffic,
        sram=grid.wafer.sram.summary(),
        wafer=grid.wafer.describe(),
        slice_xy=np.asarray(grid.gather(field)[:, :, nz // 2], np.float32),
    )


def _run_jacobi(cfg, wafer, progress) -> StencilRun:
    dt = _field_dtype(cfg, ("fp32", "fp16"))
    grid = place_grid(
        wafer,
        cfg.grid,
        {"u": dt, "u_next": dt, "f": dt},
        boundary=cfg.boundary,
        buffers_for=lambda n: 4 * jnp.dtype(_DT[dt]).itemsize,
    )  # Z ghosts
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
    cost = _cost7(grid, lambda a: jacobi(grid)(a, a), u, "jacobi", reads=4)
    pred = perf.predict(grid.wafer.spec, cost, grid.shape[2])
    return _finish(
        cfg,
        grid,
        "relative residual",
        hist,
        {"max_error_vs_exact": err},
        done,
        wall,
        cost,
        pred,
        perf.FLOPS_PER_CELL["jacobi"],
        u,
    )


def _two_buffers(grid: StencilGrid, u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Two distinct Z-ghost-padded copies of u, for `iterate_padded` (donated in turn)."""
    return jax.jit(lambda a: (pad_z(grid, a), pad_z(grid, a)))(u)


def _eigenvalue_continuous(grid: StencilGrid) -> float:
    return 3 * (2 * np.pi if grid.boundary == "periodic" else np.pi) ** 2


def _cost7(grid, fn, u, kind: str, reads: float) -> perf.KernelCost:
    traffic, _ = perf.traced_traffic(grid.wafer, fn, u)
    word = u.dtype.itemsize
    key = "fp16" if word == 2 else "fp32"
    return perf.KernelCost(
        flops={key: perf.FLOPS_PER_CELL[kind]},
        sram_read_words=reads,
        sram_write_words=1,
        word_bytes=word,
        traffic=traffic,
    )


def _run_heat(cfg, wafer, progress) -> StencilRun:
    dt_name = _field_dtype(cfg, ("fp32", "fp16"))
    grid = place_grid(
        wafer,
        cfg.grid,
        {"u": dt_name, "u_next": dt_name},
        boundary=cfg.boundary,
        buffers_for=lambda n: 4 * jnp.dtype(_DT[dt_name]).itemsize,
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
    cost = _cost7(grid, heat(grid, dt=dt), u, "heat", reads=3)
    pred = perf.predict(grid.wafer.spec, cost, grid.shape[2])
    final = {
        "max_deviation_from_exact_decay": hist[-1][1],
        "amplitude": float(decay**done),
        "dt": dt,
    }
    return _finish(
        cfg,
        grid,
        "max |u - exact decay|",
        hist,
        final,
        done,
        wall,
        cost,
        pred,
        perf.FLOPS_PER_CELL["heat"],
        u,
    )


def _run_bicgstab(cfg, wafer, progress) -> StencilRun:
    precision = "mixed" if cfg.dtype in ("mixed", "fp16") else _field_dtype(cfg, ("fp32",))
    vec = "fp16" if precision == "mixed" else "fp32"
    names = ("x", "r", "rhat", "p", "v", "s", "t")
    grid = place_grid(
        wafer, cfg.grid, {**{n: vec for n in names}, "b": "fp32"}, boundary=cfg.boundary
    )
    tol = cfg.tol if cfg.tol is not None else (1e-3 if precision == "mixed" else 1e-6)
    maxiter = 1000 if cfg.steps is None else cfg.steps
    solve = bicgstab(grid, precision=precision, tol=tol, maxiter=maxiter)
    ue = exact_solution(grid, "bicgstab")
    apply_a = laplacian7(grid)
    b = jax.jit(apply_a)(grid.place(ue, "b"))
    sigma = scale_for(grid, float(jnp.max(jnp.abs(b))))
    res, wall = _timed(lambda bb, s: solve(bb, None, s), b * 1, jnp.float32(sigma))
    if progress:
        progress(int(res.iterations), maxiter)
    nrm = norm(grid)
    true_res = float(jax.jit(lambda x, bb: nrm(bb - apply_a(x)) / nrm(bb))(res.x, b))
    n = int(res.iterations)
    hist = [(i, float(v)) for i, v in enumerate(np.asarray(res.history)[: n + 1])]
    final = {
        "recurrence_residual": float(res.residual),
        "true_residual": true_res,
        "max_error_vs_exact": float(np.abs(grid.gather(res.x) - ue).max()),
        "breakdown": float(bool(res.breakdown)),
        "sigma": sigma,
        "tol": tol,
    }
    cost, pred, flops = _bicgstab_cost(grid, precision, res.x.astype(grid.dtype("x")))
    return _finish(cfg, grid, "relative residual", hist, final, n, wall, cost, pred, flops, res.x)


def _bicgstab_cost(grid, precision, x):
    """One iteration: 2 SpMVs traced, 3 reductions (their latency traced once each)."""
    spmv = laplacian7(grid)
    traffic, _ = perf.traced_traffic(grid.wafer, lambda a: spmv(spmv(a)), x)
    local = jnp.zeros(x.shape[:2] + (2,), jnp.float32)
    red, _ = perf.traced_traffic(grid.wafer, lambda a: fabric_reduce(grid.wafer, a), local)
    traffic = dataclasses.replace(
        traffic, latency_hops=traffic.latency_hops + 3 * red.latency_hops, count=traffic.count + 3
    )
    mixed = precision == "mixed"
    flops = (
        {"fp16": perf.FLOPS_PER_CELL["bicgstab"], "fp32": perf.FLOPS_PER_CELL["bicgstab_dots"]}
        if mixed
        else {"fp32": perf.FLOPS_PER_CELL["bicgstab"] + perf.FLOPS_PER_CELL["bicgstab_dots"]}
    )
    cost = perf.KernelCost(
        flops=flops,
        sram_read_words=24,
        sram_write_words=6,
        word_bytes=2 if mixed else 4,
        traffic=traffic,
        reductions=3,
    )
    pred = perf.predict(
        grid.wafer.spec,
        cost,
        grid.shape[2],
        reduction_hops=red.latency_hops * grid.wafer.spec.hop_latency_cycles,
    )
    return cost, pred, sum(flops.values())


def default_block_z(nz: int, cap: int = 64) -> int:
    """The largest divisor of nz not above `cap`."""
    return max(d for d in range(1, min(nz, cap) + 1) if nz % d == 0)


def _run_wave(cfg, wafer, progress) -> StencilRun:
    _field_dtype(cfg, ("fp32",))
    nz = cfg.grid[2]
    b = default_block_z(nz) if cfg.block_z is None else cfg.block_z
    fields = {"u_prev": "fp32", "u": "fp32"}
    grid = place_grid(
        wafer,
        cfg.grid,
        {**fields, "velocity": "fp32"},
        boundary=cfg.boundary,
        radius=RADIUS,
        buffers_for=lambda n: 16 * 4 * min(b, n) + 8 * 2 * 4,
    )
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
    traffic, _ = perf.traced_traffic(grid.wafer, fns.step_fn, st)
    traffic = traffic.scaled(nz // b)  # the Z-block loop body is traced once
    cost = perf.wave25_cost(traffic, nz // b)
    pred = perf.predict(grid.wafer.spec, cost, nz)
    final = {"max_abs_u": hist[-1][1], "dt": dt, "f0": f0, "block_z": b}
    return _finish(
        cfg,
        grid,
        "max |u|",
        hist,
        final,
        done,
        wall,
        cost,
        pred,
        perf.FLOPS_PER_CELL["wave25"],
        fns.field_fn(st),
    )
