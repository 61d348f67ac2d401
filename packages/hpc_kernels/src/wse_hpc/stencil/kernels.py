"""7-point stencil kernels on a placed grid: the Laplacian SpMV, Jacobi and explicit heat steps.

Every factory closes over a `StencilGrid` (static) and returns a pure function of placed
fields `(nx, ny, nz)` (see `wse_hpc.stencil.placement`); the shell decides `jit` and loops.
±X / ±Y neighbours come only through the fabric (zero halo for Dirichlet, wrapped for
periodic): `fabric.halo_apply` for the constant-coefficient SpMV (one materialized region per
device block, which XLA:CPU vectorizes; the ledger records the same four shifts),
`fabric.shift` elsewhere; ±Z are local slices of the Z column.

The operator is A = -div(k grad) discretised with 7 points, so A is symmetric positive
definite with Dirichlet boundaries:

    (A u)_i = sum over axes a of [k+ (u_i - u_{i+e_a}) + k- (u_i - u_{i-e_a})] / h_a^2

with k = 1 unless face coefficients (`face_coefficients`, the arithmetic mean of the two
cells' k; a boundary face takes its cell's k) are passed. Computation stays in the field's
dtype (fp16 or fp32); `dot` and `norm` reduce in fp32 through `fabric.reduce`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from wse_core import fabric

from wse_hpc.stencil.placement import StencilError, StencilGrid

__all__ = [
    "Faces",
    "diagonal",
    "dot",
    "face_coefficients",
    "heat",
    "iterate_padded",
    "jacobi",
    "laplacian7",
    "max_stable_dt",
    "neighbours",
    "norm",
    "pad_z",
    "refresh_ghosts",
]


class Faces(NamedTuple):
    """Face coefficients k / h^2 toward +X, -X, +Y, -Y, +Z, -Z (each an (nx, ny, nz) field)."""

    xp: jax.Array
    xm: jax.Array
    yp: jax.Array
    ym: jax.Array
    zp: jax.Array
    zm: jax.Array


def _fabric_boundary(grid: StencilGrid) -> fabric.Boundary:
    return "periodic" if grid.boundary == "periodic" else "zero"


def _z_pair(grid: StencilGrid, u: jax.Array, padded: bool = False):
    """The Z+1 and Z-1 neighbours of every cell: local slices of the Z column (of its
    ghost-padded form when `padded`)."""
    if padded:
        return u[:, :, 2:], u[:, :, :-2]
    if grid.boundary == "periodic":
        return jnp.roll(u, -1, axis=2), jnp.roll(u, 1, axis=2)
    zero = jnp.zeros_like(u[:, :, :1])
    up = jnp.concatenate([u[:, :, 1:], zero], axis=2)
    down = jnp.concatenate([zero, u[:, :, :-1]], axis=2)
    return up, down


def neighbours(grid: StencilGrid, u: jax.Array, padded: bool = False) -> tuple[jax.Array, ...]:
    """The six neighbour fields (+X, -X, +Y, -Y, +Z, -Z) of `u`; X / Y through the fabric.

    `padded`: u carries one ghost plane at each Z end (`pad_z`); results are interior-sized.
    """
    w, b = grid.wafer, _fabric_boundary(grid)
    c = u[:, :, 1:-1] if padded else u
    xp = fabric.shift(w, c, "N", boundary=b)  # PE (r, c) receives from (r + 1, c)
    xm = fabric.shift(w, c, "S", boundary=b)
    yp = fabric.shift(w, c, "W", boundary=b)  # PE (r, c) receives from (r, c + 1)
    ym = fabric.shift(w, c, "E", boundary=b)
    zp, zm = _z_pair(grid, u, padded)
    return xp, xm, yp, ym, zp, zm


def pad_z(grid: StencilGrid, u: jax.Array) -> jax.Array:
    """u with one ghost plane at each Z end: zero (Dirichlet) or wrapped (periodic)."""
    return refresh_ghosts(grid, jnp.pad(u, ((0, 0), (0, 0), (1, 1))))


def refresh_ghosts(grid: StencilGrid, u: jax.Array) -> jax.Array:
    """Periodic: copy the far interior planes into the ghosts (in place); Dirichlet: as is."""
    if grid.boundary != "periodic":
        return u
    nz = grid.shape[2]
    u = lax.dynamic_update_slice_in_dim(u, u[:, :, nz : nz + 1], 0, axis=2)
    return lax.dynamic_update_slice_in_dim(u, u[:, :, 1:2], nz + 1, axis=2)


def iterate_padded(grid: StencilGrid, update_fn: Callable[[jax.Array], jax.Array], steps: int):
    """`run_fn((u_pad, spare)) -> (u_pad, spare)`: `steps` updates u <- update_fn(u_pad).

    Why: XLA cannot update a stencil in place, so a loop carrying one field copies it every
    step. Two distinct ghost-padded buffers (`pad_z`; donate both) written in turn, each by
    a partial dynamic_update_slice inside a one-trip loop (which keeps XLA from fusing
    consecutive sweeps into one that recomputes the stencil), need no copy: about 1.5-2x
    faster at 256^3 here. The ghosts keep the Z boundary; the newest field comes first.
    """
    nz = grid.shape[2]

    def write(dst: jax.Array, src: jax.Array) -> jax.Array:
        def one(i, d):
            view = lax.dynamic_slice_in_dim(src, i, nz + 2, axis=2)
            return lax.dynamic_update_slice_in_dim(d, update_fn(view), i + 1, 2)

        return refresh_ghosts(grid, lax.fori_loop(0, 1, one, dst))

    def pair(i, ab):
        a, b = ab
        b = write(b, a)
        return write(a, b), b

    def run_fn(ab: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        a, b = lax.fori_loop(0, steps // 2, pair, ab)
        return (write(b, a), a) if steps % 2 else (a, b)

    return run_fn


def _inv_h2(grid: StencilGrid) -> tuple[float, float, float]:
    hx, hy, hz = grid.spacing
    return 1.0 / hx**2, 1.0 / hy**2, 1.0 / hz**2


def face_coefficients(grid: StencilGrid, kappa: jax.Array) -> Faces:
    """Faces of a placed cell-coefficient field `kappa` (> 0): mean of the two cells, / h^2."""
    w, b = grid.wafer, _fabric_boundary(grid)
    one = jnp.ones_like(kappa)
    cx, cy, cz = _inv_h2(grid)

    def other(direction: str) -> jax.Array:
        # A missing neighbour (Dirichlet edge) reads as the cell's own k.
        got = fabric.shift(w, kappa, direction, boundary=b)
        have = fabric.shift(w, one, direction, boundary=b)
        return got + (1 - have) * kappa

    if grid.boundary == "periodic":
        kzp, kzm = jnp.roll(kappa, -1, 2), jnp.roll(kappa, 1, 2)
    else:
        kzp = jnp.concatenate([kappa[:, :, 1:], kappa[:, :, -1:]], axis=2)
        kzm = jnp.concatenate([kappa[:, :, :1], kappa[:, :, :-1]], axis=2)
    mean = lambda nb: (kappa + nb) / 2
    return Faces(
        xp=mean(other("N")) * cx,
        xm=mean(other("S")) * cx,
        yp=mean(other("W")) * cy,
        ym=mean(other("E")) * cy,
        zp=mean(kzp) * cz,
        zm=mean(kzm) * cz,
    )


def diagonal(grid: StencilGrid, faces: Faces | None = None) -> jax.Array | float:
    """The diagonal of A: a number for k = 1, else a field."""
    if faces is None:
        return 2.0 * sum(_inv_h2(grid))
    return faces.xp + faces.xm + faces.yp + faces.ym + faces.zp + faces.zm


def _off_diagonal_sum(
    grid: StencilGrid, u: jax.Array, faces: Faces | None, scale: float = 1.0, padded=False
) -> jax.Array:
    """scale * sum_neighbours k u_nb / h^2 (the negated off-diagonal part of A applied to u)."""
    xp, xm, yp, ym, zp, zm = neighbours(grid, u, padded)
    if faces is None:
        cx, cy, cz = (jnp.asarray(c * scale, u.dtype) for c in _inv_h2(grid))
        return (xp + xm) * cx + (yp + ym) * cy + (zp + zm) * cz
    f = faces
    return (f.xp * xp + f.xm * xm + f.yp * yp + f.ym * ym + f.zp * zp + f.zm * zm).astype(u.dtype)


def _difference7(coeffs: tuple[jax.Array, ...], region: jax.Array) -> jax.Array:
    """A u in difference form on one block's halo region (`fabric.halo_apply`, one Z ghost
    cell at each end): the same operations in the same order as from six neighbour fields."""
    cx, cy, cz = coeffs
    mid = region[1:-1, 1:-1, 1:-1]
    pair = lambda a, b: (mid - a) + (mid - b)
    xs = pair(region[2:, 1:-1, 1:-1], region[:-2, 1:-1, 1:-1])  # +X from the PE south
    ys = pair(region[1:-1, 2:, 1:-1], region[1:-1, :-2, 1:-1])  # +Y from the PE east
    zs = pair(region[1:-1, 1:-1, 2:], region[1:-1, 1:-1, :-2])
    return xs * cx + ys * cy + zs * cz


def laplacian7(
    grid: StencilGrid, *, scale: float = 1.0, padded: bool = False
) -> Callable[..., jax.Array]:
    """`apply_fn(u, faces=None) -> scale * A u`, the 7-point SpMV (u's shape and dtype).

    `scale` is folded into the coefficients (so fp16 fields never see 1 / h^2 alone).
    """

    def apply_fn(u: jax.Array, faces: Faces | None = None) -> jax.Array:
        if faces is None and not padded:
            # Difference form: u - u_nb is exact in fp16 for nearby values, so smooth
            # fields (where A u is small) keep their accuracy (diag u - sum u_nb does not).
            coeffs = tuple(jnp.asarray(c * scale, u.dtype) for c in _inv_h2(grid))
            fn = functools.partial(_difference7, coeffs)
            return fabric.halo_apply(grid.wafer, u, fn, boundary=_fabric_boundary(grid), ghost=1)
        if faces is None:
            xp, xm, yp, ym, zp, zm = neighbours(grid, u, padded)
            cx, cy, cz = (jnp.asarray(c * scale, u.dtype) for c in _inv_h2(grid))
            mid = u[:, :, 1:-1]
            pair = lambda a, b: (mid - a) + (mid - b)
            return pair(xp, xm) * cx + pair(yp, ym) * cy + pair(zp, zm) * cz
        diag = diagonal(grid, faces).astype(u.dtype)
        mid = u[:, :, 1:-1] if padded else u
        return diag * mid - _off_diagonal_sum(grid, u, faces, padded=padded)

    return apply_fn


def jacobi(grid: StencilGrid, *, padded: bool = False) -> Callable[..., jax.Array]:
    """`step_fn(u, f, faces=None) -> u'`: one Jacobi sweep for A u = f, u' = (f + N u) / D.

    `padded`: u is ghost-padded in Z (`pad_z`, for `iterate_padded`); u' is interior-sized.
    """

    def step_fn(u: jax.Array, f: jax.Array, faces: Faces | None = None) -> jax.Array:
        off = _off_diagonal_sum(grid, u, faces, padded=padded)
        if faces is None:
            return (f + off) * jnp.asarray(1.0 / diagonal(grid), u.dtype)
        return ((f + off) / diagonal(grid, faces)).astype(u.dtype)

    return step_fn


def max_stable_dt(grid: StencilGrid, diffusivity: float) -> float:
    """The largest explicit-Euler step for u_t = div(k grad u) with max k = `diffusivity`."""
    return 2.0 / (diffusivity * 4.0 * sum(_inv_h2(grid)))


def heat(
    grid: StencilGrid, *, dt: float, diffusivity: float = 1.0, padded: bool = False
) -> Callable[..., jax.Array]:
    """`step_fn(u, source=None, faces=None) -> u'`: explicit Euler for u_t = -k A u + s.

    `padded`: u is ghost-padded in Z (`pad_z`); u' is interior-sized.
    With `faces` the coefficients come from them (`diffusivity` must bound their k); else
    k = `diffusivity`. Raises StencilError when dt is not positive or not stable.
    """
    if not dt > 0:
        raise StencilError(f"the time step must be positive, got dt={dt}")
    if not diffusivity > 0:
        raise StencilError(f"the diffusivity must be positive, got {diffusivity}")
    limit = max_stable_dt(grid, diffusivity)
    if dt > limit:
        raise StencilError(
            f"dt={dt:.3g} is unstable for explicit heat stepping on this grid; use dt <= "
            f"{limit:.3g} (h^2 / (2 d k))"
        )
    apply_fn = laplacian7(grid, padded=padded)

    def step_fn(u: jax.Array, source: jax.Array | None = None, faces: Faces | None = None):
        scale = jnp.asarray(dt * (1.0 if faces is not None else diffusivity), u.dtype)
        du = -apply_fn(u, faces)
        u = u[:, :, 1:-1] if padded else u
        if source is not None:
            du = du + source
        return u + scale * du

    return step_fn


def dot(grid: StencilGrid) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """`dot_fn(x, y) -> fp32 scalar`: per-PE sums in fp32, then a wafer-wide fabric.reduce."""

    def dot_fn(x: jax.Array, y: jax.Array) -> jax.Array:
        local = jnp.sum(x.astype(jnp.float32) * y.astype(jnp.float32), axis=2)
        return fabric.reduce(grid.wafer, local)

    return dot_fn


def norm(grid: StencilGrid) -> Callable[[jax.Array], jax.Array]:
    """`norm_fn(x) -> fp32 scalar` 2-norm over the logical grid."""
    d = dot(grid)
    return lambda x: jnp.sqrt(d(x, x))
