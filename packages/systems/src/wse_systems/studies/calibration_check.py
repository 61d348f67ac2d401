"""Experiment `cost-model-calibration`: every constant of the cost model, the rows that fit
it, every calibration row against the model, and a leave-one-out table.

Rows (the calibration set of references/calibration-rows.md, `wse_core.cost.calibration.rows` and
`wse_systems.published.decode_check_row`): the eight
grids of Jacquelin et al. Table II (Gcell/s; they fit `router_switch_cycles`), the 69.6%
busy profile at 600 x 600 (fits `dsd_issue_cycles`), the SDK-simulator SUMMA GEMM of
Wang-oss-tech/csl-experiments (cycles; fits `task_activation_cycles`), lingzhi227/MIMD_dataflow's
@fmacs trace (elements per cycle, a check), Rocki et al.'s allreduce at about 1.1 x the
diameter (a check of the sourced fabric constants), WaferLLM's MeshGEMV measured on a CS-3
by a third party (cycles of one GEMV; twelve fit CS-3's hop and ramp latencies, DSD issue and
control instruction, twenty-six are checks: `wse_core.cost.calibration.MESHGEMV_FITTED`),
Llama 3.1 8B batch-1 decode on one WSE-3 (tokens/s, a check; the published setup,
`wse_systems.published.PUBLISHED_SETUP`, on the plan `wse plan infer` serves it on, with the
assumptions that move it and that no row identifies swept beside it: `params["swept ..."]`,
`wse_systems.published.check_sweeps`). Each row says its role and carries its cycles by
mechanism and what its own pricing read (`_priced`, `read_by`), not the whole run's.

Measurements: `constant` rows (every `wse_core.cost.mechanisms` constant: its value on WSE-2
and WSE-3 with the fitted ones in place, units, mechanism, basis, and its source or the rows
that fit it) and `leave_one_out` rows (each fitted row left out: the refitted values and the row
predicted with them). Both tables read in one sense (hunt 73: the rows' ratio was taken on
Gcell/s, the leave-one-out error on seconds: the 200 x 200 grid, predicted slow, read 0.985
in one and +1.6% left out in the other): a leave-one-out row is in the unit of its
prediction row (`quantity`; Table II's grids in Gcell/s against Table II's own Gcell/s
column, converted here from `calibration.leave_one_out`'s seconds), and
`error_without_row` = model_without_row / published - 1, the prediction table's ratio - 1.
Each row's source names the calibration set; what it is to the calibration is its role
alone (hunt 73: the busy share's source said "check" beside its role "fits
dsd_issue_cycles"). The other published experiments' figures are kept aside on purpose;
their predictions are reported by their own experiments with `published` left empty.
"""

from __future__ import annotations

from wse_core.cost.assumptions import value_of
from wse_core.cost.calibration import (
    MESHGEMV_WSE3,
    STENCIL_NZ,
    STENCIL_STEPS,
    STENCIL_TABLE_II,
    current,
    leave_one_out,
    meshgemv_row_case,
    rows,
)
from wse_core.cost.mechanisms import CONSTANTS
from wse_core.cost.perf import PerfModel
from wse_core.cost.reads import Reads, recording
from wse_core.cost.work import Op
from wse_core.studies.experiment import ExperimentResult, PredictionRow, read_by

from wse_systems.published import check_sweeps, decode_case, decode_check_row, sweep_params

__all__ = ["run", "run_predictions", "constants_table"]

# The MeshGEMV rows by case name (P, M, N, group_num, cycles, log file).
_GEMV = {meshgemv_row_case(r): r for r in MESHGEMV_WSE3}
# Table II's own Gcell/s column, in the order of STENCIL_TABLE_II (references/calibration-rows.md).
TABLE_II_GCELLS = (533.64, 2097.60, 4731.53, 4956.17, 5945.40, 8922.08, 9782.14, 9862.78)
# Where each row's figure comes from; its role (which constant it fits, or "check") is the
# row's role alone: a refit under `--assume` may change it (a held constant's row checks).
SOURCES = {
    "stencil25": "Jacquelin et al., arXiv:2204.03775, Table II (calibration set)",
    "busy": "Jacquelin et al., arXiv:2204.03775, Sec. V (calibration set)",
    "allreduce": "Rocki et al., SC20, arXiv:2010.03660 (calibration set)",
    "simulator": "Wang-oss-tech/csl-experiments (SUMMA) and lingzhi227/MIMD_dataflow "
    "(@fmacs trace), SDK simulator, WSE-2 (calibration set; docs/references/calibration-rows.md)",
    "meshgemv": "FxPiGaAo/WaferLLM MeshGEMV/WSE-3/wse_result.json @5c6705353f95, WaferLLM's "
    "MeshGEMV measured on a CS-3 by a third party (calibration set; "
    "docs/references/calibration-rows.md)",
    "llama3.1-8b": "Cerebras, Hot Chips 2024 / launch 2024-08-27, measured by Artificial "
    "Analysis (API output speed; wse_systems.published.PUBLISHED_SETUP) (calibration set)",
}


