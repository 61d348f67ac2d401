"""The fabric: the only way data crosses PEs (with its `reduce` and `blocks` modules, the only
code that calls shard_map).

Every op takes and returns placed wafer fields (`(rows, cols, *per_pe)` global arrays, see
`wse_core.hw.wafer`) and may be called inside `jit`. Inside a device's block data moves as array
slices; across blocks as `lax.ppermute` of the block edges (halos) or `lax.psum`. Padding PEs
never leak into results: they read as zero (zero boundary), as the wrapped value (periodic
boundary) or are left out of reductions.

Directions: a shift moves data one PE (or `distance` PEs) toward `direction`; row 0 is the
north edge, column 0 the west edge. So with `direction="E"`, PE (r, c) receives the value of
PE (r, c - 1); with `"N"`, the value of PE (r + 1, c).

Distances are integers >= 1 (not bool) and stay on the grid (`blocks.check_reach`): a zero
boundary shift or multicast reaches at most the PEs along the axis (all of them already leave
zeros), a periodic multicast one fewer (the next is the PE's own value come round); a periodic
shift is a rotation by the distance modulo the axis, moved and priced the shorter way round
(`blocks.rotation`). Hunt 67: a shift of 10,000 on 4 x 4 built its halo block by block for
minutes; 2.5 failed in range().

Ops: `shift`, `multicast` (the next k PEs downstream all receive a PE's value),
`multicast_apply` (the multicast consumed where it lands: a function reads each block's values
and those of the k PEs upstream of it, no per-PE copies), `sliding_extreme` (the min or max
over a run of PEs upstream, by doubling shifts), `halo_apply` (the four nearest
neighbours' halos, consumed from one region per block: a stencil's exchange), `window_apply`
(the window multicast: every PE receives the values of the (2 k_rows + 1) x (2 k_cols + 1) PEs
around it and uses what it selects; the emulator hands a function each block's window region
instead of copying the window to every PE), `broadcast` (one PE's value to its whole row or
column), `reduce` (to one value) and `allreduce` (to every PE), over the whole grid or along
rows / columns, with `"sum"` or `"max"`; `allreduce_apply` (the sum along rows / columns of
partials a function computes already summed over each block's PEs); `local_apply` (PE-local
compute on each block, no traffic: for kernels XLA cannot split over devices by itself).

Each op records its traffic (words, word-hops including detours around dead PEs, busiest-link
words, latency hops) in `wafer.traffic` at trace time; `count(wafer, fn, *args)` traces a
function abstractly and returns what it would move (`wse_core.fabric.counting`, with its
rules under jit, loops, cond, vmap and grad; the arithmetic of each entry lives in
`wse_core.fabric.ledger`). The fabric is three modules, the only ones in the project that call
shard_map / ppermute / psum: this one (the neighbour ops, `local_apply`),
`wse_core.fabric.reduce` (`reduce`, `allreduce`, `allreduce_apply`, `broadcast`, re-exported
here) and `wse_core.fabric.blocks` (what runs on each device's block: halo exchange, masks,
the shard_map call itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax import lax

from wse_core.errors import PlacementError, WseError
from wse_core.fabric import blocks as blk
from wse_core.fabric import ledger as led
from wse_core.fabric.blocks import Boundary
from wse_core.fabric.counting import count
from wse_core.fabric.reduce import allreduce, allreduce_apply, broadcast, reduce
from wse_core.hw.wafer import Wafer

__all__ = [
    "Direction",
    "Boundary",
    "shift",
    "multicast",
    "multicast_apply",
    "halo_apply",
    "sliding_extreme",
    "window_apply",
    "broadcast",
    "reduce",
    "allreduce",
    "allreduce_apply",
    "local_apply",
    "count",
]

Direction = Literal["N", "S", "E", "W"]
_OPPOSITE = {"N": "S", "S": "N", "E": "W", "W": "E"}


# -- ops between neighbours ----------------------------------------------------------------
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
    blk.check_field(wafer, x, "multicast")
    _check_boundary(boundary)
    axis, sign = _direction(direction)
    blk.check_reach(wafer, "multicast", k, axis, boundary)
    block = wafer.block_shape[axis]

    def on_block(b):
        if sign > 0:  # receive from lower indices: halo before
            ext = blk.extend(b, wafer, axis, k, 0, boundary)
            outs = [blk.take(ext, axis, k - d, k - d + block) for d in range(1, k + 1)]
        else:
            ext = blk.extend(b, wafer, axis, 0, k, boundary)
            outs = [blk.take(ext, axis, d, d + block) for d in range(1, k + 1)]
        return jnp.stack(outs, axis=2)

    led.record_multicast(wafer, direction, led.words_per_pe(x), k)
    return blk.on_blocks(wafer, on_block, x)


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
    and "W" it comes last: region[i + j]), and returns a placed field's block (any other
    shape refused, `blocks.block_fn`; hunt 77: the region itself came back as a silently
    mis-assembled array). The ledger records the multicast; the emulator never copies the k
    values to every PE."""
    for f in (x, *fields):
        blk.check_field(wafer, f, "multicast_apply")
    _check_boundary(boundary)
    axis, sign = _direction(direction)
    blk.check_reach(wafer, "multicast", k, axis, boundary)

    def on_block(b, *blocks):
        region = blk.extend(b, wafer, axis, k if sign > 0 else 0, 0 if sign > 0 else k, boundary)
        return fn(region, *blocks)

    led.record_multicast(wafer, direction, led.words_per_pe(x), k)
    return blk.on_blocks(wafer, blk.block_fn(wafer, on_block, "multicast_apply"), x, *fields)


