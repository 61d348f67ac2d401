"""The numba side of a neighbour-list build on a CPU (`neighbours.build.select` with the
PEs' own loops): what each PE does as the window's slabs pass, one kernel call per device
block, and its XLA FFI handlers (`handler("build")`, `handler("build_pairs")`: each compiled
or loaded from numba's cache only when a CPU build first needs it; the call frame is read as
`wse_core.host.numba_ffi` says).

The build is XLA's (`select`) slot for slot: for each row offset in march order, the
window columns west to east whose atom lies within cutoff + skin (minimum image, float32,
not the PE itself), the first `caps[s]` of them kept, packed in that order into the PE's M
candidates. XLA tests every slot of the block as one array operation per slot and packs with
bit masks and a scan; this walks each PE's window once, a row offset's slots in one
branch-free pass (4,000 Cu atoms, 5.1 M slots: 11.4 ms; with the region as (x, y, z,
species) records and one branchy pass, 22.6 ms).

On one device (`half`) with a window at most `pair_words.PAIR_MASK_COLS` wide, `build_pairs`
gives the same lists testing each pair of PEs once: the minimum-image r^2 of (i, j) and of
(j, i) are the same float32 bits (the displacements are exact negatives of each other and rint is
symmetric), so each PE tests the row offsets 0 .. k_rows of its window (its own row only
east of itself) and marks every hit in two bit masks, its own slot and the mirrored slot
(-offset, the column reflected) of the partner, found by its block index; a second pass
walks each PE's masks in march order, lowest column first, with the capacities of `build`
(4,000 Cu atoms on captured inputs, the same output: 27 -> 11 ms, best of 10 on a loaded
machine).

Arguments (float32, int32, bool; `neighbours.build` lays them out): x, y, z, species
(Rr, Rc) each, the window region's planes, held (br, bc) bool, pos (br, bc, 3), ids_region
(Rr, Rc) and ids_own (br, bc) int32 block indices (read only with ci[4]), offsets (S,) and
caps (S,) int32 (march order), cf (4,) = box (3), (cutoff + skin)^2, ci (5,) = k_rows, k_cols,
depth (the forces' region rows beyond the block), M, half (1: store only the candidates of
a larger block index, for `pe_pairs`' each-pair-once kernels on one device). Results: index
(br, bc, M) int32 (places in the forces' region of rows -depth .. depth; 0 past the count),
species (br, bc, M) int32, count (br, bc) int32 (the candidates stored; without half, above
M the lists overflow), over (br, bc) bool (a row offset had more than its capacity, or the
full list more than M candidates). The handler hands them to the kernels as `Window`,
`Block`, `March`, cf, ci and `Built` (the results).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import carray, njit, types
from numba.extending import intrinsic
from wse_core.host.numba_ffi import FRAME_ARGS, FRAME_RETS, OPTS, addr, data, dims, handlers, ptr
from wse_core.host.numba_ffi import metadata_query as metadata

from wse_hpc.md.pe_pair_math import minimum_image

__all__ = ["Block", "Built", "March", "Window", "handler"]

_ONE = np.uint64(1)


class Window(NamedTuple):
    """The window region's planes (Rr, Rc)."""

    x: np.ndarray  # float32 positions (A)
    y: np.ndarray
    z: np.ndarray
    species: np.ndarray  # float32: the species, < 0 where no atom is
    ids: np.ndarray  # int32 block indices (read only with ci[4])


class Block(NamedTuple):
    """The block's PEs (br, bc)."""

    held: np.ndarray  # bool: the PE holds an atom
    pos: np.ndarray  # (br, bc, 3) float32 (A)
    ids: np.ndarray  # int32 block indices (read only with ci[4])


class March(NamedTuple):
    """The row offsets in march order (S,), int32."""

    offsets: np.ndarray
    caps: np.ndarray  # each offset's capacity


class Built(NamedTuple):
    """The lists (the results; the module doc)."""

    index: np.ndarray  # (br, bc, M) int32
    species: np.ndarray  # (br, bc, M) int32
    count: np.ndarray  # (br, bc) int32
    over: np.ndarray  # (br, bc) bool


