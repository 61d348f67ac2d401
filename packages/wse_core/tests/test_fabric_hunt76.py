"""Hunt 76 in the fabric, each against an oracle outside it (NumPy, hand counts).

Broken before:
- a float "max" `reduce` / `allreduce` dropped NaN on every multi-device mesh (XLA:CPU's
  all-reduce max does): a 3 x 4 grid with one NaN reduced to 11.0 on a 1 x 2 mesh, NaN on
  1 x 1; fp8 (float8_e4m3fn, no infinities) padding and a sliding extreme's window start
  read as NaN (its -inf), so every fp8 `sliding_extreme` was NaN;
- the collectives' chain into a line's centre PE was one hop short on every even line
  (`reduce_to_centre` of 2 PEs 0 hops, of 4 PEs 1; `allreduce_2d` 1 x 4: 3, 4 x 4: 6), and the
  traced allreduce recorded (n - 1) / 2 hops an axis each way and no relay (1 x 2: 1 hop, 0
  relays, against the collectives' 2 relays);
- a `fabric.count` inside a counted function added its traffic to the outer count (256 words
  for a function that moved none; 1536 for one that moved 768).

Hand count of a chain: a line of n PEs reduces into PE (n - 1) // 2; the longest chain is the
farthest PE's walk to it, one hop a link, and the flood back walks it again.
"""

import itertools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from wse_core import fabric, preset
from wse_core.cost.collectives import allreduce_2d, reduce_2d, reduce_to_centre
from wse_core.hw.wafer import build_wafer

MESHES = [(1, 1), (1, 2), (2, 2), (2, 4), (4, 2)]
GRIDS = [(3, 4), (5, 7)]


def _wafer(grid, mesh=(1, 1)):
    return build_wafer(preset("small"), grid=grid, mesh_shape=mesh)


def _with_nan(grid, at, seed=0, per_pe=(3,)):
    x = np.random.default_rng(seed).normal(size=grid + per_pe).astype(np.float32)
    x[at + (0,) * len(per_pe)] = np.nan
    return x


def _same(got, want):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))  # NaN equals NaN here


