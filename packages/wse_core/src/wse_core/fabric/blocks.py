"""The fabric's block-level building blocks: what runs on each device's block inside shard_map.

`wse_core.fabric` and `wse_core.fabric.reduce` build every op from these; nothing above the
fabric calls them. A placed field is split over the mesh in blocks of `wafer.block_shape` PEs:
`on_blocks` runs a function on every device's block (the one `shard_map` of the project),
`extend` gives a block the halo cells of its neighbours along a grid axis (`lax.ppermute` of
the block edges, wrapped or zero beyond the grid, padding PEs made safe), `logical_mask` marks
a block's non-padding PEs, `spanned` keeps the mesh axes a collective must combine over, and
`check_field` refuses what is not a placed field of this wafer (`check_count` / `check_reach` a
count or a distance that is not an integer in range; `rotation` what a periodic shift
moves; `wrap_add` a sliding extreme's unrolling in the field's dtype; `block_fn` a user's
block function that returns something other than blocks). The ledger side of each op lives
in `wse_core.fabric.ledger`.

Zero-size per-PE fields (`(rows, cols, 0)`): `on_blocks` returns zero-size outputs as
zeros of their shape on the wafer's sharding without running the shard_map (hunt 74: XLA
handed back every device the whole global shape, and reading the result failed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from wse_core.errors import PlacementError, WseError, is_finite, is_int, shown_setting
from wse_core.hw.wafer import COL, ROW, Wafer

__all__ = [
    "Boundary",
    "AXIS_NAMES",
    "geometry",
    "take",
    "neighbour_cells",
    "global_index",
    "along",
    "wrap_strip",
    "extend",
    "logical_mask",
    "on_blocks",
    "spanned",
    "check_field",
    "check_count",
    "check_reach",
    "rotation",
    "wrap_add",
    "extreme",
    "block_fn",
]

Boundary = Literal["zero", "periodic"]

AXIS_NAMES = (ROW, COL)


def geometry(wafer: Wafer, axis: int) -> tuple[str, int, int, int]:
    """(mesh axis name, devices along it, block length, logical size) for a grid axis."""
    return (
        AXIS_NAMES[axis],
        wafer.mesh_shape[axis],
        wafer.block_shape[axis],
        (wafer.rows, wafer.cols)[axis],
    )


def take(x: jax.Array, axis: int, start: int, stop: int) -> jax.Array:
    return lax.slice_in_dim(x, start, stop, axis=axis)


def neighbour_cells(x, wafer: Wafer, axis: int, width: int, side: int, periodic: bool):
    """The `width` cells just before (side=-1) or after (side=+1) this block along `axis`,
    fetched from the blocks `1..m` devices away with one ppermute each."""
    name, ndev, block, _ = geometry(wafer, axis)
    pieces: list[jax.Array] = []
    s = 1
    while sum(p.shape[axis] for p in pieces) < width:
        w = min(block, width - (s - 1) * block)
        send = take(x, axis, block - w, block) if side < 0 else take(x, axis, 0, w)
        if side < 0:  # device i sends to i + s
            perm = [(i, (i + s) % ndev) for i in range(ndev) if periodic or i + s < ndev]
        else:  # device i sends to i - s
            perm = [(i, (i - s) % ndev) for i in range(ndev) if periodic or i - s >= 0]
        if perm and ndev > 1:
            got = lax.ppermute(send, name, perm)
        elif periodic:  # one device along the axis: it is its own neighbour
            got = send
        else:
            got = jnp.zeros_like(send)
        pieces.append(got)
        s += 1
    if side < 0:
        pieces.reverse()
    return pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces, axis=axis)


def _pair_cells(x, wafer: Wafer, axis: int, before: int, after: int):
    """Both halos of a block on an axis of two devices, in one ppermute: each device sends
    the other its last `before` and first `after` cells (the other's before and after
    halos, both ways round on two devices): one cross-device rendezvous instead of one a
    side (`neighbour_cells`), ~0.1 ms each on a CPU host. Beyond the grid (no wrap) the
    received cells are the other end's: `extend` zeroes them by their global index, as it
    zeroes `neighbour_cells`' there."""
    name, _, block, _ = geometry(wafer, axis)
    send = jnp.concatenate([take(x, axis, block - before, block), take(x, axis, 0, after)], axis)
    got = lax.ppermute(send, name, [(0, 1), (1, 0)])
    return take(got, axis, 0, before), take(got, axis, before, before + after)


