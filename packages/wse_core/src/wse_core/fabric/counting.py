"""`count`: the fabric traffic a function would move, found by tracing it abstractly (no run).

The ledger records each fabric op when it is traced (`wse_core.hw.traffic`), so what a trace
runs is what is counted. `count` traces `fn` with `jax.disable_jit()` in force, which sets
the rules under JAX's transformations (each held by `tests/test_fabric_count_hunt74.py`
and `_hunt75.py`):

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
  ledger's `words_per_pe`, which reads the batch), inside cond, switch and while_loop too.
- `jax.grad` / `jax.vjp`: the forward pass's only. The backward is JAX's transpose of the
  traced program and never re-enters the fabric's Python, so the ledger cannot see it; on
  the wafer it moves about as much again (a shift's transpose is the opposite shift, a
  sum's allreduce is its own), so a gradient step is about twice the count.
- `count` inside a counted function: the inner count's traffic is its own, never added to
  the outer's (its ledger scope is `own`; hunt 76: a function that moved nothing counted
  the 256 words of the count it ran).

How. JAX traces a branch or a loop body into a jaxpr cached on the Python function (its
`trace_to_jaxpr`), before `vmap` batches it: a second count found the cache and recorded
nothing, and a vmapped branch recorded one example (hunt 75). While `count` runs, the
`jax.lax` names `cond`, `switch` and `while_loop` (and the `while_loop` that a `fori_loop`
over traced bounds calls) are `_CONTROL`'s: on this thread, a traced predicate runs every
branch (a loop's cond and body once) in Python on the caller's values, as `disable_jit` runs
a concrete one, and JAX's own function builds the result from their outputs; elsewhere, and
on a concrete predicate, they are JAX's. A function that bound one of them under another name
before (`from jax.lax import cond`) keeps JAX's, with its cache. A vmapped predicate over
operands that are not batched counts one example (JAX runs the branches on every one).
`jax.checkpoint` caches its trace the same way and is not covered: a checkpointed fabric
op counts once, then 0.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

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

    with wafer.traffic.scope(own=True) as entries, jax.disable_jit(), _control_in_python():
        jax.eval_shape(fresh, *args)
    total = Traffic()
    for e in entries:
        total = total + e
    return total


# -- control flow run in Python while counting (module docstring) ------------------------
_COUNTING = contextvars.ContextVar("wse_core_fabric_counting", default=False)
_LOCK = threading.Lock()
_USERS = [0]  # counts running, on any thread: JAX's names are ours while it is above 0
_HOMES = ("jax.lax", "jax._src.lax.control_flow", "jax._src.lax.control_flow.loops")
_JAX: dict[str, Callable[..., Any]] = {}  # JAX's own cond, switch, while_loop


def _concrete(x: Any) -> bool:
    """Whether JAX can read x's value now (then its `disable_jit` runs the branch taken)."""
    try:
        np.asarray(x)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return False
    return True


def _cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any, **kw: Any) -> Any:
    if not _COUNTING.get() or kw or _concrete(pred):
        return _JAX["cond"](pred, true_fun, false_fun, *operands, **kw)
    yes, no = true_fun(*operands), false_fun(*operands)
    return _JAX["cond"](pred, lambda: yes, lambda: no)


def _switch(index: Any, branches: Sequence[Callable], *operands: Any, **kw: Any) -> Any:
    if not _COUNTING.get() or kw or len(branches) < 2 or _concrete(index):
        return _JAX["switch"](index, branches, *operands, **kw)
    outs = [branch(*operands) for branch in branches]
    return _JAX["switch"](index, [functools.partial(lambda o: o, o) for o in outs])


def _while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """Trips while the predicate is concrete, as `disable_jit` runs them; at the first traced
    one, one trip of the body (a lower bound) and JAX's loop, stopped there, for the result."""
    if not _COUNTING.get():
        return _JAX["while_loop"](cond_fun, body_fun, init_val)
    val = jax.tree.map(jnp.asarray, init_val)
    while True:
        go = cond_fun(val)
        if not _concrete(go):
            break
        if not go:
            return val
        val = jax.tree.map(jnp.asarray, body_fun(val))
    body_fun(val)
    return _JAX["while_loop"](lambda _: go, lambda c: c, val)


_CONTROL = {"cond": _cond, "switch": _switch, "while_loop": _while_loop}


@contextlib.contextmanager
def _control_in_python() -> Iterator[None]:
    """`_CONTROL` in JAX's names while any count runs; in force on this thread's only."""
    with _LOCK:
        if _USERS[0] == 0:
            _swap(install=True)
        _USERS[0] += 1
    token = _COUNTING.set(True)
    try:
        yield
    finally:
        _COUNTING.reset(token)
        with _LOCK:
            _USERS[0] -= 1
            if _USERS[0] == 0:
                _swap(install=False)


def _swap(*, install: bool) -> None:
    """Put `_CONTROL` in each of `_HOMES` that holds JAX's function (or JAX's back where
    ours still stands: a name someone else replaced meanwhile stays theirs)."""
    for name, ours in _CONTROL.items():
        jaxs = _JAX.setdefault(name, getattr(jax.lax, name))
        for home in _HOMES:
            module = sys.modules.get(home)
            old, new = (jaxs, ours) if install else (ours, jaxs)
            if module is not None and getattr(module, name, None) is old:
                setattr(module, name, new)
