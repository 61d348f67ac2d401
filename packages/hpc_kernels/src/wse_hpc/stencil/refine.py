"""Iterative refinement around BiCGSTAB: the solver that stops on, and reports, the truth.

`refine(grid, precision=..., tol=..., maxiter=..., pair=...)` returns `solve_fn(b) ->
SolveResult`, one jitted `lax.while_loop` over outer steps:

    r = b - A x                   (fp32 on the wafer; x = x_hi + x_lo when `pair`)
    t = ||r|| / ||b||             (an fp32 allreduce: the true residual, what we stop on)
    stop if t + CERTIFY_FLOOR <= tol (converged), if t stalls (> 0.5 x the last one: out
        of reach) or at the inner iteration cap
    A d = r  by inner BiCGSTAB (`bicgstab`, mixed or fp32) to relative accuracy
        max(tol / (2 t), INNER_RTOL[precision]), scaled by a power of two from ||r||
    x += d                        (fp32; with `pair`, a TwoSum keeps the rounding in x_lo)

Why the pair: an fp32 x cannot get below about eps32 ||A|| ||x|| / ||b|| in the true
residual (on 48^3 the exact solution rounded to fp32 leaves 6.5e-6), and the wafer has no
fp64. Carrying x as an unevaluated sum of two fp32 fields and computing r = (b - A x_hi) -
A x_lo in fp32 (the difference-form SpMV is nearly exact on smooth fields) brings the
floor to about 1e-7 on 48^3 while staying in wafer arithmetic; the emulator's fp64 is not
used. Below that floor the tolerance is out of reach: the loop stops (`stalled`) and says
so. `pair=False` keeps one fp32 x (fits the SC20 problem on a CS-1; `wse_hpc.stencil.runs`
picks the pair for tol < PAIR_BELOW). The best x seen is kept (a stalled step is undone).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from wse_hpc.stencil.bicgstab import (
    TARGET_MAGNITUDE,
    BicgstabResult,
    Precision,
    bicgstab,
    default_replace_every,
    fused_dot,
    lambda_min,
)
from wse_hpc.stencil.kernels import diagonal, laplacian7
from wse_hpc.stencil.placement import StencilError, StencilGrid

__all__ = ["CERTIFY_FLOOR", "INNER_RTOL", "PAIR_BELOW", "STALL", "SolveResult", "refine"]

INNER_RTOL = {"mixed": 1e-2, "fp32": 1e-5}  # what each inner precision reaches reliably
PAIR_BELOW = 1e-4  # tolerances below this carry x as an fp32 pair
STALL = 0.5  # an outer step that does not halve the true residual ends the solve
MAX_OUTER = 30
# What an fp32 residual on the wafer can certify: its own rounding is about eps32 ||b||
# (measured against fp64: 4.5e-8 on 12^3, 8e-8 on 48^3), so the solve counts as converged
# only when the computed true residual plus this floor is <= tol: tolerances below
# 2 x 1.2e-7 are out of reach and reported so.
CERTIFY_FLOOR = float(jnp.finfo(jnp.float32).eps)


class SolveResult(NamedTuple):
    x: jax.Array  # fp32 field x_hi
    x_lo: jax.Array  # fp32 field: x = x_hi + x_lo (zeros without `pair`)
    iterations: jax.Array  # int32, inner iterations in all
    outer: jax.Array  # int32, true-residual checks (the first, at x = 0, included)
    replacements: jax.Array  # int32, inner residual replacements
    true_residual: jax.Array  # fp32 ||b - A x|| / ||b|| of the returned x, on the wafer
    recurrence: jax.Array  # fp32, the last inner recurrence residual relative to ||b||
    history: jax.Array  # fp32 (maxiter + 1,): recurrence residual / ||b||, NaN past the end
    true_history: jax.Array  # fp32 (MAX_OUTER + 1,): true residual per check, NaN past
    check_iterations: jax.Array  # int32 (MAX_OUTER + 1,): inner iterations at each check
    converged: jax.Array  # bool: true residual + CERTIFY_FLOOR <= tol
    stalled: jax.Array  # bool: the true residual stopped falling (tol out of reach)
    breakdown: jax.Array  # bool: the last inner solve broke down


class _Outer(NamedTuple):
    x: jax.Array
    x_lo: jax.Array
    r: jax.Array  # b - A x (shares the correction's SRAM on the wafer)
    rnorm: jax.Array
    t: jax.Array  # true residual of x
    rec: jax.Array
    k: jax.Array
    its: jax.Array
    repl: jax.Array
    hist: jax.Array
    thist: jax.Array
    tits: jax.Array  # inner iterations done at each check
    stalled: jax.Array
    breakdown: jax.Array


def _two_sum(hi: jax.Array, lo: jax.Array, d: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(hi, lo) + d with the rounding error of hi + d kept in lo (Knuth's TwoSum)."""
    s = hi + d
    bb = s - hi
    err = (hi - (s - bb)) + (d - bb)
    return s, lo + err


