"""The order in which the grouped product's PE kernels store the bases on the host: each PE
row of each device block keeps its PEs' stored rows first, in slot order, and its empty
slots after them (`storage_order`), so that a kernel streams the operator's rows back to
back instead of skipping the placement's empty slots.

Contract: the placed bases (`TlrBases`, (PR, PC, w, K) per field) and the product's per-slot
maps (the pieces, lengths and phase-2 positions of `grouped.tlrmvm_grouped`) go through the
same permutation: `stored(x, order)` for a field, `in_order(m, order)` for a map,
`at_in_order(at, src, dst, bc)` for phase 2's positions (into the phase-1 output, stored in
`src`'s order; listed in the phase-3 rows' order, `dst`). The permutation stays inside a PE
row of a block, so a block's rows stay on its device, and a PE row's stored rows keep their
order: phase 1's dots and phase 3's sums (each PE row's rows added in row order) are bit for
bit those of the placement's own order. What a PE holds (the plan, the SRAM ledger, the
fabric's traffic) is the placement's; only where the emulator keeps it in host memory moves.

Why: the placement leaves a third of the slots empty at n = 9801 (27,300 slots, 18,355
rows), in gaps between the rows (465-577 of the 2,730 PEs hold no U or no V rows, others are
part full), and the cores' streaming prefetchers run on into each gap: in a product, phase 1
0.71 -> 0.67 ms and phase 3 0.72 -> 0.67 with the rows packed (minimum of 100 products back
to back, jax.profiler, 2-core VM, 2026-12-04). Skipping the empty slots by a list of rows,
prefetching by bytes rather than rows, or 2 MB pages gained nothing (phase 1 alone, p10 of
150 calls): the bytes in the gaps are the cost.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["at_in_order", "in_order", "storage_order", "stored"]


def storage_order(lengths: np.ndarray, block_cols: int) -> np.ndarray:
    """(PR, PC / bc, bc w) int: for each PE row of each block (bc = `block_cols` PEs), the
    slots (flattened over its PEs and w) in storage order: those whose `lengths` (PR, PC, w)
    are positive first, in slot order, then the empty ones."""
    pr, pc, w = lengths.shape
    empty = (lengths <= 0).reshape(pr, pc // block_cols, block_cols * w)
    return np.argsort(empty, axis=-1, kind="stable")


def in_order(m: np.ndarray, order: np.ndarray) -> np.ndarray:
    """A per-slot map m (PR, PC, w, ...) listed in storage order."""
    seg = m.reshape(*order.shape, *m.shape[3:])
    idx = order.reshape(*order.shape, *([1] * (m.ndim - 3)))
    return np.take_along_axis(seg, idx, axis=2).reshape(m.shape)


def at_in_order(at: np.ndarray, src: np.ndarray, dst: np.ndarray, block_cols: int) -> np.ndarray:
    """Phase 2's positions (PR, PC, w) (block-local flat slots of the phase-1 output, one per
    phase-3 slot) for rows stored in order: listed in `dst`'s order, pointing into
    `src`'s."""
    pr, blocks, seg = src.shape
    inv = np.empty_like(src)
    np.put_along_axis(inv, src, np.broadcast_to(np.arange(seg), src.shape), axis=2)
    at = in_order(at, dst)
    row, j = np.divmod(at, seg)
    b = np.broadcast_to((np.arange(at.shape[1]) // block_cols)[None, :, None], at.shape)
    return (row * seg + inv[row, b, j]).astype(at.dtype)


def stored(x: jax.Array, order: np.ndarray) -> jax.Array:
    """A placed field x (PR, PC, w, K) with each block's PE rows in storage order (once,
    at build; same shape and sharding)."""
    idx = jnp.asarray(order)[..., None]

    def permute(v):
        seg = v.reshape(*order.shape, v.shape[-1])
        return jnp.take_along_axis(seg, idx, axis=2).reshape(v.shape)

    return jax.jit(permute, out_shardings=x.sharding)(x)
