"""Assumptions a user can change: `with assume(hop_latency_cycles=2): ...`.

Every constant of the cost model (`wse_core.cost.mechanisms.CONSTANTS`, listed with units,
mechanism and basis in `ASSUMED_FIELDS`, the registry, here) may be changed. Inside `assume(...)`
the calibration settings (`setting(key)`: the Table II Z block, ...) take the new values and
the calibration (`wse_core.cost.calibration.current`) is refitted under them; a fitted constant that
is assumed is held at the assumed value and left out of the fit. Spec fields are changed once,
at the edge: `resolve_spec(...)` turns a preset name or a spec file, `--set` and `--assume`
into one `WaferSpec` (the CLI's commands and Python callers), and `assumed_spec(name)` is a
preset under the active `assume` block (the experiment runners, run inside it by `wse
experiments run NAME --assume KEY=VALUE`; `--sweep KEY=a,b,c` runs it once per value).
`wse_core.hw.spec.preset` itself is pure. A rerun of any prediction shows what one assumption
moves.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from wse_core.cost.mechanisms import CALIBRATION_DEFAULTS, CALIBRATION_KEYS, CONSTANTS
from wse_core.errors import SpecError, ascii_only, shown, suggest
from wse_core.hw.presets import refuse_past_the_grid
from wse_core.hw.spec import WaferSpec, load_spec, preset

DEFAULT_WAFER = "wse3"  # the edge's wafer when neither a preset nor a spec file is given

__all__ = [
    "ASSUMED_FIELDS",
    "assume",
    "active",
    "applied",
    "resolve_spec",
    "assumed_spec",
    "setting",
    "value_of",
    "key_values",
    "parse_assumptions",
    "listed",
]

# Every constant a user may change (`wse experiments run NAME --assume KEY=VALUE`): its
# units, mechanism, basis and source (wse_core.cost.mechanisms). Every prediction lists them.
ASSUMED_FIELDS = {key: c.line() for key, c in CONSTANTS.items()}

_ACTIVE: contextvars.ContextVar[Mapping[str, float] | None] = contextvars.ContextVar(
    "wse_assumptions", default=None
)


def _check(values: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in values.items():
        if key not in ASSUMED_FIELDS:
            raise SpecError(
                f"unknown assumption {shown(key)}{suggest(key, ASSUMED_FIELDS)}; "
                f"known: {', '.join(ASSUMED_FIELDS)}"
            )
        try:
            out[key] = float(ascii_only(value))  # hunt 61: '４' was read as 4
        except (TypeError, ValueError, OverflowError):
            raise SpecError(f"assumption {key} must be a number, got {value!r}") from None
        if not math.isfinite(out[key]):
            raise SpecError(f"assumption {key} must be a finite number, got {value!r}")
        c = CONSTANTS[key]
        why = c.outside(out[key])  # hunt 57: fp32_mul_width=1e30 was priced
        if why:
            sweep = f"; plausible: {', '.join(f'{v:g}' for v in c.sweep)}" if c.sweep else ""
            raise SpecError(f"assumption {key} {why}, got {value!r:.40}{sweep}")
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


def applied(spec: WaferSpec, values: Mapping[str, float]) -> WaferSpec:
    """`spec` with the spec fields among the assumptions `values` replaced (the calibration
    settings among them are not spec fields: `setting` reads them)."""
    changes = {k: v for k, v in _check(values).items() if k not in CALIBRATION_KEYS}
    return spec.replace(**changes) if changes else spec


def resolve_spec(
    *,
    name: str | None = None,
    path: str | Path | None = None,
    sets: Mapping[str, Any] | None = None,
    assumptions: Mapping[str, Any] | None = None,
) -> WaferSpec:
    """The edge: one `WaferSpec` from a preset name or a YAML spec file (`load_spec`; not
    both), then the field changes `sets` (`--set FIELD=VALUE`), then the assumptions
    (`--assume KEY=VALUE`, checked against the registry). A spec file with or without
    `base:` takes `--assume` alike: an assumption changes a field of whatever spec was read.
    Neither name nor file: wse3."""
    if name is not None and path is not None:
        raise SpecError("give a wafer preset or a spec file (--spec), not both")
    if path is not None:
        spec = load_spec(path)
    else:  # '' is an unknown preset, as any other name is
        spec = preset(name if name is not None else DEFAULT_WAFER)
    if sets:
        spec = refuse_past_the_grid(spec.replace(**dict(sets)), sets)
    return applied(spec, assumptions or {})


def assumed_spec(name: str) -> WaferSpec:
    """The preset `name` under the active `assume` block: the experiment runners' edge
    (`wse experiments run NAME --assume KEY=VALUE`)."""
    return applied(preset(name), active())


def setting(key: str) -> float:
    """A calibration setting (`wse_core.cost.mechanisms.CALIBRATION_DEFAULTS`) under the active
    assumptions."""
    return float(active().get(key, CALIBRATION_DEFAULTS[key]))


def key_values(items: Sequence[str], usage: str) -> dict[str, str]:
    """`["KEY=VALUE", ...]` -> {key: value text}, stripped; a SpecError saying `usage` (e.g.
    "--set expects FIELD=VALUE") on an item without `=` or a key, or on a key given twice
    (hunt 56: the last one won, silently, as a YAML key twice did before)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"{usage}, got {shown(item)}")
        if key.strip() in out:
            raise SpecError(
                f"{usage.split()[0]} gives {key.strip()} twice ({out[key.strip()]!r:.40}, then "
                f"{value.strip()!r:.40}); give each key once"
            )
        out[key.strip()] = value.strip()
    return out


def parse_assumptions(items: list[str] | tuple[str, ...]) -> dict[str, float]:
    """`["hop_latency_cycles=2", ...]` -> a checked mapping (SpecError on a bad item)."""
    return _check(key_values(items, "--assume takes KEY=VALUE"))


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
