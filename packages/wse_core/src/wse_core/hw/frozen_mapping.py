"""`FrozenMapping`: a read-only mapping that is a value, for the mapping fields of frozen
dataclasses (`WaferSpec.simd_widths`, `.flops_per_cycle`, `RunReport.sram`, `Traffic.links`,
`Cost.mechanisms`).

Contract. It reads as `types.MappingProxyType` does (no item assignment, no `update`, `pop`
or `clear`; it compares equal to any mapping of the same items; `fm | d` and `d | fm` are
plain dicts, as is `fm.copy()`; `reversed(fm)` walks the keys backwards; `fm |= d` is a
TypeError) and, unlike it, hashes by its items and survives `pickle` and
`copy.deepcopy` (hunt 74: a `WaferSpec` could be neither a `jax.jit` static argument nor sent
to another process). Its values must be hashable for `hash` (numbers, text); the items are
copied when built, so the caller's dict may change after.

It is a `dict` subclass whose mutators refuse (hunt 75), so that `json.dumps` writes it and
`dataclasses.asdict` of a spec, which rebuilds each dict by its type, gives one `json.dumps`
writes. `dict.__setitem__(fm, ...)` called on the class itself still writes, as on any dict:
code that does that breaks its hash.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

__all__ = ["FrozenMapping"]


class FrozenMapping(dict[str, Any]):
    """A read-only copy of a mapping (or of (key, value) pairs), equal and hashed by its
    items."""

    __slots__ = ("_hash",)
    _hash: int | None

    def __new__(
        cls, items: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None
    ) -> FrozenMapping:
        self = super().__new__(cls)
        dict.update(self, items or {})
        object.__setattr__(self, "_hash", None)
        return self

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None) -> None:
        pass  # filled in __new__: dict.__init__ would update, and a second call mutate

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict.__eq__(self, other if isinstance(other, dict) else dict(other))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        same = self.__eq__(other)
        return same if same is NotImplemented else not same

    def __hash__(self) -> int:  # type: ignore[override]
        h = self._hash
        if h is None:  # order-free, as equality is
            h = hash(frozenset(self.items()))
            object.__setattr__(self, "_hash", h)
        return h

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a FrozenMapping is read-only: cannot set {name!r}")

    def __setitem__(self, key: str, value: Any) -> NoReturn:
        raise TypeError("'FrozenMapping' object does not support item assignment")

    def __delitem__(self, key: str) -> NoReturn:
        raise TypeError("'FrozenMapping' object does not support item deletion")

    def __ior__(self, other: object) -> NoReturn:  # type: ignore[misc]
        raise TypeError("'|=' is not supported by FrozenMapping; use '|' instead")

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AttributeError("a FrozenMapping is read-only: it has no update, pop or clear")

    update = setdefault = pop = popitem = clear = _read_only

    def __reduce__(self) -> tuple[type[FrozenMapping], tuple[dict[str, Any]]]:
        return (FrozenMapping, (dict(self),))

    def __repr__(self) -> str:
        return f"FrozenMapping({dict.__repr__(self)})"
