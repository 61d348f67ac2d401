"""`fabric.sliding_extreme` is the doubling shifts the PE runs, bit for bit and in the ledger,
and a NumPy oracle that walks each PE's run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import WseError, fabric, preset
from wse_core.hw.wafer import build_wafer


def _wafer(grid, mesh):
    return build_wafer(preset("small"), grid=grid, mesh_shape=mesh)


def _doubled(w, v, op, direction, width, start, wrap_add):
    """The PE program `fabric.sliding_extreme` stands for, as `fabric.shift`s: the extreme
    by doubling (each shift brings the partial extreme `span` PEs upstream), then a shift by
    `start`; a value gains `wrap_add` for each time its shift crossed the axis's far end."""
    axis = 0 if direction in "NS" else 1
    size = (w.rows, w.cols)[axis]
    index = jnp.arange(w.padded_shape[axis]).reshape((-1, 1) if axis == 0 else (1, -1))

    def moved(a, d, toward=direction):  # the value of the PE d upstream of `toward`
        out = fabric.shift(w, a, toward, boundary="periodic", distance=d)
        g = index + (d if toward in "NW" else -d)
        turn = (g >= size).astype(a.dtype) - (g < 0).astype(a.dtype)
        return out + (wrap_add * turn)[..., None]

    combine = jnp.minimum if op == "min" else jnp.maximum
    span, acc = 1, v
    while 2 * span <= width:
        acc, span = combine(acc, moved(acc, span)), 2 * span
    if span < width:
        acc = combine(acc, moved(acc, width - span))
    if start < 0:  # the run begins downstream: a shift the other way
        return moved(acc, -start, {"N": "S", "S": "N", "E": "W", "W": "E"}[direction])
    return moved(acc, start) if start else acc


@pytest.mark.parametrize(("mesh", "grid"), [((1, 1), (8, 8)), ((2, 4), (7, 10)), ((2, 4), (5, 13))])
def test_sliding_extreme_is_the_doubling_program_bit_for_bit(mesh, grid):
    """Against the doubling shifts the PE runs (values bit for bit, the same ledger) and a
    NumPy oracle that walks each PE's run; runs wider than a block, negative starts, an
    unrolled coordinate, padding PEs holding garbage."""
    w = _wafer(grid, mesh)
    x = np.random.default_rng(4).normal(size=grid + (3,)).astype(np.float32)
    xs = w.place(x).at[grid[0] :].set(1e6).at[:, grid[1] :].set(-1e6)
    cases = []
    for direction in "NSEW":
        n = grid[0 if direction in "NS" else 1]
        cases += [
            (direction, "min", n, 0, 0.0),
            (direction, "max", n - 3, 2, 7.5),
            (direction, "min", 3, -1, 0.0),
            (direction, "max", max(1, n // 2), 1 - n // 2, 4.0),
        ]

    @jax.jit
    def both(a):
        got = [
            fabric.sliding_extreme(w, a, o, d, k, start=s, wrap_add=u) for d, o, k, s, u in cases
        ]
        # the program, where it adds each value's turns once (else it rounds twice)
        want = [
            _doubled(w, a, o, d, k, s, u) if s >= 0 or not u else None for d, o, k, s, u in cases
        ]
        return got, want

    got, want = both(xs)
    for (direction, op, width, start, wrap), g, p in zip(cases, got, want, strict=True):
        axis = 0 if direction in "NS" else 1
        n, up = grid[axis], 1 if direction in "NW" else -1
        if p is not None:
            np.testing.assert_array_equal(w.gather(g), w.gather(p))
        runs = []
        for t in range(width):
            cells = np.arange(n) + up * (start + t)
            turn = np.floor_divide(cells, n).astype(np.float32)
            vals = np.take(x, cells % n, axis=axis)
            runs.append(vals + wrap * turn.reshape((-1, 1, 1) if axis == 0 else (1, -1, 1)))
        oracle = (np.min if op == "min" else np.max)(np.stack(runs), axis=0)
        np.testing.assert_array_equal(w.gather(g), oracle)
    for start, moves in [(2, ("W", 2)), (-2, ("E", 2))]:
        one = fabric.count(
            w, lambda a, s=start: fabric.sliding_extreme(w, a, "max", "W", 5, start=s), xs
        )
        program = fabric.count(
            w,
            lambda a, moves=moves: [
                fabric.shift(w, a, d, distance=k, boundary="periodic")  # its program's shifts
                for d, k in [("W", 1), ("W", 2), ("W", 1), moves]
            ],
            xs,
        )  # doubling by 1 and 2, the remainder 1, then the start
        assert (one.count, one.words, one.word_hops) == (
            program.count,
            program.words,
            program.word_hops,
        )
    with pytest.raises(WseError, match="width"):
        fabric.sliding_extreme(w, xs, "min", "N", grid[0] + 1)
