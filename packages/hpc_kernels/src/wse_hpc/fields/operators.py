"""Field operators from fabric halos: neighbours, Laplacian, gradient, divergence, advection.

Every operator takes `Field`s (`wse_hpc.fields.grid`) and returns `Field`s; ±X / ±Y
neighbours come only through `wse_core.fabric.shift` (wrapped on a periodic axis, zero beyond a
wall, then the wall's ghost rule), ±Z are slices of the PE's own column. Second-order finite
differences / finite volumes on the MAC grid:

- ghost rules at a wall (a centre-located value, or a face value along another axis): the
  wall sits half a cell beyond the last centre, so Dirichlet `g` gives the ghost `2 g - u`,
  Neumann (zero gradient) `u`; a face field along its own axis reads the wall value `lo`
  below index 0 and holds `hi` at index n - 1 (`enforce`).
- `laplacian(f)`: sum over axes of `(f+ - 2 f + f-) / h^2` (Z left out on a 2D grid).
- `gradient(f)`: central differences `(f+ - f-) / 2h` per axis, each a centred field;
  `face_gradient(p, a)`: `(p+ - p) / h` on the + face along a (MAC: the pressure gradient).
- `divergence(u, v, w)`: of MAC face velocities, `(u - u-) / h` summed, a centred field; of
  centred velocities, central differences.
- `advect(f, velocity, scheme)`: `u . grad f`. With MAC face velocities it is the flux form
  `div(u f)` with f on each face by `"central"` (the mean of the two cells) or `"upwind"`
  (the upstream cell); with centred velocities, `u (f+ - f-) / 2h` or the first-order upwind
  difference.
- `interpolate(f, a)`: centre -> + face along a, or face along a -> centre (the mean of two).
- reductions (`total`, `mean`, `dot`, `max_abs`) through `wse_core.fabric.reduce` (fp32).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from wse_core import fabric

from wse_hpc.fields.grid import (
    Bc,
    Field,
    FieldError,
    FieldGrid,
    Loc,
    record,
    record_reduction,
    record_shift,
)

__all__ = [
    "advect",
    "axes",
    "divergence",
    "dot",
    "enforce",
    "face_gradient",
    "gradient",
    "homogeneous",
    "interpolate",
    "laplacian",
    "laplacian_diagonal",
    "max_abs",
    "mean",
    "neighbour",
    "total",
]

_SHIFT = {(0, 1): "N", (0, -1): "S", (1, 1): "W", (1, -1): "E"}  # (axis, sign) -> direction
_AXIS_LOC: tuple[Loc, Loc, Loc] = ("x", "y", "z")


def axes(grid: FieldGrid) -> tuple[int, ...]:
    """The axes operators act on: X, Y and, on a 3D grid, Z."""
    return (0, 1, 2) if grid.dims == 3 else (0, 1)


def homogeneous(f: Field) -> Field:
    """f with its wall values set to zero (the linear part of an operator with these BCs)."""
    return f.like(f.data, bc=tuple(Bc(b.kind) for b in f.bc))


def _raw(grid: FieldGrid, x: jax.Array, axis: int, sign: int) -> jax.Array:
    """x at index i + sign along axis: wrapped on a periodic axis, zero beyond a wall."""
    if axis < 2:
        b = "periodic" if grid.periodic[axis] else "zero"
        record_shift(_SHIFT[(axis, sign)], grid.nz)
        return fabric.shift(grid.wafer, x, _SHIFT[(axis, sign)], boundary=b)  # type: ignore[arg-type]
    if grid.periodic[2]:
        return jnp.roll(x, -sign, axis=2)
    zero = jnp.zeros_like(x[:, :, :1])
    if sign > 0:
        return jnp.concatenate([x[:, :, 1:], zero], axis=2)
    return jnp.concatenate([zero, x[:, :, :-1]], axis=2)


def neighbour(f: Field, axis: int, sign: int) -> jax.Array:
    """The value of f at index i + sign along `axis` for every cell, walls by f's BC."""
    grid, bc = f.grid, f.bc[axis]
    record("move", grid.nz, fabric_in=axis < 2)
    x = _raw(grid, f.data, axis, sign)
    if bc.kind == "periodic":
        return x
    n, idx = grid.shape[axis], grid.index[axis]
    edge = idx == (0 if sign < 0 else n - 1)
    wall = bc.lo if sign < 0 else bc.hi
    if f.loc == _AXIS_LOC[axis]:  # a face field along its own axis reads the wall value
        ghost = jnp.full_like(f.data, wall) if bc.kind == "dirichlet" else f.data
    elif bc.kind == "dirichlet":
        ghost = 2.0 * wall - f.data
    else:
        ghost = f.data
    return jnp.where(edge, ghost, x)


