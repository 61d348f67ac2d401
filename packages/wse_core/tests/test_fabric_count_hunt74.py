"""`fabric.count` under JAX's transformations (hunt 74), each rule of
`wse_core.fabric.counting` held against a hand count or a Python loop's count:

- a `jax.jit`-wrapped step counted a second time, after it ran, or through a fresh
  `jax.jit` of the same function recorded 0 words (jit's trace cache): every count is now
  the first's;
- `lax.fori_loop` / `lax.scan` / `lax.map` of 10 shifts recorded one shift (a Python loop
  10): now the trip count times one trip; a `while_loop`, one trip (documented);
- `jax.vmap` over 3 fields recorded one: now every example;
- `lax.cond` sums both branches (an upper bound, documented); `jax.grad` counts the forward
  only (the backward never re-enters the fabric, documented).

Hand count: a periodic shift of a (rows, cols, 4) fp32 field injects rows * cols * 4 words,
a zero-boundary shift E those of the PEs with an east neighbour, rows * (cols - 1) * 4
(hunt 82: the last column, which sends nothing, was counted); an allreduce twice rows *
cols * 4 (reduce and broadcast back, `ledger.record_reduce`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from wse_core import fabric, preset
from wse_core.errors import WseError
from wse_core.hw.wafer import build_wafer

PER_PE = 4
SHIFT = 8 * 8 * PER_PE  # words of one periodic shift on 8 x 8, 4 fp32 values a PE
EDGE_SHIFT = 8 * 7 * PER_PE  # a zero-boundary shift E: column 7 has no east neighbour
ALLREDUCE = 2 * SHIFT


@pytest.fixture(scope="module")
def wafer():
    return build_wafer(preset("tiny"), grid=(8, 8), mesh_shape=(2, 2))


@pytest.fixture(scope="module")
def field(wafer):
    return wafer.place(np.ones((8, 8, PER_PE), np.float32))


def test_a_jitted_step_counts_the_same_every_time(wafer, field):
    def smooth(a):
        return fabric.allreduce(wafer, fabric.shift(wafer, a, "E") + a)

    step = jax.jit(smooth)
    first = fabric.count(wafer, step, field).words
    second = fabric.count(wafer, step, field).words
    step(field).block_until_ready()
    after_run = fabric.count(wafer, step, field).words
    fresh_jit = fabric.count(wafer, jax.jit(smooth), field).words
    assert first == second == after_run == fresh_jit == EDGE_SHIFT + ALLREDUCE


def _shifted(wafer, a):
    return fabric.shift(wafer, a, "E", boundary="periodic")


def test_static_loops_count_every_trip_as_a_python_loop(wafer, field):
    def python_loop(a):
        for _ in range(10):
            a = _shifted(wafer, a)
        return a

    def fori(a):
        return lax.fori_loop(0, 10, lambda i, a: _shifted(wafer, a), a)

    def scanned(a):
        return lax.scan(lambda a, _: (_shifted(wafer, a), None), a, None, length=10)[0]

    def mapped(a):  # lax.map is a scan over its leading axis
        return lax.map(lambda b: _shifted(wafer, b), jnp.stack([a] * 10))

    oracle = fabric.count(wafer, python_loop, field)
    assert oracle.words == 10 * SHIFT and oracle.count == 10
    for fn in (fori, scanned, mapped):
        got = fabric.count(wafer, fn, field)
        assert (got.words, got.count, dict(got.links)) == (
            oracle.words,
            oracle.count,
            dict(oracle.links),
        ), fn.__name__


def test_a_while_loop_counts_one_trip(wafer, field):
    """No trip count at trace time: one trip's traffic (a lower bound), documented."""

    def loop(a):
        return lax.while_loop(
            lambda c: c[0] < 10, lambda c: (c[0] + 1, _shifted(wafer, c[1])), (0, a)
        )

    assert fabric.count(wafer, loop, field).words == SHIFT


def test_vmap_counts_every_example(wafer, field):
    one = jax.vmap(lambda a: fabric.shift(wafer, a, "E"))
    assert fabric.count(wafer, one, jnp.stack([field] * 3)).words == 3 * EDGE_SHIFT
    nested = jax.vmap(jax.vmap(lambda a: fabric.allreduce(wafer, a)))
    assert fabric.count(wafer, nested, jnp.stack([jnp.stack([field] * 3)] * 2)).words == (
        6 * ALLREDUCE
    )


def test_cond_sums_both_branches_unless_the_predicate_is_known(wafer, field):
    def branch(a, pred):
        return lax.cond(
            pred, lambda b: fabric.shift(wafer, b, "E"), lambda b: fabric.allreduce(wafer, b), a
        )

    traced = fabric.count(wafer, lambda a: branch(a, a[0, 0, 0] > 0), field)
    assert traced.words == EDGE_SHIFT + ALLREDUCE  # an upper bound: both branches
    assert fabric.count(wafer, lambda a: branch(a, True), field).words == EDGE_SHIFT


def test_grad_counts_the_forward_pass(wafer, field):
    """The backward is JAX's transpose of the traced program: the ledger cannot see it."""

    def loss(a):
        return (fabric.shift(wafer, a, "E") ** 2)[:8, :8].sum()

    assert fabric.count(wafer, jax.grad(loss), field).words == EDGE_SHIFT


def test_count_refuses_what_is_not_a_function(wafer, field):
    with pytest.raises(WseError, match="needs a function to trace, got a int"):
        fabric.count(wafer, 3, field)
