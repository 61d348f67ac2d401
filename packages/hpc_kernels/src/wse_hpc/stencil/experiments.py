"""Stencil experiments (shared/DESIGN.md output): `sc22-stencil25`, `sc22-stencil25-nz`,
`sc20-bicgstab`. Each is `run(*, quick, seed) -> ExperimentResult`.

Predictions come from `wse_hpc.stencil.perf` (one efficiency factor fitted on Jacquelin et al.
Table II, the calibration set); `published` is filled only from shared/REFERENCES.md. The
measured part is a functional emulated run on a reduced grid (smaller with `quick`); the
predictions do not depend on `quick`.
"""

from __future__ import annotations

from typing import Any

from wse_core import ExperimentResult, PredictionRow, SramBudgetError, preset

from wse_hpc.stencil import perf
from wse_hpc.stencil.runs import StencilConfig, run_stencil

__all__ = ["stencil25", "stencil25_nz", "bicgstab_sc20"]

TABLE_II = "Jacquelin et al., arXiv:2204.03775, Table II (calibration set)"
# Table II, Gcell/s (shared/REFERENCES.md).
TABLE_II_GCELLS = {
    (200, 200): 533.64,
    (400, 400): 2097.60,
    (600, 600): 4731.53,
    (755, 994): 9862.78,
}


def _wave_prediction(spec, nx: int, ny: int, nz: int, block_z: int):
    cost = perf.wave25_cost(perf.wave25_traffic(nz, block_z), nz // block_z)
    pred = perf.predict(spec, cost, nz)
    return pred, nx * ny * nz / pred.seconds / 1e9


def _measured(run) -> dict[str, Any]:
    return {
        "kind": run.config.kind,
        "grid": "x".join(map(str, run.config.grid)),
        "steps": run.steps_done,
        "wall_s": run.wall_s,
        "emulated_mcells_per_s": run.cells_per_s / 1e6,
        **run.final,
    }


def _figure(labels, predicted, published, ylabel, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], predicted, 0.4, label="model")
    if published:
        ax.bar([x + 0.2 for x in xs], [p or 0 for p in published], 0.4, label="published")
    ax.set_xticks(list(xs), labels, rotation=20)
    ax.set(ylabel=ylabel, title=title)
    ax.legend()
    fig.tight_layout()
    return fig


def stencil25(*, quick: bool, seed: int) -> ExperimentResult:
    """Table II grids on WSE-2 (nz = 1000, 1000 steps): predicted Gcell/s vs published."""
    spec = preset("wse2")
    rows, pred_vals, pub_vals = [], [], []
    for (nx, ny), published in TABLE_II_GCELLS.items():
        pred, gcells = _wave_prediction(spec, nx, ny, 1000, perf.CALIBRATION_BLOCK_Z)
        params = {
            "preset": "wse2",
            "grid": f"{nx}x{ny}x1000",
            "steps": 1000,
            "block_z": perf.CALIBRATION_BLOCK_Z,
            "bound": pred.bound,
            "seconds_1000_steps": pred.seconds * 1000,
        }
        rows.append(PredictionRow("gcells_per_s", gcells, "Gcell/s", params, published, TABLE_II))
        pred_vals.append(gcells)
        pub_vals.append(published)
    n = 16 if quick else 48
    run = run_stencil(
        StencilConfig(
            kind="wave25",
            grid=(n, n, 40 if quick else 100),
            preset="wse2",
            steps=10 if quick else 40,
            chunks=2,
        )
    )
    fig = _figure(
        [f"{a}x{b}" for a, b in TABLE_II_GCELLS],
        pred_vals,
        pub_vals,
        "Gcell/s",
        "25-point stencil on WSE-2 (nz = 1000)",
    )
    return ExperimentResult(
        "sc22-stencil25",
        seed,
        {"efficiency": perf.EFFICIENCY, "quick": quick},
        [_measured(run)],
        rows,
        fig,
    )


