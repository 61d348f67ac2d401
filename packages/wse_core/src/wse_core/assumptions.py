"""Assumptions a user can change: `with assume(hop_latency_cycles=2): ...`.

The presets carry public figures and, where a figure is not published, an assumption
(`wse_core.spec.ASSUMED_FIELDS` names them and says why). Inside `assume(...)` every preset
that `wse_core.spec.preset` returns has those fields replaced, and the calibration
(`wse_core.calibration.current`) is refitted under them, so a rerun of any prediction shows
what one assumption moves. `wse experiments run NAME --assume KEY=VALUE` is this context.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

from wse_core.errors import SpecError, suggest

__all__ = ["assume", "active", "parse_assumptions", "listed"]

_ACTIVE: contextvars.ContextVar[Mapping[str, float] | None] = contextvars.ContextVar(
    "wse_assumptions", default=None
)


def _check(values: Mapping[str, Any]) -> dict[str, float]:
    from wse_core.spec import ASSUMED_FIELDS

    out = {}
    for key, value in values.items():
        if key not in ASSUMED_FIELDS:
            raise SpecError(
                f"unknown assumption {key!r}{suggest(key, ASSUMED_FIELDS)}; "
                f"known: {', '.join(ASSUMED_FIELDS)}"
            )
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            raise SpecError(f"assumption {key} must be a number, got {value!r}") from None
    return out


@contextlib.contextmanager
def assume(**values: Any) -> Iterator[Mapping[str, float]]:
    """Replace assumed spec fields in every preset inside the block."""
    merged = {**(_ACTIVE.get() or {}), **_check(values)}
    token = _ACTIVE.set(merged)
    try:
        yield merged
    finally:
        _ACTIVE.reset(token)


def active() -> Mapping[str, float]:
    """The assumptions changed by the innermost `assume` (empty: the presets' own)."""
    return _ACTIVE.get() or {}


def parse_assumptions(items: list[str] | tuple[str, ...]) -> dict[str, float]:
    """`["hop_latency_cycles=2", ...]` -> a checked mapping (SpecError on a bad item)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--assume takes KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return _check(out)


def listed(spec: Any) -> dict[str, str]:
    """Every assumption of `spec` with its value and why it is an assumption."""
    from wse_core.spec import ASSUMED_FIELDS

    changed = active()
    return {
        key: f"{getattr(spec, key):g}{' (changed by --assume)' if key in changed else ''}: {why}"
        for key, why in ASSUMED_FIELDS.items()
    }
