"""Implicit solves on the fabric: CG, Jacobi-preconditioned CG and BiCGSTAB over any field operator.

Each factory takes `apply_fn(Field) -> Field`, a linear operator built from
`wse_hpc.fields.operators` (so any stencil, any boundary condition: periodic, Dirichlet,
Neumann, mixed), and returns `solve_fn(b, x0=None) -> SolveResult`, one `lax.while_loop` the
shell jits. Vectors are fp32 fields; every dot product is one wafer-wide fp32 reduction
through `wse_core.fabric.reduce`. Both stop when the recurrence residual
||r_k|| / ||b|| <= tol or after `maxiter` iterations.

- `cg(apply_fn, precondition=None, nullspace=False)`: for symmetric positive (semi)definite
  A, e.g. the pressure Poisson `-laplacian` (`poisson`). `precondition` is a centred field of
  the inverse diagonal (Jacobi PCG: `jacobi_preconditioner`); Jacobi costs one multiply per
  cell and no traffic, where multigrid's coarse levels would leave most PEs idle and need
  shifts of 2, 4, 8 ... PEs, so it is the preconditioner that keeps a wafer's PEs busy (and
  on a constant-coefficient Laplacian it only corrects the wall rows). `nullspace=True`
  solves a singular system whose null space is the constants (all-periodic or all-Neumann
  Poisson): b is projected to zero mean, the residual is re-projected every iteration (one
  more reduction, fused in the same allreduce on the wafer) and x is returned with zero mean.
- `bicgstab(apply_fn)`: for non-symmetric or indefinite A (implicit advection-diffusion,
  Helmholtz with periodic boundaries), the van der Vorst iteration `wse_hpc.stencil` runs for
  the 7-point Dirichlet Laplacian, here over any operator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from wse_hpc.fields.grid import Field, scope
from wse_hpc.fields.operators import dot, homogeneous, laplacian, laplacian_diagonal, mean

__all__ = [
    "SolveResult",
    "bicgstab",
    "cg",
    "jacobi_preconditioner",
    "poisson",
]

ApplyFn = Callable[[Field], Field]
TINY = 1e-30  # guards divisions by a dot product that is exactly zero (a converged residual)


class SolveResult(NamedTuple):
    x: Field
    iterations: jax.Array  # int32
    residual: jax.Array  # fp32 ||r|| / ||b|| (recurrence)


def poisson(template: Field) -> ApplyFn:
    """`x -> -laplacian(x)` with template's BCs made homogeneous (symmetric, >= 0)."""
    bc = homogeneous(template).bc
    return lambda x: -laplacian(x.like(x.data, bc=bc))


def jacobi_preconditioner(template: Field) -> Field:
    """The inverse diagonal of `poisson(template)` as a centred field."""
    return template.like(-1.0 / laplacian_diagonal(homogeneous(template)).data)


def _zero_mean(f: Field, on: bool) -> Field:
    return f - mean(f) if on else f


class _Cg(NamedTuple):
    x: Field
    r: Field
    p: Field
    rz: jax.Array
    rr: jax.Array
    it: jax.Array


def cg(
    apply_fn: ApplyFn,
    *,
    tol: float = 1e-6,
    maxiter: int = 1000,
    precondition: Field | None = None,
    nullspace: bool = False,
) -> Callable[..., SolveResult]:
    """(Preconditioned) conjugate gradients; see the module docstring."""

    def psolve(r: Field) -> Field:
        return r if precondition is None else r * precondition

    def solve_fn(b: Field, x0: Field | None = None) -> SolveResult:
        b = _zero_mean(b, nullspace)
        x = b * 0.0 if x0 is None else x0
        r = _zero_mean(b - apply_fn(x), nullspace)
        z = psolve(r)
        bb = jnp.maximum(dot(b, b), TINY)
        s0 = _Cg(x, r, z, dot(r, z), dot(r, r), jnp.int32(0))

        def cond(s: _Cg):
            return (s.it < maxiter) & (s.rr > tol**2 * bb)

        def body(s: _Cg) -> _Cg:
            with scope("cg_iteration"):
                return _cg_step(s)

        def _cg_step(s: _Cg) -> _Cg:
            ap = apply_fn(s.p)
            alpha = s.rz / jnp.maximum(dot(s.p, ap), TINY)
            x = s.x + alpha * s.p
            r = _zero_mean(s.r - alpha * ap, nullspace)
            z = psolve(r)
            rz = dot(r, z)
            p = z + (rz / jnp.maximum(s.rz, TINY)) * s.p
            return _Cg(x, r, p, rz, dot(r, r), s.it + 1)

        s = lax.while_loop(cond, body, s0)
        return SolveResult(_zero_mean(s.x, nullspace), s.it, jnp.sqrt(s.rr / bb))

    return solve_fn


class _Bicg(NamedTuple):
    x: Field
    r: Field
    p: Field
    v: Field
    rho: jax.Array
    alpha: jax.Array
    omega: jax.Array
    rr: jax.Array
    it: jax.Array


def bicgstab(apply_fn: ApplyFn, *, tol: float = 1e-6, maxiter: int = 1000):
    """BiCGSTAB (van der Vorst 1992) over any field operator; see the module docstring."""

    def solve_fn(b: Field, x0: Field | None = None) -> SolveResult:
        x = b * 0.0 if x0 is None else x0
        r = b - apply_fn(x)
        rhat = r
        bb = jnp.maximum(dot(b, b), TINY)
        one = jnp.float32(1.0)
        s0 = _Bicg(x, r, r * 0.0, r * 0.0, one, one, one, dot(r, r), jnp.int32(0))

        def cond(s: _Bicg):
            return (s.it < maxiter) & (s.rr > tol**2 * bb)

        def body(s: _Bicg) -> _Bicg:
            with scope("bicgstab_iteration"):
                return _bicg_step(s)

        def _bicg_step(s: _Bicg) -> _Bicg:
            rho = dot(rhat, s.r)
            beta = (rho / _nz(s.rho)) * (s.alpha / _nz(s.omega))
            p = s.r + beta * (s.p - s.omega * s.v)
            v = apply_fn(p)
            alpha = rho / _nz(dot(rhat, v))
            h = s.x + alpha * p
            sv = s.r - alpha * v
            t = apply_fn(sv)
            omega = dot(t, sv) / _nz(dot(t, t))
            x = h + omega * sv
            r = sv - omega * t
            return _Bicg(x, r, p, v, rho, alpha, omega, dot(r, r), s.it + 1)

        s = lax.while_loop(cond, body, s0)
        return SolveResult(s.x, s.it, jnp.sqrt(s.rr / bb))

    return solve_fn


def _nz(x: jax.Array) -> jax.Array:
    """x, or TINY with x's sign where x is exactly zero (a converged or broken recurrence)."""
    return jnp.where(x == 0, TINY, x)
