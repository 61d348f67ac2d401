"""Placing a 3D grid on the wafer: X x Y on the PE grid, each Z column in its PE's SRAM.

A grid of shape `(nx, ny, nz)` lives on a wafer whose logical PE grid is exactly `nx x ny`
(`grid_wafer`). Every field of the grid is one wafer field of shape `(nx, ny, nz)`: the per-PE
axis is the Z column, so ±Z neighbours are local slices and ±X / ±Y neighbours come through
`wse_core.fabric` (halos). `place_grid` declares each field's bytes per PE (plus any halo or
block buffers) in the wafer's SRAM ledger, so a grid whose Z column does not fit is refused at
plan time with the largest nz that would (`max_nz`).

Boundaries: `"dirichlet"` (zero values just outside the grid; put non-zero boundary values in
the right-hand side) and `"periodic"`. Coordinates: on the unit cube, a Dirichlet axis of n
points has spacing 1 / (n + 1) and points (i + 1) h; a periodic axis has spacing 1 / n and
points i h.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from wse_core import PlacementError, SramBudgetError, WaferSpec, WseError
from wse_core.errors import shown
from wse_core.hw.spec import dtype_bytes, to_jnp
from wse_core.hw.wafer import Wafer, build_wafer

__all__ = [
    "BOUNDARIES",
    "Boundary",
    "StencilGrid",
    "StencilError",
    "field_bytes_per_pe",
    "grid_wafer",
    "max_nz",
    "place_grid",
]

Boundary = Literal["dirichlet", "periodic"]
BOUNDARIES = ("dirichlet", "periodic")


class StencilError(WseError):
    """A stencil problem that cannot be run as asked (bad size, value or setting)."""


def field_bytes_per_pe(
    nz: int, fields: Mapping[str, object], *, extra_per_field: int = 0, buffers: int = 0
) -> int:
    """SRAM bytes per PE for `fields` (name -> dtype) of Z length `nz` (+ `extra_per_field`
    halo cells per field) and `buffers` bytes of work space."""
    return sum((nz + extra_per_field) * dtype_bytes(d) for d in fields.values()) + buffers


@dataclasses.dataclass(frozen=True, eq=False)
class StencilGrid:
    """A placed 3D grid: its wafer, shape, boundary, spacing and declared fields."""

    wafer: Wafer
    shape: tuple[int, int, int]
    boundary: Boundary
    spacing: tuple[float, float, float]
    fields: Mapping[str, object]
    radius: int
    bytes_per_pe: int

    @property
    def cells(self) -> int:
        nx, ny, nz = self.shape
        return nx * ny * nz

    def dtype(self, name: str):
        return to_jnp(self.fields[name])

    def place(self, values: np.ndarray | jax.Array, name: str) -> jax.Array:
        """Put an `(nx, ny, nz)` array on the wafer as field `name` (finite real values only)."""
        values = np.asarray(values) if not isinstance(values, jax.Array) else values
        if tuple(values.shape) != self.shape:
            raise StencilError(
                f"field {name!r} must have shape {self.shape}, got {tuple(values.shape)}"
            )
        if jnp.iscomplexobj(values):  # hunt 78: the cast dropped the imaginary part
            raise StencilError(
                f"field {name!r} holds complex values (dtype {values.dtype}); the stencil's "
                "fields are real: place the real and imaginary parts as two fields"
            )
        finite = (
            np.isfinite(values).all()
            if isinstance(values, np.ndarray)
            else bool(jnp.all(jnp.isfinite(values)))
        )
        if not finite:
            raise StencilError(
                f"field {name!r} holds non-finite values (NaN or inf); give finite initial data"
            )
        return self.wafer.place(jnp.asarray(values, self.dtype(name)))

    def zeros(self, name: str) -> jax.Array:
        return self.wafer.zeros((self.shape[2],), self.dtype(name))

    def gather(self, x: jax.Array) -> np.ndarray:
        return self.wafer.gather(x)

    def coords(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """1-D point coordinates along X, Y, Z on the unit cube (see the module docstring)."""
        out = []
        for n, h in zip(self.shape, self.spacing, strict=True):
            start = 0.0 if self.boundary == "periodic" else h
            out.append(start + h * np.arange(n))
        return out[0], out[1], out[2]


def spacing_for(shape: tuple[int, int, int], boundary: Boundary) -> tuple[float, float, float]:
    """Grid spacing per axis on the unit cube."""
    off = 0 if boundary == "periodic" else 1
    return tuple(1.0 / (n + off) for n in shape)  # type: ignore[return-value]


def grid_wafer(
    spec: WaferSpec,
    shape: tuple[int, int, int],
    *,
    mesh_shape: tuple[int, int] | None = None,
    defect_seed: int | None = None,
) -> Wafer:
    """A wafer whose logical PE grid is the grid's X x Y extent."""
    nx, ny, nz = _check_shape(shape)
    return build_wafer(spec, grid=(nx, ny), mesh_shape=mesh_shape, defect_seed=defect_seed)


