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

`check_stop(tol, maxiter)` is the one rule for a solver's stopping settings (this solver,
`refine`, `wse_hpc.fields`' cg and bicgstab): tol a finite number in (0, 1), maxiter an
integer within the HPC iteration limit (`wse_core.host.limits`' time_steps).

Operators: the iteration is the one BiCGSTAB of the stack. It runs over an `Operator` (A on
placed fp32 arrays, its Jacobi-scaled form in the working precision, the scaling's constants):
`stencil_operator(grid)` is the 7-point Laplacian with Dirichlet boundaries (with periodic
ones it is singular: refused); `wse_hpc.fields.solvers.bicgstab` hands it any linear field
operator (periodic, Dirichlet, Neumann, advection: `field_operator` there), fp32 only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from wse_core import fabric
from wse_core.errors import is_finite, require_int, shown_setting
from wse_core.host import limits

from wse_hpc.stencil import pe_dots
from wse_hpc.stencil.config import INT32_MAX
from wse_hpc.stencil.kernels import diagonal, laplacian7
from wse_hpc.stencil.placement import StencilError, StencilGrid
from wse_hpc.stencil.scaling import (
    TARGET_MAGNITUDE,
    check_sigma,
    lambda_min,
    scale_for,
    sigma_for,
    start_fault,
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

Precision = Literal["mixed", "fp32"]
PRECISIONS = ("mixed", "fp32")
# |(r^, r)| / (|r^| |r|) below this fraction of the vector dtype's epsilon restarts the
# iteration (fp16: 9.8e-5, fp32: 1.2e-8): below it the dot is rounding noise.
RESTART_EPS = 0.1
# Iterations a residual history records (4 B each, per history): 100x the default cap of
# 1,000; every solve the stack runs, tests and studies included, stops within 1,000.
HISTORY_ITERATIONS = 100_000
KEEP_EVERY = 50  # iterations between kept iterates when residual replacement is off
# A pass from a nonzero x stops at this recurrence residual relative to its own ||b - A x||
# at the lowest: that right-hand side is rounded at eps ||A|| ||x|| in the working precision
# (fp16's eps 9.8e-4), and solving it further only moves the rounding; the next pass starts
# from the true residual of the x it leaves. The stack's one set: `wse_hpc.fields.solvers`'
# cg and bicgstab (fp32) use PASS_FLOOR["fp32"] and GAIN from here (`pass_again`).
PASS_FLOOR = {"mixed": 2.0**-10, "fp32": 1e-6}
GAIN = 0.9  # another pass only while the true residual fell below GAIN x the last one's


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


class Krylov(NamedTuple):
    """BiCGSTAB's recurrence: the iterate, its vectors and scalars (one `krylov_step`)."""

    x: jax.Array  # fp32: the iterate (of the scaled system)
    r: jax.Array  # working precision from here to v
    rhat: jax.Array
    p: jax.Array
    v: jax.Array
    rho: jax.Array  # fp32 scalars
    alpha: jax.Array
    omega: jax.Array


class _State(NamedTuple):
    k: Krylov
    rr: jax.Array
    it: jax.Array
    history: jax.Array
    breakdown: jax.Array
    restart: jax.Array  # bool: the next iteration starts afresh (p = r)
    hh: jax.Array  # (r^, r^), fp32: changes only at a restart


class Operator(NamedTuple):
    """A linear operator for BiCGSTAB: `space` is what its vectors are placed on (anything
    with a `.wafer`: a `StencilGrid`, a fields `FieldGrid`); `apply` is A on placed fp32
    arrays, `scaled` is `inv_d * A` in the working precision (fp16 only when `fp16`: its
    coefficients then fit fp16); `lambda_min` bounds `inv_d * A`'s smallest eigenvalue from
    below (it sets the power-of-two scaling sigma, `refine._sigma`)."""

    space: Any
    apply: Callable[[jax.Array], jax.Array]
    scaled: Callable[[jax.Array], jax.Array]
    inv_d: float
    lambda_min: float
    fp16: bool


def stencil_operator(grid: StencilGrid) -> Operator:
    """The 7-point Laplacian A of `grid` (Dirichlet: SPD); StencilError for a periodic grid,
    where A is singular (the constants are its null space)."""
    if grid.boundary != "dirichlet":
        raise StencilError(
            f"BiCGSTAB on the 7-point Poisson matrix needs Dirichlet boundaries: with "
            f"{grid.boundary} ones it is singular (constants are its null space); use "
            "dirichlet, or wse_hpc.fields (cg with nullspace=True)"
        )
    inv_d = 1.0 / float(diagonal(grid))
    scaled = laplacian7(grid, scale=inv_d)  # D^-1 A: coefficients fit fp16
    return Operator(grid, laplacian7(grid), scaled, inv_d, lambda_min(grid), True)


def fused_dot(grid: StencilGrid, pairs: list[tuple[jax.Array, jax.Array]]) -> jax.Array:
    """fp32 dot products of several pairs with one wafer-wide allreduce: shape (len(pairs),),
    replicated (every PE holds the sums, as after the wafer's allreduce; `perf` prices the
    allreduce). Why `fabric.reduce` and not `fabric.allreduce(...)[0, 0]`: the latter's
    placed result, indexed outside the mesh, costs XLA a second cross-device all-reduce to
    fetch PE (0, 0)'s copy (6 instead of 3 per iteration on a 1 x 2 mesh)."""
    if pe_dots.available(grid.wafer, pairs):  # the PEs' sums as one CPU kernel (pe_dots)
        return fabric.reduce(grid.wafer, pe_dots.local_dots(grid.wafer, pairs))
    f32 = jnp.float32
    local = jnp.stack([jnp.sum(a.astype(f32) * b.astype(f32), axis=2) for a, b in pairs], axis=-1)
    return fabric.reduce(grid.wafer, local)


def default_replace_every(precision: str) -> int:
    """The default residual-replacement period: 10 iterations (mixed), 50 (fp32)."""
    return 10 if precision == "mixed" else 50


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


def krylov_step(
    grid: StencilGrid, spmv: Callable, lo: Callable, k: Krylov, rho_new, restart
) -> Krylov:
    """One BiCGSTAB iteration's vectors: p, v = A p, s, t = A s, x and r; `rho_new` is
    (r^, r) of the current r, `restart` (bool) starts afresh with p = r. `spmv` applies the
    (scaled) operator in the working precision, `lo` casts to it."""
    # The first iteration has p = r: beta from rho = 1 could overflow fp16 (inf * 0).
    beta = jnp.where(restart, 0.0, (rho_new / k.rho) * (k.alpha / k.omega))
    p = k.r + lo(beta) * (k.p - lo(k.omega) * k.v)
    v = spmv(p)
    alpha = rho_new / fused_dot(grid, [(k.rhat, v)])[0]
    s = k.r - lo(alpha) * v
    t = spmv(s)
    ts, tt = fused_dot(grid, [(t, s), (t, t)])
    omega = jnp.where(tt > 0, ts / tt, 0.0)
    x = k.x + alpha * p.astype(jnp.float32) + omega * s.astype(jnp.float32)
    r = s - lo(omega) * t
    return k._replace(x=x, r=r, p=p, v=v, rho=rho_new, alpha=alpha, omega=omega)


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


def restart_test(rho_next, rr, r, rhat, hh):
    """Restart (r^ = r, p = r) when r^ and r have become nearly orthogonal (|(r^, r)| <
    RESTART_EPS eps ||r^|| ||r||, eps of r's dtype): the dot is then rounding noise and
    the next alpha could blow up (in fp16 it overflows). SciPy restarts only at rho = 0;
    a fixed 1e-4 restarted fp32 solves 5 times at 48^3 for nothing (84 -> 87 iterations).
    Returns (restart, r^, rho_next, (r^, r^))."""
    eps = float(jnp.finfo(r.dtype).eps)
    restart = jnp.abs(rho_next) < RESTART_EPS * eps * jnp.sqrt(rr * hh)
    rhat = lax.cond(restart, lambda: r, lambda: rhat)
    return restart, rhat, jnp.where(restart, rr, rho_next), jnp.where(restart, rr, hh)


def history_buffer(maxiter: int) -> jax.Array:
    """A residual history of NaNs, one entry for the start and one per iteration up to
    HISTORY_ITERATIONS (module docstring); writes past it are dropped (`mode="drop"`)."""
    return jnp.full((min(maxiter, HISTORY_ITERATIONS) + 1,), jnp.nan, jnp.float32)


def check_stop(tol: object, maxiter: object, *, least: int = 0, error: type = StencilError):
    """Refuse (`error`, naming the setting) a tol that is not a finite number in (0, 1) or a
    maxiter that is not an integer from `least`, and (LimitError) one past the time_steps
    limit. A target of 1 or more is met by x = 0 before any iteration: SciPy returns x0
    then; the stack refuses it, as StencilConfig and the CLI do (hunt 57)."""
    if not (is_finite(tol) and 0 < tol < 1):  # type: ignore[operator]
        raise error(
            f"tol must be a number in (0, 1) (a relative residual target), got {shown_setting(tol)}"
        )
    require_int("maxiter", maxiter, least, error=error)
    limits.check("time_steps", maxiter, "maxiter")  # type: ignore[arg-type]
    require_int("maxiter", maxiter, least, INT32_MAX, error=error)  # a lifted limit: int32


def correction_tol(tol, bnorm, rnorm):
    """SciPy's stopping rule (`scipy.sparse.linalg.bicgstab` / `cg`: ||b - A x|| <=
    max(rtol ||b||, atol), atol 0 here) for a solve that iterates on the correction d of a
    start x0, A d = r_0 = b - A x0: its residual must reach tol ||b||, that is tol ||b|| /
    ||r_0|| of its own right-hand side (PETSc's default test is relative to ||b|| too); inf
    when r_0 = 0 (met: 0 iterations). The one rule of this solver, the fields' cg and the
    fields' bicgstab (`refine` on an x0's correction); hunt 79: relative to ||r_0|| a poor
    x0 moved the target, converged=True at a true residual 1e4 x tol."""
    return jnp.where(rnorm > 0, tol * bnorm / jnp.where(rnorm > 0, rnorm, 1.0), jnp.inf)


def residual_met(rnorm, bnorm, tol):
    """SciPy's rule on a residual: ||b - A x|| <= tol ||b|| (b = 0: x = 0 meets it)."""
    return rnorm <= tol * bnorm


def pass_again(truth, before, bnorm, tol, left):
    """The stack's rule for another pass from the x a pass left (this solver, `wse_hpc.fields`'
    cg): its true residual `truth` misses tol ||b|| (`residual_met`), iterations are `left`
    (a bool), and it gained on the last check `before` by GAIN (NaN: no pass)."""
    return ~residual_met(truth, bnorm, tol) & left & (truth < GAIN * before)


def keep_best(best, new, best_truth, new_truth):
    """`new` (any pytree, e.g. (x, truth)) where its true residual is below the best so far,
    else `best` (a tie or a NaN keeps `best`): a later pass may make the true residual worse
    (review 79: 7.737e-8 -> 7.758e-8, and that worse x was returned); one select a pass."""
    take = new_truth < best_truth
    return jax.tree.map(lambda n, o: jnp.where(take, n, o), new, best)


def run_passes(first, later: Callable[[Any], Any], tol, cap, go=True):
    """The passes of a solve: `first` (a pass: a NamedTuple with `x`, `it`, `truth`, the true
    residual relative to ||b||), then `later(p)` from the last pass p while `pass_again`
    (misses tol, p.it < cap, gained GAIN on the pass before; none where `go` is False).
    Returns (the last pass, the best pass's x, its truth): the iterations and history are
    the last pass's, the x returned the best one (`keep_best`)."""

    def again(c) -> jax.Array:
        p, before, _ = c
        return pass_again(p.truth, before, 1.0, tol, p.it < cap)

    def step(c):
        p, _, best = c
        q = later(p)
        return q, p.truth, keep_best(best, (q.x, q.truth), best[1], q.truth)

    start = jnp.where(go, jnp.inf, 0.0)
    last, _, (x, truth) = lax.while_loop(again, step, (first, start, (first.x, first.truth)))
    return last, x, truth


def solver_setup(
    grid: StencilGrid, precision: str, tol: float, maxiter: int, operator: Operator | None = None
):
    """What `bicgstab` and `refine` both start from: (vector dtype, the operator: `operator`
    or `stencil_operator(grid)`); raises StencilError for a bad precision, tolerance, cap or
    boundary, or mixed precision over an operator without an fp16 form (`check_stop`:
    maxiter 0 is a run of nothing, as `wse hpc stencil --steps 0`)."""
    if precision not in PRECISIONS:
        raise StencilError(f"unknown precision {precision!r}; use 'mixed' or 'fp32'")
    check_stop(tol, maxiter)
    op = stencil_operator(grid) if operator is None else operator
    if precision == "mixed" and not op.fp16:
        raise StencilError("mixed precision needs an operator with an fp16 form; use 'fp32'")
    return (jnp.float16 if precision == "mixed" else jnp.float32), op


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
