"""BiCGSTAB to the true residual: one Krylov solve with reliable updates, in wafer arithmetic.

`refine(grid, precision=..., tol=..., maxiter=..., pair=...)` returns `solve_fn(b) ->
SolveResult`, one jitted `lax.while_loop` over BiCGSTAB iterations (`bicgstab.krylov_step`
on the diagonally scaled system D^-1 A y = sigma D^-1 r, mixed or fp32; the module docstring
of `bicgstab` says why the scaling). The Krylov iterate is only the current group's
correction d; a reliable update (Sleijpen & van der Vorst 1996; van der Vorst & Ye 2000)
folds it into the solution and replaces the recurrence residual by the true one, keeping
the Krylov space (r^, p, v and the scalars go on):

    x += d / sigma                (fp32; with `pair`, a TwoSum keeps the rounding in x_lo)
    r = b - A x                   (fp32 on the wafer; x = x_hi + x_lo when `pair`)
    t = ||r|| / ||b||             (an fp32 allreduce: the true residual, what we stop on)
    sigma' from ||r||: r = sigma' D^-1 r in the working precision; p, v and rho times
    sigma' / sigma (a power of two: exact); d = 0; (r^, r) and (r, r) again (an allreduce)

An update runs when the recurrence residual has fallen below DELTA times its largest value
since the last update or UPDATE_EVERY iterations have passed (both bound how far the fp16 /
fp32 recurrence drifts from the truth; DELTA is sqrt(eps32) in fp32, as van der Vorst & Ye
choose it, and 0.1 in mixed, where the fp16 recurrence drifts within a decade), when the
recurrence says tol is met (the truth decides), and after a breakdown (rho or omega zero,
or an fp16 overflow): the Krylov space restarts from the true residual, and the group's
correction is folded in when its scalars are finite (dropped after an overflow). Dropping
a finite correction too made the restart replay the same iterations into the same
breakdown until the cap (fp32 48^3 on a 2 x 1 mesh: 2,000 iterations at 3e-2). The solve
stops when t + CERTIFY_FLOOR <= tol (converged), when FLAT updates in a row bring no
(1 - GAIN) gain on the best t (stalled: tol out of reach), when BROKE_DOWN breakdowns come
without a gain between them (`broke_down`: the restart from the true residual broke down as
well), or at the iteration cap (a last update folds the open group in first).

Why stop on breakdowns: a restart puts r^ = r, and on an operator with (r, A r) = 0 for
every r (skew-symmetric: central advection without diffusion) its first step breaks down
again, from the same x (the step is dropped), so the restart replays itself until the cap
(hunt 82: 200 of 200 iterations, 133 breakdowns, x = 0 and `converged` False, which a
caller could not tell from a cap; SciPy's bicgstab returns info -11 at the first). One
restart is still tried, as a breakdown that follows a long group is a recurrence's, which
the restart from the true residual cures.

A group that leaves the true residual above REJECT x the best so far, or above the start's
(x = 0: t = 1), is dropped (hunt 64): x stays, and the Krylov space restarts from x's true
residual (one more SpMV and allreduce). On grids where fp16's rounding (2^-11) is not small
beside D^-1 A's smallest eigenvalue (mixed on 256 x 256 x 64: 1.1e-4) the fp16 group can
move x far off (the true residual rose to 4.0 at the first check, 3.8 at the end) while fp32
converges; the solve returned that x, worse than x = 0. Dropped groups count as updates
without a gain, so such a solve stalls after FLAT of them at its best x and says so.

Why not restart: the scheme this replaces (iterative refinement: an inner BiCGSTAB to 1e-2
(mixed) or 1e-5 (fp32), then a fresh one on the new residual) threw the Krylov space away
at every outer step and let the inner recurrence drift between them: at 48^3 it took 103
iterations in fp32 where SciPy's fp64 BiCGSTAB takes 81 to the same true residual, and 54
in mixed where SciPy takes 43.

Why the pair: an fp32 x cannot get below about eps32 ||A|| ||x|| / ||b|| in the true
residual (on 48^3 the exact solution rounded to fp32 leaves 6.5e-6), and the wafer has no
fp64. Carrying x as an unevaluated sum of two fp32 fields and computing r = (b - A x_hi) -
A x_lo in fp32 (the difference-form SpMV is nearly exact on smooth fields) brings the
floor to about 1e-7 on 48^3 while staying in wafer arithmetic; the emulator's fp64 is not
used. Below that floor the tolerance is out of reach: the loop stops (`stalled`) and says
so. `pair=False` keeps one fp32 x (fits the SC20 problem on a CS-1; `wse_hpc.stencil.runs`
picks the pair for tol < PAIR_BELOW).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from wse_hpc.stencil.bicgstab import (
    GAIN,
    TARGET_MAGNITUDE,
    Krylov,
    Operator,
    Precision,
    fused_dot,
    history_buffer,
    krylov_step,
    restart_test,
    solver_setup,
)
from wse_hpc.stencil.placement import StencilGrid
from wse_hpc.stencil.reach import CERTIFY_FLOOR
from wse_hpc.stencil.scaling import power_of_two_near

__all__ = [
    "CERTIFY_FLOOR",
    "DELTA",
    "BROKE_DOWN",
    "FLAT",
    "GAIN",
    "PAIR_BELOW",
    "REJECT",
    "UPDATE_EVERY",
    "SolveResult",
    "refine",
]

# An update when the recurrence residual falls below DELTA x its max since the last. fp32:
# sqrt(eps32) (van der Vorst & Ye); 0.1 there checked every decade for nothing (fp32 to 1e-6,
# grids 24-64^3 on one device: 44 -> 19 checks, 432 -> 427 iterations, all converged).
DELTA = {"mixed": 0.1, "fp32": float(jnp.finfo(jnp.float32).eps) ** 0.5}
UPDATE_EVERY = {"mixed": 10, "fp32": 0}  # and at least every this many iterations (0: never)
FLAT = 3  # this many updates in a row without a gain end the solve (stalled)
BROKE_DOWN = 2  # this many breakdowns without a gain between them end it (broke_down)
# a gain: the true residual below GAIN x the best so far (bicgstab's passes' one GAIN)
# A group is dropped above this x the best true residual (or above the start's). BiCGSTAB's
# residual is not monotone: the checks of converging solves rose by at most 1.41x over their
# best (mixed 192 x 192 x 4; 96^3 to 1e-6: 1.40x; 128^3 to 1e-3 and 1e-4: 1.39x), so 2 keeps
# every one of them. The bad groups measured rose 40x (mixed 128 x 128 x 64: dropped, it then
# converged in 144 iterations) and 4x over the start (mixed 256 x 256 x 64).
REJECT = 2.0
PAIR_BELOW = 1e-4  # tolerances below this carry x as an fp32 pair


class SolveResult(NamedTuple):
    x: jax.Array  # fp32 field x_hi
    x_lo: jax.Array  # fp32 field: x = x_hi + x_lo (zeros without `pair`)
    iterations: jax.Array  # int32, BiCGSTAB iterations
    checks: jax.Array  # int32, true-residual checks (the first, x = 0, and every update)
    restarts: jax.Array  # int32, Krylov restarts (a breakdown or r^ nearly orthogonal to r)
    breakdowns: jax.Array  # int32, of which after a breakdown
    true_residual: jax.Array  # fp32 ||b - A x|| / ||b|| of the returned x, on the wafer
    recurrence: jax.Array  # fp32, the last recurrence residual relative to ||b||
    # fp32 (min(maxiter, HISTORY_ITERATIONS) + 1,): the first iterations' recurrence
    # residual / ||b||, NaN past the end (`bicgstab.history_buffer`)
    history: jax.Array
    true_history: jax.Array  # fp32, the same length: true residual at each check, NaN elsewhere
    converged: jax.Array  # bool: true residual + CERTIFY_FLOOR <= tol
    stalled: jax.Array  # bool: the true residual stopped falling (tol out of reach)
    rejected: jax.Array  # int32, groups dropped (not broken down): truth above REJECT x best
    # bool: BROKE_DOWN breakdowns without a gain between them ended the solve (module doc)
    broke_down: jax.Array


class _Group(NamedTuple):
    """The Krylov solve between two updates (scaled by sigma)."""

    k: Krylov  # k.x is the group's correction d
    rho_new: jax.Array  # (r^, r) for the next iteration
    rr: jax.Array  # (r, r)
    hh: jax.Array  # (r^, r^)
    restart: jax.Array  # bool: the next iteration starts afresh (p = r)
    sigma: jax.Array  # the scale of this group
    rmax: jax.Array  # the largest ||r|| since the last update
    since: jax.Array  # iterations since the last update


class _Truth(NamedTuple):
    """The solution and what the true-residual checks found."""

    x: jax.Array
    x_lo: jax.Array
    t: jax.Array  # true residual of x
    best: jax.Array  # the best t at the last gain
    flat: jax.Array  # updates since the last gain
    checks: jax.Array
    restarts: jax.Array
    breakdowns: jax.Array
    stalled: jax.Array
    rejected: jax.Array
    broken: jax.Array  # breakdowns since the last gain


class _Carry(NamedTuple):
    g: _Group
    s: _Truth
    it: jax.Array
    rec: jax.Array  # the last recurrence residual / ||b|| (the history may end before it)
    hist: jax.Array
    thist: jax.Array


class _Refiner(NamedTuple):
    """The static things one solve closes over (built by `refine`)."""

    grid: StencilGrid
    spmv: Callable[[jax.Array], jax.Array]  # D^-1 A in the working precision
    lo: Callable[[jax.Array], jax.Array]  # cast to the working precision
    apply_a: Callable[[jax.Array], jax.Array]  # A in fp32
    inv_d: float
    target: float  # tol - CERTIFY_FLOOR
    delta: float  # DELTA of the precision
    bound_per_r: float  # |y| per ||r|| (sigma from ||r||)
    pair: bool
    every: int  # UPDATE_EVERY of the precision


def _two_sum(hi: jax.Array, lo: jax.Array, d: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(hi, lo) + d with the rounding error of hi + d kept in lo (Knuth's TwoSum)."""
    s = hi + d
    bb = s - hi
    err = (hi - (s - bb)) + (d - bb)
    return s, lo + err