# -- hole 1: NaN through every max --------------------------------------------------------
@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("grid", GRIDS)
def test_a_nan_is_the_max_on_every_mesh_as_numpy_says(grid, mesh):
    w = _wafer(grid, mesh)
    for at in [(0, 0), (grid[0] - 1, grid[1] - 1), (grid[0] // 2, 1)]:
        x = _with_nan(grid, at)
        xs = w.place(x)
        _same(fabric.reduce(w, xs, "max"), np.max(x, axis=(0, 1)))
        _same(w.gather(fabric.allreduce(w, xs, "max")), np.broadcast_to(x.max((0, 1)), x.shape))
        for axis, a in (("row", 1), ("col", 0)):
            want = np.broadcast_to(x.max(a, keepdims=True), x.shape)
            _same(w.gather(fabric.allreduce(w, xs, "max", axis=axis)), want)


@pytest.mark.parametrize("mesh", MESHES)
def test_without_nan_a_max_is_numpys_and_its_traffic_unchanged(mesh):
    grid = (5, 7)
    x = np.random.default_rng(1).normal(size=grid + (2,)).astype(np.float32)
    w = _wafer(grid, mesh)
    xs = w.place(x)
    _same(fabric.reduce(w, xs, "max"), x.max((0, 1)))
    _same(w.gather(fabric.allreduce(w, xs, "max")), np.broadcast_to(x.max((0, 1)), x.shape))
    xi = np.rint(x * 100).astype(np.int32)
    _same(fabric.reduce(w, w.place(xi), "max"), xi.max((0, 1)))
    # the ledger: a max moves what a sum of the same width moves, 35 PEs x 2 words each way
    t_max = fabric.count(w, lambda a: fabric.allreduce(w, a, "max"), xs)
    t_sum = fabric.count(w, lambda a: fabric.allreduce(w, a, "sum"), xs)
    assert t_max.words == t_sum.words == 2 * 35 * 2 and t_max.count == 1


@pytest.mark.parametrize("mesh", [(1, 1), (1, 2), (2, 4)])
def test_a_max_over_a_nan_has_the_gradient_one_device_gives(mesh):
    grid = (3, 4)
    x = _with_nan(grid, (1, 3), per_pe=())
    one = _wafer(grid)
    w = _wafer(grid, mesh)
    want = one.gather(jax.grad(lambda v: fabric.reduce(one, v, "max"))(one.place(x)))
    got = w.gather(jax.grad(lambda v: fabric.reduce(w, v, "max"))(w.place(x)))
    assert np.isnan(want).all()  # jnp.max's rule: no element equals a NaN maximum
    _same(got, want)


@pytest.mark.parametrize("mesh", [(1, 1), (1, 2), (2, 4)])
@pytest.mark.parametrize(("op", "np_op"), [("max", np.maximum), ("min", np.minimum)])
def test_a_sliding_extreme_keeps_a_nan_as_numpy(mesh, op, np_op):
    grid, width = (5, 7), 3
    x = _with_nan(grid, (2, 6))
    w = _wafer(grid, mesh)
    got = w.gather(fabric.sliding_extreme(w, w.place(x), op, "E", width))
    # "E": PE c takes columns c, c - 1, c - 2 (periodic)
    _same(got, np_op.reduce([np.roll(x, t, axis=1) for t in range(width)]))


@pytest.mark.parametrize("mesh", [(1, 1), (1, 2), (2, 2)])
def test_fp8_padding_and_window_start_read_as_its_least_value(mesh):
    fp8 = ml_dtypes.float8_e4m3fn  # no infinities: -inf cast to it is NaN
    assert np.isnan(np.asarray(-np.inf).astype(fp8))
    grid = (3, 5)  # a 1 x 2 or 2 x 2 mesh pads the grid
    x = np.arange(15, dtype=np.float32).reshape(grid).astype(fp8)
    w = _wafer(grid, mesh)
    xs = w.place(x)
    assert float(fabric.reduce(w, xs, "max")) == x.astype(np.float32).max()  # was NaN
    got = w.gather(fabric.sliding_extreme(w, xs, "max", "E", 2)).astype(np.float32)
    x32 = x.astype(np.float32)
    _same(got, np.maximum(x32, np.roll(x32, 1, axis=1)))
    got = w.gather(fabric.sliding_extreme(w, xs, "min", "S", 2)).astype(np.float32)
    _same(got, np.minimum(x32, np.roll(x32, 1, axis=0)))


# -- hole 2: hops into the centre, counted by hand ----------------------------------------
def _walk(n: int) -> int:
    """The farthest PE's links to PE (n - 1) // 2 of a line of n PEs."""
    centre = (n - 1) // 2
    return max(abs(i - centre) for i in range(n))


def test_the_hand_count_of_a_line():
    # the brief's cases: 2 PEs into one is 1 hop; 4 into PE 1 is PE 3 -> 2 -> 1; 5 into PE 2
    assert [_walk(n) for n in range(1, 7)] == [0, 1, 1, 2, 2, 3]


@pytest.mark.parametrize("n", range(1, 7))
def test_a_reduce_to_the_centre_walks_the_farthest_pe(n):
    spec = preset("tiny")
    assert reduce_to_centre(spec, n, 1).latency_hops == _walk(n)
    assert reduce_to_centre(spec, n, 16).latency_hops == _walk(n)


@pytest.mark.parametrize(("rows", "cols"), itertools.product(range(1, 7), range(1, 7)))
def test_the_allreduce_and_its_traced_traffic_walk_the_same_chain(rows, cols):
    spec = preset("small")
    hand = _walk(rows) + _walk(cols)
    assert allreduce_2d(spec, rows, cols, 1).latency_hops == 2 * hand  # reduce, then flood
    w = _wafer((rows, cols))
    x = jax.ShapeDtypeStruct(w.padded_shape + (16,), jnp.float32, sharding=w.sharding(1))
    traced = {
        "grid": fabric.count(w, lambda a: fabric.allreduce(w, a), x),
        "row": fabric.count(w, lambda a: fabric.allreduce(w, a, axis="row"), x),
        "col": fabric.count(w, lambda a: fabric.allreduce(w, a, axis="col"), x),
        "reduce": fabric.count(w, lambda a: fabric.reduce(w, a), x),
    }
    assert traced["grid"].latency_hops == 2 * hand
    assert traced["row"].latency_hops == 2 * _walk(cols)
    assert traced["col"].latency_hops == 2 * _walk(rows)
    assert traced["reduce"].latency_hops == hand
    # the relays: the collectives' own, at the traced words (16 a PE)
    assert traced["grid"].relay_stages == allreduce_2d(spec, rows, cols, 16).relay_stages
    assert traced["row"].relay_stages == allreduce_2d(spec, 1, cols, 16).relay_stages
    assert traced["col"].relay_stages == allreduce_2d(spec, rows, 1, 16).relay_stages
    assert traced["reduce"].relay_stages == reduce_2d(spec, rows, cols, 16).relay_stages


def test_two_pes_by_hand():
    # 1 x 2: PE 1 -> PE 0 (1 hop, 1 relay to combine), the flood back (1 hop, 1 relay)
    spec = preset("tiny")
    work = allreduce_2d(spec, 1, 2, 1)
    assert (work.latency_hops, work.relay_stages) == (2, 2)
    w = build_wafer(spec, grid=(1, 2))
    x = jax.ShapeDtypeStruct(w.padded_shape, jnp.float32, sharding=w.sharding())
    t = fabric.count(w, lambda a: fabric.allreduce(w, a), x)
    assert (t.latency_hops, t.relay_stages) == (2, 2)


def test_the_traced_chain_does_not_depend_on_the_mesh():
    grid = (4, 6)
    counts = set()
    for mesh in MESHES:
        w = _wafer(grid, mesh)
        x = jax.ShapeDtypeStruct(w.padded_shape + (2,), jnp.float32, sharding=w.sharding(1))
        t = fabric.count(w, lambda a, w=w: fabric.allreduce(w, a), x)
        counts.add((t.words, t.latency_hops, t.relay_stages))
    assert len(counts) == 1 and next(iter(counts))[1] == 2 * (2 + 3)


# -- hole 3: a count inside a counted function --------------------------------------------
def test_a_count_inside_a_counted_function_is_its_own():
    w = _wafer((8, 8))
    f = w.place(np.ones((8, 8, 4), np.float32))
    shift = lambda a: fabric.shift(w, a, "E", boundary="periodic")  # noqa: E731
    summed = lambda a: fabric.allreduce(w, a)  # noqa: E731
    step = lambda a: lax.cond(a[0, 0, 0] > 0, shift, summed, a)  # noqa: E731
    # hand count: the shift injects 64 PEs x 4 words; the allreduce twice that (there and
    # back); a cond on a traced value counts both branches
    shift_words, step_words = 64 * 4, 64 * 4 + 2 * 64 * 4
    assert fabric.count(w, shift, f).words == shift_words
    assert fabric.count(w, step, f).words == step_words
    inner = []

    def counts_only(a):
        inner.append(fabric.count(w, shift, a).words)
        return a

    def counts_and_runs(a):
        inner.append(fabric.count(w, step, a).words)
        return step(a)

    assert fabric.count(w, counts_only, f).words == 0  # was 256
    assert fabric.count(w, counts_and_runs, f).words == step_words  # was 1536
    assert inner == [shift_words, step_words]
    # a plain scope still sees what the function it wraps traces, not a count inside
    with w.traffic.scope() as seen:
        jax.eval_shape(lambda a: shift(a), f)
        fabric.count(w, summed, f)
    assert [e.op for e in seen] == ["shiftE"]
