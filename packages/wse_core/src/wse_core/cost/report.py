"""One result for every run: `RunReport` — what was measured, what the wafer would take.

Contract. Every shell (stencil, BiCGSTAB, MD, TLR-MVM, `wse train`, the inference engines)
reports with a `RunReport` built by `RunReport.build(...)` from the `Phases` it priced with
`PerfModel` (the same plan object its emulation ran), got one way: `.report` on what a run
returns (`run_stencil(cfg).report`, `run_md(...).report`, `wse_trainer.run.run(...).report`),
or `engine.report(measured_wall_s=...)` on an engine that outlives one run and is timed by
its caller (`TlrEngine`, the inference engines). A report is frozen: the kernel's own
figures (`extra`, a read-only mapping; those derived from the predicted time come from a
function of the evaluated `Timing` that `build` calls) are given to `build`, never set
after; `dataclasses.replace` (as `with_trace`) makes a changed copy. So that:

- `measured_wall_s` is the emulator's wall time on this machine (None for a plan only);
- `predicted` is the evaluated phase tree (`wse_core.cost.perf.Timing`): seconds and the bound
  of every phase, the critical phase, per-resource costs;
- `work` is the total counted work (instructions by kind and dtype, SRAM bytes, words per
  link direction, hops), `traffic` the fabric ledger's count, `sram` the ledger's summary;
- `assumptions` lists every constant behind the figure with its units, mechanism and basis
  (`wse_core.cost.mechanisms`), the overlap rule and the kernel's own assumptions, and
  `calibration` the fitted constants in force and the rows they were fitted on; `assumed`
  the swept constants that moved the prediction, with the values priced and their ranges
  (`wse_core.cost.listing`, recorded as the pricing read them; `assumed_lines()`, and
  `assumed_compact()` for a one-line summary: hunt 69, `wse hpc swe` and `wse train
  --validate-only` printed a prediction beside no assumption);
- `cycles_by_mechanism()` is the predicted time split by mechanism (DSD elements, DSD
  issue, task activations, SRAM, link words, hops, relays, host I/O; of overlapped
  streams only the slowest), in cycles of the wafer's clock;
- `trace` (optional) is the per-PE view of the same figures (`wse_core.trace`), saved by
  `--trace FILE` and drawn by `wse view`;
- `units_per_s` is the predicted rate of `units` (tokens/s of a per-token report,
  timesteps/s of a per-step one);
- in a notebook a report shows its mechanism breakdown and phases (`_repr_html_`; `.plot()`
  a figure: `wse_core.notebook`);
- `energy_j` is predicted seconds times the system's power (`WaferSpec.system_peak_w`, None
  for a wafer of no system), with `units` saying what one prediction covers;
- `to_dict()` is the report's own keys (`REPORT_KEYS`) and then `extra`'s, which may not
  reuse one of them (hunt 67: `extra={"predicted_s": 5.0, "bound": "fabric"}` replaced the
  prediction and its bound in the JSON while the report said otherwise).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from numbers import Integral
from typing import TYPE_CHECKING, Any, NamedTuple

from wse_core.cost.calibration import Calibration
from wse_core.cost.perf import OVERLAP, PerfModel, Phase, Phases, Timing
from wse_core.cost.reads import Reads, merged, recording
from wse_core.cost.work import require_count
from wse_core.errors import WseError, shown
from wse_core.hw.frozen_mapping import FrozenMapping
from wse_core.hw.spec import WaferSpec
from wse_core.hw.traffic import Traffic

if TYPE_CHECKING:
    from wse_core.cost.listing import Listed

__all__ = ["Figures", "Measured", "REPORT_KEYS", "RunReport", "stopwatch"]

# The keys of `RunReport.to_dict()` before the kernel's `extra`, which may not reuse them.
REPORT_KEYS = (
    "name", "wafer", "units", "systems", "measured_wall_s", "predicted_s", "bound",
    "critical_phase", "seconds_by_bound", "cycles_by_mechanism", "energy_j", "predicted",
    "work", "traffic", "sram", "calibration", "assumptions", "assumed",
)  # fmt: skip

# A kernel's own figures for `RunReport.build`: a mapping, or a function of the evaluated
# phase tree that returns one (figures derived from the predicted time).
Figures = Mapping[str, Any] | Callable[[Timing], Mapping[str, Any]]


class Measured(NamedTuple):
    """What an emulated run measured, shown in its report beside the prediction (a shell's
    `measured_wall_s=` and `sram=` to `RunReport.build`)."""

    wall_s: float | None = None  # the emulator's wall time per unit (step, token) (s)
    sram: Mapping[str, Any] | None = None  # the SRAM ledger summary of the wafer that ran it


def _check_run(measured_wall_s: object, systems: object) -> None:
    """Refuse a measured time that is not a finite number >= 0 (hunt 65: NaN made `to_dict`
    invalid JSON, "1" stayed a string) and a system count that is not a positive integer
    (-2 systems gave a negative energy)."""
    if measured_wall_s is not None:
        require_count("measured_wall_s", measured_wall_s)
    if isinstance(systems, bool) or not isinstance(systems, Integral) or systems < 1:
        raise WseError(f"systems must be a positive integer, got {shown(systems, quote=False)}")


def _check_extra(extra: Mapping[str, Any]) -> None:
    """Refuse an `extra` key that is one of the report's own (`REPORT_KEYS`): in `to_dict`
    it would replace the report's figure with another."""
    for key in extra:
        if key in REPORT_KEYS:
            raise WseError(
                f"extra key {key!r} is one of the report's own keys ({', '.join(REPORT_KEYS)})"
                f"; give the kernel's figure another name, such as 'kernel_{key}'"
            )