def global_index(wafer: Wafer, axis: int, offset: int, length: int) -> jax.Array:
    """Global positions along `axis` of `length` cells starting `offset` from this block."""
    name, _, block, _ = geometry(wafer, axis)
    start = lax.axis_index(name) * block + offset
    return start + jnp.arange(length, dtype=jnp.int32)


def along(mask: jax.Array, axis: int, ndim: int) -> jax.Array:
    """Reshape a 1-D mask so it broadcasts along `axis` of an `ndim` array."""
    shape = [1] * ndim
    shape[axis] = mask.shape[0]
    return mask.reshape(shape)


def wrap_strip(x, wafer: Wafer, axis: int, first: int, width: int):
    """Cells [first, first + width) of the logical axis, on every device (one psum)."""
    name, _, block, _ = geometry(wafer, axis)
    targets = np.arange(first, first + width)
    owner, local = targets // block, targets % block
    picked = jnp.take(x, jnp.asarray(local), axis=axis)
    mine = along(jnp.asarray(owner) == lax.axis_index(name), axis, x.ndim)
    got = lax.psum(jnp.where(mine, picked, jnp.zeros_like(picked)), name)
    return got.astype(x.dtype)  # psum makes bool int32 (hunt 74: a bool field changed dtype)


def _wrapped(x, wafer: Wafer, axis: int, before: int, after: int):
    """`extend`'s periodic halos when one is as wide as the logical axis or wider (a 1-PE
    ring's halo of one is the PE itself): every cell the logical value at its global position
    modulo the axis, as np.pad(mode="wrap") has it, taken from the whole axis on every device
    (one psum, `wrap_strip`; the block itself where one device holds the axis)."""
    _, ndev, block, size = geometry(wafer, axis)
    full = take(x, axis, 0, size) if ndev == 1 else wrap_strip(x, wafer, axis, 0, size)
    g = global_index(wafer, axis, -before, before + block + after)
    return jnp.take(full, g % size, axis=axis)


def extend(x, wafer: Wafer, axis: int, before: int, after: int, boundary: Boundary):
    """This block with `before` / `after` halo cells along `axis`; cells outside the logical
    grid are zero or wrapped, padding inside the block is made safe as well. A periodic halo
    may be as wide as the axis or wider (`_wrapped`; hunt 72: a 1-row grid's periodic
    `halo_apply` was refused though a periodic `shift` accepted it)."""
    _, ndev, block, size = geometry(wafer, axis)
    periodic = boundary == "periodic"
    if periodic and max(before, after) >= size:
        return _wrapped(x, wafer, axis, before, after)
    padded = wafer.padded_shape[axis] != size
    if ndev == 2 and 0 < before <= block and 0 < after <= block:
        halo_before, halo_after = _pair_cells(x, wafer, axis, before, after)
    else:
        halo_before = neighbour_cells(x, wafer, axis, before, -1, periodic) if before else None
        halo_after = neighbour_cells(x, wafer, axis, after, +1, periodic) if after else None
    parts = [(-before, halo_before)] if before else []
    parts.append((0, x))
    if after:
        parts.append((block, halo_after))
    strips = {}
    if periodic and padded:
        if before:
            strips["before"] = wrap_strip(x, wafer, axis, size - before, before)
        if after:
            strips["after"] = wrap_strip(x, wafer, axis, 0, after)
    out = []
    for offset, part in parts:
        if offset == 0 and not padded:
            out.append(part)  # the block itself is all logical cells
            continue
        g = global_index(wafer, axis, offset, part.shape[axis])
        if periodic and padded:
            if "before" in strips:
                vals = jnp.take(strips["before"], jnp.clip(g + before, 0, before - 1), axis=axis)
                part = jnp.where(along(g < 0, axis, x.ndim), vals, part)
            if "after" in strips:
                vals = jnp.take(strips["after"], jnp.clip(g - size, 0, after - 1), axis=axis)
                part = jnp.where(along(g >= size, axis, x.ndim), vals, part)
        elif not periodic:
            valid = along((g >= 0) & (g < size), axis, x.ndim)
            part = jnp.where(valid, part, jnp.zeros_like(part))
        out.append(part)
    return jnp.concatenate(out, axis=axis) if len(out) > 1 else out[0]


