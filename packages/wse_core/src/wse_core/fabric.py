"""The fabric: the only way data crosses PEs, and the only module that calls shard_map.

Every op takes and returns placed wafer fields (`(rows, cols, *per_pe)` global arrays, see
`wse_core.wafer`) and may be called inside `jit`. Inside a device's block data moves as array
slices; across blocks as `lax.ppermute` of the block edges (halos) or `lax.psum`. Padding PEs
never leak into results: they read as zero (zero boundary), as the wrapped value (periodic
boundary) or are left out of reductions.

Directions: a shift moves data one PE (or `distance` PEs) toward `direction`; row 0 is the
north edge, column 0 the west edge. So with `direction="E"`, PE (r, c) receives the value of
PE (r, c - 1); with `"N"`, the value of PE (r + 1, c).

Ops: `shift`, `multicast` (the next k PEs downstream all receive a PE's value),
`multicast_apply` (the multicast consumed where it lands: a function reads each block's
values and those of the k PEs upstream of it, no per-PE copies), `window_apply` (the window
multicast: every PE receives the values of the (2 k_rows + 1) x (2 k_cols + 1) PEs around it
and uses what it selects; the emulator hands a function each block's window region instead
of copying the window to every PE), `broadcast` (one PE's value to its whole row or column),
`reduce` (to one value) and `allreduce` (to every PE), over the whole grid or along rows /
columns, with `"sum"` or `"max"`; `allreduce_apply` (the sum along rows / columns of
partials a function computes already summed over each block's PEs); `local_apply` (PE-local
compute on each block, no traffic: for kernels XLA cannot split over devices by itself).

Each op records its traffic (words, word-hops including detours around dead PEs, busiest-link
words, latency hops) in `wafer.traffic` at trace time; `count(wafer, fn, *args)` traces a
function abstractly and returns what it would move (the arithmetic of each entry lives in
`wse_core.fabric_ledger`). The module stays whole past ~500 lines on purpose: it is the one
place that moves data between PEs (the only shard_map / ppermute / psum in the project).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from wse_core import fabric_ledger as led
from wse_core.errors import PlacementError, WseError
from wse_core.traffic import Traffic
from wse_core.wafer import COL, ROW, Wafer

__all__ = [
    "Direction",
    "Boundary",
    "shift",
    "multicast",
    "multicast_apply",
    "window_apply",
    "broadcast",
    "reduce",
    "allreduce",
    "allreduce_apply",
    "local_apply",
    "count",
]

Direction = Literal["N", "S", "E", "W"]
Boundary = Literal["zero", "periodic"]
ReduceOp = Literal["sum", "max"]

_AXIS_NAMES = (ROW, COL)


# -- block-level building blocks (run inside shard_map) ------------------------------------
def _geometry(wafer: Wafer, axis: int) -> tuple[str, int, int, int]:
    """(mesh axis name, devices along it, block length, logical size) for a grid axis."""
    return (
        _AXIS_NAMES[axis],
        wafer.mesh_shape[axis],
        wafer.block_shape[axis],
        (wafer.rows, wafer.cols)[axis],
    )


def _take(x: jax.Array, axis: int, start: int, stop: int) -> jax.Array:
    return lax.slice_in_dim(x, start, stop, axis=axis)


def _neighbour_cells(x, wafer: Wafer, axis: int, width: int, side: int, periodic: bool):
    """The `width` cells just before (side=-1) or after (side=+1) this block along `axis`,
    fetched from the blocks `1..m` devices away with one ppermute each."""
    name, ndev, block, _ = _geometry(wafer, axis)
    pieces: list[jax.Array] = []
    s = 1
    while sum(p.shape[axis] for p in pieces) < width:
        w = min(block, width - (s - 1) * block)
        send = _take(x, axis, block - w, block) if side < 0 else _take(x, axis, 0, w)
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


def _global_index(wafer: Wafer, axis: int, offset: int, length: int) -> jax.Array:
    """Global positions along `axis` of `length` cells starting `offset` from this block."""
    name, _, block, _ = _geometry(wafer, axis)
    start = lax.axis_index(name) * block + offset
    return start + jnp.arange(length, dtype=jnp.int32)


def _along(mask: jax.Array, axis: int, ndim: int) -> jax.Array:
    """Reshape a 1-D mask so it broadcasts along `axis` of an `ndim` array."""
    shape = [1] * ndim
    shape[axis] = mask.shape[0]
    return mask.reshape(shape)


def _wrap_strip(x, wafer: Wafer, axis: int, first: int, width: int):
    """Cells [first, first + width) of the logical axis, on every device (one psum)."""
    name, _, block, _ = _geometry(wafer, axis)
    targets = np.arange(first, first + width)
    owner, local = targets // block, targets % block
    picked = jnp.take(x, jnp.asarray(local), axis=axis)
    mine = _along(jnp.asarray(owner) == lax.axis_index(name), axis, x.ndim)
    return lax.psum(jnp.where(mine, picked, jnp.zeros_like(picked)), name)


def _extend(x, wafer: Wafer, axis: int, before: int, after: int, boundary: Boundary):
    """This block with `before` / `after` halo cells along `axis`; cells outside the logical
    grid are zero or wrapped, padding inside the block is made safe as well."""
    _, _, block, size = _geometry(wafer, axis)
    if max(before, after) >= size and boundary == "periodic":
        raise PlacementError(f"a periodic halo of {max(before, after)} needs a grid over {size}")
    periodic = boundary == "periodic"
    padded = wafer.padded_shape[axis] != size
    parts = []
    if before:
        parts.append((-before, _neighbour_cells(x, wafer, axis, before, -1, periodic)))
    parts.append((0, x))
    if after:
        parts.append((block, _neighbour_cells(x, wafer, axis, after, +1, periodic)))
    strips = {}
    if periodic and padded:
        if before:
            strips["before"] = _wrap_strip(x, wafer, axis, size - before, before)
        if after:
            strips["after"] = _wrap_strip(x, wafer, axis, 0, after)
    out = []
    for offset, part in parts:
        if offset == 0 and not padded:
            out.append(part)  # the block itself is all logical cells
            continue
        g = _global_index(wafer, axis, offset, part.shape[axis])
        if periodic and padded:
            if "before" in strips:
                vals = jnp.take(strips["before"], jnp.clip(g + before, 0, before - 1), axis=axis)
                part = jnp.where(_along(g < 0, axis, x.ndim), vals, part)
            if "after" in strips:
                vals = jnp.take(strips["after"], jnp.clip(g - size, 0, after - 1), axis=axis)
                part = jnp.where(_along(g >= size, axis, x.ndim), vals, part)
        elif not periodic:
            valid = _along((g >= 0) & (g < size), axis, x.ndim)
            part = jnp.where(valid, part, jnp.zeros_like(part))
        out.append(part)
    return jnp.concatenate(out, axis=axis) if len(out) > 1 else out[0]


def _logical_mask(wafer: Wafer, ndim: int) -> jax.Array:
    """True on this block's logical (non-padding) PEs, broadcastable to an `ndim` block."""
    br, bc = wafer.block_shape
    rows = _global_index(wafer, 0, 0, br) < wafer.rows
    cols = _global_index(wafer, 1, 0, bc) < wafer.cols
    return (rows[:, None] & cols[None, :]).reshape((br, bc) + (1,) * (ndim - 2))