def stencil25_nz(*, quick: bool, seed: int) -> ExperimentResult:
    """Gcell/s on 755 x 994 against nz and the Z block size b (the SRAM ledger caps nz)."""
    from wse_hpc.stencil import grid_wafer, max_nz

    spec = preset("wse2")
    wafer = grid_wafer(spec, (755, 994, 8), mesh_shape=(1, 1))
    rows, curves = [], {}
    for b in (10, 25, 50, 100, 200):
        fields = {"u_prev": "fp32", "u": "fp32", "velocity": "fp32"}
        cap = max_nz(wafer, fields, extra_per_field=8, buffers_for=lambda n, b=b: 64 * b + 64)
        cap -= cap % b
        curve = []
        for nz in sorted({100, 250, 500, 1000, 2000, cap}):
            if nz > cap or nz % b:
                continue
            _, gcells = _wave_prediction(spec, 755, 994, nz, b)
            published = (
                TABLE_II_GCELLS[(755, 994)] if (nz, b) == (1000, perf.CALIBRATION_BLOCK_Z) else None
            )
            rows.append(
                PredictionRow(
                    "gcells_per_s",
                    gcells,
                    "Gcell/s",
                    {"grid": f"755x994x{nz}", "block_z": b, "max_nz": cap},
                    published,
                    TABLE_II if published else None,
                )
            )
            curve.append((nz, gcells))
        curves[b] = curve
    measured = []
    nz = 40 if quick else 120
    for b in (4, 20) if quick else (4, 20, 40, 120):
        try:
            run = run_stencil(
                StencilConfig(
                    kind="wave25",
                    grid=(16, 16, nz),
                    preset="wse2",
                    steps=5 if quick else 20,
                    block_z=b,
                    chunks=1,
                )
            )
            measured.append({**_measured(run), "block_z": b})
        except SramBudgetError as e:  # pragma: no cover - the grid is chosen to fit
            measured.append({"block_z": b, "error": str(e)})
    return ExperimentResult(
        "sc22-stencil25-nz", seed, {"quick": quick}, measured, rows, _nz_figure(curves)
    )


def _nz_figure(curves):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for b, curve in curves.items():
        ax.plot([c[0] for c in curve], [c[1] for c in curve], marker="o", label=f"b = {b}")
    ax.axhline(TABLE_II_GCELLS[(755, 994)], color="k", ls=":", label="Table II, nz = 1000")
    ax.set(
        xlabel="nz (cells per PE)",
        ylabel="Gcell/s",
        title="25-point stencil, 755 x 994 PEs of WSE-2 (model)",
    )
    ax.legend()
    fig.tight_layout()
    return fig


def bicgstab_sc20(*, quick: bool, seed: int) -> ExperimentResult:
    """BiCGSTAB on CS-1 at 600 x 595 x 1536 (mixed precision): predicted time and flop/s."""
    from wse_hpc.stencil import grid_wafer, place_grid
    from wse_hpc.stencil.runs import _bicgstab_cost

    spec = preset("wse1")
    shape = (600, 595, 1536)
    rows = []
    wafer = grid_wafer(spec, shape, mesh_shape=(1, 1))
    names = ("x", "r", "rhat", "p", "v", "s", "t")
    grid = place_grid(wafer, shape, {**dict.fromkeys(names, "fp16"), "b": "fp32"})
    import jax
    import jax.numpy as jnp

    x = jax.ShapeDtypeStruct(
        wafer.padded_shape + (shape[2],), jnp.float16, sharding=wafer.sharding(1)
    )
    for precision in ("mixed", "fp32"):
        _, pred, flops = _bicgstab_cost(grid, precision, x)
        params = {
            "preset": "wse1",
            "grid": "600x595x1536",
            "precision": precision,
            "bound": pred.bound,
            "latency_us": pred.latency_cycles / spec.clock_hz * 1e6,
        }
        cells = 600 * 595 * 1536
        rows.append(PredictionRow("us_per_iteration", pred.seconds * 1e6, "us", params))
        rows.append(PredictionRow("pflops", cells * flops / pred.seconds / 1e15, "PFLOP/s", params))
    n = (16, 16, 32) if quick else (48, 48, 96)
    measured = [
        _measured(
            run_stencil(StencilConfig(kind="bicgstab", grid=n, preset="wse1", dtype=p, steps=500))
        )
        for p in ("mixed", "fp32")
    ]
    fig = _bicgstab_figure(measured)
    return ExperimentResult(
        "sc20-bicgstab",
        seed,
        {"quick": quick, "sram_bytes_per_pe": grid.bytes_per_pe},
        measured,
        rows,
        fig,
    )


def _bicgstab_figure(measured):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    labels = [f"{m['grid']}" for m in measured]
    ax.bar(range(len(measured)), [m["max_error_vs_exact"] for m in measured])
    ax.set_xticks(
        range(len(measured)),
        [f"{lab}\n{p}" for lab, p in zip(labels, ("mixed", "fp32"), strict=True)],
    )
    ax.set(yscale="log", ylabel="max |x - u_exact|", title="BiCGSTAB, reduced grid (emulated)")
    fig.tight_layout()
    return fig
