"""The build kernel of the per-PE neighbour lists (`wse_hpc.md.neighbours`), and the static
structure every list kernel closes over.

Contract: `list_spec(wafer, pot, plan, chunk) -> ListSpec` checks the plan (`plan.caps`:
one capacity per row offset -k_rows .. k_rows, then the total M; `plan.skin_A` >= 0) and
derives, on the host, what the kernels need: the row offsets in march order
(`march_order`) and their capacities, the forces' window depth, the active PEs per block.
`select(spec, region, pos, held, pe_row, pe_col)` is the build on one block of
`fabric.window_apply` over the window of (position, species): per row offset, each PE's
window columns within cutoff + skin (a bit mask per slot, tested in place), packed into M
candidates; it returns the candidates' places in the forces' region, their species, the
count, an overflow flag per PE and the order the block's lists are stored in.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from wse_core.errors import WseError
from wse_core.host.pe_ffi import register
from wse_core.hw.wafer import Wafer

from wse_hpc.md import pe_compile, pe_pairs
from wse_hpc.md.eam import EamPlan
from wse_hpc.md.pair_words import PAIR_MASK_COLS
from wse_hpc.md.pe_pairs import PairKernel
from wse_hpc.md.potentials import EamPotential
from wse_hpc.md.splines import Splines, splines_for

__all__ = [
    "ListSpec",
    "list_spec",
    "march_order",
    "min_image",
    "pe_kernels",
    "pe_kernels_for",
    "pe_loops",
    "select",
    "select_half",
]


class ListSpec(NamedTuple):
    """What the list kernels close over: static, derived once per plan by `list_spec`."""

    wafer: Wafer
    pot: EamPotential
    plan: EamPlan
    spl: Splines  # the potential's splines in the plan's dtype
    box: jax.Array  # (3,) A, the plan's dtype
    cutoff: float  # A
    skin: float  # A
    reach2: float  # (cutoff + skin)^2, A^2
    offsets: np.ndarray  # (S,) int32: the window's row offsets in march order
    seg_caps: np.ndarray  # (S,) the candidate capacity of each, in march order
    total: int  # M: candidates per PE
    depth: int  # the farthest row offset with a capacity (the forces' window rows)
    width: int  # window columns, 2 k_cols + 1
    cap_max: int  # the largest capacity of a row offset
    col_dtype: Any  # a build's window columns, compact
    active: int  # list rows evaluated per block (its atom-holding PEs first)
    keep_pairs: bool  # phase 1 keeps the pair geometry and density slopes for phase 2
    pe: PairKernel | None  # the PEs' own pair loops (`pe_pairs`, a CPU), else XLA's
    chunk: int  # PEs whose pairs are evaluated together


def march_order(k_rows: int) -> list[int]:
    """Row offsets in the order the march delivers them: own row, then -1, +1, -2, +2, ..."""
    out = [0]
    for d in range(1, k_rows + 1):
        out += [-d, d]
    return out


def list_spec(wafer: Wafer, pot: EamPotential, plan: EamPlan, chunk: int) -> ListSpec:
    """The static structure of `plan`'s lists (`chunk`: PEs whose pairs are evaluated
    together); raises `WseError` for a plan without skin or capacities, or without any
    candidate."""
    kr, kc = plan.k_rows, plan.k_cols
    if len(plan.caps) != 2 * kr + 2 or not plan.skin_A >= 0:
        raise WseError("a neighbour-list plan needs skin_A >= 0 and 2 k_rows + 2 capacities")
    dtype = jnp.dtype(plan.dtype)
    spl = splines_for(pot, dtype)
    cutoff, skin = pot.cutoff_A, plan.skin_A
    reach2 = (cutoff + skin) ** 2
    box = jnp.asarray(np.array(plan.box_A), dtype)
    caps, total = plan.caps[:-1], plan.caps[-1]
    offsets = np.asarray(march_order(kr), np.int32)
    seg_caps = np.asarray([caps[off + kr] for off in offsets])  # per offset, march order
    depth = max((abs(off) for off, c in zip(offsets, seg_caps, strict=True) if c), default=0)
    width, cap_max = 2 * kc + 1, max(caps)
    col_dtype = jnp.uint8 if width <= 256 else jnp.int32  # a build's window columns, compact
    if total == 0:
        raise WseError("no atom has a neighbour within the cutoff + skin")
    block_pes = wafer.block_shape[0] * wafer.block_shape[1]
    active = plan.active if 0 < plan.active < block_pes else block_pes
    # phase 1 keeps the pair geometry and the densities' slopes per candidate for phase 2
    # when a block's PEs are one chunk (in cache); over several chunks writing and reading
    # them back cost more on a CPU than computing them again (slopes alone: +20% at 32k
    # atoms). The PE always keeps them (the prediction prices the geometry once)
    keep_pairs = active <= chunk
    pe = None
    if pe_loops(wafer, dtype):  # the PEs' own loops
        pe = pe_pairs.pair_kernel(spl, box, cutoff, pot, wafer.mesh.devices.size)
        keep_pairs, chunk = False, block_pes  # the kernels walk the lists once per phase
    return ListSpec(
        wafer=wafer,
        pot=pot,
        plan=plan,
        spl=spl,
        box=box,
        cutoff=cutoff,
        skin=skin,
        reach2=reach2,
        offsets=offsets,
        seg_caps=seg_caps,
        total=total,
        depth=depth,
        width=width,
        cap_max=cap_max,
        col_dtype=col_dtype,
        active=active,
        keep_pairs=keep_pairs,
        pe=pe,
        chunk=chunk,
    )


def min_image(d, b):  # b: the box, shaped to broadcast along d's x, y, z axis
    return d - b * jnp.round(d * (1.0 / b))


def _ctz(x: jax.Array) -> jax.Array:
    """Trailing zero bits of uint32 x != 0: the exponent of its lowest set bit as a float32
    (exact for powers of two; the sign bit of bit 31 is masked off)."""
    low = (x & (~x + jnp.uint32(1))).astype(jnp.int32)  # bit 31 wraps to -2**31
    bits = jax.lax.bitcast_convert_type(low.astype(jnp.float32), jnp.int32)
    return jnp.where(x == 0, 32, ((bits >> 23) & 0xFF) - 127)


def _first_set_bits(words: list[jax.Array], cap: int, width: int):
    """The positions of the first `cap` set bits (lowest first) of each PE's bit mask, held
    in uint32 words (bit j of the mask is bit j % 32 of words[j // 32]): (cap, R, C) int32,
    at most width - 1 where fewer are set, and the count of set bits (R, C)."""
    count = sum(jax.lax.population_count(w).astype(jnp.int32) for w in words)

    def next_bit(words, _):
        col = 32 * (len(words) - 1) + _ctz(words[-1])
        for i in reversed(range(len(words) - 1)):
            col = jnp.where(words[i] != 0, 32 * i + _ctz(words[i]), col)
        cleared, earlier_empty = [], jnp.bool_(True)
        for w in words:  # clear the bit found, in the first non-empty word
            cleared.append(jnp.where(earlier_empty & (w != 0), w & (w - jnp.uint32(1)), w))
            earlier_empty = earlier_empty & (w == 0)
        return tuple(cleared), jnp.minimum(col, width - 1)

    return jax.lax.scan(next_bit, tuple(words), None, length=cap)[1], count


def _pack(counts: jax.Array, caps: np.ndarray, total: int):
    """Where the packed candidates (R, C, total) lie when segment s holds the first
    min(counts[..., s], caps[s]) of them: candidate t is entry t - start of the segment
    whose cumulative count first exceeds t. Returns (segment, entry, count kept)."""
    kept = jnp.minimum(counts, jnp.asarray(caps, jnp.int32))
    ends = jnp.cumsum(kept, axis=-1)  # (R, C, S)
    t = jnp.arange(total, dtype=jnp.int32)
    # seg = #{s : ends_s <= t}, a binary search of each PE's ends (a CPU concern: as a sum of
    # S comparisons XLA fused it into each of the three gathers that read seg, and a build
    # of 4,000 atoms took 65-77 ms, now 32-40; 32,000 atoms 2.0-2.1 s, now 1.35-1.4)
    flat = ends.reshape(-1, ends.shape[-1])
    find = jax.vmap(lambda e: jnp.searchsorted(e, t, side="right", method="scan"))
    seg = find(flat).astype(jnp.int32).reshape(ends.shape[:-1] + (total,))
    seg = jnp.minimum(seg, len(caps) - 1)
    start = jnp.take_along_axis(ends - kept, seg, axis=-1)
    return seg, jnp.clip(t - start, 0, None), ends[..., -1]


def _offset_columns(spec: ListSpec, planes, mine, held, off):
    """One row offset `off` of a build on a block: each PE's first `cap_max` window columns
    within cutoff + skin ((cap_max, br, bc), `col_dtype`) and their count (br, bc)."""
    kr, kc, width, box = spec.plan.k_rows, spec.plan.k_cols, spec.width, spec.box
    br, bc = held.shape
    rows = [jax.lax.dynamic_slice_in_dim(p, kr + off, br, axis=0) for p in planes]
    words = [jnp.zeros(held.shape, jnp.uint32) for _ in range(-(-width // 32))]
    for j in range(width):  # the PEs j - kc columns east
        r2 = 0.0
        for axis in range(3):
            d = rows[axis][:, j : j + bc] - mine[axis]
            d = min_image(d, box[axis])
            r2 = r2 + d * d
        ok = held & (rows[3][:, j : j + bc] >= 0) & (r2 < spec.reach2)
        if j == kc:
            ok = ok & (off != 0)  # not itself
        words[j // 32] = words[j // 32] | (ok.astype(jnp.uint32) << (j % 32))
    col, count = _first_set_bits(words, spec.cap_max, width)
    return col.astype(spec.col_dtype), count


def _build_target(name: str) -> str:
    """A numba build (`pe_build_numba`: "build", or "build_pairs" testing each pair of PEs
    once) as an FFI target, compiled (or loaded) and registered on first use; only named
    inside `pe_compile.deferred()` (the shell registers it before XLA compiles)."""
    return f"wse_md_{name}" if pe_compile.deferring() else _build_registered(name)


@functools.cache
def _build_registered(name: str) -> str:
    from wse_hpc.md import pe_build_numba

    pe_compile.wait(f"wse_md_{name}")  # a helper compiling it into numba's cache, if any
    return register(f"wse_md_{name}", pe_build_numba.handler(name))


def pe_loops(wafer: Wafer, dtype) -> bool:
    """Whether lists on `wafer` in `dtype` run the PEs' own loops (numba, float32, a CPU)."""
    cpu = all(d.platform == "cpu" for d in wafer.mesh.devices.flat)
    return pe_pairs.available() and jnp.dtype(dtype) == jnp.float32 and cpu


def pe_kernels(spec: ListSpec) -> tuple[str, ...]:
    """The FFI targets the lists' kernels call with `spec` (none without the PEs' own
    loops), the pair kernels first: `_select_pe`'s build and `neighbours`' phases."""
    return pe_kernels_for(spec.wafer, spec.plan.dtype, spec.plan) if spec.pe is not None else ()


def pe_kernels_for(wafer: Wafer, dtype, plan: EamPlan | None = None) -> tuple[str, ...]:
    """`pe_kernels` of the lists of `plan` on `wafer` in `dtype`, known before the lists are
    made (the MD shell starts their compiles early, `pe_compile`): none without the PEs' own
    loops or without lists (a plan without capacities: the full-window kernel). Without
    `plan`, the pair kernels only: they need only the device count (one device: each pair
    once, as `pe_pairs.pair_kernel`) and the dtype; the build needs the window's width."""
    if not pe_loops(wafer, dtype) or (plan is not None and not plan.caps):
        return ()
    half = wafer.mesh.devices.size == 1
    names = ["force_half", "density_half"] if half else ["force", "density"]
    if plan is not None:
        narrow = 2 * plan.k_cols + 1 <= PAIR_MASK_COLS
        names.append("build_pairs" if half and narrow else "build")
    return tuple(f"wse_md_{name}" for name in names)


def _select_pe(spec: ListSpec, region, pos, held, ids=None):
    """`select`'s lists by the PEs' own loop (`pe_build_numba`): index, species, count and
    overflow per PE, slot for slot XLA's; with `ids` (the region's and the block's block
    indices) only each pair's candidate of the larger block index is stored."""
    br, bc = held.shape
    m = spec.total
    out = (
        jax.ShapeDtypeStruct((br, bc, m), jnp.int32),
        jax.ShapeDtypeStruct((br, bc, m), jnp.int32),
        jax.ShapeDtypeStruct((br, bc), jnp.int32),
        jax.ShapeDtypeStruct((br, bc), jnp.bool_),
    )
    cf = jnp.concatenate([spec.box, jnp.asarray([spec.reach2], jnp.float32)])
    plan = spec.plan
    ci_half = ids is not None
    ci = jnp.asarray([plan.k_rows, plan.k_cols, spec.depth, m, ci_half], jnp.int32)
    if ids is None:
        ids = (jnp.zeros((1, 1), jnp.int32), jnp.zeros((1, 1), jnp.int32))
    caps = jnp.asarray(spec.seg_caps, jnp.int32)
    # one device, each pair once: each pair of PEs tested once (`pe_build_numba`, the same lists)
    pairs = ci_half and spec.width <= PAIR_MASK_COLS
    call = jax.ffi.ffi_call(
        _build_target("build_pairs" if pairs else "build"), out, vmap_method="sequential"
    )
    offsets = jnp.asarray(spec.offsets)
    planes = [region[..., i].astype(jnp.float32) for i in range(4)]
    return call(*planes, held, pos, *ids, offsets, caps, cf, ci)


def select(spec: ListSpec, region, pos, held, pe_row, pe_col):
    """Per block, row offset by row offset (march order): each PE's first `cap_max`
    window columns within cutoff + skin, their species and their count; with
    `plan.active` in the block's order (atom-holding PEs first) and that order. With the
    PEs' own loops (`spec.pe`) the numba build does the same."""
    if spec.pe is not None:
        lists = _select_pe(spec, region, pos, held)
    else:
        lists = _select_xla(spec, region, pos, held)
    return _stored(spec, lists, held, pe_row, pe_col)


def select_half(spec: ListSpec, region, ids_region, pos, held, pe_row, pe_col, ids):
    """`select` on one device for `pe_pairs`' each-pair-once kernels (`spec.pe.half`): each
    PE stores only its candidates of a larger block index (`ids`; `ids_region` the window
    region's), the ones it evaluates; capacities and overflow are the full lists'."""
    lists = _select_pe(spec, region, pos, held, (ids_region, ids))
    return _stored(spec, lists, held, pe_row, pe_col)


def _stored(spec: ListSpec, lists, held, pe_row, pe_col):
    """The lists with `plan.active` in the block's order (atom-holding PEs first), and it."""
    index, species, count, over = lists
    active, wafer = spec.active, spec.wafer
    br, bc = held.shape
    n = br * bc
    if active >= n:
        return index, species, count, over, jnp.arange(n, dtype=jnp.int32).reshape(br, bc)
    # logical PEs that hold an atom first (padding PEs hold zeros, species 0)
    live = held & (pe_row < wafer.rows) & (pe_col < wafer.cols)
    order = jnp.argsort(~live.reshape(-1), stable=True).astype(jnp.int32)

    def stored(a):
        return jnp.take(a.reshape((n,) + a.shape[2:]), order, axis=0).reshape(a.shape)

    over = over | (jnp.sum(live) > active)  # more atoms than planned: never dropped
    return stored(index), stored(species), stored(count), over, order.reshape(br, bc)


def _select_xla(spec: ListSpec, region, pos, held):
    """`select`'s lists as array operations: index, species, count and overflow per PE."""
    kr, offsets, seg_caps, cap_max = spec.plan.k_rows, spec.offsets, spec.seg_caps, spec.cap_max
    total, depth = spec.total, spec.depth
    br, bc = held.shape
    planes = [region[..., i] for i in range(4)]  # x, y, z, species of the region
    mine = [pos[..., i] for i in range(3)]
    pitch = region.shape[1]

    def one_offset(_, off):
        return None, _offset_columns(spec, planes, mine, held, off)

    _, (cols, counts) = jax.lax.scan(one_offset, None, jnp.asarray(offsets))
    counts = jnp.moveaxis(counts, 0, 2)  # (br, bc, S)
    seg, entry, count = _pack(counts, seg_caps, total)
    # the picked entries of the scan's (S, cap_max, br, bc) column outputs
    pe_r, pe_c = jnp.arange(br)[:, None, None], jnp.arange(bc)[:, None]
    # each PE's (S, cap_max) columns together, so its picks share cache lines
    cols = jnp.transpose(cols, (2, 3, 0, 1))
    at = ((pe_r * bc + pe_c) * len(offsets) + seg) * cap_max + jnp.minimum(entry, cap_max - 1)
    col = jnp.take(cols, at).astype(jnp.int32)
    row = pe_r + jnp.take(jnp.asarray(offsets), seg)  # in rows of the build's region - kr
    species = jnp.take(planes[3].reshape(-1), (row + kr) * pitch + pe_c + col)
    # in the forces' region (rows -depth .. depth, the same columns)
    # (padding entries may name a row offset beyond depth: clipped into the region)
    index = jnp.clip(row + depth, 0, br + 2 * depth - 1) * pitch + pe_c + col
    over = jnp.any(counts > jnp.asarray(seg_caps, jnp.int32), axis=-1) | (count > total)
    return index, species, count, over