@intrinsic
def _cttz(typingctx, x):
    """Trailing zero bits of a uint64 != 0 (the lowest set bit's column)."""

    def codegen(context, builder, sig, args):
        # is_zero_poison false: an i1 0 from numba's own constants (llvmlite is numba's)
        return builder.cttz(args[0], context.get_constant(types.boolean, False))

    return types.uint64(types.uint64), codegen


@intrinsic
def _popcount(typingctx, x):
    def codegen(context, builder, sig, args):
        return builder.ctpop(args[0])

    return types.uint64(types.uint64), codegen


def _build(window, block, march, cf, ci, out):
    """Per PE and row offset: the slots' distances in one branch-free pass (SIMD), then the
    kept columns in a second. With ci[4] (one device, each pair once) only the kept
    candidates of a larger block index are stored (ids: the region's and the block's
    block indices); the capacities and the overflow are the full lists' all the same."""
    px, py, pz, ps, ids_region = window.x, window.y, window.z, window.species, window.ids
    held, pos, ids_own, offsets, caps = block.held, block.pos, block.ids, march.offsets, march.caps
    index, species, count, over = out.index, out.species, out.count, out.over
    br, bc = held.shape
    kr, kc, depth, m, half = ci[0], ci[1], ci[2], ci[3], ci[4]
    pitch, width = px.shape[1], 2 * kc + 1
    bx, by, bz, reach2 = cf[0], cf[1], cf[2], cf[3]
    one = np.float32(1.0)
    box = (bx, by, bz, one / bx, one / by, one / bz)
    ok = np.empty(width, np.bool_)
    index[:] = 0
    species[:] = 0
    for r in range(br):
        for c in range(bc):
            kept, stored, too_many = 0, 0, False
            if held[r, c]:
                xi, yi, zi = pos[r, c, 0], pos[r, c, 1], pos[r, c, 2]
                i = ids_own[r, c] if half else 0
                for s in range(offsets.shape[0]):
                    off, cap, found = offsets[s], caps[s], 0
                    rr = r + kr + off
                    rx, ry, rz = px[rr, c : c + width], py[rr, c : c + width], pz[rr, c : c + width]
                    rs = ps[rr, c : c + width]
                    for j in range(width):
                        r2 = minimum_image(rx[j] - xi, ry[j] - yi, rz[j] - zi, box)[3]
                        ok[j] = (r2 < reach2) & (rs[j] >= 0)
                    if off == 0:
                        ok[kc] = False  # not itself
                    at = min(max(r + off + depth, 0), br + 2 * depth - 1) * pitch + c
                    for j in range(width):
                        if ok[j]:
                            if found < cap:
                                if stored < m and (not half or ids_region[rr, c + j] > i):
                                    index[r, c, stored] = at + j
                                    species[r, c, stored] = np.int32(rs[j])
                                    stored += 1
                                kept += 1
                            found += 1
                    too_many = too_many or found > cap
            count[r, c] = kept if not half else stored
            over[r, c] = too_many or kept > m