def _table_ii() -> dict[str, tuple[str, float, float]]:
    """Each Table II case: its grid, its cells x steps in billions (over the run's seconds:
    Gcell/s) and Table II's own Gcell/s."""
    out = {}
    for (nx, ny, _), gcells in zip(STENCIL_TABLE_II, TABLE_II_GCELLS, strict=True):
        giga_cells = nx * ny * STENCIL_NZ * STENCIL_STEPS / 1e9
        out[f"stencil25 {nx}x{ny}"] = (f"{nx}x{ny}", giga_cells, gcells)
    return out


def _priced(case: str) -> tuple[dict[str, float] | None, Reads]:
    """The row's predicted cycles by mechanism (per step, per allreduce, per token; None for
    a share or a width) and what its pricing read, listed beside the row alone (`read_by`;
    hunt 76: each row listed the whole run's reads, the WSE-3 clock and the exponential
    beside Table II's grids, every leave-one-out refit's fitted values)."""
    from wse_core.cost import calibration as cal
    from wse_core.cost.assumptions import calibration_spec  # the rows' wafer (hunt 66)

    with recording() as got:
        if case.startswith("stencil25"):  # the busy share is a share of the same step
            timing = PerfModel(calibration_spec("wse2")).evaluate(cal.table_ii_phases(1))
            mech = None if "busy" in case else timing.by_mechanism()
        elif case.startswith("llama"):
            spec, phases = decode_case()
            mech = PerfModel(spec).evaluate(phases).by_mechanism()
        elif case.startswith("allreduce"):
            spec, work = cal.allreduce_case(current())
            mech = PerfModel(spec).cost(work).timed_mechanisms()
        elif case.startswith("meshgemv"):
            r = _GEMV[case]
            spec, priced = cal.meshgemv_case(current())
            phases = cal.meshgemv_row_phases(*r[:4])
            mech = PerfModel(spec, priced).evaluate(phases).by_mechanism()
        elif case.startswith("summa"):
            mech = PerfModel(calibration_spec("wse2")).cost(cal.summa_work()).timed_mechanisms()
        else:
            mech = None
            _note_fmac_width()
    return mech, got


def _note_fmac_width() -> None:
    """Note what the @fmacs check, an fp32 FMAC's width on the calibration's WSE-2
    (`calibration.rows`; `Op.width` notes nothing), reads: its SIMD width and SRAM ports,
    each moving where an end of its sweep moves the width."""
    from wse_core.cost.assumptions import calibration_spec
    from wse_core.cost.reads import read

    spec, op = calibration_spec("wse2"), Op("fmac", "fp32", 10)
    for key in ("fp32_mul_width", "sram_read_bytes_per_cycle", "sram_write_bytes_per_cycle"):
        ends = CONSTANTS[key].sweep or ()
        moves = any(op.width(spec.replace(**{key: v})) != op.width(spec) for v in ends)
        read(key, getattr(spec, key), moves)


def run_predictions(*, seed: int = 0) -> list[PredictionRow]:
    """Every calibration row as a prediction (Gcell/s, busy share, cycles, tokens/s), each
    with what its own pricing read."""
    out = []
    grids = _table_ii()
    for row in [*rows(), decode_check_row()]:
        case, role = str(row["case"]), str(row["role"])
        params: dict[str, object] = {"case": case, "role": role, "bound": row["bound"]}
        pub, model = float(row["published"]), float(row["model"])  # type: ignore[arg-type]
        mech, got = _priced(case)
        if case in grids:
            grid, giga_cells, pub_value = grids[case]
            params |= {"wafer": "wse2", "grid": grid, "nz": STENCIL_NZ, "per": "step"}
            value = giga_cells / model
            unit, name, src = "Gcell/s", "gcells_per_s", SOURCES["stencil25"]
        elif "busy" in case:
            value, pub_value, unit, name, src = model, pub, "", "busy_share", SOURCES["busy"]
        elif case.startswith("summa") or case.startswith("fmacs"):
            params |= {"wafer": "wse2", "per": "run" if case.startswith("summa") else "cycle"}
            value, pub_value, unit = model, pub, str(row["quantity"])
            name, src = case.replace(" ", "_"), SOURCES["simulator"]
        elif case.startswith("meshgemv"):
            p, m, n, g, _, log = _GEMV[case]
            params |= {"wafer": "wse3", "P": p, "M": m, "N": n, "group_num": g, "per": "gemv",
                       "log": log}  # fmt: skip
            value, pub_value, unit, name = model, pub, "cycles", "meshgemv_cycles"
            src = SOURCES["meshgemv"]
        elif case.startswith("allreduce"):
            params |= {"wafer": "wse1", "words": 1, "per": "allreduce"}
            value, pub_value, unit, name = model, pub, "cycles", "allreduce_cycles"
            src = SOURCES["allreduce"]
        else:
            params |= {"wafer": "wse3", "wafers": 1, "model": "llama3.1-8b", "per": "token",
                       **sweep_params(check_sweeps())}  # fmt: skip
            value, pub_value, unit, name = 1 / model, 1 / pub, "tokens/s", "tokens_per_s"
            src = SOURCES["llama3.1-8b"]
        out += read_by(got, PredictionRow(name, value, unit, params, pub_value, src, mech))
    return out