def _residual(rf: _Refiner, b, x, x_lo):
    """r = b - A x (x = x_hi + x_lo with `pair`) and ||r|| (one fp32 allreduce)."""
    apply_a, grid, pair = rf.apply_a, rf.grid, rf.pair
    r = b - apply_a(x)
    r = r - apply_a(x_lo) if pair else r
    return r, jnp.sqrt(fused_dot(grid, [(r, r)])[0])


def _sigma(rf: _Refiner, rnorm: jax.Array) -> jax.Array:
    """The power of two that keeps |y| near TARGET_MAGNITUDE for a residual of norm rnorm
    (||r|| >= max |r|: the bound of `bicgstab.scale_for` without a max-reduction), exact
    (`scaling.power_of_two_near`), so the rescale sigma' / sigma is too."""
    rnorm = jnp.maximum(rnorm, jnp.finfo(jnp.float32).tiny)
    return power_of_two_near(TARGET_MAGNITUDE / (rnorm * rf.bound_per_r))


def _update(rf: _Refiner, b: jax.Array, bnorm: jax.Array, bad: jax.Array, c: _Carry) -> _Carry:
    """A reliable update (module docstring); `bad`: the group broke down (the Krylov space
    restarts from the true residual; its correction is dropped if not finite). A group
    that leaves the truth above REJECT x the best, or above the start's, is dropped too."""
    g, s, lo = c.g, c.s, rf.lo
    finite = jnp.isfinite(g.rr) & jnp.isfinite(g.k.alpha) & jnp.isfinite(g.k.omega)
    d = jnp.where(bad & ~finite, 0.0, g.k.x / g.sigma)
    x, x_lo = _two_sum(s.x, s.x_lo, d) if rf.pair else (s.x + d, s.x_lo)
    r, rnorm = _residual(rf, b, x, x_lo)
    found = jnp.where(bnorm > 0, rnorm / bnorm, 0.0)  # what the check found (NaN: dropped)
    worse = ~(found <= jnp.minimum(REJECT * s.best, 1.0))
    kept = lambda: (s.x, s.x_lo, *_residual(rf, b, s.x, s.x_lo))
    x, x_lo, r, rnorm = lax.cond(worse, kept, lambda: (x, x_lo, r, rnorm))
    t = jnp.where(bnorm > 0, rnorm / bnorm, 0.0)
    broke, dropped = bad, worse & ~bad  # a dropped group that broke down counts as broken
    bad = broke | worse
    sigma = _sigma(rf, rnorm)
    up = sigma / g.sigma
    rescale = lambda a: jnp.where(bad, 0, lo(a.astype(jnp.float32) * up))
    r = lo(r * (sigma * rf.inv_d))
    rhat = jnp.where(bad, r, g.k.rhat)
    k = g.k._replace(x=jnp.zeros_like(d), r=r, rhat=rhat, p=rescale(g.k.p), v=rescale(g.k.v))
    rho_new, rr = fused_dot(rf.grid, [(rhat, r), (r, r)])
    k = k._replace(rho=k.rho * up)
    hh = jnp.where(bad, rr, g.hh)
    g = _Group(k, rho_new, rr, hh, bad, sigma, jnp.sqrt(rr), jnp.int32(0))
    gain = t < GAIN * s.best
    # a breakdown says nothing about a floor; a dropped group does
    flat = jnp.where(gain, 0, s.flat + (~broke | worse))
    best = jnp.where(gain, t, s.best)
    s = _Truth(
        x, x_lo, t, best, flat, s.checks + 1, s.restarts + bad, s.breakdowns + broke,
        flat >= FLAT, s.rejected + dropped, jnp.where(gain, 0, s.broken + broke),
    )  # fmt: skip
    return c._replace(g=g, s=s, thist=c.thist.at[c.it].set(found, mode="drop"))