def shift(
    wafer: Wafer,
    x: jax.Array,
    direction: Direction,
    *,
    boundary: Boundary = "zero",
    distance: int = 1,
) -> jax.Array:
    """Move every PE's value `distance` PEs toward `direction` (same shape as x); periodic,
    the rotation by `distance` mod the axis, moved the shorter way round (`blocks.rotation`)."""
    blk.check_field(wafer, x, "shift")
    _check_boundary(boundary)
    axis, _ = _direction(direction)
    block = wafer.block_shape[axis]
    blk.check_reach(wafer, "shift", distance, axis, boundary)
    d, back = blk.rotation(wafer, axis, distance, boundary)
    way = _OPPOSITE[direction] if back else direction
    if d == 0:  # a whole number of turns (e.g. a 1-PE ring): the identity, nothing moves
        return x
    sign = led.DIRECTIONS[way][1]

    def on_block(b):
        if sign > 0:
            return blk.take(blk.extend(b, wafer, axis, d, 0, boundary), axis, 0, block)
        return blk.take(blk.extend(b, wafer, axis, 0, d, boundary), axis, d, d + block)

    led.record_shift(wafer, way, led.words_per_pe(x), d, boundary=boundary)
    return blk.on_blocks(wafer, on_block, x)


def _doubling(width: int) -> list[int]:
    """The shift distances of a sliding extreme over `width` PEs by doubling: 1, 2, 4, ...
    while the span doubles within the width, then the remainder (ceil(log2 width) shifts)."""
    out, span = [], 1
    while 2 * span <= width:
        out.append(span)
        span *= 2
    if span < width:
        out.append(width - span)
    return out


