"""Experiment `wafer-yield`: how often a wafer can be repaired, and how many PEs it keeps.

Measured: over seeded wafers, the fraction the two-level repair of `wse_core.hw.defects`
fixes (a row with more dead PEs than spare columns is retired; retired rows must not
outnumber spare rows), for a sweep of defect rates and spare budgets on the WSE-3 grid: each
wafer's map drawn by `defect_map` and repaired, or refused, by `remap` itself (hunt 81: the
draws applied the closed form's own rule to Binomial counts, so a regression in `remap`
left the dots on the lines), with the binomial standard error of the fraction. Usable PEs:
the logical grid on a wafer `remap` repairs, none on one it refuses (no command runs there;
hunt 81: it counted the good rows of a refused wafer).

Predicted: the same fraction in closed form — a row is fine with probability
q = BinomCDF(spare_cols; physical_cols, rate), and the wafer with probability
BinomCDF(spare_rows; physical_rows, 1 - q) (`wse_core.hw.repair`, which the planners use to
refuse a spec whose wafer does not repair). Nothing here is published; `published` is null.
"""

from __future__ import annotations

import math

import numpy as np

from wse_core.cost.assumptions import assumed_spec
from wse_core.errors import DefectError
from wse_core.hw.defects import defect_map, remap
from wse_core.hw.repair import predicted_repairable  # the one closed form (planners use it)
from wse_core.hw.spec import WaferSpec
from wse_core.studies.experiment import ExperimentResult, PredictionRow

__all__ = ["run", "predicted_repairable", "simulate"]

RATES = (1e-4, 1e-3, 2e-3, 3e-3, 5e-3, 7e-3, 1e-2, 2e-2)
SPARES = ((0, 6), (0, 12), (2, 12), (4, 24))  # (spare_rows, spare_cols)


def simulate(spec: WaferSpec, rate: float, wafers: int, rng: np.random.Generator):
    """(repairable fraction, mean usable PEs) of `wafers` wafers of `spec` at `rate`: each a
    `defect_map` drawn from a seed of `rng`, repaired by `remap` (its logical PEs usable) or
    refused (DefectError: none)."""
    repaired = 0
    for seed in rng.integers(0, 2**63 - 1, size=wafers):
        try:
            remap(spec, defect_map(spec, int(seed), rate))
        except DefectError:
            continue
        repaired += 1
    return repaired / wafers, repaired * spec.num_pes / wafers


def run(*, quick: bool = False, seed: int = 0) -> ExperimentResult:
    wse3 = assumed_spec("wse3")
    rows, cols = wse3.pe_rows, wse3.pe_cols
    wafers = 20 if quick else 200  # maps repaired a point (a WSE-3 map: ~20 ms)
    rng = np.random.default_rng(seed)
    measurements, predictions = [], []
    for spare_rows, spare_cols in SPARES:
        spec = wse3.replace(spare_rows=spare_rows, spare_cols=spare_cols)
        for rate in RATES:
            frac, usable = simulate(spec, rate, wafers, rng)
            params = {
                "preset": "wse3",
                "spare_rows": spare_rows,
                "spare_cols": spare_cols,
                "defect_rate": rate,
            }
            measurements.append(
                {
                    **params,
                    "wafers": wafers,
                    "repairable_fraction": frac,
                    "standard_error": math.sqrt(max(frac * (1.0 - frac), 0.0) / wafers),
                    "usable_pes": usable,
                    "usable_fraction": usable / spec.num_pes,
                }
            )
            predictions.append(
                PredictionRow(
                    "repairable_fraction",
                    predicted_repairable(rows, cols, spare_rows, spare_cols, rate),
                    "fraction",
                    params,
                )
            )
    return ExperimentResult(
        experiment="wafer-yield",
        seed=seed,
        config={
            "preset": "wse3",
            "grid": [rows, cols],
            "wafers_per_point": wafers,
            "rates": list(RATES),
            "spares": [list(s) for s in SPARES],
        },
        measurements=measurements,
        predictions=predictions,
        figure=_figure(measurements, predictions),
    )


def _figure(measurements, predictions):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for spare in SPARES:
        label = f"{spare[0]} spare rows, {spare[1]} spare cols"
        ms = [m for m in measurements if (m["spare_rows"], m["spare_cols"]) == spare]
        ps = [p for p in predictions if (p.params["spare_rows"], p.params["spare_cols"]) == spare]
        line = ax1.semilogx(
            [m["defect_rate"] for m in ms], [m["repairable_fraction"] for m in ms], "o", label=label
        )[0]
        ax1.semilogx(
            [p.params["defect_rate"] for p in ps],
            [p.value for p in ps],
            "-",
            color=line.get_color(),
        )
        ax2.semilogx(
            [m["defect_rate"] for m in ms], [m["usable_fraction"] for m in ms], "o-", label=label
        )
    ax1.set(
        xlabel="dead-PE rate",
        ylabel="repairable wafers",
        title="WSE-3: remap on drawn maps (dots) vs closed form (lines)",
    )
    ax2.set(
        xlabel="dead-PE rate",
        ylabel="usable fraction of the logical grid",
        title="usable PEs (the grid where remap repairs, none where it refuses)",
    )
    ax1.legend(fontsize=8)
    fig.tight_layout()
    return fig
