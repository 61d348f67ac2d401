"""`wse wafer check`'s cases: every fabric op that moves or combines data, each beside NumPy's
answer computed from the check's data alone (`wse_core.fabric`'s public ops but `count`, which
moves nothing).

`cases(wafer, x, hops)` -> {name: (function of the placed field, NumPy's answer)}; the
function returns a placed field (a reduction's value is spread over the grid). Every sum
adds distinct PEs' values of `check_data`, so it is exact in any order (its docstring); the
max cases hold a NaN at one PE, which must come back as NaN on every mesh, as `np.max` has
it (hunt 76: a multi-device max dropped it; `check` compares NaN with NaN as equal).
Hunt 76: the check ran 6 cases over 5 of the 11 ops its help said it ran.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["cases"]


def _nan_at(x: np.ndarray) -> tuple[int, int]:
    """The PE whose channel 0 holds the max cases' NaN: a middle row, the last column (on a
    device other than the first wherever the mesh splits the grid)."""
    return x.shape[0] // 2, x.shape[1] - 1


def _window_sum(x: np.ndarray, k_rows: int, k_cols: int) -> np.ndarray:
    """Each PE's sum over the periodic (2 k_rows + 1) x (2 k_cols + 1) PEs around it."""
    return sum(
        np.roll(x, (dr, dc), axis=(0, 1))
        for dr in range(-k_rows, k_rows + 1)
        for dc in range(-k_cols, k_cols + 1)
    )


def cases(wafer, x: np.ndarray, hops: int) -> dict[str, tuple[Callable, np.ndarray]]:
    """{case: (function of the placed field, NumPy's answer)}; `hops`: the multicast's reach."""
    import jax
    import jax.numpy as jnp
    from wse_core import fabric, testing

    rows, cols = x.shape[:2]
    (br, bc), (r0, c0) = wafer.block_shape, _nan_at(x)
    xn = x.copy()
    xn[r0, c0, 0] = np.nan
    x64 = x.astype(np.float64)  # the sums' answers: exact (check_data)
    kc, width = min(1, (cols - 1) // 2), min(3, cols)  # the window and run the grid holds

    def with_nan(a):
        return a.at[r0, c0, 0].set(jnp.nan)

    def spread(v):  # a reduction's value on every PE, sharded as a field
        return jax.lax.with_sharding_constraint(
            jnp.broadcast_to(v, wafer.padded_shape + v.shape), wafer.sharding(v.ndim)
        )

    def upstream_sum(region):  # multicast_apply "S": the k values above each PE
        return sum(jax.lax.slice_in_dim(region, hops - j, hops - j + br, axis=0)
                   for j in range(1, hops + 1))  # fmt: skip

    def neighbours(region):  # halo_apply: N + S + W + E
        return region[2:, 1:-1] + region[:-2, 1:-1] + region[1:-1, 2:] + region[1:-1, :-2]

    def window(region):
        return sum(region[1 + dr : 1 + dr + br, kc + dc : kc + dc + bc]
                   for dr in (-1, 0, 1) for dc in range(-kc, kc + 1))  # fmt: skip

    n = np.newaxis
    return {
        "shift_E_periodic": (
            lambda a: fabric.shift(wafer, a, "E", boundary="periodic"),
            testing.np_shift(x, "E", 1, "periodic"),
        ),
        "shift_N_zero": (lambda a: fabric.shift(wafer, a, "N"), testing.np_shift(x, "N")),
        f"multicast_S_{hops}": (
            lambda a: fabric.multicast(wafer, a, "S", hops),
            testing.np_multicast(x, "S", hops),
        ),
        f"multicast_apply_S_{hops}": (
            lambda a: fabric.multicast_apply(wafer, a, "S", hops, upstream_sum),
            testing.np_multicast(x, "S", hops).sum(2),
        ),
        "halo_apply_zero": (
            lambda a: fabric.halo_apply(wafer, a, neighbours),
            sum(testing.np_shift(x, d) for d in "NSWE"),
        ),
        "window_apply_periodic": (
            lambda a: fabric.window_apply(wafer, a, 1, kc, window),
            _window_sum(x, 1, kc),
        ),
        "sliding_extreme_max_E_nan": (
            lambda a: fabric.sliding_extreme(wafer, with_nan(a), "max", "E", width),
            np.maximum.reduce([np.roll(xn, t, axis=1) for t in range(width)]),
        ),
        "broadcast_row": (
            lambda a: fabric.broadcast(wafer, a, "row", cols - 1),
            np.broadcast_to(x[:, -1:], x.shape),
        ),
        "reduce_sum": (
            lambda a: spread(fabric.reduce(wafer, a, "sum")),
            np.broadcast_to(x64.sum((0, 1)), x.shape),
        ),
        "reduce_max_nan": (
            lambda a: spread(fabric.reduce(wafer, with_nan(a), "max")),
            np.broadcast_to(xn.max((0, 1)), x.shape),
        ),
        "allreduce_sum": (
            lambda a: fabric.allreduce(wafer, a, "sum"),
            np.broadcast_to(x64.sum((0, 1)), x.shape),
        ),
        "allreduce_max_row": (
            lambda a: fabric.allreduce(wafer, a, "max", axis="row"),
            np.broadcast_to(x.max(1, keepdims=True), x.shape),
        ),
        "allreduce_max_nan": (
            lambda a: fabric.allreduce(wafer, with_nan(a), "max"),
            np.broadcast_to(xn.max((0, 1)), x.shape),
        ),
        "allreduce_apply_col": (
            lambda a: fabric.allreduce_apply(wafer, lambda b: b.sum(0), a, axis="col"),
            np.broadcast_to(x64.sum(0)[n], x.shape),
        ),
        "local_apply": (lambda a: fabric.local_apply(wafer, lambda b: b * b, a), x * x),
    }