def _check_shape(shape) -> tuple[int, int, int]:
    seq = isinstance(shape, tuple | list) or (isinstance(shape, np.ndarray) and shape.ndim == 1)
    if not (seq and len(shape) == 3 and all(map(_positive_whole, shape))):
        got = shown(" ".join(str(shape).split()), quote=False)  # one line, cut at 60 characters
        raise StencilError(f"the grid must be three positive integers NX NY NZ, got {got}")
    return int(shape[0]), int(shape[1]), int(shape[2])


def _positive_whole(n: object) -> bool:
    """A count given as 4 or 4.0 (not NaN, inf or True: hunt 65, int(nan) was a traceback)."""
    real = isinstance(n, numbers.Real) and not isinstance(n, bool)
    return real and math.isfinite(n) and n > 0 and int(n) == n


def max_nz(
    wafer: Wafer,
    fields: Mapping[str, object],
    *,
    extra_per_field: int = 0,
    buffers_for: Callable[[int], int] = lambda nz: 0,
) -> int:
    """The largest Z-column length whose fields fit in the SRAM the ledger has free."""
    return wafer.sram.largest(
        lambda nz: (
            field_bytes_per_pe(nz, fields, extra_per_field=extra_per_field) + buffers_for(nz)
        ),
        lo=1,
    )


def place_grid(
    wafer: Wafer,
    shape: tuple[int, int, int],
    fields: Mapping[str, object],
    *,
    boundary: Boundary = "dirichlet",
    radius: int = 1,
    extra_per_field: int = 0,
    buffers_for: Callable[[int], int] = lambda nz: 0,
    tag: str = "stencil",
) -> StencilGrid:
    """Declare `fields` (name -> dtype) of an `(nx, ny, nz)` grid in the SRAM ledger.

    `radius` is the stencil's reach; `extra_per_field` halo cells and `buffers_for(nz)` work
    bytes are added per PE. Raises StencilError for a bad shape or boundary and
    SramBudgetError (with the largest nz that fits) when the Z column is too long.
    """
    nx, ny, nz = _check_shape(shape)
    if boundary not in BOUNDARIES:
        raise StencilError(f"unknown boundary {boundary!r}; use 'dirichlet' or 'periodic'")
    if (nx, ny) != (wafer.rows, wafer.cols):
        raise PlacementError(
            f"a {nx} x {ny} x {nz} grid needs a {nx} x {ny} PE grid; this wafer has "
            f"{wafer.rows} x {wafer.cols} (build it with grid_wafer)"
        )
    need = radius + 1  # the fabric wraps or zero-fills a halo of `radius` cells
    if min(shape) < need:
        raise StencilError(
            f"grid {nx} x {ny} x {nz} is too small for a radius-{radius} stencil with "
            f"{boundary} boundaries: every axis needs at least {need} points"
        )
    for name, dtype in fields.items():
        if to_jnp(dtype) not in (jnp.float16, jnp.float32):
            raise StencilError(f"field {name!r}: dtype {dtype!r} is not fp16 or fp32")
    total = field_bytes_per_pe(nz, fields, extra_per_field=extra_per_field) + buffers_for(nz)
    if not wafer.sram.fits(total):
        best = max_nz(wafer, fields, extra_per_field=extra_per_field, buffers_for=buffers_for)
        raise SramBudgetError(
            f"a Z column of {nz} does not fit: {len(fields)} fields need {total} B per PE but "
            f"{wafer.sram.free_bytes()} B are free on the {wafer.spec.name} PEs"
            f"{wafer.sram.reserve_note()}; the largest nz that fits is {best}"
        )
    for name, dtype in fields.items():
        wafer.sram.allocate(f"{tag}.{name}", (nz + extra_per_field) * dtype_bytes(dtype))
    if buffers_for(nz):
        wafer.sram.allocate(f"{tag}.buffers", buffers_for(nz))
    return StencilGrid(
        wafer=wafer,
        shape=(nx, ny, nz),
        boundary=boundary,
        spacing=spacing_for((nx, ny, nz), boundary),
        fields=dict(fields),
        radius=radius,
        bytes_per_pe=total,
    )
