"""The one calibration: the fitted mechanism constants, fitted only on REFERENCES.md's set.

Contract. `current()` returns the `Calibration` in force: `values`, the fitted `WaferSpec`
fields (`wse_core.cost.mechanisms` marks them `fitted`), `fitted_on`, the rows that determine
each, and `settings`, the calibration settings in force (`wse_core.cost.assumptions.setting`).
`PerfModel` puts `values` into the spec it prices with; nothing divides any cost. The rows
are priced on the wafers they were measured on (`wse_core.cost.assumptions.calibration_spec`:
the `wse2` and `wse1` presets), which an assumption about the wafer being priced
(`--assume clock_hz=...`) does not move (hunt 66: it did, and a faster WSE-3 clock refitted
the WSE-2 rows into a slower WSE-3); `--assume calibration.clock_hz=...` moves them, and
`wafer`, `clock_hz` and `wafer_assumed` say what the fit used. The fit runs lazily, once per
set of assumptions that move it (`for_calibration`); a fitted constant the user assumes
(`--assume dsd_issue_cycles=20`) is held there and not fitted. Rows (the calibration set of
references/calibration-rows.md and nothing else; `rows()` gives each with its published and model
figure and its role):

- Jacquelin et al. Table II (25-point stencil, fp32, WSE-2, nz = 1000, 1000 steps, eight
  grids): the step time, priced as the published algorithm
  (`wse_core.cost.stencil.wave_step_phases`) at the Table II Z block (`table_ii_block_z`).
  Each of the eight rows fits `router_switch_cycles` (the idle per Z block beyond the halo's
  words and hops; the fit is their mean, so leaving one out predicts it from the others).
- Jacquelin et al.'s busy share, 69.6% at 600 x 600: fits `dsd_issue_cycles` (the busy
  cycles beyond the elements and task activations, per DSD issued).
- An SDK-simulator run published with its inputs (Wang-oss-tech/csl-experiments' SUMMA GEMM,
  WSE-2, P = 4, f32 tiles 14 x 14 x 14: the main task's 45,783 cycles for 784 FMACS of
  length 14 and 800 task switches; docs/references/calibration-rows.md cites it): fits
  `task_activation_cycles`.
- WaferLLM's MeshGEMV measured on a CS-3 (third-party hardware runs published with their
  inputs: FxPiGaAo/WaferLLM `MeshGEMV/WSE-3/wse_result.json`; `MESHGEMV_WSE3`, the data file
  `waferllm_meshgemv_wse3.csv` beside this module): priced on the `wse3` preset as the kernel
  runs (`meshgemv_row_phases`). The Mt = 8, Nt = 1 rows at P = 80 and 720 less their Mt = 1
  partners fit CS-3's `dsd_issue_cycles` (7 more FMAC DSDs, nothing else); then the Mt = Nt
  = 1 rows at P = 16 and 80 (group_num 2, 4, 8) and at P = 144, 336, 528, 720
  (`MESHGEMV_FITTED`) fit CS-3's `hop_latency_cycles`, `ramp_latency_cycles` and
  `control_instruction_cycles` (the call's control flow, its instructions counted by hand:
  `meshgemv_rows.KERNEL_CONTROL`, `HARNESS_CONTROL`) by least squares on relative residuals.
  No intercept (issue 41: until then 64 cycles a call were a free parameter priced in these
  rows only); the other rows are checks. These are the only per-wafer fitted constants
  (`Calibration.by_system`: a spec of system CS-3 prices them; WSE-2 and WSE-1 keep their
  values, and every WSE-2 row above is priced as before).
- Checks (nothing fitted on them): lingzhi227/MIMD_dataflow's @fmacs instruction trace (WSE-2
  simulator: one fp32 element per cycle, the width `fp32_mul_width` prices); Rocki et al.
  (SC20): a wafer-wide allreduce "about 10% greater than the diameter" in cycles, on the
  CS-1 (`wse1` preset's fabric, a scalar); the Llama 3.1 8B decode at 1,800 tokens/s
  (Hot Chips 2024), `wse_systems.published.decode_check_row` (this module imports no LLM case).

The three fitted constants are solved together (Newton's method on the three rows: the busy
share and the SUMMA row both weigh DSD overhead against task activations, so they are
solved as one system). `leave_one_out()` refits without each
fitted row and predicts it; `current(overrides=...)` refits with a row's published figure
changed, which is how a test shows that the leave-one-out can fail.

The CS-3 constants are fitted after the WSE-2 ones (their rows are priced with the WSE-2
fit's dsd_issue_cycles in place), and are left out of a spec that gives its own value
(a spec file's, `--set`'s or `--assume`'s: `Calibration.for_spec`).

Luczynski et al.'s measured reduce cycle counts (REFERENCES.md's calibration set) are not
rows here: the stored corpus held only secondary summaries of the paper (its model, T_R and
the 1-cycle hop), which `wse_core.cost.mechanisms` uses as sources.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

from wse_core.cost.mechanisms import CORE_MECHANISMS, SYSTEM_FITTED
from wse_core.cost.meshgemv_rows import (
    MESHGEMV_FITTED,
    MESHGEMV_ROWS_TEXT,
    MESHGEMV_SOURCE,
    MESHGEMV_SYSTEM,
    MESHGEMV_WSE3,
    fit_meshgemv,
    gemv_cycles,
    gemv_fits,
    meshgemv_row_case,
    meshgemv_row_phases,
)
from wse_core.cost.pricing import Phases, Pricing
from wse_core.cost.reads import recorded_fit
from wse_core.cost.stencil import wave_step_phases
from wse_core.cost.work import Op, Work
from wse_core.hw.frozen_mapping import FrozenMapping
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
    "summa_work",
    "row",
    "STENCIL_TABLE_II",
    "STENCIL_BUSY_SHARE",
    "SUMMA_GEMM",
    "FMACS_TRACE_ELEMENTS_PER_CYCLE",
    "DECODE_8B_TOKENS_PER_S",
    "ALLREDUCE_OVER_DIAMETER",
    "MESHGEMV_WSE3",
    "MESHGEMV_FITTED",
    "MESHGEMV_SOURCE",
    "SYSTEM_FITTED",
    "meshgemv_row_phases",
    "meshgemv_case",
    "meshgemv_row_case",
]

# Jacquelin et al., Table II (docs/references/calibration-rows.md): WSE-2, nz = 1000, 1000 steps:
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
# Wang-oss-tech/csl-experiments SUMMA GEMM on the WSE-2 SDK simulator (docs/references/
# calibration-rows.md): P, Mt, Kt, Nt, main-task (T11) cycles, task switches on the PE.
SUMMA_GEMM = {"P": 4, "Mt": 14, "Kt": 14, "Nt": 14, "cycles": 45783.0, "task_switches": 800}
# lingzhi227/MIMD_dataflow, Systolic_Mul_v2 f32 @fmacs trace (WSE-2 simulator): the 300
# accumulating instructions run one element per cycle (10 elements in 10 cycles).
FMACS_TRACE_ELEMENTS_PER_CYCLE = 1.0
FITTED = ("dsd_issue_cycles", "router_switch_cycles", "task_activation_cycles")
BUSY_CASE = "stencil25 600x600 busy"
SUMMA_CASE = "summa gemm P4 14x14x14"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Calibration:
    """Fitted spec fields, the rows each was fitted on, and the settings in force."""

    values: Mapping[str, float] = dataclasses.field(default_factory=dict)
    fitted_on: Mapping[str, str] = dataclasses.field(default_factory=dict)
    settings: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # constant -> its row's model / published - 1 where the fit could not meet it (a constant
    # held at 0 because the rows disagree under the assumptions in force)
    misses: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # the wafer its rows are priced on, its clock, and the `calibration.KEY` assumptions
    # in force on it (fields by name; empty: the preset as published)
    wafer: str = ""
    clock_hz: float = 0.0
    wafer_assumed: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # fitted spec fields of one system's wafer only (system -> field -> value; `for_spec`) and
    # the rows each was fitted on (no per-source intercept since issue 41: the MeshGEMV rows'
    # 64 cycles a call are counted control instructions and DSDs)
    by_system: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    system_fitted_on: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def for_spec(self, spec: WaferSpec) -> dict[str, float]:
        """The fitted fields priced on `spec`: `values`, and its system's (`by_system`) where
        the spec holds the preset's prior (a spec file's or `--set`'s own value is kept) and
        no active assumption gives the field (`--assume hop_latency_cycles=1` prices 1)."""
        from wse_core.cost.assumptions import active

        given = active()
        prior = {f.name: f.default for f in dataclasses.fields(WaferSpec)}
        own = {k: v for k, v in self.by_system.get(spec.system, {}).items()
               if k not in given and getattr(spec, k) == prior[k]}  # fmt: skip
        return {**self.values, **own}

    def to_dict(self) -> dict[str, object]:
        """Every field by name, its mappings as dicts (results.json's "calibration")."""
        fields = ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))
        return {k: _plain(v) for k, v in fields}

    def on_wafer(self) -> str:
        """ "wse2 at 8.5e+08 Hz", with the `calibration.KEY` assumptions on it if any."""
        from wse_core.cost.assumptions import CALIBRATION_PREFIX

        given = ", ".join(f"{CALIBRATION_PREFIX}{k}={v:g}" for k, v in self.wafer_assumed.items())
        return f"{self.wafer} at {self.clock_hz:g} Hz" + (f" (assumed: {given})" if given else "")

    def describe(self) -> str:
        from wse_core.cost.mechanisms import CONSTANTS

        if not self.values:
            return "no fitted constants (the spec's own values)"
        parts = [
            f"{k} = {v:.4g} {CONSTANTS[k].units} (fitted on {self.fitted_on.get(k, '?')})"
            for k, v in self.values.items()
        ]
        parts += [
            f"{k} = {v:.4g} {CONSTANTS[k].units} on {system} (fitted on "
            f"{self.system_fitted_on.get(k, '?')})"
            for system, fit in self.by_system.items() for k, v in fit.items()
        ]  # fmt: skip
        sets = ", ".join(f"{k} = {v:g}" for k, v in self.settings.items())
        return "; ".join(parts) + (f"; settings: {sets}" if sets else "") + (
            f"; rows priced on {self.on_wafer()}" if self.wafer else "") + (
            f"; {self.missed()}" if self.misses else "")  # fmt: skip

    def missed(self) -> str:
        """The rows the fit cannot meet under the assumptions in force, in words ("": none)."""
        rows = ", ".join(f"{k} {100 * m:+.1f}%" for k, m in self.misses.items())
        return (f"the rows cannot all be met under these assumptions (a constant would be "
                f"negative; it is held at 0): rows missed, by the constant each fits: {rows}"
                if rows else "")  # fmt: skip


