"""The 25-point acoustic wave stencil (radius 4, 8th order in space, 2nd in time), fp32.

As on WSE-2 (Jacquelin et al., 2022): X x Y on the PE grid, Z in each PE's SRAM, the four
nearest PEs in each direction reached by localized broadcasts (`fabric.multicast(..., k=4)`
toward N, S, E and W), and the Z column processed in blocks of `block_z` planes so that the
received halos (16 values per cell of a block) fit beside the fields.

    u^{n+1} = 2 u^n - u^{n-1} + (v dt)^2 L8(u^n) + (v dt)^2 w(t_n) delta_source

L8 is the sum over axes of the 8th-order central second difference (coefficients
`COEFFS` / h^2), v a variable velocity (a field), w a Ricker wavelet of peak frequency f0 at
one grid point. State fields carry 4 ghost planes at each end of Z (zero for Dirichlet,
refreshed from the other end for periodic); `field_fn` gives the (nx, ny, nz) view.
`wave25(...)` returns `WaveFns(init_fn, step_fn, field_fn)`, pure functions the shell jits;
`laplacian25(grid, block, width)` is one block's stencil (what the cost model traces).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from wse_core import fabric

from wse_hpc.stencil.placement import StencilError, StencilGrid

__all__ = [
    "COEFFS",
    "RADIUS",
    "WaveFns",
    "WaveState",
    "laplacian25",
    "max_stable_dt",
    "ricker",
    "wave25",
]

RADIUS = 4
# 8th-order central second difference: c0, c1..c4 (Fornberg).
COEFFS = (-205.0 / 72.0, 8.0 / 5.0, -1.0 / 5.0, 8.0 / 315.0, -1.0 / 560.0)
_SYMBOL_MAX = -(COEFFS[0] + 2 * sum(c * (-1) ** j for j, c in enumerate(COEFFS[1:], 1)))


class WaveState(NamedTuple):
    u_prev: jax.Array  # (nx, ny, nz + 8) fp32, Z ghost planes included
    u: jax.Array  # (nx, ny, nz + 8)
    vdt2: jax.Array  # (nx, ny, nz): (v dt)^2
    source: jax.Array  # (nx, ny): (v dt)^2 at the source PE, 0 elsewhere
    step: jax.Array  # int32 time-step index n


class WaveFns(NamedTuple):
    init_fn: Callable[..., WaveState]
    step_fn: Callable[[WaveState], WaveState]
    field_fn: Callable[[WaveState], jax.Array]


def max_stable_dt(grid: StencilGrid, v_max: float) -> float:
    """The leapfrog stability limit of the 25-point scheme for velocity up to `v_max`."""
    return 2.0 / (v_max * math.sqrt(_SYMBOL_MAX * sum(1 / h**2 for h in grid.spacing)))


def ricker(t: jax.Array, f0: float) -> jax.Array:
    """Ricker wavelet of peak frequency f0, centred at t0 = 1 / f0."""
    a = (math.pi * f0 * (t - 1.0 / f0)) ** 2
    return (1 - 2 * a) * jnp.exp(-a)


def _xy_terms(grid: StencilGrid, c: jax.Array) -> jax.Array:
    """sum_j c_j (u_{x+j} + u_{x-j}) / hx^2 + the same in Y, via 4-PE localized broadcasts."""
    w = grid.wafer
    b = "periodic" if grid.boundary == "periodic" else "zero"
    hx, hy, _ = grid.spacing
    coef = jnp.asarray(COEFFS[1:], jnp.float32)[:, None]  # (4, 1): broadcast over the block
    out = None
    for (d1, d2), h in ((("N", "S"), hx), (("E", "W"), hy)):
        pair = fabric.multicast(w, c, d1, RADIUS, boundary=b) + fabric.multicast(
            w, c, d2, RADIUS, boundary=b
        )  # (nx, ny, 4, block)
        term = jnp.sum(pair * coef, axis=2) * jnp.float32(1 / h**2)
        out = term if out is None else out + term
    return out


def laplacian25(grid: StencilGrid, block: jax.Array, width: int) -> jax.Array:
    """L8 of the `width` middle planes of a Z block `(nx, ny, width + 8)` (ghosts included)."""
    hx, hy, hz = grid.spacing
    c = block[:, :, RADIUS : RADIUS + width]
    centre = COEFFS[0] * (1 / hx**2 + 1 / hy**2 + 1 / hz**2)
    z = sum(
        COEFFS[j]
        * (
            block[:, :, RADIUS + j : RADIUS + j + width]
            + block[:, :, RADIUS - j : RADIUS - j + width]
        )
        for j in range(1, RADIUS + 1)
    )
    return jnp.float32(centre) * c + z * jnp.float32(1 / hz**2) + _xy_terms(grid, c)


def _refresh_ghosts(grid: StencilGrid, u: jax.Array) -> jax.Array:
    """Periodic Z: ghost planes copy the far end of the column (Dirichlet ghosts stay 0)."""
    if grid.boundary != "periodic":
        return u
    nz, r = grid.shape[2], RADIUS
    return jnp.concatenate([u[:, :, nz : nz + r], u[:, :, r : nz + r], u[:, :, r : 2 * r]], 2)


def wave25(
    grid: StencilGrid,
    *,
    dt: float,
    f0: float = 10.0,
    source: tuple[int, int, int] | None = None,
    block_z: int | None = None,
) -> WaveFns:
    """The 25-point wave scheme on `grid` with Z blocks of `block_z` planes (default: nz;
    when b does not divide nz the last block is shorter, as SC22 Table III's 1000 / 334).

    `source` is the (x, y, z) index of the point source (default: the centre; None-able
    amplitude via f0 > 0). Raises StencilError for a bad dt, block or source position.
    """
    nx, ny, nz = grid.shape
    b = nz if block_z is None else int(block_z)
    if not 0 < b <= nz:
        raise StencilError(f"the Z block size must be in 1..nz={nz}; got {block_z}")
    if not (dt > 0 and f0 > 0):
        raise StencilError(f"dt and f0 must be positive, got dt={dt}, f0={f0}")
    src = (nx // 2, ny // 2, nz // 2) if source is None else tuple(source)
    if any(not 0 <= s < n for s, n in zip(src, grid.shape, strict=True)):
        raise StencilError(f"source {src} lies outside the {nx} x {ny} x {nz} grid")
    r = RADIUS

    def init_fn(u_prev: jax.Array, u: jax.Array, velocity: jax.Array) -> WaveState:
        pad = lambda a: _refresh_ghosts(grid, jnp.pad(a, ((0, 0), (0, 0), (r, r))))
        vdt2 = (velocity * jnp.float32(dt)) ** 2
        rows = lax.broadcasted_iota(jnp.int32, vdt2.shape[:2], 0)
        cols = lax.broadcasted_iota(jnp.int32, vdt2.shape[:2], 1)
        at_src = (rows == src[0]) & (cols == src[1])
        weight = jnp.where(at_src, vdt2[:, :, src[2]], 0.0)
        return WaveState(pad(u_prev), pad(u), vdt2, weight, jnp.int32(0))

    def step_fn(st: WaveState) -> WaveState:
        def block(z0, out, width):
            ub = lax.dynamic_slice_in_dim(st.u, z0, width + 2 * r, axis=2)
            prev = lax.dynamic_slice_in_dim(out, z0 + r, width, axis=2)
            coef = lax.dynamic_slice_in_dim(st.vdt2, z0, width, axis=2)
            new = 2 * ub[:, :, r : r + width] - prev + coef * laplacian25(grid, ub, width)
            return lax.dynamic_update_slice_in_dim(out, new, z0 + r, axis=2)

        full, rest = divmod(nz, b)
        nxt = lax.fori_loop(0, full, lambda i, out: block(i * b, out, b), st.u_prev)
        if rest:  # the last, shorter block (nz not a multiple of b)
            nxt = block(full * b, nxt, rest)
        amp = ricker(st.step.astype(jnp.float32) * jnp.float32(dt), f0)
        nxt = nxt.at[:, :, src[2] + r].add(st.source * amp)
        nxt = _refresh_ghosts(grid, nxt)
        return WaveState(st.u, nxt, st.vdt2, st.source, st.step + 1)

    def field_fn(st: WaveState) -> jax.Array:
        return st.u[:, :, r : r + nz]

    return WaveFns(init_fn, step_fn, field_fn)
