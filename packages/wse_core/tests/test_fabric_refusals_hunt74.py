"""What is not a placed field of this wafer, refused in one line at the op, and zero-size
per-PE fields, which now run (hunt 74):

- a list or a Python scalar raised AttributeError 'ndim'; a field placed on another
  wafer's mesh raised JAX's incompatible-devices error: now a `PlacementError` naming what
  the op needs (`wafer.place`);
- `halo_apply` / `local_apply` with a fn returning the wrong block shape returned a
  mis-assembled array: now refused, naming the block shape;
- a `(rows, cols, 0)` field: every op failed on gather (XLA handed each device the whole
  global shape). Oracle: NumPy's result shapes (np.roll, np.repeat, np.sum)."""

import jax
import numpy as np
import pytest
from wse_core import fabric, preset
from wse_core.errors import PlacementError
from wse_core.hw.wafer import build_wafer


@pytest.fixture(scope="module")
def w4():
    return build_wafer(preset("tiny"), grid=(8, 8), mesh_shape=(2, 2))


@pytest.fixture(scope="module")
def w1():
    return build_wafer(preset("tiny"), grid=(8, 8), mesh_shape=(1, 1))


def _one_line(excinfo, *words):
    text = str(excinfo.value)
    assert "\n" not in text
    for word in words:
        assert word in text, text


def test_what_is_not_an_array_is_refused_in_one_line(w4):
    x = np.zeros((8, 8), np.float32)
    with pytest.raises(PlacementError) as e:
        fabric.shift(w4, x.tolist(), "E")
    _one_line(e, "fabric.shift", "got a list", "wafer.place", "(8, 8)")
    with pytest.raises(PlacementError) as e:
        fabric.allreduce(w4, 3.0)
    _one_line(e, "fabric.allreduce", "got a float", "wafer.place")


def test_another_wafers_field_is_refused_in_one_line(w1, w4):
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    with pytest.raises(PlacementError) as e:
        fabric.shift(w1, w4.place(x), "E")
    _one_line(e, "devices [0, 1, 2, 3]", "mesh [0]", "wafer.place")
    with pytest.raises(PlacementError) as e:
        fabric.allreduce(w4, w1.place(x))
    _one_line(e, "devices [0]", "mesh [0, 1, 2, 3]", "wafer.place")
    # NumPy and uncommitted arrays go wherever the op runs, as before
    got = w4.gather(fabric.shift(w4, x, "E"))
    np.testing.assert_array_equal(got[:, 1:], x[:, :-1])


def test_a_block_fn_of_the_wrong_shape_is_refused(w4):
    f = w4.place(np.ones((8, 8), np.float32))
    with pytest.raises(PlacementError) as e:
        fabric.halo_apply(w4, f, lambda r: r)  # the region, margin and all
    _one_line(e, "halo_apply", "(4, 4)", "(6, 6)")
    with pytest.raises(PlacementError) as e:
        fabric.local_apply(w4, lambda b: b[:1], f)
    _one_line(e, "local_apply", "(4, 4)", "(1, 4)")
    ok = fabric.halo_apply(w4, f, lambda r: r[1:-1, 1:-1] + r[:-2, 1:-1])
    np.testing.assert_array_equal(w4.gather(ok)[1:], 2.0)


@pytest.mark.parametrize("mesh", [(1, 1), (2, 2)])
def test_zero_size_fields_run(mesh):
    w = build_wafer(preset("tiny"), grid=(5, 7), mesh_shape=mesh)
    x = np.zeros((5, 7, 0), np.float32)
    f = w.place(x)
    ops = {
        "shift": (lambda a: fabric.shift(w, a, "S"), np.roll(x, 1, 0).shape),
        "periodic": (lambda a: fabric.shift(w, a, "E", boundary="periodic"), x.shape),
        "allreduce": (lambda a: fabric.allreduce(w, a), x.shape),
        "max": (lambda a: fabric.allreduce(w, a, "max"), x.shape),
        "broadcast": (lambda a: fabric.broadcast(w, a, "row", 2), np.repeat(x[:, 2:3], 7, 1).shape),
        "multicast": (lambda a: fabric.multicast(w, a, "E", 2), (5, 7, 2, 0)),
    }
    for name, (fn, shape) in ops.items():
        assert w.gather(fn(f)).shape == shape, name
        assert w.gather(jax.jit(fn)(f)).shape == shape, name
    assert np.asarray(fabric.reduce(w, f)).shape == np.sum(x, axis=(0, 1)).shape
