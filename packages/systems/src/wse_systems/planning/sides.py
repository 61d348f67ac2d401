"""What every `wse plan` answer holds, train's and infer's alike: one system's side
(`SideResult`: time, energy, cost and the figures behind them), a training `Plan` and the
JSON fields every plan shares (`plan_dict`), the input checks (`check_positive`,
`check_rates`), each system's rates (`gpu_rates`, `wafer_rates`) and the notes every plan
states (`power_notes`, `grid_note`). `wse_systems.planning.train` builds on them and
re-exports them (`wse_systems.planning.infer` imports them from there); split out of it at
hunt 76 when it reached 400 lines.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_core import WaferSpec
from wse_core.hw.repair import check_repairable, repaired_grid_note

from wse_systems import economics as eco
from wse_systems import gpu as gpum
from wse_systems.planning.choice import PlanError

__all__ = ["SideResult", "Plan", "plan_dict", "check_positive", "check_rates", "gpu_rates",
           "wafer_rates", "power_notes", "grid_note"]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class SideResult:
    """One system's answer. `units`: wafer systems or GPUs; `time_s`: what `time_key` names
    (training: "train_s", the whole run; serving: "s_per_output_token"); `reads`: the
    constants its pricing read (`wse_core.cost.reads`; None: not recorded), listed beside an
    experiment's rows of it (`read_by`)."""

    system: str
    units: int
    time_s: float
    energy_j: float
    bill: eco.Bill
    figures: dict[str, Any]
    time_key: str = "train_s"
    reads: Any = dataclasses.field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        # hunt 66: "time_s" meant seconds per output token in the infer JSON and the whole
        # run in the train JSON; each key now names what it is. The train JSON keeps
        # "time_s" as an alias of "train_s" (apps/cli/tests/test_plan_cli.py reads it).
        alias = {"time_s": self.time_s} if self.time_key == "train_s" else {}
        return {
            "system": self.system,
            "units": self.units,
            self.time_key: self.time_s,
            **alias,
            "energy_j": self.energy_j,
            "energy_kwh": self.energy_j / 3.6e6,
            "cost_usd": self.bill.to_dict(),
            **self.figures,
        }


@dataclasses.dataclass(frozen=True)
class Plan:
    workload: str  # "train" | "infer"
    model: str
    n_params: int
    inputs: dict[str, Any]
    wafer: SideResult
    gpu: SideResult | None  # None: no GPU layout holds the model (training)
    gpus_to_match: int | None
    assumptions: list[str]

    def to_dict(self) -> dict[str, Any]:
        return plan_dict(self)


def plan_dict(plan: Any) -> dict[str, Any]:
    """The fields every plan's JSON has (train's `Plan`, infer's `ServingPlan`)."""
    return {
        "workload": plan.workload,
        "model": plan.model,
        "n_params": plan.n_params,
        "inputs": plan.inputs,
        "wafer": plan.wafer.to_dict(),
        "gpu": None if plan.gpu is None else plan.gpu.to_dict(),
        "gpus_to_match": plan.gpus_to_match,
        "assumptions": plan.assumptions,
    }


def check_positive(**values: float | None) -> None:
    for name, v in values.items():
        if v is not None and not (v > 0 and math.isfinite(v)):  # inf is not a size
            raise PlanError(f"--{name.replace('_', '-')} must be positive, got {v:g}")


def gpu_rates(g: gpum.GpuSpec, rates: dict[str, Any]) -> eco.Rates:
    given = {k: v for k, v in rates.items() if v is not None and k != "usd_per_system_hour"}
    usd = rates.get("usd_per_gpu_hour") or g.usd_per_gpu_hour
    given.pop("usd_per_gpu_hour", None)
    return eco.Rates(usd_per_system_hour=usd, **given)


def wafer_rates(spec: WaferSpec, rates: dict[str, Any]) -> eco.Rates:
    given = {k: v for k, v in rates.items() if k != "usd_per_gpu_hour"}
    return eco.wafer_rates(spec, **given)


def check_rates(rates: dict[str, Any]) -> None:
    """Prices and hours given must be finite and >= 0 (NaN and negatives are refused)."""
    for name, v in rates.items():
        if v is not None and not (v >= 0 and math.isfinite(v)):
            raise PlanError(f"--{name.replace('_', '-')} must be a number >= 0, got {v:g}")


def power_notes(g: gpum.GpuSpec, spec: WaferSpec) -> list[str]:
    """The power and price assumptions every plan states."""
    peak, idle = eco.system_power_w(spec)
    gpeak, gidle = g.power_w_per_gpu()
    return [
        f"wafer system {eco.system_of(spec).system}: {peak / 1e3:g} kW while busy, "
        f"{idle / 1e3:g} kW idle ({eco.system_of(spec).source}; idle assumed); "
        "MemoryX/SwarmX power not counted",
        f"GPU {g.name}: {gpeak:g} W per GPU busy, {gidle:g} W idle (DGX node max / 8; "
        "idle assumed); switches not counted",
        "busy systems draw their maximum rated power (an upper bound)",
        "rates and engineering hours are assumptions (wse_systems.economics), inputs here",
    ]


def grid_note(spec: WaferSpec) -> str:
    """The grid every wafer plan prices, stated: the logical one of a repaired wafer. A spec
    whose wafer does not repair at its defect_rate (`wse_core.hw.repair.check_repairable`)
    is refused (DefectError) before any work (hunt 66: it was priced as a perfect wafer)."""
    check_repairable(spec)
    return repaired_grid_note(spec)