def constants_table() -> list[dict[str, object]]:
    """Every constant: its value on WSE-2 and on WSE-3 (fitted ones as the calibration sets
    them: CS-3's hop and ramp latencies, DSD issue and control instruction are fitted on its
    own rows),
    units, mechanism, basis, and its source or the rows that fit it."""
    from wse_core.cost.assumptions import calibration_spec

    cal = current()
    rates = PerfModel(calibration_spec("wse2")).rates  # the calibration's WSE-2 (hunt 66)
    rates3 = PerfModel(calibration_spec("wse3")).rates  # CS-3's fitted constants
    on = {k: f"on WSE-3: {rows}" for k, rows in cal.system_fitted_on.items()}
    return [
        {
            "kind": "constant",
            "constant": key,
            "value_wse2": value_of(rates, key),
            "value_wse3": value_of(rates3, key),
            "units": c.units,
            "mechanism": c.mechanism,
            "basis": c.basis,
            "source_or_rows": cal.fitted_on.get(key, c.source)
            + (f"; {on[key]}" if key in on else ""),
        }
        for key, c in CONSTANTS.items()
    ]


def _loo_rows() -> list[dict[str, object]]:
    """Each fitted row left out, in its prediction row's unit: model_without_row /
    published - 1 (Table II's grids from seconds to Gcell/s, against Table II's Gcell/s)."""
    gcells = _table_ii()
    quantity = {str(r["case"]): str(r["quantity"]) for r in rows()}
    out = []
    for r in leave_one_out():
        case = str(r["case"])
        pub, model = float(r["published"]), float(r["model_without_row"])  # type: ignore[arg-type]
        if case in gcells:  # seconds for the run -> Gcell/s, the prediction row's unit
            (_, giga_cells, pub), unit = gcells[case], "Gcell/s"
            model = giga_cells / model
        else:  # busy share, cycles: the prediction row's unit already
            unit = quantity[case]
        out.append({"kind": "leave_one_out", "case": case, "refitted": r["values_without_row"],
                    "quantity": unit, "published": pub, "model_without_row": model,
                    "error_without_row": model / pub - 1.0})  # fmt: skip
    return out


def run(*, quick: bool = False, seed: int = 0) -> ExperimentResult:
    """No emulation: the constants, the rows, the leave-one-out table."""
    preds = run_predictions(seed=seed)
    cal = current()
    loo = _loo_rows()
    return ExperimentResult(
        experiment="cost-model-calibration",
        seed=seed,
        config={"calibration": cal.to_dict()},
        measurements=[*constants_table(), *loo],
        predictions=preds,
        figure=_figure(preds, loo, cal.describe()),
    )


def _figure(preds: list[PredictionRow], loo: list[dict[str, object]], caption: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), width_ratios=(3, 2))
    labels = [str(p.params["case"]) for p in preds]
    ratios = [p.value / p.published if p.published else 0.0 for p in preds]
    colors = [
        "tab:blue" if str(p.params["role"]).startswith("fits") else "tab:orange" for p in preds
    ]
    ax.axhspan(0.95, 1.05, color="tab:green", alpha=0.15, label="within 5%")
    ax.bar(range(len(ratios)), ratios, color=colors)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=7)
    lo, hi = 0.7, 1.3
    ax.set(ylabel="model / published (in each row's unit)", ylim=(lo, hi))
    for i, r in enumerate(ratios):  # a bar past the axis says its ratio (the 8B check: 1.92x)
        if not lo <= r <= hi:
            y = hi - 0.02 if r > hi else lo + 0.02
            ax.text(i, y, f"{r:.2f}x", ha="center", va="top" if r > hi else "bottom", fontsize=7)
    ax.set_title("Calibration set: fitted rows (blue) and checks (orange)", fontsize=9)
    ax.legend(loc="upper left", fontsize=7)
    ax2.bar(range(len(loo)), [100 * float(r["error_without_row"]) for r in loo])  # type: ignore[arg-type]
    ax2.axhspan(-10, 10, color="tab:green", alpha=0.15)
    ax2.set_xticks(
        range(len(loo)), [str(r["case"]) for r in loo], rotation=35, ha="right", fontsize=7
    )
    ax2.set(ylabel="model / published - 1 without the row (%)", title="Leave one out")
    fig.text(0.01, 0.01, caption, fontsize=6, wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig
