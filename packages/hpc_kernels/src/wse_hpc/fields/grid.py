"""Fields on the wafer: a placed grid and arrays with NumPy-like arithmetic (NETL's WFA idiom).

A `FieldGrid` is an `(nx, ny, nz)` grid on a wafer whose logical PE grid is `nx x ny` (X down
the PE rows, Y across the PE columns, each Z column in its PE's SRAM, as `wse_hpc.stencil`
places it); `nz = 1` is a 2D grid (no Z operators). Each axis is periodic or bounded by walls.
Cells are unit-cube cells of size `h_a = length_a / n_a`; centres sit at `(i + 1/2) h_a`.

`grid.field(name, values, loc=..., bc=...)` is WFA's `WSE_Array`: it declares the array's Z
column in the SRAM ledger once per name (`fields.<name>`, fp32) and returns a `Field`, a
pytree holding one placed `jax.Array` with the grid, its location and its boundary conditions
as static data. `+ - * /`, unary minus, `abs`, `maximum`, `minimum`, `where` are PE-local
programs (no traffic); every one records the DSD instruction it is into the active `Program`
(`program()`), which is how `wse_hpc.fields.perf` prices a step from the code that runs it.
Fields cross PEs only through `wse_hpc.fields.operators` (fabric shifts).

Locations: `"c"` (cell centre) or `"x"`, `"y"`, `"z"` (the face on the + side of the cell
along that axis: the MAC staggering, so a PE holds one cell's p, T and its east / north / top
face velocities). Boundary conditions (`Bc`, per axis, same on both ends' kind):
`periodic`, `dirichlet(lo, hi)` (values on the wall), `neumann()` (zero normal gradient).
A no-slip wall is `dirichlet(0, 0)` for every velocity component (`no_slip`), a moving lid
`dirichlet(0, U)` for the tangential component. A face field along its own axis holds the
wall's value at index n - 1 (the + wall face); `enforce` writes it after an update.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from wse_core import PlacementError, SramBudgetError, WaferSpec, WseError
from wse_core.cost.work import Op
from wse_core.hw.wafer import Wafer, build_wafer

__all__ = [
    "Bc",
    "Field",
    "FieldError",
    "FieldGrid",
    "Loc",
    "Program",
    "dirichlet",
    "field_grid",
    "neumann",
    "no_slip",
    "periodic",
    "program",
    "record",
    "record_reduction",
    "record_shift",
    "scope",
    "traced_program",
]

Loc = Literal["c", "x", "y", "z"]
LOCS: tuple[str, ...] = ("c", "x", "y", "z")
WORD_BYTES = 4  # fields are fp32


class FieldError(WseError):
    """A field problem that cannot be run as asked (shape, location, boundary, CFL)."""


@dataclasses.dataclass(frozen=True)
class Bc:
    """One axis's boundary condition: kind and the wall values at its low / high ends."""

    kind: Literal["periodic", "dirichlet", "neumann"]
    lo: float = 0.0
    hi: float = 0.0


def periodic() -> Bc:
    return Bc("periodic")


def dirichlet(lo: float = 0.0, hi: float = 0.0) -> Bc:
    return Bc("dirichlet", float(lo), float(hi))


def neumann() -> Bc:
    return Bc("neumann")


def no_slip() -> Bc:
    return dirichlet(0.0, 0.0)


