"""Assumptions a user can change: `with assume(hop_latency_cycles=2): ...`.

Every constant of the cost model (`wse_core.mechanisms.CONSTANTS`, listed with units,
mechanism and basis in `ASSUMED_FIELDS`, the registry, here) may be changed. Inside `assume(...)`
every preset that `wse_core.spec.preset` returns has the spec fields replaced, the
calibration settings (`setting(key)`: the Table II Z block, ...) take the new values, and the
calibration (`wse_core.calibration.current`) is refitted under them; a fitted constant that
is assumed is held at the assumed value and left out of the fit. A rerun of any prediction
shows what one assumption moves. `wse experiments run NAME --assume KEY=VALUE` is this
context and `--sweep KEY=a,b,c` runs it once per value.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

from wse_core.errors import SpecError, suggest
from wse_core.mechanisms import CALIBRATION_DEFAULTS, CONSTANTS

__all__ = [
    "ASSUMED_FIELDS",
    "assume",
    "active",
    "setting",
    "value_of",
    "parse_assumptions",
    "listed",
]

# Every constant a user may change (`wse experiments run NAME --assume KEY=VALUE`): its
# units, mechanism, basis and source (wse_core.mechanisms). Every prediction lists them.
ASSUMED_FIELDS = {key: c.line() for key, c in CONSTANTS.items()}

_ACTIVE: contextvars.ContextVar[Mapping[str, float] | None] = contextvars.ContextVar(
    "wse_assumptions", default=None
)


def _check(values: Mapping[str, Any]) -> dict[str, float]:
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


def setting(key: str) -> float:
    """A calibration setting (`wse_core.mechanisms.CALIBRATION_DEFAULTS`) under the active
    assumptions."""
    return float(active().get(key, CALIBRATION_DEFAULTS[key]))


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
    changed = active()
    return {
        key: f"{value_of(spec, key):g}{' (changed by --assume)' if key in changed else ''}: {why}"
        for key, why in ASSUMED_FIELDS.items()
    }


def value_of(spec: Any, key: str) -> float:
    """`key`'s value on `spec`, or the calibration setting's when `key` is one."""
    return setting(key) if key in CALIBRATION_DEFAULTS else float(getattr(spec, key))