def sliding_extreme(
    wafer: Wafer,
    x: jax.Array,
    op: Literal["min", "max"],
    direction: Direction,
    width: int,
    *,
    start: int = 0,
    wrap_add: float = 0.0,
) -> jax.Array:
    """Every PE gets the min (max) of x over the `width` PEs `start`, `start` + 1, ... PEs
    upstream of it along `direction` (the PEs a `shift` toward `direction` by those
    distances would bring it), periodic; `start` may be negative (the run begins that many
    PEs downstream). `wrap_add`: the values are an unrolled periodic coordinate, so a value
    that comes round the end of the axis carries `wrap_add` times the turns it made (+1 past
    the far end, -1 before the near end; an atom's x seen across the box's boundary), added
    in x's dtype, which the result keeps (on an integer field an integer it holds; on bool,
    0: `blocks.wrap_add`).

    The PE program: the extreme over the run by doubling, ceil(log2 width) shifts (1, 2, 4,
    ... and the remainder, each combining its partial extreme with the one that many PEs
    upstream), then one shift by `start` (by -`start` the other way when negative); the
    ledger records those shifts. The emulator computes the same values in one pass: the
    block with a halo of the run's reach (one `extend`) and a `reduce_window`. Exact: min and
    max pick a value, and adding the same `wrap_add` before or after picking rounds alike.
    """
    blk.check_field(wafer, x, "sliding_extreme")
    add = blk.wrap_add(wrap_add, x.dtype)
    axis, sign = _direction(direction)
    size = (wafer.rows, wafer.cols)[axis]
    if op not in ("min", "max"):
        raise WseError(f"unknown extreme {op!r}; use 'min' or 'max'")
    blk.check_count("sliding_extreme width", width, 1)
    blk.check_count("sliding_extreme start", start, -size + 1)
    if not 0 < width <= size or not -size < start <= size - width:
        raise WseError(
            f"a sliding extreme needs 0 < width <= {size} and the run inside one turn of the "
            f"axis; got width {width}, start {start}"
        )
    up = -sign  # PE i's run is the cells i + up * (start + t), t in [0, width)
    near, far = sorted((up * start, up * (start + width - 1)))
    before, after = max(0, -near), max(0, far)
    block = wafer.block_shape[axis]
    combine, init = (
        (lax.min, blk.extreme(x.dtype, 1)) if op == "min" else (lax.max, blk.extreme(x.dtype, -1))
    )

    def on_block(b):
        region = blk.extend(b, wafer, axis, before, after, "periodic")
        if add is not None:
            g = blk.along(
                blk.global_index(wafer, axis, -before, region.shape[axis]), axis, region.ndim
            )
            turn = jnp.where(g >= size, 1, jnp.where(g < 0, -1, 0)).astype(region.dtype)
            region = jnp.where(turn != 0, region + add * turn, region)
        dims = [1] * region.ndim
        dims[axis] = width
        runs = lax.reduce_window(region, init, combine, dims, (1,) * region.ndim, "VALID")
        return blk.take(runs, axis, before + near, before + near + block)

    words = led.words_per_pe(x)
    for d in _doubling(width):
        led.record_shift(wafer, direction, words, d, boundary="periodic")
    if start:
        way = direction if start > 0 else _OPPOSITE[direction]
        led.record_shift(wafer, way, words, abs(start), boundary="periodic")
    return blk.on_blocks(wafer, on_block, x)


def halo_apply(
    wafer: Wafer,
    x: jax.Array,
    fn: Callable[..., Any],
    *fields: jax.Array,
    boundary: Boundary = "zero",
    ghost: int = 0,
) -> Any:
    """The four nearest-neighbour halos of x consumed where they land (a 5-point stencil's
    exchange): `fn(region, *field_blocks)` runs on each block with `region`, x on the block's
    PEs and one PE of margin on every side (`region[r + 1 + dr, c + 1 + dc]` is x of the PE dr
    rows south and dc columns east of the block's PE (r, c) for the cross |dr| + |dc| <= 1;
    zero or wrapped beyond the edge; the corner cells are not defined and fn must not read
    them), and returns placed fields' blocks. `ghost` cells are added at both ends of the
    first per-PE axis, zero or wrapped within the PE as `boundary` says (a Z column's own
    boundary, read beside the halo; nothing sent). The ledger records what four `shift`s of
    x record (N, S, W, E, one PE each; none along a periodic axis of one PE, whose ring
    wraps onto itself): no PE receives a diagonal value.

    Why an op of its own: four shifts are four pads or concatenates that XLA:CPU fuses into
    the consumer as per-element bounds selects, which do not vectorize; fn here reads slices
    of one materialized region (a 7-point fp16 SpMV at 48^3: 4.1 -> 0.36 ms, fp32 0.17 ->
    0.16 ms, one device).
    """
    for f in (x, *fields):
        blk.check_field(wafer, f, "halo_apply")
    _check_boundary(boundary)
    blk.check_count("halo_apply ghost", ghost, 0)
    if x.ndim < 3 and ghost:
        raise WseError(f"ghost cells need a per-PE axis, got ghost {ghost} on a field without one")

    def on_block(b, *blocks):
        if ghost:
            b = _ghosts(b, ghost, boundary)
        region = blk.extend(blk.extend(b, wafer, 0, 1, 1, boundary), wafer, 1, 1, 1, boundary)
        # Materialized: fn's slices then read plain memory (see the docstring).
        return fn(lax.optimization_barrier(region), *blocks)

    w = led.words_per_pe(x)
    for direction in ("N", "S", "W", "E"):
        if blk.rotation(wafer, led.DIRECTIONS[direction][0], 1, boundary)[0]:
            led.record_shift(wafer, direction, w, 1, boundary=boundary)
    return blk.on_blocks(wafer, blk.block_fn(wafer, on_block, "halo_apply"), x, *fields)


