"""`fabric.count` through control flow (hunt 75), held against hand counts:

- a function with a `lax.cond` / `lax.switch` / `lax.while_loop` on a traced value counted
  768 words the first time and 0 after (JAX caches a branch's or body's trace on the Python
  function, so the fabric code never ran again): every count is now the first's, through a
  new wrapper, a second switch reusing a counted branch, a jitted run before, a `fori_loop`
  over traced bounds;
- under `jax.vmap` a branch or loop body counted one example: now every example, as outside
  control flow.

Hand count: a shift of a (rows, cols, 4) fp32 field injects rows * cols * 4 words; an
allreduce twice that (reduce and broadcast back, `ledger.record_reduce`)."""

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from wse_core import fabric

# hunt 74's wafer, field and hand counts, the same case
_spec = importlib.util.spec_from_file_location(
    "fabric_count_hunt74", Path(__file__).with_name("test_fabric_count_hunt74.py")
)
H74 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(H74)
PER_PE, SHIFT, ALLREDUCE = H74.PER_PE, H74.SHIFT, H74.ALLREDUCE
wafer, field = H74.wafer, H74.field  # module-scoped fixtures
BATCH = 3


def _ops(wafer):
    def shifted(a):
        return fabric.shift(wafer, a, "E", boundary="periodic")

    def summed(a):
        return fabric.allreduce(wafer, a)

    return shifted, summed


def _three(wafer, fn, *args):
    return [fabric.count(wafer, fn, *args).words for _ in range(3)]


def test_cond_and_switch_count_the_same_every_time(wafer, field):
    shifted, summed = _ops(wafer)

    def step(a):
        return lax.cond(a[0, 0, 0] > 0, shifted, summed, a)

    def pick(a):
        return lax.switch(a[0, 0, 0].astype(int), [shifted, summed, lambda b: b], a)

    assert _three(wafer, step, field) == [SHIFT + ALLREDUCE] * 3
    assert fabric.count(wafer, lambda a: step(a), field).words == SHIFT + ALLREDUCE
    jax.jit(step)(field).block_until_ready()
    assert fabric.count(wafer, step, field).words == SHIFT + ALLREDUCE
    assert _three(wafer, pick, field) == [SHIFT + ALLREDUCE] * 3

    def again(a):  # a second switch whose branches were all counted before
        return lax.switch(a[0, 0, 0].astype(int), [shifted, shifted, summed], a)

    assert _three(wafer, again, field) == [2 * SHIFT + ALLREDUCE] * 3


def test_a_data_dependent_loop_counts_one_trip_every_time(wafer, field):
    shifted, _ = _ops(wafer)

    def body(c):
        return c[0] + 1, shifted(c[1])

    def relax(a):
        return lax.while_loop(lambda c: c[0] < a[0, 0, 0], body, (0.0, a))[1]

    def fori(a):
        return lax.fori_loop(0, a[0, 0, 0].astype(int), lambda i, c: shifted(c), a)

    assert _three(wafer, relax, field) == [SHIFT] * 3
    assert _three(wafer, fori, field) == [SHIFT] * 3


def test_vmap_counts_every_example_inside_control_flow(wafer, field):
    shifted, summed = _ops(wafer)
    fields = jnp.stack([field] * BATCH)
    chosen = jax.vmap(lambda p, a: lax.cond(p, shifted, summed, a))
    preds = jnp.array([True, False, True])
    assert _three(wafer, chosen, preds, fields) == [BATCH * (SHIFT + ALLREDUCE)] * 3
    own = jax.vmap(lambda a: lax.cond(a[0, 0, 0] > 0, shifted, summed, a))
    assert fabric.count(wafer, own, fields).words == BATCH * (SHIFT + ALLREDUCE)
    switched = jax.vmap(lambda i, a: lax.switch(i, [shifted, summed], a))
    assert fabric.count(wafer, switched, jnp.arange(BATCH), fields).words == (
        BATCH * (SHIFT + ALLREDUCE)
    )
    looped = jax.vmap(
        lambda a: lax.while_loop(
            lambda c: c[0] < c[1][0, 0, 0], lambda c: (c[0] + 1, shifted(c[1])), (0.0, a)
        )[1]
    )
    assert _three(wafer, looped, fields) == [BATCH * SHIFT] * 3
    known = jax.vmap(lambda a: lax.cond(True, shifted, summed, a))  # only the branch taken
    assert fabric.count(wafer, known, fields).words == BATCH * SHIFT


def test_control_flow_is_jaxs_outside_a_count(wafer, field):
    """The names are JAX's again after a count, and a jitted cond still computes what NumPy
    does (a shift east on the periodic grid: every value moves one column)."""
    shifted, summed = _ops(wafer)
    names = (lax.cond, lax.switch, lax.while_loop, jax.lax.fori_loop)

    def step(a):
        return lax.cond(a[0, 0, 0] > 0, shifted, summed, a)

    fabric.count(wafer, step, field)
    assert (lax.cond, lax.switch, lax.while_loop, jax.lax.fori_loop) == names
    values = np.arange(8 * 8 * PER_PE, dtype=np.float32).reshape(8, 8, PER_PE) + 1
    got = np.asarray(jax.jit(step)(wafer.place(values)))
    np.testing.assert_array_equal(got, np.roll(values, 1, axis=1))