def extreme(dtype, sign: int) -> jax.Array:
    """The identity of a max (sign -1) or min (+1) over `dtype`, what padding and a window's
    start read as: -+inf, the least or greatest finite value of a float without infinities
    (fp8's float8_e4m3fn: there inf is NaN, which every max and min then gave; hunt 76), or
    the integer's (bool's) least or greatest value (hunt 74: an int field raised
    OverflowError on inf)."""
    if jnp.issubdtype(dtype, jnp.floating):
        fi = jnp.finfo(dtype)
        inf = np.isinf(np.asarray(np.inf).astype(dtype))
        return jnp.asarray(sign * np.inf if inf else (fi.max if sign > 0 else fi.min), dtype)
    info = jnp.iinfo(dtype) if dtype != jnp.bool_ else None
    top = (sign > 0) if info is None else (info.max if sign > 0 else info.min)
    return jnp.asarray(top, dtype)


def logical_mask(wafer: Wafer, ndim: int) -> jax.Array:
    """True on this block's logical (non-padding) PEs, broadcastable to an `ndim` block."""
    br, bc = wafer.block_shape
    rows = global_index(wafer, 0, 0, br) < wafer.rows
    cols = global_index(wafer, 1, 0, bc) < wafer.cols
    return (rows[:, None] & cols[None, :]).reshape((br, bc) + (1,) * (ndim - 2))


def on_blocks(
    wafer: Wafer,
    fn: Callable,
    *fields: jax.Array,
    out_spec: P | None = None,
    check_vma: bool = True,
    row_data: tuple[jax.Array, ...] = (),
) -> Any:
    """fn on each device's block of every placed field (one block argument per field), then
    of every `row_data` array (split over the mesh's rows only)."""
    spec = P(ROW, COL)
    out_specs = spec if out_spec is None else out_spec
    call = jax.shard_map(
        fn,
        mesh=wafer.mesh,
        in_specs=(spec,) * len(fields) + (P(ROW),) * len(row_data),
        out_specs=out_specs,
        check_vma=check_vma,
    )
    if any(f.size == 0 for f in fields):
        outs = jax.eval_shape(call, *fields, *row_data)
        if not any(o.size for o in jax.tree.leaves(outs)):  # nothing to compute: see above
            where = NamedSharding(wafer.mesh, out_specs)
            return jax.tree.map(lambda o: jax.device_put(jnp.zeros(o.shape, o.dtype), where), outs)
    return call(*fields, *row_data)


def block_fn(wafer: Wafer, fn: Callable, op: str) -> Callable:
    """fn, refusing at trace time any output leaf that is not a block of this wafer's
    `block_shape` PEs + per-PE dims (hunt 74: a wrong shape came back as a silently
    mis-assembled array, not a field)."""
    block = tuple(wafer.block_shape)

    def checked(*blocks: jax.Array) -> Any:
        out = fn(*blocks)
        for leaf in jax.tree.leaves(out):
            shape = tuple(getattr(leaf, "shape", ()))
            if shape[:2] != block:
                raise PlacementError(
                    f"fabric.{op}'s fn must return blocks of {block} PEs + per-PE dims (the "
                    f"block it was given); got shape {shape}"
                )
        return out

    return checked


def spanned(wafer: Wafer, axes: tuple[str, ...]) -> tuple[str, ...]:
    """The mesh axes among `axes` that span more than one device: a collective over the
    others has nothing to combine. XLA:CPU runs even a one-device all-reduce through its
    collective machinery, ~35 us a call when the process has several devices (a 256-atom MD
    step with two reductions: 0.26 -> 0.33 ms), so the ops skip them."""
    return tuple(a for a in axes if wafer.mesh.shape[a] > 1)


def _devices(x: object) -> set | None:
    """The devices a concrete, committed array lives on (None for tracers, NumPy arrays and
    uncommitted arrays, which go wherever the op runs)."""
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) and x.committed:
        return set(x.sharding.device_set)
    return None


