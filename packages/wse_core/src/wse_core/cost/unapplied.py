"""A wafer field assumed but not in the spec being priced: said, once, as a warning.

Contract. `assume(clock_hz=...)` changes the wafers built under it (`assumed_spec(NAME)`,
`resolve_spec(...)`: the edge where a spec is resolved once), never a `WaferSpec` built
outside it: `PerfModel(preset(NAME))` inside the block prices the preset's own clock, by
design (the calibration's wafers are priced as measured under `clock_hz=...`, hunt 66).
Hunt 77: a library user who followed the module's headline example (`with
assume(hop_latency_cycles=2): ...` around a bare preset) got unchanged figures with no word.
`warn_unapplied(spec)` (called by `Pricing.rates` at each new state of the assumptions) warns
when the active assumptions give a wafer field a value `spec` does not hold; the calibration's
wafers as `calibration_spec` gives them are exempt (priced as measured on purpose).
"""

from __future__ import annotations

import dataclasses
import warnings

from wse_core.cost.assumptions import active, calibration_spec
from wse_core.cost.mechanisms import CALIBRATION_KEYS, CONSTANTS, SYSTEM_FITTED
from wse_core.hw.spec import WaferSpec

__all__ = ["unapplied", "warn_unapplied"]

_FIELDS = {f.name for f in dataclasses.fields(WaferSpec)}
# The wafers `wse_core.cost.calibration` prices its cases on (`_wse`: the rows' WSE-2, the
# allreduce check's CS-1): as `calibration_spec` gives them, priced as measured on purpose. A
# bare WSE-2 preset under `clock_hz=...` is their twin and is not warned of either.
_CALIBRATION_WAFERS = ("wse1", "wse2", "wse3")  # wse3: CS-3's MeshGEMV rows (session 83)


def unapplied(spec: WaferSpec) -> dict[str, float]:
    """The active assumptions of wafer fields (not fitted constants, which `held` applies to
    every wafer, nor settings or `calibration.KEY`) whose value `spec` does not hold; empty
    for the calibration's wafers as `calibration_spec` gives them (`_CALIBRATION_WAFERS`)."""
    fields = {
        k: v
        for k, v in active().items()
        if k in _FIELDS and k in CONSTANTS and CONSTANTS[k].basis != "fitted"
        and k not in CALIBRATION_KEYS
    }  # fmt: skip
    missed = {k: v for k, v in fields.items() if float(getattr(spec, k)) != v}
    if not missed:
        return {}
    if spec.name in _CALIBRATION_WAFERS and _as_measured(spec):
        return {}
    return missed


def _as_measured(spec: WaferSpec) -> bool:
    """`spec` is the calibration's wafer as `calibration_spec` gives it; on a system whose
    fields the calibration fits (CS-3's hop and ramp latencies, DSD issue and control
    instruction), only with those fields moved off the preset's, as
    `wse_core.cost.calibration.meshgemv_case` prices its MeshGEMV rows (a bare wse3 preset is
    the wafer being priced, and is warned of)."""
    measured = calibration_spec(spec.name)
    own = {k: getattr(measured, k) for k in SYSTEM_FITTED.get(spec.system, ())}
    if not own:
        return spec == measured
    return spec != measured and spec.replace(**own) == measured


def warn_unapplied(spec: WaferSpec) -> None:
    """Warn (UserWarning, once per message) when `unapplied(spec)` is not empty."""
    missed = unapplied(spec)
    if missed:
        held = ", ".join(f"{k} = {float(getattr(spec, k)):g}, not the assumed {v:g}"
                         for k, v in missed.items())  # fmt: skip
        warnings.warn(
            f"pricing {spec.name} with {held}: assume() changes the wafers built under it "
            f"(assumed_spec({spec.name!r}) or resolve_spec(...)), not a spec built outside it",
            UserWarning,
            stacklevel=3,
        )