# -- the program a step runs: instructions recorded at trace time ---------------------------
class Program:
    """What a traced function does on each PE, by scope (`scope(name)`; "" outside any):
    PE-local instructions (`Op`s over the Z column), fabric shifts (direction, 32-bit words
    per PE) and wafer-wide reductions (words per PE)."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, Op]] = []
        self.shifts: list[tuple[str, str, int]] = []
        self.reductions: list[tuple[str, int]] = []
        self.scopes: list[str] = [""]

    @property
    def scope(self) -> str:
        return self.scopes[-1]


_ACTIVE = threading.local()


def _active() -> Program | None:
    return getattr(_ACTIVE, "prog", None)


@contextlib.contextmanager
def program() -> Iterator[Program]:
    """Record every field instruction traced inside the block into a fresh `Program`."""
    prog, prev = Program(), _active()
    _ACTIVE.prog = prog
    try:
        yield prog
    finally:
        _ACTIVE.prog = prev


def traced_program(fn: Callable, *args) -> Program:
    """What `fn(*args)` does on each PE: traced abstractly (`jax.eval_shape`, no data) under
    `program()`. A fresh function each time: a cached trace would record nothing."""
    with program() as prog:
        jax.eval_shape(lambda *a: fn(*a), *args)
    return prog


@contextlib.contextmanager
def scope(name: str) -> Iterator[None]:
    """Tag what is recorded inside the block (e.g. one solver iteration, priced per use)."""
    prog = _active()
    if prog is not None:
        prog.scopes.append(name)
    try:
        yield
    finally:
        if prog is not None:
            prog.scopes.pop()


def record(kind: str, length: int, count: float = 1.0, fabric_in: bool = False) -> None:
    """Note `count` instructions of `kind` over `length` elements in the active program."""
    prog = _active()
    if prog is not None:
        prog.ops.append((prog.scope, Op(kind, "fp32", length, count=count, fabric_in=fabric_in)))


def record_shift(direction: str, words: int) -> None:
    prog = _active()
    if prog is not None:
        prog.shifts.append((prog.scope, direction, words))


def record_reduction(words: int) -> None:
    prog = _active()
    if prog is not None:
        prog.reductions.append((prog.scope, words))


# -- the grid -------------------------------------------------------------------------------
FP32_MAX = float(np.finfo(np.float32).max)


def _fp32_values(name: str, arr: np.ndarray) -> np.ndarray:
    """`arr` as float64, or FieldError when its values are no real fp32 numbers (hunt 65: a
    complex field lost its imaginary part with only NumPy's warning, 1e300 became inf)."""
    if np.iscomplexobj(arr) or arr.dtype.kind not in "biuf":
        kind = "complex" if np.iscomplexobj(arr) else str(arr.dtype)
        raise FieldError(f"field {name!r} holds {kind} values; fields are real fp32")
    arr = arr.astype(np.float64, copy=False)
    if not np.isfinite(arr).all():
        raise FieldError(f"field {name!r} holds non-finite values; give finite data")
    if arr.size and (largest := float(np.abs(arr).max())) > FP32_MAX:
        raise FieldError(f"field {name!r} holds values past fp32 (largest {largest:.3g}); "
                         f"fields are fp32, give magnitudes up to {FP32_MAX:.3g}")  # fmt: skip
    return arr


@dataclasses.dataclass(frozen=True, eq=False)
class FieldGrid:
    """A placed `(nx, ny, nz)` grid: its wafer, spacing, periodic axes and PE index fields."""

    wafer: Wafer
    shape: tuple[int, int, int]
    spacing: tuple[float, float, float]
    periodic: tuple[bool, bool, bool]
    index: tuple[jax.Array, jax.Array, jax.Array]  # int32, broadcastable to a field

    @property
    def dims(self) -> int:
        return 2 if self.shape[2] == 1 else 3

    @property
    def nz(self) -> int:
        return self.shape[2]

    @property
    def cells(self) -> int:
        return int(np.prod(self.shape))

    def field(
        self,
        name: str,
        values: np.ndarray | jax.Array | float = 0.0,
        *,
        loc: Loc = "c",
        bc: Sequence[Bc] | None = None,
    ) -> Field:
        """WFA's `WSE_Array`: declare `name`'s Z column in the SRAM ledger (once) and place
        `values` (a scalar or an `(nx, ny, nz)` array) as a fp32 field."""
        if loc not in LOCS:
            raise FieldError(f"unknown field location {loc!r}; use one of {', '.join(LOCS)}")
        bcs = self.check_bc(name, bc)
        arr = np.asarray(values)
        if arr.ndim and arr.shape != self.shape:
            raise FieldError(f"field {name!r} must have shape {self.shape}, got {arr.shape}")
        arr = _fp32_values(name, arr)
        self.declare(name)
        if arr.ndim == 0:
            data = self.wafer.full((self.nz,), float(arr), jnp.float32)  # type: ignore[arg-type]
        else:
            data = self.wafer.place(jnp.asarray(arr, jnp.float32))
        return Field(data, self, loc, bcs)

    def declare(self, name: str, words_per_cell: int = 1) -> None:
        """Allocate `fields.<name>` (the Z column, fp32) in the SRAM ledger unless present."""
        key = f"fields.{name}"
        if any(a.name == key for a in self.wafer.sram.allocations):
            return
        need = words_per_cell * self.nz * WORD_BYTES
        if not self.wafer.sram.fits(need):
            raise SramBudgetError(
                f"field {name!r}: its Z column of {self.nz} needs {need} B per PE but "
                f"{self.wafer.sram.free_bytes()} B are free on the {self.wafer.spec.name} PEs"
                f"{self.wafer.sram.reserve_note()}"
            )
        self.wafer.sram.allocate(key, need)

    def check_bc(self, name: str, bc: Sequence[Bc] | None) -> tuple[Bc, Bc, Bc]:
        """The field's three axis conditions, checked against the grid's periodic axes."""
        if bc is None:
            bc = [periodic() if p else neumann() for p in self.periodic]
        bcs = tuple(bc)
        if len(bcs) != 3:
            raise FieldError(f"field {name!r}: give one boundary condition per axis (3)")
        for a, (b, p) in enumerate(zip(bcs, self.periodic, strict=True)):
            if (b.kind == "periodic") != p:
                want = "periodic" if p else "dirichlet or neumann"
                raise FieldError(f"field {name!r}: axis {'xyz'[a]} is {want}, got {b.kind}")
        return bcs  # type: ignore[return-value]

    def gather(self, f: Field | jax.Array) -> np.ndarray:
        """The `(nx, ny, nz)` values of a field, as NumPy fp32."""
        data = f.data if isinstance(f, Field) else f
        return self.wafer.gather(data)

    def centres(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """1-D cell-centre coordinates along X, Y, Z."""
        return tuple(
            h * (np.arange(n) + 0.5) for n, h in zip(self.shape, self.spacing, strict=True)
        )  # type: ignore[return-value]


def field_grid(
    spec: WaferSpec,
    shape: tuple[int, int, int],
    *,
    periodic: tuple[bool, bool, bool] = (False, False, False),
    lengths: tuple[float, float, float] = (1.0, 1.0, 1.0),
    mesh_shape: tuple[int, int] | None = None,
    defect_seed: int | None = None,
) -> FieldGrid:
    """Build a wafer whose PE grid is the grid's X x Y extent and the grid on it; `periodic`
    is three booleans (X, Y, Z). A Z column past SRAM is refused before anything is built."""
    if len(shape) != 3 or any(int(n) != n or n < 1 for n in shape):
        raise FieldError(f"the grid must be three positive integers NX NY NZ, got {shape}")
    nx, ny, nz = (int(n) for n in shape)
    if min(nx, ny) < 3 or nz == 2:
        raise FieldError(f"grid {nx} x {ny} x {nz}: X and Y need >= 3 cells, Z 1 (2D) or >= 3")
    if any(not (float(L) > 0 and np.isfinite(L)) for L in lengths):
        raise FieldError(f"domain lengths must be positive and finite, got {lengths}")
    # hunt 65: (1, 0, "no") read as (True, False, True); nz 10^9 built 8 GB, then was refused
    axes = tuple(periodic) if isinstance(periodic, (tuple, list)) else ()
    if len(axes) != 3 or not all(isinstance(p, (bool, np.bool_)) for p in axes):
        raise FieldError(f"periodic must be three booleans (X, Y, Z), got {periodic!r:.80}")
    if (need := nz * WORD_BYTES) > (have := spec.data_bytes_per_pe):
        raise SramBudgetError(f"a Z column of {nz:,} cells needs {need:,} B per PE (one fp32 "
                              f"field); the {spec.name} PEs have {have:,} B for data "
                              f"({spec.code_stack_bytes_per_pe:,} B of their "
                              f"{spec.sram_bytes_per_pe:,} are code and stack, assumed): at "
                              f"most {have // WORD_BYTES:,} cells")  # fmt: skip
    try:
        wafer = build_wafer(spec, grid=(nx, ny), mesh_shape=mesh_shape, defect_seed=defect_seed)
    except PlacementError as e:
        raise FieldError(f"grid {nx} x {ny} does not fit the {spec.name} PE grid: {e}") from None
    pr, pc = wafer.padded_shape
    sharding = wafer.sharding(1)
    ix = jax.device_put(
        jnp.broadcast_to(jnp.arange(pr, dtype=jnp.int32)[:, None, None], (pr, pc, 1)), sharding
    )
    iy = jax.device_put(
        jnp.broadcast_to(jnp.arange(pc, dtype=jnp.int32)[None, :, None], (pr, pc, 1)), sharding
    )
    iz = jnp.arange(nz, dtype=jnp.int32)[None, None, :]
    spacing = tuple(float(L) / n for L, n in zip(lengths, (nx, ny, nz), strict=True))
    return FieldGrid(wafer, (nx, ny, nz), spacing, tuple(map(bool, axes)), (ix, iy, iz))  # type: ignore[arg-type]


# -- fields ---------------------------------------------------------------------------------
@jax.tree_util.register_pytree_node_class
class Field:
    """A placed fp32 field (`data`: `(rows, cols, nz)` padded and sharded) with its grid,
    location and boundary conditions (static). Arithmetic is PE-local and recorded."""

    __array_priority__ = 100

    def __init__(self, data: jax.Array, grid: FieldGrid, loc: Loc = "c", bc=None) -> None:
        self.data = data
        self.grid = grid
        self.loc = loc
        self.bc = bc if bc is not None else grid.check_bc("field", None)

    def tree_flatten(self):
        return (self.data,), (self.grid, self.loc, self.bc)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], *aux)

    def like(self, data: jax.Array, loc: Loc | None = None, bc=None) -> Field:
        return Field(data, self.grid, loc or self.loc, bc if bc is not None else self.bc)

    def with_bc(self, bc: Sequence[Bc]) -> Field:
        return self.like(self.data, bc=self.grid.check_bc("field", bc))

    def _binary(self, other, fn: Callable, kind: str, reverse: bool = False) -> Field:
        if isinstance(other, Field):
            if other.loc != self.loc or other.grid is not self.grid:
                raise FieldError(f"cannot combine a {self.loc!r} field with a {other.loc!r} one")
            b = other.data
        else:
            b = other
        record(kind, self.grid.nz)
        return self.like(fn(b, self.data) if reverse else fn(self.data, b))

    def __add__(self, o):
        return self._binary(o, jnp.add, "add")

    __radd__ = __add__

    def __sub__(self, o):
        return self._binary(o, jnp.subtract, "sub")

    def __rsub__(self, o):
        return self._binary(o, jnp.subtract, "sub", reverse=True)

    def __mul__(self, o):
        return self._binary(o, jnp.multiply, "mul")

    __rmul__ = __mul__

    def __truediv__(self, o):
        if not isinstance(o, Field):  # a scalar divisor is a multiply by its reciprocal
            return self._binary(1.0 / o, jnp.multiply, "mul")
        return self._binary(o, jnp.divide, "div")

    def __rtruediv__(self, o):
        return self._binary(o, jnp.divide, "div", reverse=True)

    def __neg__(self):
        record("neg", self.grid.nz)
        return self.like(-self.data)

    def __abs__(self):
        record("abs", self.grid.nz)
        return self.like(jnp.abs(self.data))

    def maximum(self, o) -> Field:
        return self._binary(o, jnp.maximum, "max")

    def minimum(self, o) -> Field:
        return self._binary(o, jnp.minimum, "max")  # a min is a max instruction's twin

    def where(self, cond: jax.Array, other) -> Field:
        """`cond ? self : other` per cell (a masked move)."""
        b = other.data if isinstance(other, Field) else other
        record("move", self.grid.nz)
        return self.like(jnp.where(cond, self.data, b))

    def numpy(self) -> np.ndarray:
        return self.grid.gather(self)
