"""Hunt 72 in the fabric, each against an oracle outside it (NumPy, hand counts).

Broken before:
- a periodic `shift` was priced at the distance asked, not the rotation it performs: 10,001
  on a 4-wide grid was 10,001 latency hops (2.35e-5 s), a whole turn (the identity) 4 hops, a
  1 x 1 periodic shift one word-hop;
- `jax.grad` of a "max" `reduce` / `allreduce` raised NotImplementedError (`lax.pmax` has no
  differentiation rule) on every multi-device mesh;
- a periodic `halo_apply` refused a 1-row or 1-column grid ("a periodic halo of 1 needs a
  grid over 1") that a periodic `shift` accepts.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import fabric, preset
from wse_core.hw.traffic import Traffic
from wse_core.hw.wafer import build_wafer

SHIFT_CASES = [((1, 1), (4, 6)), ((2, 2), (5, 7)), ((1, 2), (4, 6))]


def _wafer(grid, mesh):
    return build_wafer(preset("small"), grid=grid, mesh_shape=mesh)


def _data(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _rolled(x, direction, d):
    """NumPy's rotation: "E" PE (r, c) gets x[r, c - d], "N" x[r + d, c], and so on."""
    axis, sign = {"N": (0, -1), "S": (0, 1), "E": (1, 1), "W": (1, -1)}[direction]
    return np.roll(x, sign * d, axis=axis)


def _hand_count(pes, words, size, direction, d):
    """(word-hops, latency hops, links) of a rotation by d on a ring of `size` PEs (no
    defects: one hop a link): min(r, size - r) links the short way, r = d mod size."""
    r = d % size
    if r == 0:
        return 0.0, 0.0, {}
    other = {"N": "S", "S": "N", "E": "W", "W": "E"}[direction]
    hops, way = (r, direction) if r <= size - r else (size - r, other)
    return pes * words * hops, float(hops), {way: words * hops}


@pytest.mark.parametrize(("mesh", "grid"), SHIFT_CASES)
@pytest.mark.parametrize("direction", ["E", "N"])
def test_a_periodic_shift_is_priced_as_the_rotation_it_performs(mesh, grid, direction):
    w = _wafer(grid, mesh)
    x = _data(grid + (2,))
    xs = w.place(x)
    size = grid[1] if direction == "E" else grid[0]
    words = 2.0  # two fp32 values a PE
    for d in (1, 2, size - 1, size, size + 1, 2 * size, 10_001):

        def moved(a, d=d):
            return fabric.shift(w, a, direction, boundary="periodic", distance=d)

        np.testing.assert_array_equal(w.gather(jax.jit(moved)(xs)), _rolled(x, direction, d))
        got = fabric.count(w, moved, xs)
        word_hops, latency, links = _hand_count(w.num_pes, words, size, direction, d)
        assert (got.word_hops, got.latency_hops, dict(got.links)) == (word_hops, latency, links), d
        if d % size:
            assert got == fabric.count(w, lambda a, r=d % size: moved(a, r), xs)
        else:  # the identity moves nothing: no entry at all
            assert got == Traffic()


def test_a_one_pe_ring_shift_records_nothing():
    w = _wafer((1, 1), (1, 1))
    x = _data((1, 1, 3))
    with w.traffic.scope() as entries:
        out = fabric.shift(w, w.place(x), "E", boundary="periodic")
    np.testing.assert_array_equal(w.gather(out), x)
    assert entries == []


def _max_grad(x, axes, ct):
    """d <ct, max(x over `axes`)> / dx in NumPy, jnp.max's rule: ct divided by how many
    elements hold the maximum (ties split evenly), at each of them; 0 elsewhere."""
    hot = x == x.max(axis=axes, keepdims=True)
    share = (ct / hot.sum(axis=axes, keepdims=True)).astype(np.float32)
    return np.where(hot, share, np.float32(0))