def _on_blocks(
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
    return jax.shard_map(
        fn,
        mesh=wafer.mesh,
        in_specs=(spec,) * len(fields) + (P(ROW),) * len(row_data),
        out_specs=out_specs,
        check_vma=check_vma,
    )(*fields, *row_data)


def _spanned(wafer: Wafer, axes: tuple[str, ...]) -> tuple[str, ...]:
    """The mesh axes among `axes` that span more than one device: a collective over the
    others has nothing to combine. XLA:CPU runs even a one-device all-reduce through its
    collective machinery, ~35 us a call when the process has several devices (a 256-atom MD
    step with two reductions: 0.26 -> 0.33 ms), so the ops skip them."""
    return tuple(a for a in axes if wafer.mesh.shape[a] > 1)


def _check_field(wafer: Wafer, x: jax.Array, op: str) -> None:
    if x.ndim < 2 or tuple(x.shape[:2]) != wafer.padded_shape:
        raise PlacementError(
            f"fabric.{op} needs a placed field of shape {wafer.padded_shape} + per-PE dims "
            f"(use wafer.place); got {tuple(x.shape)}"
        )


# -- public ops ----------------------------------------------------------------------------
def _direction(direction: str) -> tuple[int, int]:
    try:
        return led.DIRECTIONS[direction]
    except KeyError:
        raise WseError(f"unknown direction {direction!r}; use one of N, S, E, W") from None


def _check_boundary(boundary: str) -> None:
    if boundary not in ("zero", "periodic"):
        raise WseError(f"unknown boundary {boundary!r}; use 'zero' or 'periodic'")


def multicast(
    wafer: Wafer, x: jax.Array, direction: Direction, k: int, *, boundary: Boundary = "zero"
) -> jax.Array:
    """Each PE's value travels to the next `k` PEs toward `direction`.

    Returns `(rows, cols, k, *per_pe)`: entry j at a PE is the value of the PE j + 1 steps
    upstream (for "E", PE (r, c) gets x[r, c - 1 - j]). Zero or wrapped beyond the edge.
    """
    _check_field(wafer, x, "multicast")
    _check_boundary(boundary)
    if k <= 0:
        raise WseError(f"multicast distance must be positive, got {k}")
    axis, sign = _direction(direction)
    block = wafer.block_shape[axis]

    def on_block(b):
        if sign > 0:  # receive from lower indices: halo before
            ext = _extend(b, wafer, axis, k, 0, boundary)
            outs = [_take(ext, axis, k - d, k - d + block) for d in range(1, k + 1)]
        else:
            ext = _extend(b, wafer, axis, 0, k, boundary)
            outs = [_take(ext, axis, d, d + block) for d in range(1, k + 1)]
        return jnp.stack(outs, axis=2)

    led.record_multicast(wafer, direction, led.words_per_pe(x), k)
    return _on_blocks(wafer, on_block, x)


def multicast_apply(
    wafer: Wafer,
    x: jax.Array,
    direction: Direction,
    k: int,
    fn: Callable[..., jax.Array],
    *fields: jax.Array,
    boundary: Boundary = "zero",
) -> jax.Array:
    """`multicast(wafer, x, direction, k)` consumed where it lands: `fn(region,
    *field_blocks)` runs on each block with `region`, x on the block's PEs and on the k PEs
    upstream of it along the direction (for "S" and "E" the margin comes first: region[k + i
    - j] along the axis is the value of the PE j steps upstream of the block's PE i; for "N"
    and "W" it comes last: region[i + j]), and returns a placed field's block. The ledger
    records the multicast; the emulator never copies the k values to every PE."""
    for f in (x, *fields):
        _check_field(wafer, f, "multicast_apply")
    _check_boundary(boundary)
    if k <= 0:
        raise WseError(f"multicast distance must be positive, got {k}")
    axis, sign = _direction(direction)

    def on_block(b, *blocks):
        region = _extend(b, wafer, axis, k if sign > 0 else 0, 0 if sign > 0 else k, boundary)
        return fn(region, *blocks)

    led.record_multicast(wafer, direction, led.words_per_pe(x), k)
    return _on_blocks(wafer, on_block, x, *fields)


def shift(
    wafer: Wafer,
    x: jax.Array,
    direction: Direction,
    *,
    boundary: Boundary = "zero",
    distance: int = 1,
) -> jax.Array:
    """Move every PE's value `distance` PEs toward `direction` (same shape as x)."""
    _check_field(wafer, x, "shift")
    _check_boundary(boundary)
    if distance <= 0:
        raise WseError(f"shift distance must be positive, got {distance}")
    axis, sign = _direction(direction)
    block = wafer.block_shape[axis]
    size = (wafer.rows, wafer.cols)[axis]
    # A periodic shift by a whole number of turns is the identity (e.g. a 1-PE ring).
    d = distance % size if boundary == "periodic" else distance

    def on_block(b):
        if d == 0:
            return b
        if sign > 0:
            return _take(_extend(b, wafer, axis, d, 0, boundary), axis, 0, block)
        return _take(_extend(b, wafer, axis, 0, d, boundary), axis, d, d + block)

    led.record_shift(wafer, direction, led.words_per_pe(x), distance)
    return _on_blocks(wafer, on_block, x)


def window_apply(
    wafer: Wafer,
    x: jax.Array,
    k_rows: int,
    k_cols: int,
    fn: Callable[..., Any],
    *fields: jax.Array,
    kept: tuple[jax.Array, ...] = (),
    boundary: Boundary = "periodic",
) -> Any:
    """The window multicast of x, consumed where it lands: `fn(region, *kept_regions,
    *field_blocks)` runs on each block of PEs with `region`, the values of x on the block's
    PEs and a margin of k_rows x k_cols PEs around it (`region[r + k_rows + dr, c + k_cols +
    dc]` is x of the PE dr rows south and dc columns east of the block's PE (r, c); zero or
    wrapped beyond the edge), the same regions of the fields in `kept` (windows the PEs
    already received in an earlier multicast and kept: not sent again, not recorded), and
    the block's part of each placed field in `fields`; fn returns placed fields' blocks
    `(block rows, block cols, ...)` (any pytree of them).

    On the wafer this is the marching multicast of Santos et al.: every PE multicasts its
    value k_cols PEs east and west, then the (2 k_cols + 1)-wide row windows march k_rows
    PEs north and south; the ledger records exactly that (multicasts E and W, then k_rows
    shifts S and N of the row windows). The emulator never materializes the window per PE:
    each device extends its block by the margin (an exchange per side at block edges) and fn
    reads from it.
    """
    for f in (x, *kept, *fields):
        _check_field(wafer, f, "window")
    _check_boundary(boundary)
    if k_rows < 0 or k_cols < 0:
        raise WseError(f"window half-widths must be >= 0, got {k_rows} x {k_cols}")
    if 2 * k_rows + 1 > wafer.rows or 2 * k_cols + 1 > wafer.cols:
        raise PlacementError(
            f"a +-{k_rows} x +-{k_cols} window exceeds the {wafer.rows} x {wafer.cols} grid"
        )

    def extend(b):
        region = _extend(b, wafer, 0, k_rows, k_rows, boundary) if k_rows else b
        return _extend(region, wafer, 1, k_cols, k_cols, boundary) if k_cols else region

    def on_block(*blocks):
        n = 1 + len(kept)
        return fn(*(extend(b) for b in blocks[:n]), *blocks[n:])

    w = led.words_per_pe(x)
    if k_cols:
        led.record_multicast(wafer, "E", w, k_cols)
        led.record_multicast(wafer, "W", w, k_cols)
    for _ in range(k_rows):
        led.record_shift(wafer, "S", w * (2 * k_cols + 1), 1)
        led.record_shift(wafer, "N", w * (2 * k_cols + 1), 1)
    return _on_blocks(wafer, on_block, x, *kept, *fields)


def _combine(op: ReduceOp):
    if op == "sum":
        return jnp.sum, lax.psum, 0
    if op == "max":
        return jnp.max, lax.pmax, -jnp.inf
    raise WseError(f"unknown reduction {op!r}; use 'sum' or 'max'")


def _fill(dtype, fill):
    if fill == 0:
        return jnp.zeros((), dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.array(fill, dtype)
    return jnp.array(jnp.iinfo(dtype).min, dtype)


def _axes_for(axis: Literal["row", "col"] | None) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Grid axes reduced and mesh axes combined: 'row' reduces along a row (over columns)."""
    if axis is None:
        return (0, 1), (ROW, COL)
    if axis == "row":
        return (1,), (COL,)
    if axis == "col":
        return (0,), (ROW,)
    raise WseError(f"unknown reduction axis {axis!r}; use 'row', 'col' or None for the grid")


def allreduce(
    wafer: Wafer,
    x: jax.Array,
    op: ReduceOp = "sum",
    *,
    axis: Literal["row", "col"] | None = None,
) -> jax.Array:
    """Reduce over the grid (or along each row / column) and give every PE the result.

    Same shape as x: every PE holds the reduction of its group (padding left out).
    """
    _check_field(wafer, x, "allreduce")
    local, collective, fill = _combine(op)
    grid_axes, mesh_axes = _axes_for(axis)

    spanned = _spanned(wafer, mesh_axes)

    def on_block(b):
        masked = jnp.where(_logical_mask(wafer, b.ndim), b, _fill(b.dtype, fill))
        part = local(masked, axis=grid_axes, keepdims=True)
        return jnp.broadcast_to(collective(part, spanned) if spanned else part, b.shape)

    led.record_reduce(wafer, x, grid_axes, f"allreduce_{op}", both=True)
    return _on_blocks(wafer, on_block, x)


def allreduce_apply(
    wafer: Wafer, fn: Callable[..., jax.Array], *fields: jax.Array, axis: Literal["row", "col"]
) -> jax.Array:
    """`allreduce(wafer, partials, "sum", axis=axis)` of per-PE partials that fn computes
    already summed over each block's PEs: `fn(*field_blocks)` returns the block's sums along
    each row, `(block rows, *per_pe)` (axis="row"; for "col", `(block cols, *per_pe)`); the
    blocks' sums are added across devices and every PE gets its row's (column's) total, as a
    placed field `(rows, cols, *per_pe)`. fn must give padding PEs no weight (`wafer.place`
    fills them with zeros). The ledger records the allreduce of `per_pe`-shaped partials."""
    for f in fields:
        _check_field(wafer, f, "allreduce_apply")
    if axis not in ("row", "col"):
        raise WseError(f"unknown reduction axis {axis!r}; use 'row' or 'col'")
    grid_axes, mesh_axes = _axes_for(axis)
    spanned, red = _spanned(wafer, mesh_axes), grid_axes[0]

    def on_block(*blocks):
        part = jnp.expand_dims(fn(*blocks), red)
        part = lax.psum(part, spanned) if spanned else part
        shape = list(part.shape)
        shape[red] = wafer.block_shape[red]
        return jnp.broadcast_to(part, shape)

    out = _on_blocks(wafer, on_block, *fields)
    led.record_reduce(wafer, out, grid_axes, "allreduce_sum", both=True)
    return out


def reduce(wafer: Wafer, x: jax.Array, op: ReduceOp = "sum") -> jax.Array:
    """Reduce over the whole logical grid to one per-PE-shaped value (replicated array)."""
    _check_field(wafer, x, "reduce")
    local, collective, fill = _combine(op)

    spanned = _spanned(wafer, (ROW, COL))

    def on_block(b):
        masked = jnp.where(_logical_mask(wafer, b.ndim), b, _fill(b.dtype, fill))
        part = local(masked, axis=(0, 1))
        return collective(part, spanned) if spanned else part

    led.record_reduce(wafer, x, (0, 1), f"reduce_{op}", both=False)
    # over a one-device mesh axis the value is replicated without a collective to prove it
    return _on_blocks(wafer, on_block, x, out_spec=P(), check_vma=spanned == (ROW, COL))


def broadcast(wafer: Wafer, x: jax.Array, axis: Literal["row", "col"], source: int) -> jax.Array:
    """Give every PE of each row (axis="row") the value of that row's PE in column `source`
    (or, axis="col", of each column's PE in row `source`)."""
    _check_field(wafer, x, "broadcast")
    grid_axis = {"row": 1, "col": 0}.get(axis)
    if grid_axis is None:
        raise WseError(f"unknown broadcast axis {axis!r}; use 'row' or 'col'")
    size = (wafer.rows, wafer.cols)[grid_axis]
    if not 0 <= source < size:
        raise PlacementError(f"broadcast source {source} is outside 0..{size - 1}")
    name, _, block, _ = _geometry(wafer, grid_axis)

    def on_block(b):
        local = jnp.take(b, jnp.asarray([source % block]), axis=grid_axis)
        if not _spanned(wafer, (name,)):  # the source is in this block
            return jnp.broadcast_to(local, b.shape)
        mine = lax.axis_index(name) == source // block
        return jnp.broadcast_to(
            lax.psum(jnp.where(mine, local, jnp.zeros_like(local)), name), b.shape
        )

    w = led.words_per_pe(x)
    lines = (wafer.cols, wafer.rows)[grid_axis]
    mean_h, max_h = led.hops(wafer, grid_axis)
    led.record(
        wafer,
        f"broadcast_{axis}",
        lines * w,
        lines * w * (size - 1) * mean_h,
        w,
        (size - 1) * max_h,
        {"E": w, "W": w} if grid_axis == 1 else {"N": w, "S": w},  # out from the source
    )
    return _on_blocks(wafer, on_block, x)


def local_apply(
    wafer: Wafer,
    fn: Callable[..., jax.Array],
    *fields: jax.Array,
    row_data: tuple[jax.Array, ...] = (),
) -> jax.Array:
    """`fn(*field_blocks, *row_blocks)` on each device's block, returning a placed field's
    block: compute inside the PEs, nothing crosses a PE and nothing is recorded. `row_data`:
    arrays `(padded rows, ...)` that every PE of a row holds alike (what `broadcast` along
    rows leaves), split over the mesh's row axis and whole on each device column. For
    kernels XLA cannot partition itself (a custom call); plain jnp code needs none."""
    for f in fields:
        _check_field(wafer, f, "local_apply")
    for r in row_data:
        if r.shape[0] != wafer.padded_shape[0]:
            raise PlacementError(
                f"fabric.local_apply needs row data of {wafer.padded_shape[0]} rows, got "
                f"shape {tuple(r.shape)}"
            )
    return _on_blocks(wafer, fn, *fields, row_data=row_data)


def count(wafer: Wafer, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Traffic:
    """The traffic `fn(*args, **kwargs)` records, found by tracing it abstractly (no run).

    A fresh function object is traced every call: `jax.eval_shape` caches traces by
    function, and a cached trace would run no fabric op and so record nothing."""

    def fresh(*a: Any) -> Any:
        return fn(*a, **kwargs)

    with wafer.traffic.scope() as entries:
        jax.eval_shape(fresh, *args)
    total = Traffic()
    for e in entries:
        total = total + e
    return total
