"""Integer and bool fields through the fabric (hunt 74):

- `sliding_extreme` of an int field raised OverflowError (its identity was +-inf cast to
  the int): oracle, np.min / np.max over np.roll copies, values spanning the dtype's range;
- `broadcast` of a bool field came back int32 where the mesh spans the broadcast axis (psum
  promotes bool), bool elsewhere: oracle np.repeat, dtype bool on every mesh;
- the ledger priced an int8 / uint8 / bool allreduce sum at the input's width while the
  result is 32-bit (`jnp.sum` promotes): hand count, 4 bytes a value."""

import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import fabric, preset
from wse_core.hw.wafer import build_wafer

GRID = (7, 6)  # not divided by the meshes below: padding PEs in play


def _wafer(mesh):
    return build_wafer(preset("tiny"), grid=GRID, mesh_shape=mesh)


@pytest.mark.parametrize("mesh", [(1, 1), (2, 2)])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.bool_])
@pytest.mark.parametrize("op", ["min", "max"])
def test_sliding_extreme_of_integers_is_numpys(mesh, dtype, op):
    rng = np.random.default_rng(7)
    if dtype == np.bool_:
        x = rng.random(GRID) > 0.5
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, size=GRID, endpoint=True).astype(dtype)
        x[0, :2] = (info.min, info.max)  # the extremes themselves
    w = _wafer(mesh)
    for direction, axis, sign in (("E", 1, 1), ("S", 0, 1), ("W", 1, -1)):
        got = w.gather(fabric.sliding_extreme(w, w.place(x), op, direction, 3))
        ref = getattr(np, op)([np.roll(x, sign * t, axis) for t in range(3)], axis=0)
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, ref, err_msg=direction)


@pytest.mark.parametrize("mesh", [(1, 1), (1, 2), (2, 1), (2, 2)])
def test_broadcast_keeps_bool_on_every_mesh(mesh):
    x = np.random.default_rng(0).random(GRID) > 0.5
    w = _wafer(mesh)
    row = fabric.broadcast(w, w.place(x), "row", 2)
    col = fabric.broadcast(w, w.place(x), "col", 3)
    assert row.dtype == col.dtype == np.bool_
    np.testing.assert_array_equal(w.gather(row), np.repeat(x[:, 2:3], GRID[1], 1))
    np.testing.assert_array_equal(w.gather(col), np.repeat(x[3:4, :], GRID[0], 0))


@pytest.mark.parametrize(
    "dtype,bytes_each",
    [(np.int8, 4), (np.uint8, 4), (np.bool_, 4), (np.int32, 4), (np.float16, 2), (np.float32, 4)],
)
def test_a_sum_is_priced_at_its_results_width(dtype, bytes_each):
    """Hand count: allreduce = 2 x (PEs x values a PE x bytes each / 4) words; reduce half."""
    w = _wafer((2, 2))
    f = w.place(np.ones(GRID + (4,), dtype))
    pes = GRID[0] * GRID[1]
    words = pes * 4 * bytes_each / 4
    out = fabric.allreduce(w, f)
    assert np.dtype(out.dtype).itemsize == bytes_each  # the width the result needs
    assert fabric.count(w, lambda a: fabric.allreduce(w, a), f).words == 2 * words
    assert fabric.count(w, lambda a: fabric.reduce(w, a), f).words == words
    if dtype != np.bool_:  # a max keeps x's dtype and is priced at it
        mx = fabric.count(w, lambda a: fabric.allreduce(w, a, "max"), f).words
        assert mx == 2 * pes * 4 * np.dtype(dtype).itemsize / 4
    np.testing.assert_array_equal(w.gather(out), np.full(GRID + (4,), pes))
    assert jnp.issubdtype(out.dtype, jnp.integer) or jnp.issubdtype(out.dtype, jnp.floating)
