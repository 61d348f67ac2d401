"""BiCGSTAB's power-of-two scaling sigma, and what a start can lose to the working precision.

fp16 spans about 6e-5 .. 6.5e4 (subnormals down to 2^-24), so `bicgstab` works on the
diagonally scaled system D^-1 A y = sigma D^-1 r_0 with sigma a power of two that keeps |y|
near TARGET_MAGNITUDE (from D^-1 A's smallest eigenvalue, `lambda_min`, known in closed form
for Dirichlet boundaries). r_0 is b without an x0 and b - A x0 with one (the iteration then
solves for x - x0, so sigma follows the residual as `refine._sigma` does).

`start_fault` is the one rule for a start the working precision cannot hold: r_0's scaled
copy overflowed, came out non-finite, flushed to zero whole, or lost to flushing (entries
below half fp16's smallest subnormal, 2^-25, that are not zero in fp32) more than
FLUSH_SHARE of its fp32 norm. Why that share: rounding every entry to fp16 moves r_0 by at
most eps16 / 2 of its norm, the error the mixed scheme accepts anyway; flushing more than
eps16 is at least twice that, a right-hand side the solve no longer sees (its recurrence
would report convergence that the truth does not have). With the default sigma, max|sigma
D^-1 r_0| is near 2^10 lambda_min, so flushed entries sit below 2^-35 / lambda_min of the
largest and a meaningful share needs ~10^9+ of them: the rule guards a sigma given by hand.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from wse_core.errors import is_finite, shown_setting

from wse_hpc.stencil.kernels import diagonal
from wse_hpc.stencil.placement import StencilError, StencilGrid

__all__ = [
    "FLUSH_SHARE",
    "TARGET_MAGNITUDE",
    "check_sigma",
    "lambda_min",
    "power_of_two_near",
    "scale_for",
    "sigma_for",
    "start_fault",
]

TARGET_MAGNITUDE = 2.0**10  # |y| kept near this: far from fp16's overflow and underflow
FLUSH_SHARE = float(jnp.finfo(jnp.float16).eps)  # 2^-10: twice fp16's rounding of r_0


def lambda_min(grid: StencilGrid) -> float:
    """The smallest eigenvalue of D^-1 A for the 7-point Dirichlet operator (k = 1)."""
    inv = [1.0 / h**2 for h in grid.spacing]
    lam = sum(
        4 * c * math.sin(math.pi * h / 2) ** 2 for c, h in zip(inv, grid.spacing, strict=True)
    )
    return lam / (2 * sum(inv))


def scale_for(grid: StencilGrid, b_max: float) -> float:
    """sigma: a power of two with sigma * max|D^-1 b| / lambda_min near 2^10 (b_max: max|b|,
    or max|b - A x0| for a solve from x0)."""
    if not b_max > 0:
        return 1.0
    d = float(diagonal(grid))
    x_bound = b_max / d / lambda_min(grid)
    return 2.0 ** round(math.log2(TARGET_MAGNITUDE / x_bound))


def sigma_for(r_max: jax.Array, inv_d: float, lam_min: float) -> jax.Array:
    """`scale_for`'s power of two from a traced max|r_0| (1 for r_0 = 0 or a non-finite one)."""
    y = r_max * inv_d / lam_min
    ok = jnp.isfinite(y) & (y > 0)
    return jnp.where(ok, power_of_two_near(TARGET_MAGNITUDE / jnp.where(ok, y, 1.0)), 1.0)


def power_of_two_near(x: jax.Array) -> jax.Array:
    """The fp32 power of two nearest `x` (> 0) in log2, within fp32's normal range: a traced
    sigma, exact, so a rescale sigma' / sigma is too (`ldexp`, not `exp2`: XLA's jitted
    exp2(13) on a CPU is 8192.004)."""
    e = jnp.clip(jnp.round(jnp.log2(x)), -126, 127).astype(jnp.int32)
    return jnp.ldexp(jnp.float32(1.0), e)


def start_fault(dots: Callable, r32, r, rr32, rr0, r_max, sigma) -> jax.Array:
    """True when the start cannot run (module docstring): `r32` is sigma D^-1 r_0 in fp32,
    `r` its working-precision copy, `rr32` / `rr0` their squared norms, `r_max` max|r_0|,
    `dots(pairs)` the solver's fp32 dot products (`bicgstab.fused_dot` on its grid). An fp32
    working precision loses nothing to flushing (one reduction fewer)."""
    whole = (rr0 == 0) & (r_max > 0)  # hunt 78: sigma=1 flushed b ~ 1e-7 to zero
    bad = whole | ~jnp.isfinite(rr0) | ~(jnp.isfinite(sigma) & (sigma > 0))
    if r.dtype == jnp.float32:
        return bad
    flushed = jnp.where((r == 0) & (r32 != 0), r32, 0.0)
    lost = dots([(flushed, flushed)])[0]  # ||flushed entries||^2 in fp32
    return bad | (lost > FLUSH_SHARE**2 * rr32)


def check_sigma(sigma: object) -> None:
    """Refuse a sigma given as a number that is not positive and finite (a traced one is
    checked in the solve: `sigma_fault`)."""
    if sigma is None or isinstance(sigma, jax.Array):
        return
    if not (is_finite(sigma) and sigma > 0):  # type: ignore[operator]
        raise StencilError(
            f"sigma must be a positive finite number (a power of two: scale_for(grid, "
            f"max|b - A x0|), or None to pick it), got {shown_setting(sigma)}"
        )
