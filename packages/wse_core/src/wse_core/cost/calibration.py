"""The one calibration: the fitted mechanism constants, fitted only on REFERENCES.md's set.

Contract. `current()` returns the `Calibration` in force: `values`, the fitted `WaferSpec`
fields (`wse_core.cost.mechanisms` marks them `fitted`), `fitted_on`, the rows that determine
each, and `settings`, the calibration settings in force (`wse_core.cost.assumptions.setting`).
`PerfModel` puts `values` into the spec it prices with; nothing divides any cost. The fit
runs lazily, once per set of active assumptions; a fitted constant the user assumes
(`--assume dsd_issue_cycles=20`) is held there and not fitted. Rows (the calibration set of
shared/REFERENCES.md and nothing else; `rows()` gives each with its published and model
figure and its role):

- Jacquelin et al. Table II (25-point stencil, fp32, WSE-2, nz = 1000, 1000 steps, eight
  grids): the step time, priced as the published algorithm
  (`wse_core.cost.stencil.wave_step_phases`) at the Table II Z block
  (`table_ii_block_z`). Fits `dsd_issue_cycles` (the mean of the eight rows: the per-PE work
  does not depend on the grid). The 69.6% busy profile at 600 x 600 is a check row: the
  model's busy share of the step (simd + DSD issue + task activations over the step).
- Rocki et al. (SC20): a wafer-wide allreduce "about 10% greater than the diameter" in
  cycles, on the CS-1 (`wse1` preset's fabric, a scalar): a check of the fabric constants
  (hop and ramp latency, sourced from Luczynski et al.) and `wse_core.cost.collectives`.
- Llama 3.1 8B, 16-bit, one WSE-3, batch-1 decode at 1,800 tokens/s (Hot Chips 2024),
  planned by `wse_systems.pipeline` and priced by `wse_systems.decoder`: a check (no
  other row is needed to price it, and nothing is fitted on it). Its row is
  `systems.decoder.decode_check_row` (this module imports no LLM case; `row` builds it).

Luczynski et al.'s measured reduce cycle counts (REFERENCES.md's calibration set) are not
rows here: the stored corpus held only secondary summaries of the paper (its model, T_R and
the 1-cycle hop), which `wse_core.cost.mechanisms` uses as sources. `leave_one_out()` refits
without each fitted row and predicts it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from types import MappingProxyType

from wse_core.cost.pricing import Phases, Pricing
from wse_core.cost.stencil import wave_step_phases
from wse_core.cost.work import Work
from wse_core.hw.spec import WaferSpec

__all__ = [
    "Calibration",
    "UNCALIBRATED",
    "current",
    "rows",
    "leave_one_out",
    "wave25_phases",
    "table_ii_phases",
    "allreduce_case",
    "row",
    "STENCIL_TABLE_II",
    "STENCIL_BUSY_SHARE",
    "DECODE_8B_TOKENS_PER_S",
    "ALLREDUCE_OVER_DIAMETER",
]

# Jacquelin et al., Table II (shared/REFERENCES.md): WSE-2, nz = 1000, 1000 steps:
# (nx, ny, seconds for 1000 steps).
STENCIL_TABLE_II = (
    (200, 200, 0.0750),
    (400, 400, 0.0763),
    (600, 600, 0.0761),
    (755, 500, 0.0762),
    (755, 600, 0.0762),
    (755, 900, 0.0762),
    (755, 990, 0.0764),
    (755, 994, 0.0761),
)
STENCIL_NZ, STENCIL_STEPS = 1000, 1000
STENCIL_BUSY_SHARE = 0.696  # Jacquelin et al. Sec. V: busy cycles, profiled at 600 x 600
DECODE_8B_TOKENS_PER_S = 1800.0  # Cerebras, Hot Chips 2024
ALLREDUCE_OVER_DIAMETER = 1.1  # Rocki et al., SC20: allreduce cycles / diameter (about)
FITTED = ("dsd_issue_cycles",)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Calibration:
    """Fitted spec fields, the rows each was fitted on, and the settings in force."""

    values: Mapping[str, float] = dataclasses.field(default_factory=dict)
    fitted_on: Mapping[str, str] = dataclasses.field(default_factory=dict)
    settings: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "values": dict(self.values),
            "fitted_on": dict(self.fitted_on),
            "settings": dict(self.settings),
        }

    def describe(self) -> str:
        from wse_core.cost.mechanisms import CONSTANTS

        if not self.values:
            return "no fitted constants (the spec's own values)"
        parts = [
            f"{k} = {v:.4g} {CONSTANTS[k].units} (fitted on {self.fitted_on.get(k, '?')})"
            for k, v in self.values.items()
        ]
        sets = ", ".join(f"{k} = {v:g}" for k, v in self.settings.items())
        return "; ".join(parts) + (f"; settings: {sets}" if sets else "")


UNCALIBRATED = Calibration()


def wave25_phases(nz: int, block_z: int, steps: int) -> Phases:
    """The published 25-point step (`wse_core.cost.stencil`), `steps` times."""
    return wave_step_phases(nz, block_z, steps=steps)


def _wse(name: str) -> WaferSpec:
    """The calibration case's wafer under the active assumptions (the fit is refitted under
    them: `current`)."""
    from wse_core.cost.assumptions import assumed_spec

    return assumed_spec(name)


def table_ii_phases(steps: int = STENCIL_STEPS) -> Phases:
    """The Table II case as priced: `steps` published steps at nz = 1000 and the Table II Z
    block (`table_ii_block_z`)."""
    from wse_core.cost.assumptions import setting

    return wave25_phases(STENCIL_NZ, int(setting("table_ii_block_z")), steps)


def _stencil_seconds(cal: Calibration) -> float:
    return Pricing(_wse("wse2"), cal).evaluate(table_ii_phases()).seconds


def _busy_share(cal: Calibration) -> float:
    timing = Pricing(_wse("wse2"), cal).evaluate(table_ii_phases())
    mech = timing.by_mechanism()
    busy = sum(mech.get(k, 0.0) for k in ("simd", "dsd_issue", "task_activation"))
    return busy / (timing.seconds * _wse("wse2").clock_hz)


def allreduce_case(cal: Calibration | None = None) -> tuple[WaferSpec, Work]:
    """Rocki et al.'s case: a scalar fp32 allreduce over the whole CS-1 fabric (`wse1`)."""
    from wse_core.cost.collectives import allreduce_2d

    spec = _wse("wse1")
    rates = Pricing(spec, cal or UNCALIBRATED).rates
    return spec, allreduce_2d(rates, spec.pe_rows, spec.pe_cols, 1)


