"""Energy and cost of a prediction: system power (peak and idle), hourly rates, people.

Contract: every predicted time becomes energy and money the same way, wafer or GPU.

- `system_of(spec)` (its `SystemPower`) and `system_power_w(spec) -> (peak_w, idle_w)` of
  the system built around a `WaferSpec`, read from the spec's system fields (`system`,
  `system_peak_w`, `system_usd_per_hour`, `system_source`: the presets wse1..wse3 carry
  CS-1..CS-3's, a spec file inherits its base's; nothing is looked up by name). A wafer of
  no system (the small test wafers) is a `SpecError`. GPU nodes carry their power in
  `wse_systems.gpu.GpuSpec`.
- `energy_j(busy_s, peak_w, idle_w=0, wall_s=None)`: a system busy for `busy_s` draws its
  peak, and idles for the rest of `wall_s`. Running at the maximum rated power is an upper
  bound (a real training run draws less); say so where it matters. Per step, per token,
  per solve: divide by the count (`per`).
- `bill(system_hours=, energy_j=, rates=) -> Bill`: hardware hours x rate + people hours x
  rate + energy x electricity price (0 by default: cloud and amortised rates include power).
  (Dollars, not `wse_core.cost.perf.Cost`, which is cycles.)
- `token_costs(usd=, input_tokens=, output_tokens=, input_share=) -> TokenCosts`: dollars
  per million input and output tokens, as providers bill them, and the blend at the
  workload: the prompts' share of the system's time is charged to input tokens, the rest to
  output tokens, so $/M in x input + $/M out x output = usd = blend x all tokens.

Figures (watts per system; "assumption" where nothing is published):

| system | peak | idle | source |
| --- | --- | --- | --- |
| CS-1 (wse1) | 20 kW | 5 kW | Cerebras CS-1 product overview (SC19) |
| CS-2 (wse2) | 23 kW | 5.75 kW | Cerebras CS-2 datasheet |
| CS-3 (wse3) | 23 kW | 5.75 kW | Cerebras CS-3 announcement (2024): same power as CS-2 |
| DGX A100 / H100 | 6.5 / 10.2 kW | 1.6 / 2.6 kW | NVIDIA DGX datasheets (max); `systems.gpu` |

Idle: 25% of peak for every system, an assumption (no vendor publishes an idle figure).
Power of MemoryX, SwarmX and of a GPU cluster's switches is not counted on either side
(not published for MemoryX/SwarmX).

Default rates (all assumptions, inputs everywhere they are used): a wafer system-hour
$60 (CS-1), $90 (CS-2), $100 (CS-3) — no list price is published; press estimates of a few
million dollars per system amortised over three years give about $100/h; GPU-hours in
`wse_systems.gpu`; an engineer-hour $100 (fully loaded); 160 engineering hours per job on
either system (vendors claim fewer for the wafer; equal by default so the choice is yours).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_core.errors import SpecError, WseError
from wse_core.hw.spec import WaferSpec

__all__ = [
    "IDLE_FRACTION",
    "SystemPower",
    "Rates",
    "Bill",
    "system_of",
    "system_power_w",
    "wafer_rates",
    "energy_j",
    "per",
    "bill",
    "TokenCosts",
    "token_costs",
]

IDLE_FRACTION = 0.25  # idle / peak power where none is published (assumption)
USD_PER_ENGINEER_HOUR = 100.0
ENGINEER_HOURS = 160.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class SystemPower:
    """One wafer system: its name, power and default hourly rate."""

    system: str
    peak_w: float
    idle_w: float
    usd_per_hour: float
    source: str


def system_of(spec: WaferSpec) -> SystemPower:
    """The system built around wafer `spec`, from the spec's own system fields (a spec loaded
    from a file with `base: wse3` carries its base's); a wafer of no system (`system_peak_w`
    0, the small test wafers) is a `SpecError`."""
    if not spec.system_peak_w:
        raise SpecError(
            f"wafer {spec.name!r} is part of no system with a known power (system_peak_w is "
            "0): use a wafer of a CS system (wse1, wse2, wse3) or set system_peak_w"
        )
    return SystemPower(
        system=spec.system or spec.name,
        peak_w=spec.system_peak_w,
        idle_w=IDLE_FRACTION * spec.system_peak_w,
        usd_per_hour=spec.system_usd_per_hour,
        source=spec.system_source or "the wafer spec",
    )


def system_power_w(spec: WaferSpec) -> tuple[float, float]:
    """(peak_w, idle_w) of the system built around wafer `spec`."""
    s = system_of(spec)
    return s.peak_w, s.idle_w


def energy_j(
    busy_s: float, peak_w: float, idle_w: float = 0.0, wall_s: float | None = None
) -> float:
    """Joules of a system busy `busy_s` seconds at `peak_w`, idle for the rest of `wall_s`."""
    idle_s = 0.0 if wall_s is None else max(0.0, wall_s - busy_s)
    return busy_s * peak_w + idle_s * idle_w


def per(total: float, count: float) -> float:
    """`total` per item (joules per token, per step, per solve); nan for no items."""
    return total / count if count else float("nan")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rates:
    """Prices: a system-hour (a wafer system or one GPU), an engineer-hour, a kWh."""

    usd_per_system_hour: float
    usd_per_engineer_hour: float = USD_PER_ENGINEER_HOUR
    engineer_hours: float = ENGINEER_HOURS
    usd_per_kwh: float = 0.0

    def __post_init__(self) -> None:
        for name, value in dataclasses.asdict(self).items():  # a NaN or negative price
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise WseError(f"{name} must be a finite number >= 0, got {value}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def wafer_rates(spec: WaferSpec, **overrides: Any) -> Rates:
    """Default rates of the system built around `spec`; None overrides are ignored."""
    given = {k: v for k, v in overrides.items() if v is not None}
    return dataclasses.replace(Rates(usd_per_system_hour=system_of(spec).usd_per_hour), **given)


@dataclasses.dataclass(frozen=True)
class Bill:
    hardware_usd: float
    people_usd: float
    energy_usd: float

    @property
    def total_usd(self) -> float:
        return self.hardware_usd + self.people_usd + self.energy_usd

    def to_dict(self) -> dict[str, float]:
        return {**dataclasses.asdict(self), "total_usd": self.total_usd}


def bill(*, system_hours: float, energy_j: float, rates: Rates) -> Bill:
    """Hardware hours x rate + engineer hours x rate + kWh x price."""
    return Bill(
        hardware_usd=system_hours * rates.usd_per_system_hour,
        people_usd=rates.engineer_hours * rates.usd_per_engineer_hour,
        energy_usd=energy_j / 3.6e6 * rates.usd_per_kwh,
    )


@dataclasses.dataclass(frozen=True)
class TokenCosts:
    """Dollars per million input tokens, output tokens, and all tokens of the workload."""

    usd_per_million_input: float
    usd_per_million_output: float
    usd_per_million_blend: float

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def token_costs(
    *, usd: float, input_tokens: float, output_tokens: float, input_share: float
) -> TokenCosts:
    """`usd` (system-hours x price) over a workload's tokens: `input_share` of it (the
    prompts' share of the system's time, in [0, 1]) per input token, the rest per output
    token, and all of it per token of either kind."""
    if not 0.0 <= input_share <= 1.0:
        raise WseError(f"input_share must be in [0, 1], got {input_share}")
    million = 1e6
    return TokenCosts(
        usd_per_million_input=per(usd * input_share, input_tokens) * million,
        usd_per_million_output=per(usd * (1 - input_share), output_tokens) * million,
        usd_per_million_blend=per(usd, input_tokens + output_tokens) * million,
    )