@pytest.mark.parametrize("mesh", [(2, 2), (1, 2), (2, 1), (1, 1)])
@pytest.mark.parametrize("grid", [(5, 7), (4, 4)])
def test_grad_of_a_max_reduction_is_jnp_max_s(mesh, grid):
    """Values 0, 1, 2 only: many ties, spread over several devices."""
    w = _wafer(grid, mesh)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 3, size=grid + (3,)).astype(np.float32)
    xs = w.place(x)
    wts = rng.normal(size=3).astype(np.float32)
    g = jax.grad(lambda a: jnp.sum(wts * fabric.reduce(w, a, "max")))(xs)
    np.testing.assert_array_equal(w.gather(g), _max_grad(x, (0, 1), wts))
    np.testing.assert_array_equal(fabric.reduce(w, xs, "max"), x.max((0, 1)))
    for axis, axes in (("row", 1), ("col", 0), (None, (0, 1))):
        c = rng.normal(size=grid + (3,)).astype(np.float32)

        def loss(a, c=c, axis=axis):
            return jnp.sum(w.place(c) * fabric.allreduce(w, a, "max", axis=axis))

        # every PE of a group receives the max: its cotangent is the group's sum of c
        want = _max_grad(x, axes, c.sum(axis=axes, keepdims=True))
        # rtol: the group's sum of c added in another order (per block, then across devices)
        np.testing.assert_allclose(w.gather(jax.grad(loss)(xs)), want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mesh", [(2, 2), (1, 1)])
def test_a_max_reduction_records_what_it_did_before(mesh):
    """The ledger of a max is the sum's (the same chain), by hand: a reduce to one value
    is n w words over the PEs, an allreduce twice that."""
    w = _wafer((5, 7), mesh)
    xs = w.place(_data((5, 7, 2)))
    for fn, mult in ((fabric.reduce, 1), (fabric.allreduce, 2)):
        got = fabric.count(w, lambda a, fn=fn: fn(w, a, "max"), xs)
        ref = fabric.count(w, lambda a, fn=fn: fn(w, a, "sum"), xs)
        assert got.words == ref.words == 35 * 2 * mult
        assert (got.word_hops, got.latency_hops, got.links) == (
            ref.word_hops,
            ref.latency_hops,
            ref.links,
        )


@pytest.mark.parametrize(
    ("mesh", "grid"), [((1, 1), (1, 5)), ((2, 2), (1, 5)), ((2, 2), (1, 1)), ((1, 4), (3, 1))]
)
@pytest.mark.parametrize("boundary", ["periodic", "zero"])
def test_halo_apply_on_a_one_pe_axis_is_numpy_s_pad(mesh, grid, boundary):
    """A 1-PE periodic ring wraps onto itself (np.pad's wrap); zero pads with zeros; the
    ledger is what the four shifts record (none along a 1-PE axis)."""
    w = _wafer(grid, mesh)
    x = _data(grid + (2,), seed=3)

    def fn(region):
        mid = region[1:-1, 1:-1]
        cross = (region[2:, 1:-1], region[:-2, 1:-1], region[1:-1, 2:], region[1:-1, :-2])
        return jnp.stack((mid, *cross), axis=-1)

    with w.traffic.scope() as entries:
        got = w.gather(
            jax.jit(lambda a: fabric.halo_apply(w, a, fn, boundary=boundary))(w.place(x))
        )
    mode = "wrap" if boundary == "periodic" else "constant"
    p = np.pad(x, ((1, 1), (1, 1), (0, 0)), mode=mode)
    want = (p[1:-1, 1:-1], p[2:, 1:-1], p[:-2, 1:-1], p[1:-1, 2:], p[1:-1, :-2])
    np.testing.assert_array_equal(got, np.stack(want, axis=-1))
    with w.traffic.scope() as shifts:
        jax.eval_shape(
            lambda a: [fabric.shift(w, a, d, boundary=boundary) for d in "NSWE"], w.place(x)
        )
    assert entries == shifts
    # none along a 1-PE axis, periodic (its ring wraps onto itself) or zero (no neighbour
    # that way: hunt 82 recorded a hop and a link word each)
    one_pe_axes = sum(n == 1 for n in grid)
    assert len(entries) == 4 - 2 * one_pe_axes
