"""BiCGSTAB for the 7-point Poisson problem A x = b on the wafer (Rocki et al., SC20).

`bicgstab(grid, precision=..., tol=..., maxiter=...)` returns `solve_fn(b, x0=None) ->
BicgstabResult`, one `lax.while_loop` that the shell jits. Per iteration: two 7-point SpMVs
(halos through `wse_core.fabric.halo_apply`), the AXPYs, and three wafer-wide fp32
allreduces through `fabric.allreduce` ((r^, v); (t, s) with (t, t); (r^, r) with (r, r)).
This solver stops by SciPy's rule (`scipy.sparse.linalg.bicgstab`: ||b - A x|| <= rtol ||b||,
atol 0; `correction_tol`), with or without an x0: its recurrence runs to tol ||b||, then the
true residual of the x it leaves is computed (one SpMV, one allreduce); where it misses tol
another pass starts from that x (`PASS_FLOOR`, `GAIN`, `run_passes`). It returns the best
pass's x (review 79: a last pass may end worse) and reports its true residual, and
`converged` says it met tol (hunt 79: the target was tol ||b - A x0||, and from x0 = 10 x
random it said converged at a true residual 1e4 x tol). `wse_hpc.stencil.refine` runs the
same iteration (`krylov_step`, `restart_test`) with reliable updates within one Krylov space
(what the CLI, the bench and the experiments run).

Precision: `"mixed"` is the published scheme — vectors, SpMV and AXPYs in fp16, dot products
accumulated and reduced in fp32, scalars in fp32 — with two safeguards that fp16 needs on
Poisson grids past ~32^3 (without them the fp16 recurrence residual drifts away from the true
one and the iteration diverges): the solution x accumulates in fp32, and every
`replace_every` iterations (10 for mixed, 50 for fp32; 0 turns it off) the recurrence
residual is replaced by b - A x computed from that fp32 x (one extra SpMV).
`"fp32"` keeps everything in fp32.

Scaling (why): fp16 spans about 6e-5 .. 6.5e4, and 1 / h^2 alone overflows it on the SC20
grid. So the solver works on the diagonally scaled system D^-1 A y = sigma D^-1 r_0 with
sigma a power of two chosen so that |y| stays near 2^10 (`scaling`), and returns x = x0 +
y / sigma in fp32. r_0 = b - A x0 (b without an x0): from x0 the iteration solves for the
correction from 0, so sigma and the residual replacement follow r_0, never b (hunt 78
review: sigma from b left a warm start's r_0 ~ 1e-3 b to fall through fp16's underflow,
x all NaN). Both precisions use the same scaling, so their iterations differ only by
rounding. A breakdown never returns NaN where a finite iterate existed: the loop keeps the
iterate at the start of every `replace_every` iterations (KEEP_EVERY without replacement;
one copy per chunk, in an outer loop), and a non-finite x is swapped for it, with its
residual. Why not the last finite one: a select every iteration is 3 more vector passes
per iteration in XLA's count (31 -> 34 mixed, 50 -> 53 fp32, 48^3 and 96^3), ~6-10%.

The history holds the recurrence residual ||r_k|| / ||b|| (fp32) for k = 0..iterations (a
later pass's from its own start, the true residual there);
entries past the last iteration are NaN. It has min(maxiter, HISTORY_ITERATIONS) + 1 entries:
a cap is a bound, not a forecast (hunt 67: maxiter=10**8 made a 4-iteration solve allocate
2 GB of history up front), so a solve past HISTORY_ITERATIONS records its first ones only.

Contract: this module owns the solver `bicgstab` (its loop, its passes, its scaled start, its
history and `BicgstabResult`); one iteration over an operator (`Krylov`, `krylov_step`,
`restart_test`, `Operator`, `stencil_operator`, `fused_dot`, `solver_setup`) is
`wse_hpc.stencil.krylov`'s, shared with `refine`, and the stack's stopping rule
(`check_stop`, `correction_tol`, `PASS_FLOOR`, `GAIN`, `run_passes`...) is
`wse_hpc.stencil.stopping`'s, shared with `wse_hpc.fields`' solvers; both are re-exported
here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from wse_core import fabric

from wse_hpc.stencil.krylov import (
    PRECISIONS,
    RESTART_EPS,
    Krylov,
    Operator,
    Precision,
    default_replace_every,
    fused_dot,
    krylov_step,
    restart_test,
    solver_setup,
    stencil_operator,
)
from wse_hpc.stencil.placement import StencilGrid
from wse_hpc.stencil.scaling import (
    TARGET_MAGNITUDE,
    check_sigma,
    lambda_min,
    scale_for,
    sigma_for,
    start_fault,
)
from wse_hpc.stencil.stopping import (
    GAIN,
    PASS_FLOOR,
    check_stop,
    correction_tol,
    keep_best,
    pass_again,
    residual_met,
    run_passes,
)

__all__ = [
    "GAIN",
    "PASS_FLOOR",
    "HISTORY_ITERATIONS",
    "PRECISIONS",
    "RESTART_EPS",
    "TARGET_MAGNITUDE",
    "BicgstabResult",
    "Krylov",
    "Operator",
    "bicgstab",
    "check_stop",
    "correction_tol",
    "default_replace_every",
    "history_buffer",
    "keep_best",
    "krylov_step",
    "lambda_min",
    "pass_again",
    "residual_met",
    "restart_test",
    "run_passes",
    "scale_for",
    "solver_setup",
    "stencil_operator",
]

# Iterations a residual history records (4 B each, per history): 100x the default cap of
# 1,000; every solve the stack runs, tests and studies included, stops within 1,000.
HISTORY_ITERATIONS = 100_000
KEEP_EVERY = 50  # iterations between kept iterates when residual replacement is off


class BicgstabResult(NamedTuple):
    x: jax.Array  # fp32 solution field
    iterations: jax.Array  # int32
    residual: jax.Array  # fp32, ||b - A x|| / ||b|| of the x returned (0 for b = 0)
    history: jax.Array  # fp32 (min(maxiter, HISTORY_ITERATIONS) + 1,), NaN past the end
    # bool: rho or omega became zero / non-finite in a pass (the next starts from its kept
    # iterate's true residual), or `sigma_fault`
    breakdown: jax.Array
    converged: jax.Array  # bool: the true residual met tol (SciPy's rule, hunt 79)
    # bool: sigma D^-1 r_0 overflowed the working precision or lost more than FLUSH_SHARE of
    # its norm to underflow (`scaling.start_fault`), or sigma is not a positive finite
    # number: no iteration ran, x = x0 (or 0); `scale_for` gives a sigma
    sigma_fault: jax.Array


class _State(NamedTuple):
    k: Krylov
    rr: jax.Array
    it: jax.Array
    history: jax.Array
    breakdown: jax.Array
    restart: jax.Array  # bool: the next iteration starts afresh (p = r)
    hh: jax.Array  # (r^, r^), fp32: changes only at a restart


class _Solver(NamedTuple):
    """The static things one solve closes over (built by `bicgstab`)."""

    grid: StencilGrid
    apply: Callable[[jax.Array], jax.Array]  # A on fp32 fields (r_0 = b - A x0)
    spmv: Callable[[jax.Array], jax.Array]  # D^-1 A in the working precision
    lo: Callable[[jax.Array], jax.Array]  # cast to the working precision
    inv_d: float
    lambda_min: float
    maxiter: int
    every: int  # residual-replacement period (0: off)


def _start(sv: _Solver, b: jax.Array, x0: jax.Array | None, sigma, tol):
    """The first state, the scaled working-precision r_0 (residual replacement's right-hand
    side), rho_0, ||r_0||, sigma, the start x0 (0 without one, or for b = 0: x = 0 whatever
    x0, as SciPy, hunt 75) and `ratio`, SciPy's target tol ||b|| as a fraction of ||r_0||
    (`correction_tol`; exactly tol without an x0, where r_0 = b). sigma None picks
    `scale_for`'s from max|r_0| (one max-allreduce). A start the working precision cannot
    hold is a breakdown with `sigma_fault` (`scaling.start_fault`)."""
    grid, lo, f32 = sv.grid, sv.lo, jnp.float32
    r0 = b.astype(f32)
    if x0 is None:
        r_max = fabric.reduce(grid.wafer, jnp.max(jnp.abs(r0), axis=2), "max")
        x0 = jnp.zeros((), f32)
    else:
        rx0 = r0 - sv.apply(x0.astype(f32))  # r_0 in fp32, unscaled (1 / h^2 fits fp32)
        maxes = [jnp.max(jnp.abs(v), axis=2) for v in (r0, rx0)]
        b_max, r_max = fabric.reduce(grid.wafer, jnp.stack(maxes, axis=-1), "max")
        x0 = jnp.where(b_max > 0, x0.astype(f32), 0.0)
        r0, r_max = jnp.where(b_max > 0, rx0, 0.0), jnp.where(b_max > 0, r_max, 0.0)
    sigma = sigma_for(r_max, sv.inv_d, sv.lambda_min) if sigma is None else sigma
    sigma = jnp.asarray(sigma, f32)
    r32 = r0 * (sigma * sv.inv_d)
    r = lo(r32)
    if x0.ndim:  # ||b|| in r_0's scaled units (b itself may overflow fp32's squares)
        bs = b.astype(f32) * (sigma * sv.inv_d)
        rr32, rr0, bb = fused_dot(grid, [(r32, r32), (r, r), (bs, bs)])
        ratio = correction_tol(tol, jnp.sqrt(bb), jnp.sqrt(rr32))
    else:
        rr32, rr0 = fused_dot(grid, [(r32, r32), (r, r)])
        ratio = jnp.asarray(tol, f32)
    dots = functools.partial(fused_dot, grid)
    fault = start_fault(dots, r32, r, rr32, rr0, r_max, sigma)
    del r32, r0  # only the working-precision r_0 stays alive (memory at the SC20 size)
    r0norm = jnp.where(fault, 0.0, jnp.sqrt(rr0))
    start = jnp.where(fault, jnp.where(jnp.isfinite(rr32), 1.0, jnp.nan), r0norm > 0)
    to_b = jnp.where(ratio < jnp.inf, tol / ratio, 0.0)  # ||r_0|| / ||b||: 1 without x0
    hist = history_buffer(sv.maxiter).at[0].set((start * to_b).astype(f32))
    one = f32(1.0)
    x = jnp.zeros_like(r, f32)
    k = Krylov(x, r, r, jnp.zeros_like(r), jnp.zeros_like(r), one, one, one)
    st = _State(k, rr0, jnp.int32(0), hist, fault, jnp.bool_(True), rr0)
    return st, r, rr0, r0norm, sigma, x0, ratio, to_b


def _iterate(
    sv: _Solver, bs: jax.Array, unit: jax.Array, carry: tuple[_State, jax.Array]
) -> tuple[_State, jax.Array]:
    """The while loop's body: one iteration, the residual replacement, the restart test
    (`unit`: ||b|| in the recurrence's scaled units, the history's denominator)."""
    grid, spmv, lo, every = sv.grid, sv.spmv, sv.lo, sv.every
    # rho_new = (r^, r) of the current r, computed with ||r||^2 at the end of the
    # previous iteration (one reduction for both).
    st, rho_new = carry
    k = krylov_step(grid, spmv, lo, st.k, rho_new, st.restart)
    if every:  # residual replacement: r = b - A x from the fp32 solution
        fresh = (st.it + 1) % every == 0
        fresh_r = lambda: lo(bs.astype(jnp.float32) - spmv(k.x))
        k = k._replace(r=lax.cond(fresh, fresh_r, lambda: k.r))
    rho_next, rr = fused_dot(grid, [(k.rhat, k.r), (k.r, k.r)])
    it = st.it + 1
    restart, rhat, rho_next, hh = restart_test(rho_next, rr, k.r, k.rhat, st.hh)
    bad = ~jnp.isfinite(rr) | (rho_next == 0) | (k.omega == 0)
    rr = jnp.where(jnp.isfinite(rr), rr, st.rr)  # report the last finite residual
    hist = st.history.at[it].set(jnp.sqrt(rr) / unit, mode="drop")  # past the buffer: kept out
    done = _State(k._replace(rhat=rhat), rr, it, hist, bad, restart, hh)
    return done, rho_next


def _true_residual(sv: _Solver, b: jax.Array, x: jax.Array, sigma: jax.Array) -> jax.Array:
    """||b - A x|| / ||b|| in fp32 (one SpMV, one allreduce), 0 for b = 0; both vectors
    scaled by sigma D^-1 first, r_0's scaling, so that fp32's squares neither overflow (b ~
    1e30) nor underflow. NaN for a non-finite x."""
    s = sigma * sv.inv_d
    f32 = jnp.float32
    r, bs = (b.astype(f32) - sv.apply(x)) * s, b.astype(f32) * s
    rr, bb = fused_dot(sv.grid, [(r, r), (bs, bs)])
    return jnp.where(bb > 0, jnp.sqrt(rr) / jnp.sqrt(jnp.where(bb > 0, bb, 1.0)), 0.0)


def history_buffer(maxiter: int) -> jax.Array:
    """A residual history of NaNs, one entry for the start and one per iteration up to
    HISTORY_ITERATIONS (module docstring); writes past it are dropped (`mode="drop"`)."""
    return jnp.full((min(maxiter, HISTORY_ITERATIONS) + 1,), jnp.nan, jnp.float32)


class _Pass(NamedTuple):
    """What one pass of `bicgstab` leaves (`_pass`)."""

    x: jax.Array  # fp32, finite where any iterate was
    it: jax.Array  # iterations so far, all passes
    truth: jax.Array  # ||b - A x|| / ||b|| (`_true_residual`)
    history: jax.Array
    breakdown: jax.Array
    fault: jax.Array  # `sigma_fault` of this pass's start


def _pass(sv: _Solver, b, tol, cap, x0, sigma, floor, resume) -> _Pass:
    """One BiCGSTAB solve from x0 (None: 0) on its correction, to SciPy's tol ||b||
    (`correction_tol`) but not below `floor` relative to ||b - A x0|| (module docstring),
    within `cap`; `resume` (iterations so far, history) goes on from a last pass (None: from
    iteration 0, a new history); the true residual of the x it returns."""
    st, bs, rho0, r0norm, sigma, x_start, ratio, to_b = _start(sv, b, x0, sigma, tol)
    if resume is not None:
        st = st._replace(it=resume[0], history=resume[1])
    fault = st.breakdown
    stop_at = jnp.maximum(ratio, floor) * r0norm  # tol ||b|| in the scaled recurrence's units
    every = sv.every

    def cond(st: _State) -> jax.Array:
        return (st.it < cap) & (jnp.sqrt(st.rr) > stop_at) & ~st.breakdown

    unit = jnp.where(to_b > 0, r0norm / to_b, 1.0)  # the history's ||b||, scaled
    iterate = functools.partial(_iterate, sv, bs, unit)

    def chunk(c):  # `every` iterations; the iterate at their start kept (finite: it ran on)
        (st, rho), _ = c
        end = st.it + (every or KEEP_EVERY)
        inner = lambda c: cond(c[0]) & (c[0].it < end)
        return lax.while_loop(inner, iterate, (st, rho)), st.k.x

    first = ((st, rho0), st.k.x)
    (st, _), kept = lax.while_loop(lambda c: cond(c[0][0]), chunk, first)
    x_out, x_kept = (x_start + jnp.where(fault, 0.0, y / sigma) for y in (st.k.x, kept))
    nan_x = x_out - x_out  # 0 where finite, NaN elsewhere
    finite = fused_dot(sv.grid, [(nan_x, nan_x)])[0] == 0
    x_out = jnp.where(finite, x_out, x_kept)  # a NaN x: the last kept iterate instead
    truth = _true_residual(sv, b, x_out, sigma)  # of the x returned, relative to ||b||
    return _Pass(x_out, st.it, truth, st.history, st.breakdown, fault)


def bicgstab(
    grid: StencilGrid,
    *,
    precision: Precision = "mixed",
    tol: float = 1e-6,
    maxiter: int = 1000,
    replace_every: int | None = None,
) -> Callable[..., BicgstabResult]:
    """`solve_fn(b, x0=None, sigma=None, *, rtol=None, limit=None) -> BicgstabResult` for
    A x = b (b an fp32 field), stopping by SciPy's rule on the true residual.

    `sigma` is the scaling of the module docstring (a traced scalar) of r_0 = b - A x0 (b
    without x0); None (the default) picks `scale_for(grid, max|r_0|)`'s inside the solve
    (one max-allreduce; hunt 78: a fixed 1.0 flushed b ~ 1e-7 to zero in fp16 and overflowed
    b ~ 1; sigma from b broke warm starts). A sigma whose start the working precision cannot
    hold is flagged (`sigma_fault`, `breakdown`; `scaling.start_fault`), never converged; a
    Python number that is not positive and finite is refused (StencilError). A breakdown
    whose x is not finite returns the last kept iterate (module docstring).
    A pass iterates on the correction of its start (x0, 0, or the last pass's x) until the
    recurrence residual is <= tol ||b|| (or the traced `rtol`; SciPy's rule, relative to
    ||b||, never to ||b - A x0||), though from a nonzero start not below PASS_FLOOR of that
    start's residual, after `maxiter` (or the traced `limit`) iterations in all, or at a
    breakdown. The x it leaves is checked on the true residual (one SpMV): another pass runs
    while that misses tol, improved on the last check by GAIN, and iterations are left
    (`run_passes`); the x returned is the best pass's (a last pass may end worse).
    `residual` is that true residual ||b - A x|| / ||b|| of the x returned (NaN when x is
    not finite; a sigma_fault's is the start's, 1 without x0), `converged` says it met tol.
    From an x0 that meets tol it returns x0 after 0 iterations (SciPy too); for b = 0, x =
    0 (whatever x0, as SciPy), residual 0, converged.
    """
    dtype, op = solver_setup(grid, precision, tol, maxiter)
    lo = lambda s: s.astype(dtype)
    every = default_replace_every(precision) if replace_every is None else replace_every
    sv = _Solver(grid, op.apply, op.scaled, lo, op.inv_d, op.lambda_min, maxiter, every)

    def solve_fn(
        b: jax.Array, x0: jax.Array | None = None, sigma=None, *, rtol=None, limit=None
    ) -> BicgstabResult:
        check_sigma(sigma)
        tol_now = jnp.asarray(tol if rtol is None else rtol, jnp.float32)
        cap = maxiter if limit is None else jnp.minimum(limit, maxiter)
        floor = 0.0 if x0 is None else PASS_FLOOR[precision]
        run = functools.partial(_pass, sv, b, tol_now, cap)
        first = run(x0, sigma, floor, None)
        fault = first.fault

        def next_pass(p: _Pass) -> _Pass:
            later = run(p.x, None, PASS_FLOOR[precision], (p.it, p.history))
            return later._replace(breakdown=later.breakdown | p.breakdown)

        go = ~fault & jnp.isfinite(first.truth)
        p, x, truth = run_passes(first, next_pass, tol_now, cap, go)
        res = jnp.where(fault, p.history[0], truth)
        met = residual_met(truth, 1.0, tol_now) & ~fault  # NaN: not met
        return BicgstabResult(x, p.it, res, p.history, p.breakdown, met, fault)

    return solve_fn
