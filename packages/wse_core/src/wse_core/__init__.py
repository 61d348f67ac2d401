"""wse_core: the functional wafer — specs, the PE grid on a jax Mesh, SRAM, defects, fabric,
and the performance model.

The spine (shared/DESIGN.md): `WaferSpec` (a preset) -> `build_wafer` (mesh, defects and
remap, SRAM ledger, traffic ledger) -> kernels place fields with `wafer.place`, move data only
with `wse_core.fabric`, and return a `RunReport` whose `predicted` comes from `PerfModel`
(instruction-level counts, one phase algebra, one calibration: `wse_core.cost.calibration`).

Importing this package does not import JAX; `wse_core.hw.wafer` and `wse_core.fabric` do, so call
`wse_core.host.runtime.configure(devices)` first when the device count matters.
"""

from pathlib import Path

from wse_core.cost.perf import (
    OVERLAP,
    Cost,
    Op,
    PerfModel,
    Phase,
    Phases,
    Timing,
    Work,
    overlap,
    serial,
)
from wse_core.cost.report import Measured, RunReport
from wse_core.errors import (
    DefectError,
    PlacementError,
    SpecError,
    SramBudgetError,
    WseError,
    suggest,
)
from wse_core.hw.defects import DefectMap, Remap, defect_map, remap
from wse_core.hw.spec import DTYPES, PRESETS, WaferSpec, load_spec, preset, spec_from
from wse_core.hw.sram import Allocation, Region, SramLedger
from wse_core.hw.traffic import Traffic, TrafficLedger
from wse_core.studies.experiment import ExperimentResult, PredictionRow, write_experiment

# the one version of every package of the stack (each pyproject reads this file)
__version__ = (Path(__file__).with_name("VERSION")).read_text().strip()

__all__ = [
    "DTYPES",
    "OVERLAP",
    "PRESETS",
    "Allocation",
    "DefectError",
    "DefectMap",
    "ExperimentResult",
    "Measured",
    "PerfModel",
    "PlacementError",
    "Op",
    "Phase",
    "Phases",
    "RunReport",
    "Timing",
    "Cost",
    "overlap",
    "serial",
    "PredictionRow",
    "Region",
    "Remap",
    "SpecError",
    "SramBudgetError",
    "SramLedger",
    "Traffic",
    "TrafficLedger",
    "WaferSpec",
    "Work",
    "WseError",
    "defect_map",
    "load_spec",
    "preset",
    "remap",
    "spec_from",
    "suggest",
    "write_experiment",
    "__version__",
]