def _power_w(spec: WaferSpec, systems: int) -> float | None:
    """Peak power of `systems` systems built around `spec` (None: a wafer of no system, whose
    `system_peak_w` is 0)."""
    return spec.system_peak_w * systems if spec.system_peak_w else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunReport:
    """One run's report, frozen: every figure is given to `build` (or the constructor) and
    none is set after. `assumptions`, `sram` and `extra` are read-only mappings (copies of
    what was given); `dataclasses.replace` (as `with_trace`) makes a changed copy."""

    name: str
    wafer: str
    predicted: Timing
    phases: Phases
    calibration: Calibration
    assumptions: Mapping[str, str]
    measured_wall_s: float | None = None
    traffic: Traffic = dataclasses.field(default_factory=Traffic)
    sram: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    units: str = "run"
    systems: int = 1
    energy_j: float | None = None
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    trace: Any = None  # a wse_core.trace.PeTrace of this run (per-PE figures), when built
    # the swept constants that moved the prediction (`wse_core.cost.listing.Listed`), as the
    # pricing read them (`wse_core.cost.reads`)
    assumed: tuple[Listed, ...] = ()

    def __post_init__(self) -> None:
        _check_run(self.measured_wall_s, self.systems)
        # NumPy scalars (np.float32, np.int64) are no JSON: kept as Python numbers
        if self.measured_wall_s is not None:
            object.__setattr__(self, "measured_wall_s", float(self.measured_wall_s))
        object.__setattr__(self, "systems", int(self.systems))
        for name in ("assumptions", "sram", "extra"):
            object.__setattr__(self, name, FrozenMapping(dict(getattr(self, name))))
        _check_extra(self.extra)

    def with_trace(self, trace: Any) -> RunReport:
        """This report with its per-PE trace attached (`wse_core.trace.trace_from`)."""
        return dataclasses.replace(self, trace=trace)

    @classmethod
    def build(
        cls,
        name: str,
        spec: WaferSpec,
        phases: Phases | Phase,
        *,
        measured_wall_s: float | None = None,
        traffic: Traffic | None = None,
        sram: Mapping[str, Any] | None = None,
        assumptions: Mapping[str, str] | None = None,
        units: str = "run",
        systems: int = 1,
        model: PerfModel | None = None,
        extra: Figures | None = None,
        reads: Reads | None = None,
    ) -> RunReport:
        """Evaluate `phases` on `spec` and gather everything a reader needs beside it.

        `extra`: the kernel's own figures, a mapping or a function of the evaluated
        `Timing` that returns one (for figures derived from the predicted seconds, such as
        a rate); they keep the order given and land in `to_dict()` after the fields.
        `assumed` lists what the pricing read (`wse_core.cost.reads`), with `reads`: what
        the caller recorded while it built `phases` (an exponential's FMACs are counted
        there)."""
        from wse_core.cost.assumptions import listed
        from wse_core.cost.listing import listed as listed_reads

        _check_run(measured_wall_s, systems)  # before the tree is priced
        if isinstance(extra, Mapping):
            _check_extra(extra)
        if isinstance(phases, Phase):
            phases = Phases("serial", (phases,), phases.name)
        model = model or PerfModel(spec)
        with recording() as got:
            timing = model.evaluate(phases)
            figures = (extra(timing) if callable(extra) else extra) or {}
        power = _power_w(spec, systems)
        calibration = model.calibration_in_force()
        listing = listed(model.spec, calibration, model.rates)  # the values `model` read
        return cls(
            name=name,
            wafer=spec.name,
            predicted=timing,
            phases=phases,
            calibration=calibration,
            assumptions={"overlap rule": OVERLAP, **listing, **dict(assumptions or {})},
            measured_wall_s=measured_wall_s,
            traffic=traffic or Traffic(),
            sram=sram or {},
            units=units,
            systems=systems,
            energy_j=None if power is None else power * timing.seconds,
            extra=figures,
            assumed=listed_reads(merged(reads, got)),
        )

    @property
    def predicted_s(self) -> float:
        return self.predicted.seconds

    def cycles_by_mechanism(self) -> dict[str, float]:
        """Predicted cycles by mechanism (`wse_core.cost.perf.Timing.by_mechanism`)."""
        return self.predicted.by_mechanism()

    @property
    def bound(self) -> str:
        """The resource that sets most of the predicted time (leaves summed by bound)."""
        shares = self.predicted.by_bound()
        return max(shares, key=shares.__getitem__) if shares else "-"

    @property
    def units_per_s(self) -> float:
        """Predicted `units` per second (tokens/s of a per-token report, timesteps/s of a
        per-step one): 1 / `predicted_s`, infinite for a zero prediction."""
        return self.predicted.per_s

    def phase_rows(self) -> list[dict[str, object]]:
        """One row per phase: depth, name, repeat, seconds (all repeats), bound."""
        return [
            {
                "depth": depth,
                "phase": node.name,
                "repeat": node.repeat,
                "seconds": node.seconds,
                "share": node.seconds / self.predicted.seconds if self.predicted.seconds else 0,
                "bound": node.bound,
            }
            for depth, node in self.predicted.rows()
        ]

    def _repr_html_(self) -> str:
        from wse_core.notebook import report_html

        return report_html(self)

    def plot(self) -> Any:
        """The predicted cycles by mechanism as bars (a matplotlib Figure)."""
        from wse_core.notebook import report_figure

        return report_figure(self)

    def to_dict(self) -> dict[str, Any]:
        """`REPORT_KEYS` in their order, then `extra`'s keys (none of them one of those)."""
        return {
            "name": self.name,
            "wafer": self.wafer,
            "units": self.units,
            "systems": self.systems,
            "measured_wall_s": self.measured_wall_s,
            "predicted_s": self.predicted.seconds,
            "bound": self.bound,
            "critical_phase": self.predicted.critical().name,
            "seconds_by_bound": self.predicted.by_bound(),
            "cycles_by_mechanism": self.cycles_by_mechanism(),
            "energy_j": self.energy_j,
            "predicted": self.predicted.to_dict(),
            "work": self.phases.total_work().to_dict(),
            "traffic": self.traffic.to_dict(),
            "sram": dict(self.sram),
            "calibration": self.calibration.to_dict(),
            "assumptions": dict(self.assumptions),
            "assumed": [e.to_dict() for e in self.assumed],
            **self.extra,
        }

    def assumed_lines(self) -> list[str]:
        """The swept constants that moved the prediction, one line each (`Listed.line`)."""
        return [e.line() for e in self.assumed]

    def assumed_compact(self) -> str:
        """The same on one line, the ranges left to `wse experiments assumptions`."""
        from wse_core.cost.listing import compact

        return compact(self.assumed)


@contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    """`with stopwatch() as t: ...` then `t["s"]` is the elapsed wall time in seconds."""
    t: dict[str, float] = {}
    start = time.perf_counter()
    try:
        yield t
    finally:
        t["s"] = time.perf_counter() - start
