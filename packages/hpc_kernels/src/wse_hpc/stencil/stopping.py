"""The stack's one stopping rule for its Krylov solvers, and the passes a solve runs.

Contract: this module owns when a solve stops and when it runs again, for this stencil's
`bicgstab` and `refine` and `wse_hpc.fields`' cg and bicgstab alike. `check_stop(tol,
maxiter)` refuses stopping settings before anything is traced: tol a finite number in (0, 1),
maxiter an integer within the HPC iteration limit (`wse_core.host.limits`' time_steps). A
solve stops by SciPy's rule (`scipy.sparse.linalg.bicgstab`: ||b - A x|| <= rtol ||b||, atol
0; `correction_tol` on a start's correction, `residual_met` on a true residual), with or
without an x0: its recurrence runs to tol ||b||, then the true residual of the x it leaves is
computed; where it misses tol another pass starts from that x (`PASS_FLOOR`, `GAIN`,
`pass_again`, `run_passes`), and the best pass's x is returned (`keep_best`; review 79: a
last pass may end worse). The functions are pure and traceable (jnp scalars in, out).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from wse_core.errors import is_finite, require_int, shown_setting
from wse_core.host import limits

from wse_hpc.stencil.config import INT32_MAX
from wse_hpc.stencil.placement import StencilError

__all__ = ["GAIN", "PASS_FLOOR", "check_stop", "correction_tol", "keep_best", "pass_again",
           "residual_met", "run_passes"]  # fmt: skip

# A pass from a nonzero x stops at this recurrence residual relative to its own ||b - A x||
# at the lowest: that right-hand side is rounded at eps ||A|| ||x|| in the working precision
# (fp16's eps 9.8e-4), and solving it further only moves the rounding; the next pass starts
# from the true residual of the x it leaves. The stack's one set: `wse_hpc.fields.solvers`'
# cg and bicgstab (fp32) use PASS_FLOOR["fp32"] and GAIN from here (`pass_again`).
PASS_FLOOR = {"mixed": 2.0**-10, "fp32": 1e-6}
GAIN = 0.9  # another pass only while the true residual fell below GAIN x the last one's


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