def _plain(value: object) -> object:
    """`value` with every mapping in it a dict (`by_system` is a mapping of mappings)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


UNCALIBRATED = Calibration()


def wave25_phases(nz: int, block_z: int, steps: int) -> Phases:
    """The published 25-point step (`wse_core.cost.stencil`), `steps` times."""
    return wave_step_phases(nz, block_z, steps=steps)


def _wse(name: str) -> WaferSpec:
    """The calibration case's wafer, as measured, under the assumptions that move the
    calibration only (`calibration_spec`; the fit is refitted under them: `current`)."""
    from wse_core.cost.assumptions import calibration_spec

    return calibration_spec(name)


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
    busy = sum(mech.get(k, 0.0) for k in CORE_MECHANISMS)  # the core's instruction stream
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


def summa_work() -> Work:
    """The SUMMA case's main task on its PE, as its code runs: P steps of Kt x Nt fp32
    FMACS of length Mt (C's column += A's column times a scalar of B: two vector reads, one
    write), and the task switches the run records."""
    c = SUMMA_GEMM
    fmacs = Op("fmac", "fp32", c["Mt"], count=c["P"] * c["Kt"] * c["Nt"])
    return Work(ops=(fmacs,), task_activations=float(c["task_switches"]))


def _summa_cycles(cal: Calibration) -> float:
    return Pricing(_wse("wse2"), cal).cost(summa_work()).cycles


def meshgemv_case(cal: Calibration | None = None) -> tuple[WaferSpec, Calibration]:
    """The wafer the MeshGEMV rows are priced on (`calibration_spec("wse3")` with CS-3's
    fitted fields in place) and the calibration to price it with (its `values`)."""
    cal = cal or current()
    spec = _wse("wse3")
    own = cal.by_system.get(MESHGEMV_SYSTEM, {})
    values = {k: v for k, v in cal.values.items() if k not in own}  # CS-3's own in the spec
    return spec.replace(**own), Calibration(values=values)


def _table_rows(excluded: frozenset[str], published: Mapping[str, float]):
    out = []
    for nx, ny, seconds in STENCIL_TABLE_II:
        case = f"stencil25 {nx}x{ny}"
        if case not in excluded:
            out.append((nx, ny, published.get(case, seconds)))
    return out


def _targets(excluded: frozenset[str], published: Mapping[str, float]) -> dict[str, tuple]:
    """Each fitted constant: (the model of its row as a function of a calibration, the row's
    published figure, what it is fitted on), for the rows not excluded."""
    out: dict[str, tuple] = {}
    table = _table_rows(excluded, published)
    if table:
        out["router_switch_cycles"] = (
            _stencil_seconds,
            sum(r[2] for r in table) / len(table),
            f"Jacquelin et al. Table II, mean step time of {len(table)} rows "
            "(25-point stencil, fp32, WSE-2, nz = 1000)",
        )
    if BUSY_CASE not in excluded:
        out["dsd_issue_cycles"] = (
            _busy_share,
            published.get(BUSY_CASE, STENCIL_BUSY_SHARE),
            "Jacquelin et al. Sec. V, 69.6% busy cycles at 600 x 600",
        )
    if SUMMA_CASE not in excluded:
        out["task_activation_cycles"] = (
            _summa_cycles,
            published.get(SUMMA_CASE, SUMMA_GEMM["cycles"]),
            "SDK-simulator SUMMA GEMM, WSE-2, P = 4, 14 x 14 x 14 (Wang-oss-tech/csl-experiments)",
        )
    return out


def _solve(targets: Mapping[str, tuple]) -> dict[str, float]:
    """The constants that make every target row's model equal its figure: Newton's method
    on the rows' relative residuals with a finite-difference Jacobian (the rows are linear
    in the constants while no bound changes, so it converges in a few steps). A constant
    is never negative: where the rows would need one it stays 0 and its row misses."""
    import numpy as np

    keys = list(targets)
    if not keys:
        return {}

    from wse_core.cost.assumptions import refuse_refit_past_limits

    def residual(x) -> np.ndarray:
        for key, v in zip(keys, x, strict=True):
            refuse_refit_past_limits(key, float(v))
        cal = Calibration(values=dict(zip(keys, (float(v) for v in x), strict=True)))
        return np.array([targets[k][0](cal) / targets[k][1] - 1.0 for k in keys])

    x = np.full(len(keys), 10.0)
    for _ in range(20):
        r = residual(x)
        if np.max(np.abs(r)) < 1e-9:
            break
        jac = np.column_stack([(residual(x + 1e-3 * e) - r) / 1e-3 for e in np.eye(len(keys))])
        x = np.maximum(x - np.linalg.lstsq(jac, r, rcond=None)[0], 0.0)  # cycles are >= 0
    return dict(zip(keys, (float(v) for v in x), strict=True))


def _fit(excluded: frozenset[str] = frozenset(), published: Mapping[str, float] = {}):
    from wse_core.cost.assumptions import CALIBRATION_PREFIX, for_calibration, setting
    from wse_core.cost.mechanisms import CALIBRATION_KEYS

    pinned = for_calibration()
    targets = {k: v for k, v in _targets(excluded, published).items() if k not in pinned}
    values = _solve(targets)
    fitted_on = {k: targets[k][2] for k in values}
    settings = {k: setting(k) for k in CALIBRATION_KEYS}
    cal = Calibration(values=FrozenMapping(values), fitted_on=FrozenMapping(fitted_on))
    misses = {k: m for k, (model, figure, _) in targets.items()
              if abs(m := model(cal) / figure - 1.0) > 1e-6}  # fmt: skip
    on_wafer = {k.removeprefix(CALIBRATION_PREFIX): v for k, v in pinned.items()
                if k.startswith(CALIBRATION_PREFIX)}  # fmt: skip
    wse3 = fit_meshgemv(_wse("wse3"), Calibration(values=cal.values), excluded, published)
    by_system = {MESHGEMV_SYSTEM: FrozenMapping(wse3)} if wse3 else {}
    return dataclasses.replace(
        cal, settings=FrozenMapping(settings), misses=FrozenMapping(misses),
        wafer="wse2", clock_hz=_wse("wse2").clock_hz, wafer_assumed=FrozenMapping(on_wafer),
        by_system=FrozenMapping(by_system),
        system_fitted_on=FrozenMapping(dict.fromkeys(wse3, MESHGEMV_ROWS_TEXT)),
    )  # fmt: skip


@functools.cache
def _fit_cached(
    key: tuple[tuple[str, float], ...],
    excluded: frozenset[str],
    published: tuple[tuple[str, float], ...],
) -> Calibration:
    from wse_core.cost.assumptions import assume

    with assume(**dict(key)):  # the fit reads only what moves it (`for_calibration`)
        return recorded_fit(lambda: _fit(excluded, dict(published)))


def current(
    excluded: frozenset[str] = frozenset(), published: Mapping[str, float] | None = None
) -> Calibration:
    """The calibration in force under the active assumptions (fitted on first use);
    `excluded`: row names to leave out of the fit (for `leave_one_out`); `published`: row
    figures to use instead of the published ones (a perturbation, for tests)."""
    from wse_core.cost.assumptions import for_calibration

    pub = tuple(sorted((published or {}).items()))
    return _fit_cached(tuple(sorted(for_calibration().items())), frozenset(excluded), pub)


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


def _role(cal: Calibration, key: str) -> str:
    return f"fits {key}" if key in cal.values else "check"


def rows(
    cal: Calibration | None = None, published: Mapping[str, float] | None = None
) -> list[dict[str, object]]:
    """Every calibration row priced here: published and model figures, their ratio, its role
    (which constant it fits, or "check") and the bound. The Llama 3.1 8B check row is
    `wse_systems.published.decode_check_row` (an LLM case: pricing and the calibration do
    not depend on it)."""
    cal = cal or current()
    pub = published or {}
    out = []
    model_s = _stencil_seconds(cal)
    role = _role(cal, "router_switch_cycles")
    for nx, ny, seconds in STENCIL_TABLE_II:
        case = f"stencil25 {nx}x{ny}"
        out.append(row(case, "seconds", pub.get(case, seconds), model_s, role, "compute"))
    busy = _busy_share(cal)
    share = pub.get(BUSY_CASE, STENCIL_BUSY_SHARE)
    out.append(row(BUSY_CASE, "busy share", share, busy, _role(cal, "dsd_issue_cycles"), "-"))
    summa = pub.get(SUMMA_CASE, SUMMA_GEMM["cycles"])
    role = _role(cal, "task_activation_cycles")
    out.append(row(SUMMA_CASE, "cycles", summa, _summa_cycles(cal), role, "compute"))
    fmacs = Op("fmac", "fp32", 10).width(Pricing(_wse("wse2"), cal).rates)
    out.append(row("fmacs trace", "elements/cycle", FMACS_TRACE_ELEMENTS_PER_CYCLE, fmacs,
                   "check", "compute"))  # fmt: skip
    model_c, published_c = _allreduce_cycles(cal)
    out.append(row("allreduce wse1 scalar", "cycles", published_c, model_c, "check", "latency"))
    return out + _gemv_rows(cal, pub)


def _gemv_rows(cal: Calibration, pub: Mapping[str, float]) -> list[dict[str, object]]:
    """The MeshGEMV rows (cycles of one GEMV, every one a counted mechanism), each fitting
    CS-3's `SYSTEM_FITTED` constants or a check."""
    spec, priced = meshgemv_case(cal)
    fitted = SYSTEM_FITTED[MESHGEMV_SYSTEM]
    fits = f"fits {', '.join(fitted)}"  # on CS-3 (the case says wse3): docs/experiments.md
    out = []
    for r in MESHGEMV_WSE3:
        role = fits if gemv_fits(r) and MESHGEMV_SYSTEM in cal.by_system else "check"
        case = meshgemv_row_case(r)
        model = gemv_cycles(spec, priced, r)
        out.append(row(case, "cycles", pub.get(case, r[4]), model, role, "latency"))
    return out


def leave_one_out(published: Mapping[str, float] | None = None) -> list[dict[str, object]]:
    """For each row that fits a constant: refit without it, predict it (error = model /
    published - 1 under the refitted calibration). `published` perturbs row figures (the
    fit and the rows use them), to show that a row the others disagree with fails."""
    pub = dict(published or {})
    full = current(published=pub)
    out = []
    for r in rows(full, pub):
        if not str(r["role"]).startswith("fits"):
            continue
        loo = current(frozenset({str(r["case"])}), pub)
        pred = next(x for x in rows(loo, pub) if x["case"] == r["case"])
        out.append(
            {
                "case": r["case"],
                "published": r["published"],
                "model": r["model"],
                "model_without_row": pred["model"],
                "error_without_row": float(pred["ratio"]) - 1.0,  # type: ignore[arg-type]
                "values_without_row": {
                    **loo.values,
                    **{
                        f"{k} on {system}": v
                        for system, fit in loo.by_system.items()
                        for k, v in fit.items()
                    },
                },  # fmt: skip
            }
        )
    return out
