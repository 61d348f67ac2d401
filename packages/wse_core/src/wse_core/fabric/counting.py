"""`count`: the fabric traffic a function would move, found by tracing it abstractly (no run).

The ledger records each fabric op when it is traced (`wse_core.hw.traffic`), so what a trace
runs is what is counted. `count` traces `fn` with `jax.disable_jit()` in force, which sets
the rules under JAX's transformations (each held by `tests/test_fabric_count_hunt74.py`):

- `jax.jit` inside fn: traced every time, whatever jit has cached (hunt 74: a jitted step
  counted a second time, or after it ran, recorded 0 words).
- `lax.fori_loop` with static bounds, `lax.scan`, `lax.map`: the body runs once a trip, so
  the traffic is the trip count times one trip's, as a Python loop records it. A
  `lax.while_loop` (or a `fori_loop` over traced bounds) has no trip count at trace time:
  one trip's traffic, a lower bound.
- `lax.cond` / `lax.switch` on a traced predicate: every branch is traced and summed, an
  upper bound (no branch is known to be the one that runs); on a concrete predicate only
  the branch taken.
- `jax.vmap`: every example's traffic (the batch times one example's; the ops ask the
  ledger's `words_per_pe`, which reads the batch).
- `jax.grad` / `jax.vjp`: the forward pass's only. The backward is JAX's transpose of the
  traced program and never re-enters the fabric's Python, so the ledger cannot see it; on
  the wafer it moves about as much again (a shift's transpose is the opposite shift, a
  sum's allreduce is its own), so a gradient step is about twice the count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from wse_core.errors import WseError
from wse_core.hw.traffic import Traffic
from wse_core.hw.wafer import Wafer

__all__ = ["count"]


def count(wafer: Wafer, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Traffic:
    """The traffic `fn(*args, **kwargs)` records, traced abstractly (the rules under jit,
    loops, cond, vmap and grad are the module docstring's). args may be arrays or
    `jax.ShapeDtypeStruct`s."""

    if not callable(fn):
        raise WseError(f"fabric.count needs a function to trace, got a {type(fn).__name__}")

    def fresh(*a: Any) -> Any:  # eval_shape caches traces by function object
        return fn(*a, **kwargs)

    with wafer.traffic.scope() as entries, jax.disable_jit():
        jax.eval_shape(fresh, *args)
    total = Traffic()
    for e in entries:
        total = total + e
    return total
