"""The functional wafer: a logical PE grid as sharded arrays on a jax Mesh.

A field on the wafer is one `jax.Array` of shape `(rows, cols, *per_pe)`. It is stored padded
to `(padded_rows, padded_cols, *per_pe)` so that the device mesh `(mesh_rows, mesh_cols)`
divides it, and sharded `P(ROW, COL)`: each device holds a block of PEs. Tiles are array axes,
never Python objects, so an 8 x 8 grid and a 762 x 1176 grid go through the same code.

Padding PEs (beyond the logical grid) hold unspecified values; `wse_core.fabric` masks them
out of every exchange and reduction, and `gather` drops them. Build a wafer with
`build_wafer(spec, ...)`; place data with `place`, read it back with `gather`.

A wafer also owns the host-side ledgers: `sram` (per-PE bytes, which the kernels declare:
`place` allocates nothing), `traffic` (fabric words and hops, recorded at trace time) and its
repaired defect map (`defects`, `remap`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from wse_core.errors import DefectError, PlacementError, is_int, shown, shown_setting
from wse_core.hw.defects import DefectMap, Remap, defect_map, remap, subgrid_note
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import SramLedger
from wse_core.hw.traffic import TrafficLedger

__all__ = ["ROW", "COL", "Wafer", "build_wafer", "choose_mesh_shape"]

ROW = "row"  # mesh axis over PE-grid rows
COL = "col"  # mesh axis over PE-grid columns


@functools.cache
def _filler(shape: tuple[int, ...], bits: bytes, dtype: np.dtype, sharding: NamedSharding):
    """The jitted maker of a placed field of the `dtype` value whose bytes are `bits`
    (compiled once per shape, value, dtype and sharding: `Wafer.full` jitted a new lambda,
    and so compiled, on every call). Keyed by the bytes: -0.0 == 0.0 and NaN != NaN as floats."""
    value = np.frombuffer(bits, dtype)[0]
    return jax.jit(lambda: jnp.full(shape, value, dtype), out_shardings=sharding)


def _put(x, sharding: NamedSharding) -> jax.Array:
    """`x` (the padded field) placed with `sharding`."""
    if sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    # Multi-process: every process holds the same host value and supplies its blocks.
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def _pe_pair(what: str, pair: object) -> tuple[int, int]:
    """`pair` as two positive integers (hunt 65: grid=(4.5, 4) built a wafer of 4.5 rows that
    refused every field; mesh_shape=(1.0, 1) was a slicing TypeError)."""
    if isinstance(pair, np.ndarray):
        pair = tuple(pair.tolist())
    if not (isinstance(pair, Sequence) and len(pair) == 2 and all(is_int(n) for n in pair)):
        got = shown(repr(pair), quote=False)
        raise PlacementError(f"{what} must be two positive integers (rows, cols), got {got}")
    rows, cols = (int(n) for n in pair)
    if rows <= 0 or cols <= 0:
        raise PlacementError(f"{what} must be two positive integers, got {rows} x {cols}")
    return rows, cols


def _kept(x: np.ndarray) -> np.ndarray:
    """`x` in the dtype JAX keeps it in (64-bit as 32-bit unless jax_enable_x64 is on), refused
    when a value would not survive the cast (hunt 65: int64 2**40 + 7 was placed as 7, float64
    1e300 as inf, with at most a NumPy warning). Rounding a float to fp32 is kept."""
    if not (x.dtype == bool or jnp.issubdtype(x.dtype, jnp.number)):  # hunt 73: a TypeError
        raise PlacementError(f"a wafer field must hold numbers, got an array of {x.dtype}")
    want = np.dtype(jax.dtypes.canonicalize_dtype(x.dtype))
    if want == x.dtype or x.size == 0:
        return x.astype(want, copy=False)
    why = "JAX keeps 64-bit values in 32 bits unless jax_enable_x64 is on"
    if x.dtype.kind in "iu":
        info = np.iinfo(want)
        lo, hi = x.min(), x.max()
        if lo < info.min or hi > info.max:
            bad = hi if hi > info.max else lo
            raise PlacementError(
                f"the field holds {bad}, outside {want}'s range {info.min}..{info.max} ({why})"
            )
        return x.astype(want)
    with np.errstate(over="ignore"):
        y = x.astype(want)
    if x.dtype.kind in "fc" and np.isinf(y).any():
        over = np.isinf(y) & ~np.isinf(x)
        if over.any():
            raise PlacementError(
                f"the field holds {x[over].flat[0]:g}, past {want}'s largest "
                f"{float(np.finfo(want).max):.4g} ({why})"
            )
    return y


def _number(value: object, want: np.dtype) -> bool | int | float | complex:
    """`value` as a Python number: a 0-d array (NumPy's or JAX's) or a NumPy scalar as its
    value (hunt 73: a 0-d jax.Array was an unhashable TypeError), else a PlacementError."""
    if isinstance(value, np.ndarray | jax.Array) and not isinstance(value, jax.core.Tracer):
        value = np.asarray(value)[()] if value.ndim == 0 else value
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)  # a Fraction too
    if isinstance(value, numbers.Complex):
        return complex(value)
    got = shown_setting(value)
    raise PlacementError(f"a {want} field's value must be a number, got {got}")


def _fill(value: object, want: np.dtype) -> np.ndarray:
    """`value` cast to `want` as NumPy casts it (a 0-d array), or a PlacementError where
    `want` would not hold it, as `place` refuses it (`_kept`). hunt 72: `full((), 1e300)` was
    inf, `full((), 2**40, int32)` 0, NaN as int32 -2147483648, 1.5 as int32 1, with at most a
    NumPy warning; hunt 73: 10**400 was an OverflowError, '1' and 1+0j as float32 TypeErrors.
    A string or None is no number; a complex value, its imaginary part 0 too, fills only a
    complex field (NumPy's cast would drop that part with a warning)."""
    v = _number(value, want)
    if want.kind == "b":
        return np.array(v).astype(want)  # any number has a truth value, as in NumPy
    if isinstance(v, complex) and want.kind != "c":
        raise PlacementError(f"a real {want} field cannot hold the complex value {v!r}")
    if want.kind in "iu" and not isinstance(v, complex):
        info = np.iinfo(want)
        if (isinstance(v, float) and not v.is_integer()) or not info.min <= v <= info.max:
            raise PlacementError(
                f"a {want} field cannot hold {shown_setting(value)}: give a whole number in "
                f"{info.min}..{info.max}"
            )
        return np.array(int(v)).astype(want)
    try:  # an int past float64's range: OverflowError, as NumPy's own cast of it
        x = np.array(v, np.complex128 if want.kind == "c" else np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            y = x.astype(want)
        back = y.astype(x.dtype)  # a finite part made inf, or NaN (float8_e4m3fn has no inf)
        if not any(np.isfinite(f(x)) and not np.isfinite(f(back)) for f in (np.real, np.imag)):
            return y
    except OverflowError:
        pass
    big = float(np.finfo(want).max)
    raise PlacementError(
        f"a {want} field cannot hold {shown_setting(value)}: past its largest {big:.4g}"
    )


@dataclasses.dataclass(eq=False)
class Wafer:
    """A spec's logical PE grid placed on a device mesh, with its ledgers."""

    spec: WaferSpec
    rows: int
    cols: int
    mesh: Mesh
    defects: DefectMap | None
    remap: Remap
    sram: SramLedger
    traffic: TrafficLedger

    # Shapes ----------------------------------------------------------------------------
    @property
    def mesh_shape(self) -> tuple[int, int]:
        return self.mesh.devices.shape  # type: ignore[return-value]

    @property
    def block_shape(self) -> tuple[int, int]:
        """PEs per device block (rows, cols)."""
        mr, mc = self.mesh_shape
        return -(-self.rows // mr), -(-self.cols // mc)

    @property
    def padded_shape(self) -> tuple[int, int]:
        (br, bc), (mr, mc) = self.block_shape, self.mesh_shape
        return br * mr, bc * mc

    @property
    def num_pes(self) -> int:
        return self.rows * self.cols

    def sharding(self, per_pe_ndim: int = 0) -> NamedSharding:
        """The sharding of a field with `per_pe_ndim` trailing per-PE axes."""
        return NamedSharding(self.mesh, P(ROW, COL, *([None] * per_pe_ndim)))

    # Data ------------------------------------------------------------------------------
    def place(self, x: np.ndarray | jax.Array) -> jax.Array:
        """Put a `(rows, cols, *per_pe)` array on the wafer (padded and sharded). A host array
        of 64-bit values is kept in 32 bits (JAX's 64-bit mode off) or refused with a
        PlacementError when a value would not survive that (`_kept`). The SRAM ledger is not
        touched: the kernel that plans the field allocates it (`sram`'s module docstring)."""
        # a host array (NumPy, a list) is cast, padded and cut into blocks on the host: jnp's
        # pad and the sharded put's slicing were small programs compiled (or loaded) at every
        # start (~0.05 s of a warm `wse hpc md` at 32,000 atoms)
        host = not isinstance(x, jax.Array)
        x = _kept(np.asarray(x)) if host else x
        if x.ndim < 2 or x.shape[:2] != (self.rows, self.cols):
            raise PlacementError(
                f"a wafer field must have shape ({self.rows}, {self.cols}, ...), got {x.shape}"
            )
        pr, pc = self.padded_shape
        pad = [(0, pr - self.rows), (0, pc - self.cols)] + [(0, 0)] * (x.ndim - 2)
        if pr != self.rows or pc != self.cols:
            x = np.pad(x, pad) if host else jnp.pad(x, pad)
        return _put(x, self.sharding(x.ndim - 2))

    def gather(self, x: jax.Array) -> np.ndarray:
        """The logical `(rows, cols, *per_pe)` values of a placed field, as NumPy (on every
        process of a multi-process run). A NumPy array of the padded shape is read as one;
        anything else of another shape is refused (hunt 74: a NumPy array was an
        AttributeError, a (3, 3) array came back as given)."""
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) < 2 or tuple(shape[:2]) != self.padded_shape:
            got = f"shape {tuple(shape)}" if shape is not None else type(x).__name__
            raise PlacementError(
                f"gather takes a field placed on this wafer, of shape {self.padded_shape} "
                f"+ the per-PE shape (wafer.place); got {got}"
            )
        if isinstance(x, np.ndarray):
            return np.asarray(x)[: self.rows, : self.cols]
        if not x.is_fully_addressable:
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(x, tiled=True))[
                : self.rows, : self.cols
            ]
        return np.asarray(jax.device_get(x))[: self.rows, : self.cols]

    def full(self, per_pe_shape: Sequence[int] = (), value: float = 0, dtype=jnp.float32):
        """A placed field of `value` (a number, a 0-d array or NumPy scalar), created sharded
        (no host copy); a value `dtype` cannot hold is refused as `place` refuses it (`_fill`).
        Inside jit a traced 0-d `value` fills it as `jnp.full` would (cast, unchecked: its
        value is not known; hunt 73: "must be a number, got JitTracer")."""
        if not all(is_int(n) and n >= 0 for n in per_pe_shape):
            got = shown(repr(per_pe_shape), quote=False)
            raise PlacementError(f"per_pe_shape must be integers >= 0, got {got}")
        pr, pc = self.padded_shape
        shape = (pr, pc, *(int(n) for n in per_pe_shape))
        want = np.dtype(jax.dtypes.canonicalize_dtype(jnp.dtype(dtype)))
        if isinstance(value, jax.core.Tracer):  # inside jit: cast as jnp.full casts it
            if value.ndim != 0:
                got = f"a traced array of shape {tuple(value.shape)}"
                raise PlacementError(f"a {want} field's value must be one number, got {got}")
            filled = jnp.full(shape, value.astype(want), want)
            return jax.lax.with_sharding_constraint(filled, self.sharding(len(per_pe_shape)))
        bits = _fill(value, want).tobytes()
        return _filler(shape, bits, want, self.sharding(len(per_pe_shape)))()

    def zeros(self, per_pe_shape: Sequence[int] = (), dtype=jnp.float32) -> jax.Array:
        return self.full(per_pe_shape, 0, dtype)

    def pe_coords(self) -> tuple[jax.Array, jax.Array]:
        """Placed int32 fields of each PE's logical row and column index."""
        # made on the host: jnp's iota and broadcasts were four small programs to compile or
        # load (~0.09 s of a warm `wse hpc md` start at 32,000 atoms)
        pr, pc = self.padded_shape
        r = np.broadcast_to(np.arange(pr, dtype=np.int32)[:, None], (pr, pc))
        c = np.broadcast_to(np.arange(pc, dtype=np.int32)[None, :], (pr, pc))
        s = self.sharding()
        return _put(r, s), _put(c, s)

    def describe(self) -> dict[str, object]:
        return {
            "preset": self.spec.name,
            "grid": [self.rows, self.cols],
            "mesh": list(self.mesh_shape),
            "block": list(self.block_shape),
            "padded": list(self.padded_shape),
            "devices": int(self.mesh.devices.size),
            "platform": self.mesh.devices.flat[0].platform,
            "dead_pes": self.defects.num_dead if self.defects is not None else 0,
            "retired_rows": list(self.remap.retired_rows),
            "detour_hops": self.remap.extra_hops,
        }


def choose_mesh_shape(rows: int, cols: int, num_devices: int) -> tuple[int, int]:
    """The factorization mr x mc of the devices (mr <= rows, mc <= cols) with the squarest
    blocks, using as many devices as possible."""
    best: tuple[float, int, int] | None = None
    for n in range(num_devices, 0, -1):
        for mr in range(1, n + 1):
            if n % mr:
                continue
            mc = n // mr
            if mr > rows or mc > cols:
                continue
            br, bc = math.ceil(rows / mr), math.ceil(cols / mc)
            score = abs(math.log(br / bc))
            if best is None or score < best[0]:
                best = (score, mr, mc)
        if best is not None:
            return best[1], best[2]
    return 1, 1


def _check_defects(seed: object, rate: float | None) -> None:
    """Hunt 65: a rate without a seed drew no dead PEs, silently; a negative seed was NumPy's
    "expected non-negative integer"."""
    if seed is None:
        if rate is not None:
            raise DefectError(
                f"defect_rate={shown(rate, quote=False)} needs a defect_seed to draw dead PEs "
                "from; give defect_seed=0 (or any integer >= 0) too"
            )
        return
    if not is_int(seed) or seed < 0:  # type: ignore[operator]
        got = shown(repr(seed), quote=False)
        raise DefectError(f"defect_seed must be an integer >= 0, got {got}")


def _check_devices(devs: list) -> None:
    """Hunt 77: a device twice or a name ("cpu0") built a wafer whose `place` then failed in
    JAX (safe_zip, AttributeError); each device once, as jax.devices() gives them."""
    for d in devs:
        if not isinstance(d, jax.Device):
            raise PlacementError(
                f"devices must be JAX devices (jax.devices()), got a {type(d).__name__} "
                f"{shown(repr(d), quote=False)}"
            )
    if len(set(devs)) < len(devs):
        twice = next(d for i, d in enumerate(devs) if d in devs[:i])
        raise PlacementError(f"devices lists {twice} twice; a mesh holds each device once")


def build_wafer(
    spec: WaferSpec,
    *,
    grid: tuple[int, int] | None = None,
    mesh_shape: tuple[int, int] | None = None,
    devices: Sequence[jax.Device] | None = None,
    defect_seed: int | None = None,
    defect_rate: float | None = None,
) -> Wafer:
    """Lay `spec`'s PE grid (or a `grid` sub-rectangle of it) over the devices.

    `mesh_shape` defaults to `choose_mesh_shape`; `devices` to all of `jax.devices()`.
    With `defect_seed` (an integer >= 0), dead PEs are drawn at `defect_rate` (default: the
    spec's) and repaired; an unrepairable wafer raises DefectError. A `defect_rate` without a
    `defect_seed` is refused: no dead PEs would be drawn.
    """
    _check_defects(defect_seed, defect_rate)
    rows, cols = _pe_pair("grid", grid) if grid is not None else (spec.pe_rows, spec.pe_cols)
    if rows > spec.pe_rows or cols > spec.pe_cols:
        raise PlacementError(
            f"a {rows} x {cols} PE grid does not fit the {spec.name} wafer's "
            f"{spec.pe_rows} x {spec.pe_cols} PEs"
        )
    devs = list(devices if devices is not None else jax.devices())
    devs = [devices] if isinstance(devices, str) else devs  # one name, not its letters
    _check_devices(devs)
    if mesh_shape is None:
        mesh_shape = choose_mesh_shape(rows, cols, len(devs))
    mr, mc = _pe_pair("mesh_shape", mesh_shape)
    if mr * mc > len(devs):
        raise PlacementError(f"mesh {mr} x {mc} needs {mr * mc} devices; {len(devs)} available")
    mesh = Mesh(
        np.array(devs[: mr * mc]).reshape(mr, mc),
        (ROW, COL),
        axis_types=(AxisType.Auto, AxisType.Auto),
    )
    defects = None if defect_seed is None else defect_map(spec, defect_seed, defect_rate)
    try:
        repaired = remap(spec, defects)
    except DefectError as e:
        if defects is None or (rows, cols) == (spec.pe_rows, spec.pe_cols):
            raise
        raise DefectError(f"{e}; {subgrid_note(spec, defects, rows, cols)}") from None
    return Wafer(
        spec=spec,
        rows=rows,
        cols=cols,
        mesh=mesh,
        defects=defects,
        remap=repaired,
        sram=SramLedger.for_spec(spec, rows, cols),
        traffic=TrafficLedger(),
    )
