"""Assumptions a user can change: `with assume(hop_latency_cycles=2):
PerfModel(assumed_spec(NAME))...` (a wafer field changes the wafers built under the
block, never a spec built outside it: `PerfModel(preset(NAME))` there prices the preset's
own value, and warns so: `wse_core.cost.unapplied`).

Every constant of the cost model (`wse_core.cost.mechanisms.CONSTANTS`, listed with units,
mechanism and basis in `ASSUMED_FIELDS`, the registry, here) may be changed. What a key
moves (hunt 66: `clock_hz` was written into every preset, the WSE-2 the calibration rows were
measured on too, so a faster WSE-3 clock refitted the calibration and predicted a slower
WSE-3):

- a wafer field (`clock_hz`, `fp32_mul_width`, `hop_latency_cycles`, ...): the wafers being
  priced only (`assumed_spec`, `resolve_spec`);
- `calibration.KEY` (a wafer field so prefixed): the calibration's wafers only
  (`calibration_spec`: the WSE-2 of its rows, the CS-1 of its allreduce check); the
  calibration (`wse_core.cost.calibration.current`) is refitted under it, and says so
  (`Calibration.wafer_assumed`, its `misses`);
- a fitted constant (`dsd_issue_cycles`, ...): held at the value on every wafer, whatever
  spec it was built from (`held`, priced by `Pricing.rates`), and left out of the fit;
- a calibration setting (`setting(key)`: the Table II Z block, ...): the calibration and
  the kernels that read it; the calibration is refitted under it;
- a constant of a model priced above wse_core (`gpu.kernel_s`, the GPU serving step's
  kernel cost; `gpu.launched_kernel_s`, the field experiments' GPU kernel;
  `attention.exp_fmacs`, the wafer's exponential): that model's figures only, never a
  wafer's spec or the calibration. The package that models it registers it
  (`register_system_constant`; wse_core imports no package above it) and reads it with
  `system_constant(key)`; until it is imported the key is unknown.

`setting` and `system_constant` note what they read for the listing beside a prediction
(`wse_core.cost.reads`, `wse_core.cost.listing`).

Spec fields are changed once, at the edge: `resolve_spec(...)` turns a preset name or a spec
file, `--set` and `--assume` into one `WaferSpec` (the CLI's commands and Python callers),
and `assumed_spec(name)` is a preset under the active `assume` block (the experiment
runners, run inside it by `wse experiments run NAME --assume KEY=VALUE`; `--sweep
KEY=a,b,c` runs it once per value). `wse_core.hw.spec.preset` itself is pure. A rerun of any
prediction shows what one assumption moves.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from wse_core.cost.mechanisms import CALIBRATION_DEFAULTS, CALIBRATION_KEYS, CONSTANTS, Constant
from wse_core.cost.reads import read
from wse_core.errors import SpecError, ascii_only, shown, suggest
from wse_core.hw.presets import refuse_past_the_grid
from wse_core.hw.spec import WaferSpec, load_spec, preset

DEFAULT_WAFER = "wse3"  # the edge's wafer when neither a preset nor a spec file is given

__all__ = [
    "ASSUMED_FIELDS",
    "CALIBRATION_PREFIX",
    "assume",
    "active",
    "applied",
    "resolve_spec",
    "apply_sets",
    "assumed_spec",
    "calibration_spec",
    "for_calibration",
    "held",
    "refuse_refit_past_limits",
    "constant_key",
    "constant_of",
    "register_system_constant",
    "system_constant",
    "system_keys",
    "setting",
    "value_of",
    "key_values",
    "parse_assumptions",
    "listed",
]

# Every constant a user may change (`wse experiments run NAME --assume KEY=VALUE`): its
# units, mechanism, basis and source (wse_core.cost.mechanisms). Every prediction lists them.
ASSUMED_FIELDS = {key: c.line() for key, c in CONSTANTS.items()}
# `calibration.clock_hz=8.5e8`: a wafer field of the calibration's wafers, not of the wafers
# being priced (the rows are measurements on a WSE-2: an assumption about the wafer being
# predicted must not move them)
CALIBRATION_PREFIX = "calibration."
# `gpu.kernel_s`: constants of the systems the wafers are compared with, `SYSTEM.FIELD` as
# `calibration.FIELD` names the calibration's wafers' (module docstring): key -> (its
# Constant, the value priced where no --assume gives one)
_SYSTEM_CONSTANTS: dict[str, tuple[Constant, float]] = {}

_ACTIVE: contextvars.ContextVar[Mapping[str, float] | None] = contextvars.ContextVar(
    "wse_assumptions", default=None
)


def _fitted(key: str) -> bool:
    return key in CONSTANTS and CONSTANTS[key].basis == "fitted"


def register_system_constant(key: str, constant: Constant, *, value: float) -> None:
    """Make `key` (`SYSTEM.FIELD`: `gpu.kernel_s`) an assumption `--assume` takes, within
    `constant.limits`, priced at `value` where none is given (`system_constant`)."""
    system, dot, field = key.partition(".")
    if not (dot and system and field) or key.startswith(CALIBRATION_PREFIX):
        raise ValueError(f"a system constant's key is SYSTEM.FIELD, not calibration.*: {key!r}")
    _SYSTEM_CONSTANTS[key] = (constant, float(value))


def system_keys() -> tuple[str, ...]:
    """The registered system constants' keys (`gpu.kernel_s`), in registration order."""
    return tuple(_SYSTEM_CONSTANTS)