def _iterate(rf: _Refiner, b: jax.Array, bnorm: jax.Array, c: _Carry) -> _Carry:
    """The while loop's body: one iteration, an update when one is due, the restart test."""
    g = c.g
    k = krylov_step(rf.grid, rf.spmv, rf.lo, g.k, g.rho_new, g.restart)
    rho_new, rr = fused_dot(rf.grid, [(k.rhat, k.r), (k.r, k.r)])
    rec = jnp.sqrt(rr)
    est = rec / (g.sigma * rf.inv_d * bnorm)  # the recurrence's view of the true residual
    bad = ~jnp.isfinite(rr) | (k.omega == 0) | (rho_new == 0)
    rmax = jnp.maximum(g.rmax, rec)
    due = bad | (rec <= rf.delta * rmax) | (est <= rf.target)
    due = due | (g.since + 1 >= rf.every) if rf.every else due
    g = g._replace(k=k, rho_new=rho_new, rr=rr, restart=False, rmax=rmax, since=g.since + 1)
    c = c._replace(g=g, it=c.it + 1, rec=est, hist=c.hist.at[c.it + 1].set(est, mode="drop"))
    # The update when due, as a loop of 0 or 1 trips rather than `lax.cond(due, update, id)`:
    # XLA:CPU copied two carried fields in the identity branch of the cond, ~70 us every
    # fp32 iteration at 48^3 (jax.profiler); a while loop updates its carry in place. The
    # same results bit for bit (fp32 and mixed, meshes 1x1, 1x2, 2x1).
    update = functools.partial(_update, rf, b, bnorm, bad)
    once = lambda dc: (jnp.bool_(False), update(dc[1]))
    _, c = lax.while_loop(lambda dc: dc[0], once, (due, c))
    g = c.g
    again, rhat, rho_new, hh = restart_test(g.rho_new, g.rr, g.k.r, g.k.rhat, g.hh)
    g = g._replace(k=g.k._replace(rhat=rhat), rho_new=rho_new, hh=hh, restart=g.restart | again)
    return c._replace(g=g, s=c.s._replace(restarts=c.s.restarts + again))