class _Refiner(NamedTuple):
    """The static things one refinement closes over (built by `refine`)."""

    grid: StencilGrid
    inner: Callable[..., BicgstabResult]  # the inner BiCGSTAB's solve_fn
    apply_a: Callable[[jax.Array], jax.Array]  # A in fp32
    precision: str
    maxiter: int
    every: int  # the inner residual-replacement period
    target: float  # tol - CERTIFY_FLOOR
    bound_per_r: float  # |y| per ||r|| (sigma from ||r||)
    pair: bool


def _residual(rf: _Refiner, b, x, x_lo):
    """r = b - A x (x = x_hi + x_lo with `pair`) and ||r|| (one fp32 allreduce)."""
    apply_a, grid, pair = rf.apply_a, rf.grid, rf.pair
    r = b - apply_a(x)
    r = r - apply_a(x_lo) if pair else r
    return r, jnp.sqrt(fused_dot(grid, [(r, r)])[0])


def _outer_step(rf: _Refiner, b: jax.Array, bnorm: jax.Array, st: _Outer) -> _Outer:
    """One outer step: the inner solve of A d = r, x += d, the new true residual."""
    inner, precision, maxiter, every = rf.inner, rf.precision, rf.maxiter, rf.every
    target, bound_per_r, pair = rf.target, rf.bound_per_r, rf.pair
    sigma = jnp.exp2(jnp.round(jnp.log2(TARGET_MAGNITUDE / (st.rnorm * bound_per_r))))
    rtol = jnp.maximum(0.5 * max(target, CERTIFY_FLOOR) / st.t, INNER_RTOL[precision])
    res = inner(st.r, None, sigma, rtol=rtol, limit=maxiter - st.its)
    d = jnp.where(jnp.isfinite(res.residual), res.x, 0.0)
    x, x_lo = _two_sum(st.x, st.x_lo, d) if pair else (st.x + d, st.x_lo)
    r, rnorm = _residual(rf, b, x, x_lo)
    t = rnorm / bnorm
    keep = lambda new, old: jnp.where(t < st.t, new, old)  # the best x stays
    idx = jnp.arange(maxiter + 1)
    mine = (idx > st.its) & (idx <= st.its + res.iterations)
    src = res.history[jnp.clip(idx - st.its, 0, maxiter)] * (st.rnorm / bnorm)
    its = st.its + res.iterations
    return _Outer(
        keep(x, st.x), keep(x_lo, st.x_lo), r, rnorm, jnp.minimum(t, st.t),
        res.residual * st.rnorm / bnorm, st.k + 1, its, st.repl + res.iterations // every,
        jnp.where(mine, src, st.hist), st.thist.at[st.k].set(t), st.tits.at[st.k].set(its),
        t > STALL * st.t, res.breakdown,
    )  # fmt: skip


def refine(
    grid: StencilGrid,
    *,
    precision: Precision = "mixed",
    tol: float = 1e-6,
    maxiter: int = 1000,
    pair: bool = True,
) -> Callable[[jax.Array], SolveResult]:
    """`solve_fn(b) -> SolveResult` for A x = b (b a placed fp32 field), see the module
    docstring. Raises StencilError for a bad tolerance or cap."""
    if not (tol > 0 and math.isfinite(tol)):
        raise StencilError(f"tol must be a positive number, got {tol}")
    if maxiter < 0:
        raise StencilError(f"maxiter must be >= 0, got {maxiter}")
    inner = bicgstab(grid, precision=precision, tol=INNER_RTOL[precision], maxiter=maxiter)
    apply_a = laplacian7(grid)
    every = default_replace_every(precision)
    target = tol - CERTIFY_FLOOR  # <= 0: not certifiable, refine until it stalls
    # sigma from ||r|| (>= max |r|): |y| <= 2^10 as in scale_for, without a max-reduction.
    bound_per_r = 1.0 / float(diagonal(grid)) / lambda_min(grid)
    rf = _Refiner(grid, inner, apply_a, precision, maxiter, every, target, bound_per_r, pair)

    def solve_fn(b: jax.Array) -> SolveResult:
        bnorm = jnp.sqrt(fused_dot(grid, [(b, b)])[0])
        zero = jnp.zeros_like(b, jnp.float32)
        r, rnorm = _residual(rf, b, zero, zero)  # the first check (x = 0), priced as any other
        t0 = jnp.where(bnorm > 0, rnorm / bnorm, 0.0)
        nan = lambda n: jnp.full((n,), jnp.nan, jnp.float32)
        st = _Outer(
            zero, zero, r, rnorm, t0, jnp.float32(1.0), jnp.int32(1), jnp.int32(0),
            jnp.int32(0), nan(maxiter + 1).at[0].set(1.0), nan(MAX_OUTER + 1).at[0].set(t0),
            jnp.zeros((MAX_OUTER + 1,), jnp.int32), jnp.bool_(False), jnp.bool_(False),
        )  # fmt: skip

        def cond(st: _Outer) -> jax.Array:
            return (st.t > target) & ~st.stalled & (st.its < maxiter) & (st.k <= MAX_OUTER)

        st = lax.while_loop(cond, functools.partial(_outer_step, rf, b, bnorm), st)
        return SolveResult(
            st.x, st.x_lo, st.its, st.k, st.repl, st.t, st.rec, st.hist, st.thist, st.tits,
            st.t <= target, st.stalled, st.breakdown,
        )  # fmt: skip

    return solve_fn