def enforce(f: Field) -> Field:
    """A face field with its + wall face (index n - 1 along its own, bounded axis) set to the
    wall's value."""
    if f.loc == "c":
        return f
    a = _AXIS_LOC.index(f.loc)
    bc = f.bc[a]
    if bc.kind != "dirichlet":
        return f
    record("move", 1)
    return f.like(jnp.where(f.grid.index[a] == f.grid.shape[a] - 1, bc.hi, f.data))


def laplacian(f: Field) -> Field:
    """The 5-point (2D) / 7-point (3D) Laplacian with f's boundary conditions."""
    grid = f.grid
    out = None
    for a in axes(grid):
        term = (neighbour(f, a, 1) - 2.0 * f.data + neighbour(f, a, -1)) / grid.spacing[a] ** 2
        record("add", grid.nz, 2 if out is None else 3)  # (f+ - 2f) + f-, then into the sum
        record("mul", grid.nz, 2)
        out = term if out is None else out + term
    return f.like(out)


def gradient(f: Field) -> tuple[Field, ...]:
    """Central differences of a centred field, one centred field per axis."""
    out = []
    for a in axes(f.grid):
        record("sub", f.grid.nz)
        record("mul", f.grid.nz)
        d = (neighbour(f, a, 1) - neighbour(f, a, -1)) / (2.0 * f.grid.spacing[a])
        out.append(f.like(d, loc="c"))
    return tuple(out)


def face_gradient(p: Field, axis: int) -> Field:
    """`(p+ - p) / h` on the + face along `axis` (MAC), a face field."""
    if p.loc != "c":
        raise FieldError("face_gradient takes a centred field")
    record("sub", p.grid.nz)
    record("mul", p.grid.nz)
    d = (neighbour(p, axis, 1) - p.data) / p.grid.spacing[axis]
    return p.like(d, loc=_AXIS_LOC[axis])


def divergence(*velocity: Field) -> Field:
    """div of MAC face velocities (u on x faces, ...) or of centred ones, a centred field."""
    grid = velocity[0].grid
    if len(velocity) != len(axes(grid)):
        raise FieldError(f"divergence needs {len(axes(grid))} components, got {len(velocity)}")
    out = None
    for a, u in zip(axes(grid), velocity, strict=True):
        record("sub", grid.nz)
        record("mul", grid.nz)
        if u.loc == _AXIS_LOC[a]:
            d = (u.data - neighbour(u, a, -1)) / grid.spacing[a]
        elif u.loc == "c":
            d = (neighbour(u, a, 1) - neighbour(u, a, -1)) / (2.0 * grid.spacing[a])
        else:
            raise FieldError(f"component {a} is on {u.loc!r} faces; want {_AXIS_LOC[a]!r} or 'c'")
        out = d if out is None else out + d
    return Field(out, grid, "c", velocity[0].grid.check_bc("div", None))  # type: ignore[arg-type]