def _first(rf: _Refiner, b: jax.Array, bnorm: jax.Array, maxiter: int) -> _Carry:
    """x = 0: the true residual is b itself (t = 1, no SpMV)."""
    sigma = _sigma(rf, bnorm)
    r = rf.lo(b * (sigma * rf.inv_d))
    zero_v, zero_x = jnp.zeros_like(r), jnp.zeros_like(b, jnp.float32)
    one = jnp.float32(1.0)
    rr = fused_dot(rf.grid, [(r, r)])[0]
    k = Krylov(zero_x, r, r, zero_v, zero_v, one, one, one)
    g = _Group(k, rr, rr, rr, jnp.bool_(True), sigma, jnp.sqrt(rr), jnp.int32(0))
    t0 = jnp.where(bnorm > 0, one, 0.0)
    none = jnp.int32(0)
    no = jnp.bool_(False)
    s = _Truth(zero_x, zero_x, t0, t0, none, jnp.int32(1), none, none, no, none, none)
    nan = history_buffer(maxiter)
    return _Carry(g, s, jnp.int32(0), t0, nan.at[0].set(t0), nan.at[0].set(t0))


def refine(
    grid: StencilGrid,
    *,
    precision: Precision = "mixed",
    tol: float = 1e-6,
    maxiter: int = 1000,
    pair: bool = True,
    operator: Operator | None = None,
) -> Callable[..., SolveResult]:
    """`solve_fn(b) -> SolveResult` for A x = b (b a placed fp32 field), see the module
    docstring. A is `grid`'s 7-point Laplacian, or `operator` (`bicgstab.Operator`, any
    linear operator on placed arrays: `grid` is then its `space`, e.g. a fields
    `FieldGrid`). Raises StencilError for a bad tolerance, cap, precision or boundary."""
    dtype, op = solver_setup(grid, precision, tol, maxiter, operator)
    lo = lambda a: a.astype(dtype)
    certify = tol - CERTIFY_FLOOR  # <= 0: not certifiable, refine until it stalls
    bound_per_r = op.inv_d / op.lambda_min
    every = UPDATE_EVERY[precision]
    delta = DELTA[precision]

    def solve_fn(
        b: jax.Array,
        target: jax.Array | float | None = None,
        limit: jax.Array | int | None = None,
    ) -> SolveResult:
        # `target`: a traced certificate in place of tol - CERTIFY_FLOOR, relative to ||b||
        # (hunt 75: a fields x0's correction needs tol ||b_0|| / ||b_0 - A x0||); `limit`: a
        # traced cap below maxiter (the fields solver's second pass gets what the first left)
        target = certify if target is None else target
        cap = maxiter if limit is None else jnp.minimum(limit, maxiter)
        rf = _Refiner(grid, op.scaled, lo, op.apply, op.inv_d, target, delta, bound_per_r,
                      pair, every)  # fmt: skip
        bnorm = jnp.sqrt(fused_dot(grid, [(b, b)])[0])
        c = _first(rf, b, bnorm, maxiter)

        def cond(c: _Carry) -> jax.Array:
            going = ~c.s.stalled & (c.s.broken < BROKE_DOWN)
            return (c.s.t > target) & going & (c.it < cap)

        c = lax.while_loop(cond, functools.partial(_iterate, rf, b, bnorm), c)
        last = functools.partial(_update, rf, b, bnorm, ~jnp.isfinite(c.g.rr))
        c = lax.cond(c.g.since > 0, last, lambda c: c, c)  # the cap: fold the open group in
        s = c.s
        return SolveResult(
            s.x, s.x_lo, c.it, s.checks, s.restarts, s.breakdowns, s.t, c.rec, c.hist,
            c.thist, s.t <= target, s.stalled, s.rejected, s.broken >= BROKE_DOWN,
        )  # fmt: skip

    return solve_fn