def system_constant(key: str) -> float:
    """The registered system constant `key` under the active assumptions (noted as read:
    `wse_core.cost.reads`)."""
    value = float(active().get(key, _SYSTEM_CONSTANTS[key][1]))
    read(key, value)
    return value


def constant_of(key: str) -> Constant:
    """The `Constant` an assumption's key prices (its units, limits and sweep); a SpecError
    for an unknown key (`constant_key`)."""
    if key in _SYSTEM_CONSTANTS:
        return _SYSTEM_CONSTANTS[key][0]
    return CONSTANTS[constant_key(key)]


def constant_key(key: str) -> str:
    """The registry key an assumption's key names (`calibration.clock_hz` -> clock_hz); a
    SpecError for a key the registry does not know, and for `calibration.` before a key that
    is already the calibration's (a fitted constant, a setting)."""
    base = key.removeprefix(CALIBRATION_PREFIX)
    if base not in ASSUMED_FIELDS:
        systems = list(_SYSTEM_CONSTANTS)
        known = [*ASSUMED_FIELDS, *systems, *(CALIBRATION_PREFIX + k for k in ASSUMED_FIELDS)]
        raise SpecError(
            f"unknown assumption {shown(key)}{suggest(key, known)}; known: "
            f"{', '.join([*ASSUMED_FIELDS, *systems])}, and {CALIBRATION_PREFIX}FIELD for a "
            "wafer field of the calibration's WSE-2"
        )
    if base != key and (base in CALIBRATION_KEYS or _fitted(base)):
        what = "a setting of the calibration" if base in CALIBRATION_KEYS else (
            "fitted on the calibration set: an assumed value is held on every wafer, the "
            "calibration's too"
        )  # fmt: skip
        raise SpecError(f"{key}: {base} is {what}; assume it as {base}=VALUE")
    return base


