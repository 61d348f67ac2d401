"""What JSON allows and Python's `json` module reads anyway: one object's key given twice
(the last silently wins) and NaN / Infinity (no JSON values). `distinct_keys` is the
`object_pairs_hook` and `not_json` the `parse_constant` that refuse them with one line
(ValueError); `wse_core.host.limits.load_json` (every JSON file of the stack) and the
server's request bodies (`wse_inference.serve.http_body`) read through them."""

from __future__ import annotations

from typing import Any

__all__ = ["distinct_keys", "not_json"]


def not_json(word: str) -> Any:
    """NaN, Infinity and -Infinity: Python's json reads them, JSON has no such values."""
    raise ValueError(f"{word} is not a JSON value (numbers must be finite)")


def distinct_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are distinct: {"prompt": "a", "prompt": "b"} is ambiguous (the
    last would silently win), so it is refused."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key[:40]!r} appears more than once in one object")
            seen.add(key)
    return out