def _build_pairs(window, block, march, cf, ci, out):
    """`_build`'s lists with `half` (its arguments; ci[4] is taken as 1), each pair of PEs
    tested once (the module docstring): the same float32 test of a slot, the hits as bits
    of per-PE masks (br, bc, 2 k_rows + 1) of window columns, then `_build`'s packing."""
    px, py, pz, ps, ids_region = window.x, window.y, window.z, window.species, window.ids
    held, pos, ids_own, offsets, caps = block.held, block.pos, block.ids, march.offsets, march.caps
    index, species, count, over = out.index, out.species, out.count, out.over
    br, bc = held.shape
    kr, kc, depth, m = ci[0], ci[1], ci[2], ci[3]
    pitch, width = px.shape[1], 2 * kc + 1
    bx, by, bz, reach2 = cf[0], cf[1], cf[2], cf[3]
    one = np.float32(1.0)
    box = (bx, by, bz, one / bx, one / by, one / bz)
    ok = np.empty(width, np.uint64)
    mask = np.zeros((br, bc, 2 * kr + 1), np.uint64)
    index[:] = 0
    species[:] = 0
    for r in range(br):
        for c in range(bc):
            if not held[r, c]:
                continue
            xi, yi, zi = pos[r, c, 0], pos[r, c, 1], pos[r, c, 2]
            for off in range(kr + 1):
                rr, j0 = r + kr + off, kc + 1 if off == 0 else 0  # own row: east of itself
                rx, ry, rz = px[rr, c : c + width], py[rr, c : c + width], pz[rr, c : c + width]
                rs = ps[rr, c : c + width]
                for j in range(j0, width):
                    r2 = minimum_image(rx[j] - xi, ry[j] - yi, rz[j] - zi, box)[3]
                    hit = (r2 < reach2) & (rs[j] >= 0)
                    ok[j] = np.uint64(hit) << np.uint64(j)
                bits = np.uint64(0)
                for j in range(j0, width):
                    bits |= ok[j]
                mask[r, c, kr + off] |= bits
                while bits:  # the partner's mirrored slot: offset -off, column 2 kc - j
                    j = _cttz(bits)
                    bits &= bits - _ONE
                    q = ids_region[rr, c + j]
                    mask[q // bc, q % bc, kr - off] |= _ONE << np.uint64(2 * kc - j)
    for r in range(br):
        for c in range(bc):
            kept, stored, too_many = 0, 0, False
            if held[r, c]:
                i = ids_own[r, c]
                for s in range(offsets.shape[0]):
                    off, cap = offsets[s], caps[s]
                    rr, bits = r + kr + off, mask[r, c, kr + offsets[s]]
                    found = np.int64(_popcount(bits))
                    at = min(max(r + off + depth, 0), br + 2 * depth - 1) * pitch + c
                    for _ in range(min(found, cap)):  # lowest column first
                        j = np.int64(_cttz(bits))
                        bits &= bits - _ONE
                        if stored < m and ids_region[rr, c + j] > i:
                            index[r, c, stored] = at + j
                            species[r, c, stored] = np.int32(ps[rr, c + j])
                            stored += 1
                    kept += min(found, cap)
                    too_many = too_many or found > cap
            count[r, c] = stored
            over[r, c] = too_many or kept > m


build = njit(**OPTS)(_build)
build_pairs = njit(**OPTS)(_build_pairs)


@njit(inline="always")
def _args(frame):
    d = dims(frame, FRAME_ARGS, 0, 2)
    e, f = dims(frame, FRAME_ARGS, 6, 2), dims(frame, FRAME_ARGS, 7, 2)
    window = Window(
        carray(data(frame, FRAME_ARGS, 0), (d[0], d[1]), np.float32),
        carray(data(frame, FRAME_ARGS, 1), (d[0], d[1]), np.float32),
        carray(data(frame, FRAME_ARGS, 2), (d[0], d[1]), np.float32),
        carray(data(frame, FRAME_ARGS, 3), (d[0], d[1]), np.float32),
        carray(data(frame, FRAME_ARGS, 6), (e[0], e[1]), np.int32),
    )
    b = dims(frame, FRAME_ARGS, 4, 2)
    block = Block(
        carray(data(frame, FRAME_ARGS, 4), (b[0], b[1]), np.bool_),
        carray(data(frame, FRAME_ARGS, 5), (b[0], b[1], 3), np.float32),
        carray(data(frame, FRAME_ARGS, 7), (f[0], f[1]), np.int32),
    )
    s = dims(frame, FRAME_ARGS, 8, 1)[0]
    march = March(
        carray(data(frame, FRAME_ARGS, 8), (s,), np.int32),
        carray(data(frame, FRAME_ARGS, 9), (s,), np.int32),
    )
    cf = carray(data(frame, FRAME_ARGS, 10), (4,), np.float32)
    ci = carray(data(frame, FRAME_ARGS, 11), (5,), np.int32)
    m = ci[3]
    out = Built(
        carray(data(frame, FRAME_RETS, 0), (b[0], b[1], m), np.int32),
        carray(data(frame, FRAME_RETS, 1), (b[0], b[1], m), np.int32),
        carray(data(frame, FRAME_RETS, 2), (b[0], b[1]), np.int32),
        carray(data(frame, FRAME_RETS, 3), (b[0], b[1]), np.bool_),
    )
    return window, block, march, cf, ci, out


def build_ffi(frame_p):
    frame = addr(frame_p)
    if not metadata(frame):
        build(*_args(frame))
    return ptr(0)


def build_pairs_ffi(frame_p):
    frame = addr(frame_p)
    if not metadata(frame):
        build_pairs(*_args(frame))
    return ptr(0)


handler = handlers({"build": build_ffi, "build_pairs": build_pairs_ffi})