def _allreduce_cycles(cal: Calibration) -> tuple[float, float]:
    """(model cycles, published cycles) of Rocki et al.'s wafer-wide scalar allreduce."""
    spec, work = allreduce_case(cal)
    diameter = spec.pe_rows + spec.pe_cols - 2
    return Pricing(spec, cal).cost(work).cycles, ALLREDUCE_OVER_DIAMETER * diameter


def _bisect(model_s: Callable[[float], float], target: float, lo=0.0, hi=1e4) -> float:
    """x with model_s(x) == target, model_s increasing in x (bisection)."""
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if model_s(mid) < target else (lo, mid)
    return 0.5 * (lo + hi)


def _table_rows(excluded: frozenset[str]) -> list[tuple[int, int, float]]:
    return [r for r in STENCIL_TABLE_II if f"stencil25 {r[0]}x{r[1]}" not in excluded]


def _fit(excluded: frozenset[str] = frozenset()) -> Calibration:
    from wse_core.cost.assumptions import active, setting
    from wse_core.cost.mechanisms import CALIBRATION_KEYS

    pinned = active()
    values: dict[str, float] = {}
    fitted_on: dict[str, str] = {}
    table = _table_rows(excluded)
    if "dsd_issue_cycles" not in pinned and table:
        target = sum(r[2] for r in table) / len(table)

        def model_s(d: float) -> float:
            return _stencil_seconds(Calibration(values={"dsd_issue_cycles": d}))

        values["dsd_issue_cycles"] = _bisect(model_s, target)
        fitted_on["dsd_issue_cycles"] = (
            f"Jacquelin et al. Table II, mean step time of {len(table)} rows "
            "(25-point stencil, fp32, WSE-2, nz = 1000)"
        )
    settings = {k: setting(k) for k in CALIBRATION_KEYS}
    return Calibration(
        values=MappingProxyType(values),
        fitted_on=MappingProxyType(fitted_on),
        settings=MappingProxyType(settings),
    )


@functools.cache
def _fit_cached(key: tuple[tuple[str, float], ...], excluded: frozenset[str]) -> Calibration:
    from wse_core.cost.assumptions import assume

    with assume(**dict(key)):
        return _fit(excluded)


def current(excluded: frozenset[str] = frozenset()) -> Calibration:
    """The calibration in force under the active assumptions (fitted on first use);
    `excluded`: row names to leave out of the fit (for `leave_one_out`)."""
    from wse_core.cost.assumptions import active

    return _fit_cached(tuple(sorted(active().items())), frozenset(excluded))


def row(case: str, quantity: str, published: float, model: float, role: str, bound: str):
    """One calibration row: its published and model figures, their ratio, role and bound."""
    return {
        "case": case,
        "quantity": quantity,
        "published": published,
        "model": model,
        "ratio": model / published,
        "role": role,
        "bound": bound,
    }


def rows(cal: Calibration | None = None) -> list[dict[str, object]]:
    """Every calibration row priced here: published and model figures, their ratio, its role
    (which constant it fits, or "check") and the bound. The Llama 3.1 8B check row is
    `wse_systems.decoder.decode_check_row` (an LLM case: pricing and the calibration do
    not depend on it)."""
    cal = cal or current()
    out = []
    model_s = _stencil_seconds(cal)
    role = "fits dsd_issue_cycles" if "dsd_issue_cycles" in cal.values else "check"
    for nx, ny, seconds in STENCIL_TABLE_II:
        out.append(row(f"stencil25 {nx}x{ny}", "seconds", seconds, model_s, role, "compute"))
    busy = _busy_share(cal)
    out.append(row("stencil25 600x600 busy", "busy share", STENCIL_BUSY_SHARE, busy, "check", "-"))
    model_c, published_c = _allreduce_cycles(cal)
    out.append(row("allreduce wse1 scalar", "cycles", published_c, model_c, "check", "latency"))
    return out


def leave_one_out() -> list[dict[str, object]]:
    """For each row that fits a constant: refit without it, predict it (error = model /
    published - 1 under the refitted calibration)."""
    full = current()
    out = []
    for row in rows(full):
        if not str(row["role"]).startswith("fits"):
            continue
        loo = current(frozenset({str(row["case"])}))
        pred = next(r for r in rows(loo) if r["case"] == row["case"])
        out.append(
            {
                "case": row["case"],
                "published": row["published"],
                "model": row["model"],
                "model_without_row": pred["model"],
                "error_without_row": float(pred["ratio"]) - 1.0,  # type: ignore[arg-type]
                "values_without_row": dict(loo.values),
            }
        )
    return out