def _check(values: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in values.items():
        c = constant_of(key)
        try:
            out[key] = float(ascii_only(value))  # hunt 61: '４' was read as 4
        except (TypeError, ValueError, OverflowError):
            raise SpecError(f"assumption {key} must be a number, got {value!r}") from None
        if not math.isfinite(out[key]):
            raise SpecError(f"assumption {key} must be a finite number, got {value!r}")
        why = c.outside(out[key])  # hunt 57: fp32_mul_width=1e30 was priced
        if why:
            sweep = f"; plausible: {', '.join(f'{v:g}' for v in c.sweep)}" if c.sweep else ""
            raise SpecError(f"assumption {key} {why}, got {value!r:.40}{sweep}")
    return out


@contextlib.contextmanager
def assume(**values: Any) -> Iterator[Mapping[str, float]]:
    """The assumptions `values` inside the block (what each key moves: the module's
    docstring): a wafer field is applied to the wafers being priced, `calibration.KEY` to
    the calibration's."""
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
    """`spec`, a wafer being priced, with the spec fields among the assumptions `values`
    replaced (the calibration settings among them are not spec fields: `setting` reads them;
    `calibration.KEY` is the calibration's wafers': `calibration_spec`; a system constant,
    `gpu.kernel_s`, another system's: `system_constant`)."""
    changes = {k: v for k, v in _check(values).items() if k not in CALIBRATION_KEYS
               and k not in _SYSTEM_CONSTANTS and not k.startswith(CALIBRATION_PREFIX)}  # fmt: skip
    return spec.replace(**changes) if changes else spec


def for_calibration(values: Mapping[str, float] | None = None) -> dict[str, float]:
    """The assumptions among `values` (default: the active ones) that move the calibration:
    its settings, the fitted constants held, and `calibration.KEY`."""
    given = active() if values is None else values
    return {k: v for k, v in given.items()
            if k.startswith(CALIBRATION_PREFIX) or k in CALIBRATION_KEYS or _fitted(k)}  # fmt: skip


def held() -> dict[str, float]:
    """The fitted constants the active assumptions hold (`dsd_issue_cycles=20`): priced at
    that value on every wafer, the calibration's (`calibration_spec`) and every one being
    priced, whatever spec it was given (`wse_core.cost.pricing.Pricing.rates`)."""
    return {k: v for k, v in active().items() if _fitted(k)}


def calibration_spec(name: str) -> WaferSpec:
    """The preset `name` as the calibration prices its rows on it (`wse_core.cost.calibration`):
    the wafer the rows were measured on, under the fitted constants held and the
    `calibration.KEY` assumptions only; `clock_hz=...` is the priced wafers' (hunt 66)."""
    given = for_calibration()
    changes = {constant_key(k): v for k, v in given.items() if k not in CALIBRATION_KEYS}
    spec = preset(name)
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
    Neither name nor file: wse3. A fitted constant (`dsd_issue_cycles`, ...) in the file
    other than the presets' prior, or in `sets`, is refused (`_refuse_fitted`)."""
    if name is not None and path is not None:
        raise SpecError("give a wafer preset or a spec file (--spec), not both")
    if path is not None:
        spec = load_spec(path)
        _refuse_fitted(f"spec file {str(path)!r}", _moved_priors(spec))
    else:  # '' is an unknown preset, as any other name is
        spec = preset(name if name is not None else DEFAULT_WAFER)
    return applied(apply_sets(spec, sets or {}), assumptions or {})


def apply_sets(spec: WaferSpec, sets: Mapping[str, Any]) -> WaferSpec:
    """`spec` with the `--set FIELD=VALUE` changes `sets` (`resolve_spec`'s second step; the
    CLI's edge calls it apart to name the wafer it changes): a fitted constant is refused,
    and so are spares or a program rectangle past the grid (`refuse_past_the_grid`)."""
    if not sets:
        return spec
    _refuse_fitted("--set", sets)
    return refuse_past_the_grid(spec.replace(**dict(sets)), sets)


def _moved_priors(spec: WaferSpec) -> dict[str, str]:
    """The fitted constants `spec` holds at other than the prior every preset holds."""
    prior = {f.name: f.default for f in dataclasses.fields(WaferSpec)}
    return {k: f"{getattr(spec, k):g}" for k in CONSTANTS
            if _fitted(k) and getattr(spec, k) != prior[k]}  # fmt: skip


def _refuse_fitted(source: str, given: Mapping[str, Any]) -> None:
    """Hunt 66: a spec file's `dsd_issue_cycles: 100` was read and never priced (the
    calibration puts its fitted value into every spec it prices), with no word. A fitted
    constant is no figure of a wafer but of the model, fitted on the calibration set; the
    way to price another value is an assumption, which every prediction lists. A file may
    restate the prior every preset holds (a preset's dump does); `--set` may not name one."""
    for key, value in given.items():
        if key not in CONSTANTS or not _fitted(key):
            continue
        raise SpecError(
            f"{source} gives {key} = {str(value):.40}, but {key} is fitted on the calibration set "
            "(every prediction prices the fitted value; `wse experiments run "
            "cost-model-calibration` shows its rows), so a wafer spec cannot set it: remove "
            "it, or price another value as an assumption, listed with the prediction: `wse "
            f"experiments run NAME --assume {key}=VALUE` (or `wse plan ... --assume`)"
        )


def assumed_spec(name: str) -> WaferSpec:
    """The preset `name` under the active `assume` block: the experiment runners' edge
    (`wse experiments run NAME --assume KEY=VALUE`)."""
    return applied(preset(name), active())


def refuse_refit_past_limits(key: str, value: float) -> None:
    """A refit of the calibration (`wse_core.cost.calibration`) that takes the fitted
    constant `key` to `value`, past its `limits`, names the assumptions that drove it there
    (hunt 63: `--sweep clock_hz=1e6,1e11` said only "dsd_issue_cycles must be in [0, 10000]
    cycles/DSD, got 48830.57", the spec's refusal of the refitted constant)."""
    c = CONSTANTS[key]
    low, high = c.limits
    if low <= value <= high:
        return
    given = for_calibration()  # the priced wafers' assumptions do not move the fit
    cause = ", ".join(f"{k}={v:g}" for k, v in given.items()) or "the calibration rows"
    sweeps = {k: CONSTANTS[constant_key(k)].sweep for k in given
              if CONSTANTS[constant_key(k)].sweep}  # fmt: skip
    hints = [f"{k} nearer its plausible {', '.join(f'{x:g}' for x in r)}"
             for k, r in sweeps.items() if not min(r) <= given[k] <= max(r)]  # fmt: skip
    figure = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    raise SpecError(
        f"{cause} {'takes' if len(given) == 1 else 'take'} the refit of {key} to {figure} "
        f"{c.units}, past its limit [{low:,g}, {high:,g}]: the calibration's published rows "
        f"cannot be met there; assume {' and '.join(hints) or 'other values'}, or hold {key} "
        f"with --assume {key}=VALUE (an assumed constant is not refitted)"
    )


def setting(key: str) -> float:
    """A calibration setting (`wse_core.cost.mechanisms.CALIBRATION_DEFAULTS`) under the active
    assumptions, noted as read (`wse_core.cost.reads`)."""
    value = _setting(key)
    read(key, value)
    return value


def _setting(key: str) -> float:
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


def listed(spec: Any, calibration: Any = None, priced: Any = None) -> dict[str, str]:
    """Every assumption of `spec` with the value the prediction prices and why it is an
    assumption. `calibration` (a `Calibration`, as `PerfModel.calibration_in_force()` gives
    it): its fitted constants are the values in force, listed as fitted on its rows beside
    the preset's prior (hunt 67: the prior, 3 cycles/DSD, was listed while 11.49 priced).
    `priced`: the spec the pricing read the others from (`Pricing.rates`; default `spec`
    with the `held` constants in place): each is listed at the value read there, and "changed
    by --assume" only where that is the assumed value (hunt 70: `assume(dsd_issue_cycles=30)`
    was listed as "3 (changed by --assume)")."""
    changed = active()
    fitted = dict(getattr(calibration, "values", None) or {})
    if fitted and hasattr(calibration, "for_spec"):  # a system's own fit of one (issue 41:
        own = calibration.for_spec(spec)  # CS-3's DSD issue, not the WSE-2 fit's)
        fitted |= {k: v for k, v in own.items() if k in fitted}
    if priced is None:
        holds = held()
        priced = spec.replace(**holds) if holds else spec
    out = {key: _line(spec, priced, key, (fitted, calibration), changed, why)
           for key, why in ASSUMED_FIELDS.items()}  # fmt: skip
    for key, value in changed.items():  # the calibration's wafers', refitted under them
        if key.startswith(CALIBRATION_PREFIX):
            out[key] = (f"{value:g} (changed by --assume): the calibration's wafers' "
                        f"{constant_key(key)}; the calibration is refitted under it")  # fmt: skip
    return out


def _line(spec: Any, priced: Any, key: str, fit: tuple, changed: Mapping[str, float], why: str):
    """One listed assumption: its value in force, how it got there, why it is assumed;
    `fit`: (the calibration's fitted values, the calibration)."""
    fitted, cal = fit
    if key in fitted:  # six significant digits: what a reader reruns by hand
        rows = getattr(cal, "fitted_on", {}).get(key, "the calibration rows")
        if fitted[key] != getattr(cal, "values", {}).get(key):  # the system's own fit
            rows = getattr(cal, "system_fitted_on", {}).get(key, rows)
        how = f" (fitted on {rows}; prior {value_of(spec, key):g})"
        return f"{fitted[key]:.6g}{how}: {why}"
    value = value_of(priced, key)
    return f"{value:g}{_how(key, value, changed)}: {why}"


def _how(key: str, value: float, changed: Mapping[str, float]) -> str:
    """How a listed value got there: by --assume only where the value priced is the one
    assumed; a wafer field assumed on a wafer built outside the block says so."""
    if key not in changed:
        return ""
    if value == changed[key]:
        return " (changed by --assume)"
    return (f" (not the assumed {changed[key]:g}: this wafer was not built under the "
            "assumption; assumed_spec(NAME) or resolve_spec(...) applies it)")  # fmt: skip


def value_of(spec: Any, key: str) -> float:
    """`key`'s value on `spec`, or the calibration setting's when `key` is one."""
    return _setting(key) if key in CALIBRATION_DEFAULTS else float(getattr(spec, key))
