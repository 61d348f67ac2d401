"""Hunt 77: the fabric as a JAX researcher uses it as a library.

Broken before:
- `window_apply` / `multicast_apply` with a fn returning the region (not a block) gave a
  mis-assembled (10, 20) array; `allreduce_apply` with a fn summing the wrong axis gave
  (6, 12), a scalar sum a raw ValueError: now a PlacementError line naming the shape;
- `allreduce_apply` summed padding PEs in: 12 for a row of 11 ones from `wafer.full`, 90 for
  the 81 of an allreduce's output (padding enters fn as zero now);
- `broadcast` from PE 1 of a 4-PE row was priced 3 hops, the whole line, though its ledger
  floods both ways from the source: 2 now, max(src, n - 1 - src) plus that side's detours;
- `build_wafer` took a device twice or a device's name, then `place` failed in JAX;
- `sliding_extreme` of an int32 field with wrap_add=1.0 came back float32.

Oracles: NumPy on the logical grid, hand hop counts and a Python walk over the repair's
per-link hops (`Remap.link_hops`).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import DefectMap, fabric, preset, remap
from wse_core.errors import PlacementError, WseError
from wse_core.hw.wafer import build_wafer

GRID = (9, 11)  # blocks of 5 x 3 on a 2 x 4 mesh: padded to 10 x 12


@pytest.fixture(scope="module")
def w():
    return build_wafer(preset("small"), grid=GRID, mesh_shape=(2, 4))


def _x(seed=0, per_pe=()):
    return np.random.default_rng(seed).normal(size=GRID + per_pe).astype(np.float32)


def _one_line(e, *words):
    text = str(e.value)
    assert "\n" not in text
    for word in words:
        assert word in text, text


# -- 1: a fn's output shape -----------------------------------------------------------------
def test_window_and_multicast_apply_refuse_a_region_returned_as_a_block(w):
    p = w.place(_x())
    with pytest.raises(PlacementError) as e:
        fabric.window_apply(w, p, 1, 1, lambda r: r)
    _one_line(e, "fabric.window_apply", "(5, 3)", "(7, 5)")
    with pytest.raises(PlacementError) as e:
        fabric.multicast_apply(w, p, "E", 2, lambda r: r)
    _one_line(e, "fabric.multicast_apply", "(5, 3)", "(5, 5)")


def test_window_and_multicast_apply_still_give_numpys_answer(w):
    x = _x(1)
    got = w.gather(fabric.window_apply(w, w.place(x), 1, 1, lambda r: r[:-2, 2:]))
    np.testing.assert_array_equal(got, np.roll(np.roll(x, 1, 0), -1, 1))  # periodic NE
    got = w.gather(fabric.multicast_apply(w, w.place(x), "E", 2, lambda r: r[:, :-2] + r[:, 1:-1]))
    pad = np.pad(x, ((0, 0), (2, 0)))
    np.testing.assert_allclose(got, pad[:, :-2] + pad[:, 1:-1], rtol=1e-6)


@pytest.mark.parametrize(
    ("axis", "fn", "shape"),
    [("row", lambda b: b.sum(0), "(3,)"), ("row", lambda b: b.sum(), "()"),
     ("col", lambda b: b.sum(1), "(5,)")],
)  # fmt: skip
def test_allreduce_apply_refuses_a_partial_of_the_wrong_shape(w, axis, fn, shape):
    with pytest.raises(PlacementError) as e:
        fabric.allreduce_apply(w, fn, w.place(_x()), axis=axis)
    _one_line(e, "fabric.allreduce_apply", f"along each {axis}", shape)


# -- 2: padding enters fn as zero -----------------------------------------------------------
def test_allreduce_apply_leaves_padding_out_whatever_it_holds(w):
    ones = w.full((), 1.0)  # 1.0 on padding too
    got = w.gather(fabric.allreduce_apply(w, lambda b: b.sum(1), ones, axis="row"))
    np.testing.assert_array_equal(got, np.full(GRID, np.ones(GRID).sum(1)[0], np.float32))  # 11
    y = fabric.allreduce(w, w.place(np.ones(GRID, np.float32)), axis="col")  # 9 on padding
    got = w.gather(fabric.allreduce_apply(w, lambda b: b.sum(0), y, axis="col"))
    np.testing.assert_array_equal(got, np.full(GRID, 81.0, np.float32))
    x = _x(2, (3,))
    dirty = w.place(x) + w.full((3,), 5.0)  # 5 added on the padding PEs as well
    got = w.gather(fabric.allreduce_apply(w, lambda b: b.sum(1), dirty, axis="row"))
    want = np.broadcast_to((x + 5).sum(1, keepdims=True), x.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_fn_that_weighs_zero_masks_with_a_field_of_ones(w):
    """The docstring's recipe: exp(0) = 1 would count padding; a field of ones (from
    `wafer.full`, 1 on padding before fn sees it) masks it."""
    x = _x(3) / 4
    got = w.gather(
        fabric.allreduce_apply(
            w, lambda b, m: (jnp.exp(b) * m).sum(0), w.place(x), w.full((), 1.0), axis="col"
        )
    )
    want = np.broadcast_to(np.exp(x.astype(np.float64)).sum(0, keepdims=True), GRID)
    np.testing.assert_allclose(got, want, rtol=1e-5)


# -- 5: a broadcast's chain -----------------------------------------------------------------
def _latency(wafer, fn):
    x = wafer.place(np.zeros((wafer.rows, wafer.cols), np.float32))
    return fabric.count(wafer, fn, x)


def test_broadcast_from_inside_a_line_floods_both_ways():
    w4 = build_wafer(preset("tiny"), grid=(4, 4), mesh_shape=(2, 2))
    for src, hops in ((0, 3), (1, 2), (2, 2), (3, 3)):  # max(src, 3 - src) by hand
        t = _latency(w4, lambda a, s=src: fabric.broadcast(w4, a, "row", s))
        assert t.latency_hops == hops, src
        # out from the source both ways, where a link leads that way (hunt 82: an end PE
        # sent a word off the grid)
        want = {d: 1.0 for d, there in (("E", src < 3), ("W", src > 0)) if there}
        assert dict(t.links) == want
    w7 = build_wafer(preset("small"), grid=(7, 10), mesh_shape=(1, 1))
    assert _latency(w7, lambda a: fabric.broadcast(w7, a, "col", 3)).latency_hops == 3
    assert _latency(w7, lambda a: fabric.broadcast(w7, a, "row", 9)).latency_hops == 9


def _one_dead(grid, at):
    spec = preset("small")
    dead = np.zeros((spec.physical_rows, spec.physical_cols), bool)
    dead[at] = True
    dm = DefectMap(dead=dead, seed=None, rate=0.0)
    wafer = build_wafer(spec, grid=grid, mesh_shape=(1, 1))
    return dataclasses.replace(wafer, defects=dm, remap=remap(spec, dm))


def _walk(wafer, axis, src):
    """The slowest line's longer side, link by link over the repair's hop map."""
    h = wafer.remap.link_hops(axis)
    n = (wafer.rows, wafer.cols)[axis]
    lines = wafer.rows if axis == 1 else wafer.cols
    best = 0
    for i in range(lines):
        line = [int(h[i, j] if axis == 1 else h[j, i]) for j in range(n - 1)]
        best = max(best, sum(line[:src]), sum(line[src:]))
    return best


def test_a_broadcasts_detours_count_on_the_side_they_lie():
    # physical PE (3, 4) dead: row 3's link 3-4 is 2 hops (test_fabric_chain_hunt73)
    w = _one_dead((9, 12), (3, 4))
    row = {s: _latency(w, lambda a, s=s: fabric.broadcast(w, a, "row", s)).latency_hops
           for s in range(12)}  # fmt: skip
    assert row[6] == 6 + 1  # the west side holds the detour: 7 hops against 5 east
    assert row[2] == 9 + 1  # the east side, 9 links with the detour
    assert row[5] == 6  # west 5 + 1, east 6: a tie
    for s in range(12):
        assert row[s] == _walk(w, 1, s), s
    for s in range(9):
        got = _latency(w, lambda a, s=s: fabric.broadcast(w, a, "col", s)).latency_hops
        assert got == _walk(w, 0, s), s


# -- 6: build_wafer's devices ---------------------------------------------------------------
def test_build_wafer_refuses_a_device_twice_and_what_is_not_a_device():
    d = jax.devices()
    with pytest.raises(PlacementError) as e:
        build_wafer(preset("tiny"), devices=[d[0], d[0]], mesh_shape=(1, 2))
    _one_line(e, "twice", str(d[0]))
    for bad in (["cpu0"], "cpu0", [0]):
        with pytest.raises(PlacementError) as e:
            build_wafer(preset("tiny"), devices=bad)
        _one_line(e, "JAX devices", "jax.devices()")
    w2 = build_wafer(preset("tiny"), devices=d[:2], mesh_shape=(1, 2))  # as before
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    assert w2.gather(fabric.allreduce(w2, w2.place(x)))[0, 0] == x.sum()


# -- 7: sliding_extreme keeps the dtype -----------------------------------------------------
def _sliding_oracle(x, width, wrap_add):
    """Max over PE c's run c, c - 1, ..., c - width + 1 along a row ("E"), a value from
    before column 0 coming round with -wrap_add."""
    n = x.shape[1]
    c = np.arange(n)
    runs = [np.roll(x, t, axis=1) - wrap_add * (c - t < 0) for t in range(width)]
    return np.max(runs, axis=0)


@pytest.mark.parametrize("dtype", [np.int32, np.int16, np.uint8])
def test_sliding_extreme_of_an_integer_field_keeps_its_dtype(w, dtype):
    x = np.random.default_rng(5).integers(10, 100, GRID).astype(dtype)
    got = w.gather(fabric.sliding_extreme(w, w.place(x), "max", "E", 3, wrap_add=1.0))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, _sliding_oracle(x.astype(np.int64), 3, 1).astype(dtype))
    got = w.gather(fabric.sliding_extreme(w, w.place(x), "max", "E", 3, wrap_add=np.int64(7)))
    np.testing.assert_array_equal(got, _sliding_oracle(x.astype(np.int64), 3, 7).astype(dtype))


def test_sliding_extreme_refuses_a_wrap_add_the_field_cannot_hold(w):
    xi = w.place(np.zeros(GRID, np.int32))
    for bad, words in ((1.5, "int32"), (float("nan"), "finite"), ("1", "finite")):
        with pytest.raises(WseError) as e:
            fabric.sliding_extreme(w, xi, "max", "E", 3, wrap_add=bad)
        _one_line(e, "wrap_add", words)
    with pytest.raises(WseError) as e:
        fabric.sliding_extreme(w, w.place(np.zeros(GRID, np.uint8)), "max", "E", 3, wrap_add=-1)
    _one_line(e, "uint8")
    with pytest.raises(WseError) as e:
        fabric.sliding_extreme(w, w.place(np.zeros(GRID, bool)), "max", "E", 3, wrap_add=1)
    _one_line(e, "bool")
    # a float field as before: the same values, float32
    x = _x(6)
    got = w.gather(fabric.sliding_extreme(w, w.place(x), "max", "E", 3, wrap_add=2.5))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, _sliding_oracle(x, 3, np.float32(2.5)))