def interpolate(f: Field, axis: int) -> Field:
    """Centre -> + face along `axis`, or that face -> centre: the mean of two values."""
    loc = _AXIS_LOC[axis]
    record("add", f.grid.nz)
    record("mul", f.grid.nz)
    if f.loc == "c":
        return f.like(0.5 * (f.data + neighbour(f, axis, 1)), loc=loc)
    if f.loc == loc:
        return f.like(0.5 * (f.data + neighbour(f, axis, -1)), loc="c")
    raise FieldError(f"cannot interpolate a {f.loc!r} field along {'xyz'[axis]}")


def _face_value(f: Field, u: jax.Array, a: int, scheme: str) -> jax.Array:
    fp = neighbour(f, a, 1)
    if scheme == "central":
        return 0.5 * (f.data + fp)
    return jnp.where(u > 0, f.data, fp)


def advect(f: Field, velocity: Sequence[Field], scheme: str = "upwind") -> Field:
    """`u . grad f` of a centred f: flux form on MAC face velocities, else collocated."""
    if scheme not in ("upwind", "central"):
        raise FieldError(f"unknown advection scheme {scheme!r}; use 'upwind' or 'central'")
    grid, out = f.grid, None
    for a, u in zip(axes(grid), velocity, strict=True):
        record("mul", grid.nz, 3)
        record("add", grid.nz, 2)
        h = grid.spacing[a]
        if u.loc == _AXIS_LOC[a]:  # flux form: (F+ - F-) / h, F = u f on the faces
            flux = u.like(u.data * _face_value(f, u.data, a, scheme))
            d = (flux.data - neighbour(flux, a, -1)) / h
        elif scheme == "central":
            d = u.data * (neighbour(f, a, 1) - neighbour(f, a, -1)) / (2.0 * h)
        else:
            back = (f.data - neighbour(f, a, -1)) / h
            fwd = (neighbour(f, a, 1) - f.data) / h
            d = jnp.where(u.data > 0, u.data * back, u.data * fwd)
        out = d if out is None else out + d
    return f.like(out)


# -- reductions (fp32, wafer-wide) ----------------------------------------------------------
def total(f: Field | jax.Array, grid: FieldGrid | None = None) -> jax.Array:
    """The sum of a field over the grid (a scalar, replicated)."""
    data, grid = (f.data, f.grid) if isinstance(f, Field) else (f, grid)
    record("add", grid.nz)  # type: ignore[union-attr]
    record_reduction(1)
    return jnp.sum(fabric.reduce(grid.wafer, data, "sum"))  # type: ignore[union-attr]


def mean(f: Field) -> jax.Array:
    return total(f) / f.grid.cells


def dot(a: Field, b: Field) -> jax.Array:
    """sum(a * b) over the grid, fp32."""
    record("fmac", a.grid.nz)
    record_reduction(1)
    return jnp.sum(fabric.reduce(a.grid.wafer, a.data * b.data, "sum"))


def max_abs(f: Field) -> jax.Array:
    record("abs", f.grid.nz)
    record_reduction(1)
    return jnp.max(fabric.reduce(f.grid.wafer, jnp.abs(f.data), "max"))


def laplacian_diagonal(f: Field) -> Field:
    """The diagonal of `laplacian` under f's (homogeneous) BCs, as a centred field: -2 / h^2
    per axis, with a wall's ghost rule folded in (Neumann +1 / h^2, Dirichlet -1 / h^2)."""
    grid = f.grid
    d = jnp.zeros_like(f.data)
    for a in axes(grid):
        inv = 1.0 / grid.spacing[a] ** 2
        d = d - 2.0 * inv
        bc = f.bc[a]
        if bc.kind == "periodic" or f.loc == _AXIS_LOC[a]:
            continue
        fold = inv if bc.kind == "neumann" else -inv
        idx, n = grid.index[a], grid.shape[a]
        d = d + jnp.where(idx == 0, fold, 0.0) + jnp.where(idx == n - 1, fold, 0.0)
    return f.like(d)
