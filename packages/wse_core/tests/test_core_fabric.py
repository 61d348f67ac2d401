"""Every fabric op equals its NumPy oracle on 1x1, 2x4 and 4x2 meshes, on grids the mesh
divides and grids it does not, with and without defects."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import DefectError, PlacementError, WseError, defect_map, fabric, preset, remap
from wse_core.hw.wafer import build_wafer
from wse_core.testing import MESH_SHAPES, np_multicast, np_shift

CASES = [(m, g) for m in MESH_SHAPES for g in [(8, 8), (7, 10)]] + [((2, 4), (5, 13))]


def _wafer(grid, mesh, **kw):
    return build_wafer(preset("small"), grid=grid, mesh_shape=mesh, **kw)


def _data(grid, per_pe=(3,), seed=0, dtype=np.float32):
    return np.random.default_rng(seed).normal(size=grid + per_pe).astype(dtype)


@pytest.mark.parametrize(("mesh", "grid"), CASES)
def test_shift_and_multicast_match_numpy(mesh, grid):
    w = _wafer(grid, mesh)
    x = _data(grid)
    xs = w.place(x)

    @jax.jit
    def all_ops(a):
        outs = []
        for d in "NSEW":
            for b in ("zero", "periodic"):
                outs.append(fabric.shift(w, a, d, boundary=b))
                outs.append(fabric.shift(w, a, d, boundary=b, distance=2))
                outs.append(fabric.multicast(w, a, d, 3, boundary=b))
        return outs

    got = iter(all_ops(xs))
    for d in "NSEW":
        for b in ("zero", "periodic"):
            np.testing.assert_array_equal(w.gather(next(got)), np_shift(x, d, 1, b))
            np.testing.assert_array_equal(w.gather(next(got)), np_shift(x, d, 2, b))
            np.testing.assert_array_equal(w.gather(next(got)), np_multicast(x, d, 3, b))


@pytest.mark.smoke
@pytest.mark.parametrize("mesh", MESH_SHAPES)
@pytest.mark.parametrize("grid", [(8, 8), (7, 10)])
def test_reductions_and_broadcast_match_numpy(mesh, grid):
    w = _wafer(grid, mesh)
    x = _data(grid, seed=1)
    # Garbage in the padding must not leak into reductions.
    xs = w.place(x) + 0.0
    xs = xs.at[grid[0] :, :].set(1e6).at[:, grid[1] :].set(1e6)
    sum_all = w.gather(fabric.allreduce(w, xs, "sum"))
    np.testing.assert_allclose(sum_all, np.broadcast_to(x.sum((0, 1)), x.shape), rtol=1e-5)
    np.testing.assert_array_equal(
        w.gather(fabric.allreduce(w, xs, "max")), np.broadcast_to(x.max((0, 1)), x.shape)
    )
    np.testing.assert_allclose(
        w.gather(fabric.allreduce(w, xs, "sum", axis="row")),
        np.broadcast_to(x.sum(1, keepdims=True), x.shape),
        rtol=1e-5,
    )
    np.testing.assert_array_equal(
        w.gather(fabric.allreduce(w, xs, "max", axis="col")),
        np.broadcast_to(x.max(0, keepdims=True), x.shape),
    )
    np.testing.assert_array_equal(np.asarray(fabric.reduce(w, xs, "max")), x.max((0, 1)))
    np.testing.assert_allclose(np.asarray(fabric.reduce(w, xs, "sum")), x.sum((0, 1)), rtol=1e-5)
    for src in (0, grid[1] - 1):
        np.testing.assert_array_equal(
            w.gather(fabric.broadcast(w, xs, "row", src)),
            np.broadcast_to(x[:, src : src + 1], x.shape),
        )
    np.testing.assert_array_equal(
        w.gather(fabric.broadcast(w, xs, "col", grid[0] - 1)),
        np.broadcast_to(x[-1:, :], x.shape),
    )


@pytest.mark.cpu_devices
def test_integer_and_scalar_fields():
    w = _wafer((6, 9), (2, 4))
    x = np.arange(54, dtype=np.int32).reshape(6, 9)
    xs = w.place(x)
    np.testing.assert_array_equal(w.gather(fabric.shift(w, xs, "W")), np_shift(x, "W"))
    assert int(fabric.reduce(w, xs, "max")) == 53
    assert int(fabric.reduce(w, xs, "sum")) == x.sum()


@pytest.mark.cpu_devices
def test_multicast_wider_than_a_block():
    # 2 x 4 mesh on 8 x 8: blocks of 2 columns; a 5-wide multicast spans three devices.
    w = _wafer((8, 8), (2, 4))
    x = _data((8, 8), per_pe=(), seed=2)
    got = w.gather(fabric.multicast(w, w.place(x), "E", 5))
    np.testing.assert_array_equal(got, np_multicast(x, "E", 5))


def _repairable(seed, rate):
    spec = preset("small")
    try:
        remap(spec, defect_map(spec, seed, rate))
    except DefectError:
        return False
    return True


@pytest.mark.cpu_devices
def test_defects_change_traffic_not_results():
    x = _data((32, 32), seed=3)
    clean = _wafer((32, 32), (2, 4))
    # The first seed whose map at 2% dead PEs is still repairable with the spares.
    seed = next(s for s in range(100) if _repairable(s, 0.02))
    dirty = build_wafer(
        preset("small"), grid=(32, 32), mesh_shape=(2, 4), defect_seed=seed, defect_rate=0.02
    )
    assert dirty.defects.num_dead > 5

    def step(w):
        def f(a):
            a = fabric.shift(w, a, "E", boundary="periodic")
            a = fabric.multicast(w, a, "N", 2).sum(axis=2)
            return fabric.allreduce(w, a * a, "sum", axis="row")

        return f

    a = clean.gather(jax.jit(step(clean))(clean.place(x)))
    b = dirty.gather(jax.jit(step(dirty))(dirty.place(x)))
    np.testing.assert_array_equal(a, b)  # bit-identical
    t_clean = fabric.count(clean, step(clean), clean.place(x))
    t_dirty = fabric.count(dirty, step(dirty), dirty.place(x))
    assert t_clean.words == t_dirty.words
    assert t_dirty.word_hops > t_clean.word_hops  # detours around dead PEs are paid


@pytest.mark.cpu_devices
def test_traffic_is_counted_at_trace_time():
    w = _wafer((8, 8), (2, 4))
    xs = w.place(_data((8, 8), per_pe=(4,)))
    t = fabric.count(w, lambda a: fabric.shift(w, a, "E"), xs)
    # the 7 PEs of each row with an east neighbour send (hunt 82: column 7 was counted too)
    assert t.count == 1 and t.words == 7 * 8 * 4 and t.word_hops == 7 * 8 * 4
    t = fabric.count(w, lambda a: fabric.multicast(w, a, "S", 3), xs)
    assert t.max_words_per_pe == 3 * 4 and t.latency_hops == 3
    step = jax.jit(lambda a: fabric.shift(w, a, "N"))
    before = len(w.traffic.entries)
    for _ in range(3):
        step(xs)
    assert len(w.traffic.entries) == before + 1  # traced once, run three times


@pytest.mark.cpu_devices
def test_bad_calls_are_clear_errors():
    w = _wafer((8, 8), (2, 4))
    xs = w.place(_data((8, 8)))
    with pytest.raises(WseError, match="unknown direction"):
        fabric.shift(w, xs, "up")
    with pytest.raises(WseError, match="boundary"):
        fabric.shift(w, xs, "E", boundary="mirror")
    with pytest.raises(PlacementError, match="placed field"):
        fabric.shift(w, np.zeros((3, 3)), "E")
    with pytest.raises(PlacementError, match="outside"):
        fabric.broadcast(w, xs, "row", 8)
    with pytest.raises(PlacementError, match="shape"):
        w.place(np.zeros((8, 7)))


@pytest.mark.cpu_devices
def test_periodic_shift_by_whole_turns_is_identity():
    w = _wafer((1, 6), (1, 2))
    x = _data((1, 6), seed=4)
    xs = w.place(x)
    np.testing.assert_array_equal(w.gather(fabric.shift(w, xs, "S", boundary="periodic")), x)
    np.testing.assert_array_equal(
        w.gather(fabric.shift(w, xs, "E", boundary="periodic", distance=7)), np.roll(x, 7, 1)
    )


@pytest.mark.parametrize(
    ("mesh", "grid", "k"), [((1, 1), (7, 10), (2, 3)), ((2, 4), (5, 13), (2, 6))]
)
def test_window_apply_sees_the_window_and_counts_the_whole_multicast(mesh, grid, k):
    """fn reads x (and a kept field) of the PE (dr, dc) away from each block's region (a
    4-PE-wide block gets a 6-column margin from two devices); the ledger has the multicasts
    E/W and the march N/S for x alone."""
    (kr, kc), w = k, _wafer(grid, mesh)
    x, y = _data(grid), _data(grid, per_pe=(), seed=1)
    width = 2 * kc + 1
    slots = np.random.default_rng(2).integers(0, (2 * kr + 1) * width, grid + (17,))

    def pick(region, kept, s):
        br, bc = s.shape[:2]
        pitch = region.shape[1]
        at = (np.arange(br)[:, None, None] + s // width) * pitch
        at = at + np.arange(bc)[:, None] + s % width
        return jnp.take(region.reshape(-1, 3), at, axis=0), jnp.take(kept.reshape(-1), at)

    def both(a, b, s):
        return fabric.window_apply(w, a, kr, kc, pick, s, kept=(b,))

    with w.traffic.scope() as entries:
        got, got_kept = jax.jit(both)(w.place(x), w.place(y), w.place(slots))
    rr = np.arange(grid[0])[:, None, None] + slots // width - kr
    cc = np.arange(grid[1])[None, :, None] + slots % width - kc
    np.testing.assert_array_equal(w.gather(got), x[rr % grid[0], cc % grid[1]])
    np.testing.assert_array_equal(w.gather(got_kept), y[rr % grid[0], cc % grid[1]])
    n, words = grid[0] * grid[1], 3
    assert [e.op for e in entries] == ["multicastE", "multicastW"] + ["shiftS", "shiftN"] * kr
    assert sum(e.words for e in entries) == n * words * (2 + 2 * kr * width)
    assert sum(e.max_words_per_pe for e in entries) == words * (2 * kc + 2 * kr * width)
    assert sum(e.latency_hops for e in entries) == 2 * kc + 2 * kr


@pytest.mark.parametrize(
    ("mesh", "grid"), [((1, 1), (7, 10)), ((2, 4), (5, 13)), ((4, 2), (7, 10))]
)
@pytest.mark.parametrize("direction", ["N", "S", "E", "W"])
@pytest.mark.parametrize("boundary", ["zero", "periodic"])
def test_multicast_apply_keeps_what_each_pe_picks_and_counts_the_multicast(
    mesh, grid, direction, boundary
):
    """fn keeps, per PE and element, the value `pick` steps upstream (0: its own) from each
    block's region; the result and the ledger equal the multicast's (a 4-wide multicast
    spans several devices on 2 x 4 and 4 x 2)."""
    w, k = _wafer(grid, mesh), 4
    x = _data(grid, per_pe=(6, 2))
    pick = np.random.default_rng(3).integers(0, k + 1, grid + (6,)).astype(np.int32)
    axis = 0 if direction in "NS" else 1
    first = direction in "SE"  # the margin comes first along the axis

    def keep(region, p):
        i = jnp.arange(p.shape[axis]).reshape((-1, 1, 1) if axis == 0 else (1, -1, 1))
        at = (i + k - p) if first else (i + p)
        at = at[..., None]
        if axis == 0:
            return jnp.take_along_axis(region, at, axis=0)
        return jnp.take_along_axis(region, at, axis=1)

    def run(a, p):
        return fabric.multicast_apply(w, a, direction, k, keep, p, boundary=boundary)

    with w.traffic.scope() as got_entries:
        got = w.gather(jax.jit(run)(w.place(x), w.place(pick)))
    every = np.concatenate([x[:, :, None], np_multicast(x, direction, k, boundary)], axis=2)
    want = np.take_along_axis(every, pick[:, :, None, :, None], axis=2)[:, :, 0]
    np.testing.assert_array_equal(got, want)
    with w.traffic.scope() as entries:
        jax.eval_shape(
            lambda a: fabric.multicast(w, a, direction, k, boundary=boundary), w.place(x)
        )
    assert got_entries == entries


@pytest.mark.parametrize(
    ("mesh", "grid"), [((1, 1), (7, 10)), ((2, 4), (5, 13)), ((4, 2), (7, 10))]
)
@pytest.mark.parametrize("axis", ["row", "col"])
def test_allreduce_apply_adds_block_sums_like_the_allreduce(mesh, grid, axis):
    """fn sums a product over its block's PEs (one einsum); the result and the ledger equal
    fabric.allreduce of the per-PE products along the same axis."""
    w = _wafer(grid, mesh)
    a, b = _data(grid, per_pe=(3, 4)), _data(grid, per_pe=(3,), seed=1)

    def block_sum(ab, bb):
        return jnp.einsum("rcij,rci->rj" if axis == "row" else "rcij,rci->cj", ab, bb)

    def run(pa, pb):
        return fabric.allreduce_apply(w, block_sum, pa, pb, axis=axis)

    with w.traffic.scope() as got_entries:
        got = w.gather(jax.jit(run)(w.place(a), w.place(b)))
    prod = np.einsum("rcij,rci->rcj", a, b)
    want = np.broadcast_to(prod.sum(1 if axis == "row" else 0, keepdims=True), prod.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with w.traffic.scope() as entries:
        jax.eval_shape(lambda p: fabric.allreduce(w, p, "sum", axis=axis), w.place(prod))
    assert got_entries == entries
    with pytest.raises(WseError, match="axis"):
        fabric.allreduce_apply(w, block_sum, w.place(a), w.place(b), axis=None)


@pytest.mark.parametrize(
    ("mesh", "grid"), [((1, 1), (7, 10)), ((2, 4), (5, 13)), ((4, 2), (7, 10))]
)
def test_local_apply_runs_per_pe_compute_on_blocks_and_moves_nothing(mesh, grid):
    """fn sees each block of the fields and the rows of the row data it covers; the result
    equals the same per-PE arithmetic on the whole grid, and nothing enters the ledger."""
    w = _wafer(grid, mesh)
    a = _data(grid, per_pe=(3,))
    rows = np.random.default_rng(2).normal(size=(w.padded_shape[0], 3)).astype(np.float32)

    def fn(block, row_block):
        return block * row_block[:, None, :] + 1.0

    def run(pa, r):
        return fabric.local_apply(w, fn, pa, row_data=(r,))

    with w.traffic.scope() as entries:
        got = w.gather(jax.jit(run)(w.place(a), jnp.asarray(rows)))
    np.testing.assert_allclose(got, a * rows[: grid[0], None, :] + 1.0, rtol=1e-6)
    assert entries == []
    with pytest.raises(PlacementError, match="row data"):
        fabric.local_apply(w, fn, w.place(a), row_data=(jnp.ones((w.padded_shape[0] + 1, 3)),))


@pytest.mark.parametrize(
    ("mesh", "grid"), [((1, 1), (7, 10)), ((2, 4), (5, 13)), ((4, 2), (7, 10))]
)
@pytest.mark.parametrize("boundary", ["zero", "periodic"])
@pytest.mark.parametrize("ghost", [0, 2])
def test_halo_apply_sees_the_cross_and_counts_four_shifts(mesh, grid, boundary, ghost):
    """fn reads the four neighbours (and the ghost cells of the per-PE axis) from each
    block's region: they equal the four shifts (and NumPy's zero pad or wrap); the ledger
    holds exactly what the four shifts record."""
    w = _wafer(grid, mesh)
    x = _data(grid, per_pe=(5,))
    g = ghost

    def fn(region):
        mid = region[1:-1, 1:-1]
        cross = (region[2:, 1:-1], region[:-2, 1:-1], region[1:-1, 2:], region[1:-1, :-2])
        return jnp.stack((mid, *cross), axis=-1)

    with w.traffic.scope() as entries:
        got = w.gather(
            jax.jit(lambda a: fabric.halo_apply(w, a, fn, boundary=boundary, ghost=g))(w.place(x))
        )
    mode = "wrap" if boundary == "periodic" else "constant"
    want_mid = np.pad(x, ((0, 0), (0, 0), (g, g)), mode=mode)
    np.testing.assert_array_equal(got[..., 0], want_mid)
    for j, d in enumerate("NSWE"):  # N: from the PE south (+1 row); W: from the PE east
        np.testing.assert_array_equal(got[..., 1 + j], np_shift(want_mid, d, 1, boundary))
    with w.traffic.scope() as shifts:
        jax.eval_shape(
            lambda a: [fabric.shift(w, a, d, boundary=boundary) for d in "NSWE"], w.place(x)
        )
    assert entries == shifts
    with pytest.raises(WseError, match="ghost"):
        fabric.halo_apply(w, w.place(x), fn, ghost=-1)
