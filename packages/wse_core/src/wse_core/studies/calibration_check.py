"""Experiment `cost-model-calibration`: the model against every published figure the team
may see (the calibration set of shared/REFERENCES.md), with the efficiencies it fitted.

Rows: the eight grids of Jacquelin et al. Table II (25-point stencil, fp32, WSE-2, nz = 1000,
1000 steps: Gcell/s) and Llama 3.1 8B batch-1 decode on one WSE-3 (tokens/s), each with the
published figure, the ratio, and the resource that bounds it. Every row is a calibration
row: the other published experiments' figures are kept aside on purpose, so their
predictions are reported by their own experiments with `published` left empty.
"""

from __future__ import annotations

from wse_core.calibration import STENCIL_NZ, STENCIL_STEPS, STENCIL_TABLE_II, current, rows
from wse_core.experiment import ExperimentResult, PredictionRow

__all__ = ["run"]

STENCIL_SOURCE = "Jacquelin et al., arXiv:2204.03775, Table II (calibration)"
DECODE_SOURCE = "Cerebras, Hot Chips 2024 (calibration)"
# Table II's own Gcell/s column, in the order of STENCIL_TABLE_II (shared/REFERENCES.md).
TABLE_II_GCELLS = (533.64, 2097.60, 4731.53, 4956.17, 5945.40, 8922.08, 9782.14, 9862.78)


def _rows() -> list[PredictionRow]:
    out = []
    table = rows()
    for (nx, ny, _), row, gcells in zip(STENCIL_TABLE_II, table[:-1], TABLE_II_GCELLS, strict=True):
        cells = nx * ny * STENCIL_NZ * STENCIL_STEPS
        params = {"wafer": "wse2", "grid": f"{nx}x{ny}", "nz": STENCIL_NZ, "precision": "fp32"}
        params["bound"] = row["bound"]
        out.append(
            PredictionRow(
                "gcells_per_s",
                cells / float(row["model_s"]) / 1e9,  # type: ignore[arg-type]
                "Gcell/s",
                params,
                gcells,
                STENCIL_SOURCE,
            )
        )
    dec = table[-1]
    params = {"wafer": "wse3", "wafers": 1, "model": "llama3.1-8b", "precision": "fp16"}
    out.append(
        PredictionRow(
            "tokens_per_s",
            1.0 / float(dec["model_s"]),  # type: ignore[arg-type]
            "tokens/s",
            {**params, "bound": dec["bound"]},
            1800.0,
            DECODE_SOURCE,
        )
    )
    return out


def run(*, quick: bool = False, seed: int = 0) -> ExperimentResult:
    """No measured part: the rows are the model's figures for the calibration cases."""
    preds = _rows()
    cal = current()
    return ExperimentResult(
        experiment="cost-model-calibration",
        seed=seed,
        config={"calibration": cal.to_dict()},
        measurements=[],
        predictions=preds,
        figure=_figure(preds, cal.describe()),
    )


def _figure(preds: list[PredictionRow], caption: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.2))
    labels = [p.params.get("grid", p.params.get("model", "")) for p in preds]
    ratios = [p.value / p.published for p in preds if p.published]
    ax.axhspan(0.95, 1.05, color="tab:green", alpha=0.15, label="within 5%")
    ax.bar(range(len(ratios)), ratios, color=["tab:blue"] * (len(ratios) - 1) + ["tab:orange"])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="predicted / published", ylim=(0.8, 1.2))
    ax.set_title("Calibration set: 25-point stencil (blue, WSE-2) and 8B decode (orange, WSE-3)")
    ax.legend(loc="upper right")
    fig.text(0.01, 0.01, caption, fontsize=6, wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig
