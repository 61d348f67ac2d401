"""`FrozenMapping`: a read-only mapping that is a value, for the mapping fields of frozen
dataclasses (`WaferSpec.simd_widths`, `.flops_per_cycle`).

Contract. It reads as `types.MappingProxyType` does (no item assignment, no `update`; it
compares equal to any mapping of the same items) and, unlike it, hashes by its items and
survives `pickle` and `copy.deepcopy` (hunt 74: a `WaferSpec` could be neither a
`jax.jit` static argument nor sent to another process). Its values must be hashable for
`hash` (numbers, text); the items are copied when built, so the caller's dict may change
after.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["FrozenMapping"]


class FrozenMapping(Mapping[str, Any]):
    """A read-only copy of a mapping, equal and hashed by its items."""

    __slots__ = ("_items", "_hash")
    _items: dict[str, Any]
    _hash: int | None

    def __init__(self, items: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "_items", dict(items or {}))
        object.__setattr__(self, "_hash", None)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMapping):
            return self._items == other._items
        return self._items == other if isinstance(other, Mapping) else NotImplemented

    def __hash__(self) -> int:
        h = self._hash
        if h is None:  # order-free, as equality is
            h = hash(frozenset(self._items.items()))
            object.__setattr__(self, "_hash", h)
        return h

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a FrozenMapping is read-only: cannot set {name!r}")

    def __reduce__(self) -> tuple[type[FrozenMapping], tuple[dict[str, Any]]]:
        return (FrozenMapping, (dict(self._items),))

    def __repr__(self) -> str:
        return f"FrozenMapping({self._items!r})"
