"""An operator with wall values is affine: its linear part and the constant the walls add.

A field's Dirichlet wall values enter an operator as a constant: `x -> -laplacian(x.with_bc(
(dirichlet(1, 0), neumann(), neumann())))` is A x = L x + c, c = A(0) the walls' share (hunt
82: 288 at the wall cells of a 12 x 10 grid). No Krylov solver can take A itself (CG's and
BiCGSTAB's recurrences need A(a x + y) = a A x + A y); a CFD code assembles L and moves the
boundary terms to the right-hand side, L x = b - c, whose solution is A's, A x = b. `split(
apply_fn, b)` does the same for any field operator: `(linear_fn, lift)`, lift = A(0) on b's
grid, location and BCs (the iterates' own) and linear_fn(x) = A(x) - lift; lift is None and
linear_fn `apply_fn` itself for a linear operator, whose image of the zero field is exactly
zero in floating point (every term of a stencil is a coefficient times a zero).

The probe A(0) is compiled and run on the host when the solve is traced, once per operator
(`null_space.host_probe`: neither recorded nor priced), so a linear operator's solve is
traced, run and priced as before. An affine one's lift is computed in the solve (one SpMV,
priced: the boundary terms a CFD code assembles once per solve) and its linear_fn subtracts
it at every SpMV (one op per cell). An operator that closes over traced values can only be
probed inside jit: it is split there whatever it is (for a linear one lift is exactly zero
and x, the residual and the iterations are as without the split; the price has the one SpMV
more). A probe that is not finite (NaN or inf in A(0): a coefficient that is) is a FieldError.

`cg(nullspace=True)`'s probe of the constants (`null_space`) reads the linear part too:
A(1) - A(0), its null space being L's.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from wse_hpc.fields.grid import Field, FieldError
from wse_hpc.fields.null_space import host_probe
from wse_hpc.fields.operators import max_abs

__all__ = ["split"]

ApplyFn = Callable[[Field], Field]


def _zero_image(apply_fn: ApplyFn, like: Field) -> jax.Array:
    """max |A(0)| over the grid (padding left out), for a zero field like `like`."""
    return max_abs(apply_fn(like.like(jnp.zeros_like(like.data))))


def split(apply_fn: ApplyFn, b: Field) -> tuple[ApplyFn, Field | None]:
    """`(linear_fn, lift)`: lift = A(0) (a Field like b, computed in the solve) and
    linear_fn(x) = A(x) - lift for an affine operator; `(apply_fn, None)` for a linear one
    (module docstring). FieldError for an A(0) that is not finite."""
    worst = host_probe(apply_fn, b, _zero_image, "affine")
    if worst is not None and worst == 0.0:
        return apply_fn, None
    if worst is not None and not math.isfinite(worst):
        raise FieldError(
            f"the operator maps the zero field on this {b.grid.shape} grid to values that are "
            f"not finite (max |A(0)| = {worst:g}): a coefficient or a wall value of it is NaN "
            "or inf"
        )
    lift = apply_fn(b.like(jnp.zeros_like(b.data)))
    return (lambda x: apply_fn(x) - lift.data), lift