def check_field(wafer: Wafer, x: jax.Array, op: str) -> None:
    """Refuse what is not a placed field of this wafer: no shape and dtype (a list, a
    scalar), the wrong grid shape, or an array committed to other devices than the wafer's
    mesh (hunt 74: AttributeError 'ndim', JAX's incompatible-devices error)."""
    want = f"a placed field of shape {wafer.padded_shape} + per-PE dims (use wafer.place)"
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        raise PlacementError(f"fabric.{op} needs {want}; got a {type(x).__name__}")
    if x.ndim < 2 or tuple(x.shape[:2]) != wafer.padded_shape:
        raise PlacementError(f"fabric.{op} needs {want}; got {tuple(x.shape)}")
    devices, mesh = _devices(x), set(wafer.mesh.devices.flat)
    if devices is not None and devices != mesh:
        ids = sorted(d.id for d in devices)
        raise PlacementError(
            f"fabric.{op} got a field on devices {ids}, not this wafer's mesh "
            f"{sorted(d.id for d in mesh)}: place it on this wafer (wafer.place)"
        )


def check_count(what: str, value: object, low: int) -> None:
    """Refuse a `value` that is not an integer (bool refused) >= low: a PE count or a
    half-width, read by Python's range() and by slicing."""
    if not (is_int(value) and low <= value):  # type: ignore[operator]
        raise WseError(f"{what} must be an integer >= {low}, got {shown_setting(value)}")


def wrap_add(value: Any, dtype) -> jax.Array | None:
    """A sliding extreme's `wrap_add` as a value of the field's `dtype` (None for 0: nothing
    added), so the result keeps x's dtype as every op does (hunt 77: 1.0 on an int32 field
    gave float32). Refused: what is not a finite real number, a non-zero one on a bool field
    (no coordinate to unroll), and on an integer field one it cannot hold exactly."""
    concrete = not isinstance(value, jax.core.Tracer) and hasattr(value, "item")
    v = value.item() if concrete and np.ndim(value) == 0 else value
    if not is_finite(v):
        raise WseError(f"sliding_extreme wrap_add must be a finite number, got {shown_setting(v)}")
    if not v:
        return None
    dt = np.dtype(dtype)
    if dt == np.bool_ or (dt.kind in "iu" and not (v == int(v) and _holds(dt, int(v)))):
        want = "0 (a bool field has no coordinate)" if dt == np.bool_ else f"an integer {dt} holds"
        raise WseError(f"sliding_extreme wrap_add on a {dt} field must be {want}, got {v!r}")
    return jnp.asarray(v, dtype)


def _holds(dt: np.dtype, v: int) -> bool:
    info = np.iinfo(dt)
    return int(info.min) <= v <= int(info.max)


def rotation(wafer: Wafer, axis: int, distance: int, boundary: str) -> tuple[int, bool]:
    """(PEs, reversed): how far a shift by `distance` along `axis` moves its values, and
    whether toward the opposite side. As asked with the zero boundary; periodic, the
    rotation it performs, d = distance mod the axis's n PEs, the shorter way round (n - d
    the other way when n - d < d, the asked way on a tie: np.roll(x, d) == np.roll(x, d - n),
    and `extend` reads the halo on either side), 0 for a whole number of turns: the
    identity, nothing moves and nothing is recorded (hunt 72: 10,001 on 4 PEs was priced as
    10,001 hops, a whole turn as 4, a 1-PE ring as one word-hop)."""
    if boundary != "periodic":
        return distance, False
    size = (wafer.rows, wafer.cols)[axis]
    d = distance % size
    return (size - d, True) if size - d < d else (d, False)


def check_reach(
    wafer: Wafer, op: Literal["shift", "multicast"], value: object, axis: int, boundary: str
) -> None:
    """A shift's or multicast's distance along `axis`: an integer >= 1; with the zero boundary
    at most the axis's PEs, for a periodic multicast one fewer, for a periodic shift any
    (a rotation; `wse_core.fabric`'s docstring says why)."""
    check_count(f"{op} distance", value, 1)
    size, along = (wafer.rows, "row") if axis == 0 else (wafer.cols, "column")
    along += "s" * (size != 1)  # hunt 81: "it has 1 columns"
    if boundary == "periodic" and op == "shift":
        return
    most = size if boundary == "zero" else size - 1
    if value > most:  # type: ignore[operator]
        raise PlacementError(
            f"{op} distance {shown_setting(value)} is past the grid: it has {size} {along}, so "
            f"at most {most} with the {boundary} boundary"
        )