def _ghosts(b: jax.Array, g: int, boundary: Boundary) -> jax.Array:
    """b with g cells at both ends of axis 2: zero, or wrapped from the other end."""
    if boundary == "periodic":
        return jnp.concatenate([b[:, :, -g:], b, b[:, :, :g]], axis=2)
    return jnp.pad(b, ((0, 0), (0, 0), (g, g)) + ((0, 0),) * (b.ndim - 3))


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
    `(block rows, block cols, ...)` (any pytree of them; any other shape refused,
    `blocks.block_fn`: hunt 77, the region came back as a mis-assembled array).

    On the wafer this is the marching multicast of Santos et al.: every PE multicasts its
    value k_cols PEs east and west, then the (2 k_cols + 1)-wide row windows march k_rows
    PEs north and south; the ledger records exactly that (multicasts E and W, then k_rows
    shifts S and N of the row windows). The emulator never materializes the window per PE:
    each device extends its block by the margin (an exchange per side at block edges) and fn
    reads from it.
    """
    for f in (x, *kept, *fields):
        blk.check_field(wafer, f, "window")
    _check_boundary(boundary)
    blk.check_count("window half-width k_rows", k_rows, 0)
    blk.check_count("window half-width k_cols", k_cols, 0)
    if 2 * k_rows + 1 > wafer.rows or 2 * k_cols + 1 > wafer.cols:
        raise PlacementError(
            f"a +-{k_rows} x +-{k_cols} window exceeds the {wafer.rows} x {wafer.cols} grid"
        )

    def extend(b):
        region = blk.extend(b, wafer, 0, k_rows, k_rows, boundary) if k_rows else b
        return blk.extend(region, wafer, 1, k_cols, k_cols, boundary) if k_cols else region

    def on_block(*blocks):
        n = 1 + len(kept)
        return fn(*(extend(b) for b in blocks[:n]), *blocks[n:])

    w = led.words_per_pe(x)
    if k_cols:
        led.record_multicast(wafer, "E", w, k_cols)
        led.record_multicast(wafer, "W", w, k_cols)
    row = led.words_per_pe(x, values=2 * k_cols + 1)  # a row of the window: one message
    for _ in range(k_rows):
        led.record_shift(wafer, "S", row, 1, boundary=boundary)
        led.record_shift(wafer, "N", row, 1, boundary=boundary)
    return blk.on_blocks(wafer, blk.block_fn(wafer, on_block, "window_apply"), x, *kept, *fields)


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
    kernels XLA cannot partition itself (a custom call); plain jnp code needs none. An output
    that is not a block of `wafer.block_shape` PEs is refused (`blocks.block_fn`)."""
    for f in fields:
        blk.check_field(wafer, f, "local_apply")
    for r in row_data:
        if r.shape[0] != wafer.padded_shape[0]:
            raise PlacementError(
                f"fabric.local_apply needs row data of {wafer.padded_shape[0]} rows, got "
                f"shape {tuple(r.shape)}"
            )
    return blk.on_blocks(wafer, blk.block_fn(wafer, fn, "local_apply"), *fields, row_data=row_data)
