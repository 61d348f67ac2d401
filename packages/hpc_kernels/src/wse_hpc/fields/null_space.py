"""Whether an operator's null space is the constants: the probe behind `cg(nullspace=True)`.

`check_null_space(apply_fn, b)` applies A's linear part (A(x) - A(0): an operator with wall
values is affine, `wse_hpc.fields.affine`) to the constant field and to the checkerboard on
b's grid and refuses (FieldError) an operator whose image of the constants is more than
fp32 rounding of its rows (`NULL_SPACE_RTOL`): with `nullspace=True` CG projects b and x to
zero mean, which on such an operator solves another problem (hunt 80: Neumann x /
Dirichlet y returned a wrong x said converged). The probe is compiled and run on the host
when the solve is traced, once per operator, grid, location and BCs, and neither recorded
into the step's `Program` nor into the fabric ledger's open scopes: it prices nothing
(`host_probe`, which `affine.split` probes A(0) with too). An operator that closes over
traced values can only be probed inside jit; the probe is then part of the solve (priced)
and its verdict a traced bool the solve reports.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable

import jax
import jax.numpy as jnp

from wse_hpc.fields.grid import Field, FieldError, FieldGrid, program
from wse_hpc.fields.operators import max_abs

__all__ = ["NULL_SPACE_RTOL", "check_null_space", "host_probe"]

ApplyFn = Callable[[Field], Field]
TINY = 1e-30  # guards the division by a row of A c that is exactly zero

# An operator singular on the constants maps the constant field to rounding: row i sums k
# terms, |(A 1)_i| <= k u (|A| 1)_i with u = 2^-24 (Higham, Accuracy and Stability of
# Numerical Algorithms, 2nd ed. 2002, Sec. 3.1), under 1e-5 of its row for up to 167 terms (a
# 27-point stencil, two 7-point ones composed; a difference stencil's constants cancel
# exactly: 0). A row whose constant does not cancel keeps a share of its own coefficients:
# the Laplacian's Dirichlet wall row 2 / h^2 of (|A| 1)_i = 8 / h^2 (2D, square cells)
# whatever the grid's size; (h_f / h_c)^2 / 2 on cells of aspect h_c / h_f along the wall's
# axis, caught up to an aspect of ~220 (2D), past which A's smallest eigenvalue is under
# 5e-6 of its largest. Row by row, not against ||A||_inf: with variable coefficients a wall
# row where they are small would hide under the largest row. (|A| 1)_i is read off A c, c
# the checkerboard +-1: equal on a Laplacian-like stencil (positive diagonal, non-positive
# neighbours), at most it on any.
NULL_SPACE_RTOL = 1e-5


# each operator's probe by (grid, location, BCs), kept while the operator lives
_PROBED: weakref.WeakKeyDictionary[ApplyFn, dict[tuple, float]] = weakref.WeakKeyDictionary()


def _constant_image(apply_fn: ApplyFn, b: Field) -> jax.Array:
    """max_i |(L 1)_i| / |(L c)_i| on b's grid, c the checkerboard +-1 (padding left out),
    L x = A(x) - A(0) the linear part (`wse_hpc.fields.affine`; A(0) is exactly 0, and L A,
    for a linear operator)."""
    ix, iy, iz = b.grid.index
    one = b.like(jnp.ones_like(b.data))
    checker = one.where((ix + iy + iz) % 2 == 0, -one)
    a0 = apply_fn(one * 0.0).data
    a1, ac = (jnp.abs(apply_fn(f).data - a0) for f in (one, checker))
    return max_abs(one.like(a1 / jnp.maximum(ac, TINY)))


def host_probe(apply_fn: ApplyFn, b: Field, probe: Callable[[ApplyFn, Field], jax.Array],
               tag: str) -> float | None:  # fmt: skip
    """`probe(apply_fn, f)` (a scalar) of a concrete field `f` like b (zeros), compiled and
    run on the host when the solve is traced, neither recorded into the step's `Program` nor
    into the fabric ledger's open scopes (it prices nothing), once per operator, `tag`, grid,
    location and BCs; None for an operator that closes over traced values (known only
    inside jit: the caller probes inside the solve instead)."""
    grid = b.grid
    try:
        seen = _PROBED.setdefault(apply_fn, {})
    except TypeError:  # an operator with no weak reference: probed at every trace
        seen = {}
    key = (tag, grid, b.loc, b.bc)  # all the probe reads of b (a step traced twice: run and price)
    if key in seen:
        return seen[key]
    with jax.ensure_compile_time_eval():  # a concrete b of its shape, even inside jit
        like = b.like(grid.wafer.zeros((grid.nz,)))
    fn = functools.partial(probe, apply_fn)
    with program(), grid.wafer.traffic.scope(own=True):  # the probe is not the solve's work
        traced = jax.jit(fn).trace(like)
        closed = len(traced.jaxpr.in_avals) != len(jax.tree.leaves(like)) or any(
            isinstance(c, jax.core.Tracer) for c in traced.jaxpr.consts
        )  # A reads traced values: they became inputs of the probe (or its constants)
        if closed:
            return None
        seen[key] = float(traced.lower().compile()(like))
    return seen[key]


def check_null_space(apply_fn: ApplyFn, b: Field) -> jax.Array | None:
    """Refuse (FieldError) `cg(nullspace=True)` on an operator that does not map the
    constants to zero (`NULL_SPACE_RTOL`, row by row), probed on b's grid when the solve is
    traced: compiled and run on the host, neither recorded nor priced (`host_probe`). None
    when it passed; for an operator that closes over traced values (known only inside jit)
    the probe is part of the solve instead (three SpMVs and a reduction, priced) and this
    returns its traced verdict, which the solve reports (`residual` NaN, not converged) as
    it cannot refuse."""
    worst = host_probe(apply_fn, b, _constant_image, "null_space")
    if worst is None:
        return _constant_image(apply_fn, b) <= NULL_SPACE_RTOL
    return _verdict(worst, b.grid)


def _verdict(worst: float, grid: FieldGrid) -> None:
    if not worst <= NULL_SPACE_RTOL:
        raise FieldError(
            f"cg(nullspace=True) needs an operator that maps constants to zero (A 1 = 0: "
            f"all-Neumann or all-periodic Poisson), but on this {grid.shape} grid a row of "
            f"A 1 is {worst:.3g} of that row's coefficients (at most {NULL_SPACE_RTOL:g}): "
            f"the operator is not singular on the constants (a Dirichlet wall, a shift), "
            f"so solve it with nullspace=False"
        )
    return None
