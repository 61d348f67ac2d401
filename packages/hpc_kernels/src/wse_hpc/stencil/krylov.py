"""BiCGSTAB's iteration over an operator: what `bicgstab` and `refine` share.

Contract: this module owns one BiCGSTAB iteration (`krylov_step` over a `Krylov` state: p,
v = A p, s, t = A s, x and r, three wafer-wide fp32 allreduces through `fused_dot`), its
restart test (`restart_test`), the operators it runs over (`Operator`, `stencil_operator`)
and a solve's common setup (`solver_setup`: precision, stopping settings, operator;
`default_replace_every`). The loops, passes and results are `wse_hpc.stencil.bicgstab`'s and
`wse_hpc.stencil.refine`'s; the stopping rule `wse_hpc.stencil.stopping`'s.

Precision: `"mixed"` vectors, SpMV and AXPYs in fp16, dot products accumulated and reduced in
fp32, scalars in fp32; `"fp32"` keeps everything in fp32 (`PRECISIONS`; the safeguards fp16
needs are `bicgstab`'s module docstring's).

Operators: the iteration is the one BiCGSTAB of the stack. It runs over an `Operator` (A on
placed fp32 arrays, its Jacobi-scaled form in the working precision, the scaling's constants):
`stencil_operator(grid)` is the 7-point Laplacian with Dirichlet boundaries (with periodic
ones it is singular: refused); `wse_hpc.fields.solvers.bicgstab` hands it any linear field
operator (periodic, Dirichlet, Neumann, advection: `field_operator` there), fp32 only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from wse_core import fabric

from wse_hpc.stencil import pe_dots
from wse_hpc.stencil.kernels import diagonal, laplacian7
from wse_hpc.stencil.placement import StencilError, StencilGrid
from wse_hpc.stencil.scaling import lambda_min
from wse_hpc.stencil.stopping import check_stop

__all__ = ["PRECISIONS", "RESTART_EPS", "Krylov", "Operator", "Precision",
           "default_replace_every", "fused_dot", "krylov_step", "restart_test",
           "solver_setup", "stencil_operator"]  # fmt: skip

Precision = Literal["mixed", "fp32"]
PRECISIONS = ("mixed", "fp32")
# |(r^, r)| / (|r^| |r|) below this fraction of the vector dtype's epsilon restarts the
# iteration (fp16: 9.8e-5, fp32: 1.2e-8): below it the dot is rounding noise.
RESTART_EPS = 0.1


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
