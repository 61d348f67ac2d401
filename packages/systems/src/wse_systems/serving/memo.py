"""Bounded caches of the wafer serving model's pure results, shared by every `WaferServing`.

Contract. `Memo(size).get(key, compute)` is `compute()` once per `key` and context, the
`size` most recently used kept. The context is what the cost model reads besides its
arguments: the active assumptions (`wse_core.cost.assumptions.active`), the calibration in
force (`wse_core.cost.calibration.current`, by id: each fit is kept for good, so an id is
never another fit's; the entry keeps it alive too) and whether a block is recording the
constants read (`wse_core.cost.reads.reading`: pricing skips its notes when none is); the
caller's key holds the rest (`wse_systems.serving.wafer`: the phase builders in use too,
as a test swaps in an unshared builder for its oracle). What `compute()` read is kept with
its value and read again on every hit, so a prediction lists the same constants warm or
cold (`wse_core.cost.listing`).

Why: a serving system is built for each layout, load, draft and wafer count asked, and
tests and `wse plan` build several for the same model: each searched the placements and
priced the same plans again (a 96-layer model with its draft took 13 s for four systems,
most of it twice over). `frozen(obj)` turns a spec, config or plan into a key by value.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from wse_core.cost import assumptions, calibration, reads

__all__ = ["Memo", "frozen", "context"]

T = TypeVar("T")


def frozen(obj: Any) -> Any:
    """`obj` as a hashable value: dataclasses, mappings and sequences field by field."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        values = (frozen(getattr(obj, f.name)) for f in dataclasses.fields(obj))
        return (type(obj).__name__, *values)
    if isinstance(obj, Mapping):
        return tuple(sorted((k, frozen(v)) for k, v in obj.items()))
    if isinstance(obj, list | tuple):
        return tuple(frozen(v) for v in obj)
    hash(obj)  # an unhashable leaf is a TypeError here, never a wrong hit
    return obj


def context() -> tuple[tuple, Any]:
    """(the key of what the cost model reads besides its arguments, the calibration)."""
    cal = calibration.current()
    key = (tuple(sorted(assumptions.active().items())), id(cal), reads.reading())
    return key, cal


def _replay(got: reads.Reads | None) -> None:
    """Read again what a computation read, into every block recording now."""
    for key, values in (got.values if got else {}).items():
        for v in values:
            reads.read(key, v, key in got.moving)  # type: ignore[union-attr]


class Memo:
    """`compute()` once per key and context, the `size` latest kept (module contract)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._held: collections.OrderedDict[tuple, tuple[Any, reads.Reads | None, Any]] = (
            collections.OrderedDict()
        )

    def get(self, key: tuple, compute: Callable[[], T]) -> T:
        ctx, cal = context()
        full = (key, ctx)
        if full in self._held:
            self._held.move_to_end(full)
            value, got, _ = self._held[full]
            _replay(got)
            return value
        if reads.reading():  # read into the blocks recording now and kept for a hit
            with reads.recording() as got:
                value = compute()
        else:
            value, got = compute(), None
        self._held[full] = (value, got, cal)
        while len(self._held) > self.size:
            self._held.popitem(last=False)
        return value

    def clear(self) -> None:
        self._held.clear()
