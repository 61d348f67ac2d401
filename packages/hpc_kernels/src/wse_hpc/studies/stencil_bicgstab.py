"""Stencil experiments (shared/DESIGN.md output): `sc22-stencil25`, `sc22-stencil25-nz`,
`sc20-bicgstab`. Each is `run(*, quick, seed) -> ExperimentResult`.

Predictions are `wse_hpc.stencil.perf` counts on the full-size plan (`place_wave` /
`place_bicgstab`, the placements `run_stencil` uses, with traffic traced abstractly), priced
by `wse_core.cost.perf.PerfModel` mechanism by mechanism (`wse_core.cost.calibration` fits
`router_switch_cycles` on Table II, so the sc22-stencil25 rows have the role "fits
router_switch_cycles"; the others are predictions). Each
25-point row splits a step into its per-cell, per-block and per-step cycles
(`wse_core.cost.stencil.step_terms`) and carries its cycles per step by mechanism. SC20 is
priced as the kernel Rocki et al. describe (`kernel: published`) and as the emulator's own
mix (`kernel: emulator`). `published` is filled only from references/calibration-rows.md (Table
III and SC20 list inputs only: None). The measured part is a functional emulated run on a
reduced grid (smaller with `quick`); the predictions do not depend on `quick`. Param keys:
wafer, grid, nz, block_z, precision, steps, kernel.
"""

from __future__ import annotations

from typing import Any

from wse_core import ExperimentResult, PredictionRow
from wse_core.cost.assumptions import assumed_spec, setting
from wse_core.cost.calibration import STENCIL_TABLE_II
from wse_core.cost.perf import PerfModel
from wse_core.cost.reads import recording
from wse_core.cost.stencil import block_widths, step_terms
from wse_core.studies.experiment import read_by

from wse_hpc.stencil import perf
from wse_hpc.stencil.placement import grid_wafer
from wse_hpc.stencil.runs import (
    StencilConfig,
    StencilRun,
    bicgstab_spmv,
    place_bicgstab,
    place_wave,
    run_stencil,
    wave_block_fn,
)

__all__ = [
    "stencil25",
    "stencil25_nz",
    "bicgstab_sc20",
    "stencil25_predictions",
    "stencil25_nz_predictions",
    "bicgstab_sc20_predictions",
]

TABLE_II = "Jacquelin et al., arXiv:2204.03775, Table II (calibration)"
TABLE_III = "Jacquelin et al., arXiv:2204.03775, Table III (inputs only; not fitted)"
SC20 = "Rocki et al., SC20, arXiv:2010.03660 (inputs only; not fitted)"
TABLE_II_NZ, TABLE_II_STEPS = 1000, 1000  # the Z block: the calibration's table_ii_block_z
# Table II, Gcell/s (references/calibration-rows.md); the seconds are in wse_core.cost.calibration.
TABLE_II_GCELLS = {
    (200, 200): 533.64,
    (400, 400): 2097.60,
    (600, 600): 4731.53,
    (755, 500): 4956.17,
    (755, 600): 5945.40,
    (755, 900): 8922.08,
    (755, 990): 9782.14,
    (755, 994): 9862.78,
}
# SC22 Table III inputs (REFERENCES.md): 755 x 994 PEs, 100,000 steps, (nz, Z block b).
# (hunt 68: this tuple was named TABLE_III too, so the rows cited it in place of the paper)
TABLE_III_INPUTS = (
    (100, 100),
    (200, 200),
    (300, 300),
    (400, 400),
    (500, 250),
    (700, 350),
    (1000, 334),
)
TABLE_III_STEPS = 100_000


def wave_plan(nx: int, ny: int, nz: int, block_z: int):
    """The 25-point plan at full size (placed in the SRAM ledger, never allocated) and its
    phases for one step: what `run_stencil` prices for a run of this grid."""
    grid = place_wave(
        grid_wafer(assumed_spec("wse2"), (nx, ny, nz), mesh_shape=(1, 1)), (nx, ny, nz), block_z
    )
    return grid, perf.wave25_phases(grid, block_z, wave_block_fn(grid), 1)


def _wave_row(nx, ny, nz, block_z, steps, published, source):
    with recording() as got:  # what the row's pricing reads, listed beside it (hunt 69)
        grid, phases = wave_plan(nx, ny, nz, block_z)
        timing = PerfModel(grid.wafer.spec).evaluate(phases)
    clock = grid.wafer.spec.clock_hz
    gcells = nx * ny * nz / timing.seconds / 1e9
    terms = step_terms(timing, len(block_widths(nz, block_z)))
    cycles = timing.seconds * clock
    params = {
        "wafer": "wse2",
        "grid": f"{nx}x{ny}",
        "nz": nz,
        "block_z": block_z,
        "steps": steps,
        "precision": "fp32",
        "bound": timing.bound,
        "seconds": timing.seconds,  # hunt 68: was the whole run's, labelled per step
        "per": "step",
        "run_seconds": timing.seconds * steps,
        "cycles_per_step": cycles,
        **{f"{k}_share": terms[k] / cycles for k in ("per_cell", "per_block", "per_step")},
    }
    role = "fits router_switch_cycles" if published is not None else "prediction"
    mech = timing.by_mechanism()
    row = PredictionRow("gcells_per_s", gcells, "Gcell/s", params, published, source, mech, role)
    return read_by(got, row)[0]


def _measured(run: StencilRun) -> dict[str, Any]:
    report = run.report
    x = report.extra
    return {
        "kind": x["kind"],
        "grid": "x".join(map(str, x["config"]["grid"])),
        "steps": x["steps"],
        "wall_s": report.measured_wall_s,
        "emulated_mcells_per_s": x["measured_cells_per_s"] / 1e6,
        "predicted_s": report.predicted_s,
        **{k: x[k] for k in ("converged", "reason") if k in x},
        **x["final"],
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


def stencil25_predictions(*, seed: int = 0) -> list[PredictionRow]:
    """The Table II rows (Gcell/s at the calibration's Table II Z block)."""
    b = int(setting("table_ii_block_z"))
    return [
        _wave_row(nx, ny, TABLE_II_NZ, b, TABLE_II_STEPS, published, TABLE_II)
        for (nx, ny), published in TABLE_II_GCELLS.items()
    ]


def stencil25(*, quick: bool, seed: int) -> ExperimentResult:
    """Table II grids on WSE-2 (nz = 1000, 1000 steps): predicted Gcell/s vs published (the
    calibration set: `router_switch_cycles` is fitted on these eight rows), each step split
    into its per-cell, per-block and per-step terms."""
    rows = stencil25_predictions()
    n = 16 if quick else 48
    run = run_stencil(
        StencilConfig(
            kind="wave25",
            grid=(n, n, 40 if quick else 100),
            spec=assumed_spec("wse2"),
            steps=10 if quick else 40,
            chunks=2,
        )
    )
    fig = _figure(
        [f"{a}x{b}" for a, b in TABLE_II_GCELLS],
        [r.value for r in rows],
        list(TABLE_II_GCELLS.values()),
        "Gcell/s",
        "25-point stencil on WSE-2 (nz = 1000; calibration set)",
    )
    assert len(STENCIL_TABLE_II) == len(rows)  # the calibration's own list of the same rows
    config = {
        "quick": quick,
        "calibration": run.report.calibration.describe(),
        "table_ii_block_z": setting("table_ii_block_z"),
    }
    return ExperimentResult("sc22-stencil25", seed, config, [_measured(run)], rows, fig)


def stencil25_nz_predictions(*, seed: int = 0) -> list[PredictionRow]:
    """SC22 Table III inputs: Gcell/s for each (nz, Z block b) on 755 x 994 PEs."""
    return [
        _wave_row(755, 994, nz, b, TABLE_III_STEPS, None, TABLE_III) for nz, b in TABLE_III_INPUTS
    ]


def stencil25_nz(*, quick: bool, seed: int) -> ExperimentResult:
    """SC22 Table III: 755 x 994 PEs, 100,000 steps, Gcell/s for each (nz, Z block b). No
    published figure is in REFERENCES.md, so `published` stays None."""
    rows = stencil25_nz_predictions()
    measured = []
    nz = 40 if quick else 120
    for b in (4, 15, 40) if quick else (4, 15, 40, 120):  # 15: a shorter last block
        run = run_stencil(
            StencilConfig(
                kind="wave25",
                grid=(16, 16, nz),
                spec=assumed_spec("wse2"),
                steps=5 if quick else 20,
                block_z=b,
                chunks=1,
            )
        )
        measured.append({**_measured(run), "block_z": b})
    curve = [(r.params["nz"], r.value) for r in rows]
    return ExperimentResult(
        "sc22-stencil25-nz", seed, {"quick": quick}, measured, rows, _nz_figure(curve)
    )


def _nz_figure(curve):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"{nz}/{b}" for nz, b in TABLE_III_INPUTS]
    ax.plot(range(len(curve)), [c[1] for c in curve], marker="o", label="model")
    ax.axhline(TABLE_II_GCELLS[(755, 994)], color="k", ls=":", label="Table II, nz = 1000")
    ax.set_xticks(range(len(labels)), labels)
    ax.set(
        xlabel="nz / Z block b",
        ylabel="Gcell/s",
        title="25-point stencil, 755 x 994 PEs of WSE-2 (SC22 Table III inputs)",
    )
    ax.legend()
    fig.tight_layout()
    return fig


SC20_SHAPE = (600, 595, 1536)


def bicgstab_sc20_predictions(*, seed: int = 0) -> list[PredictionRow]:
    """µs per iteration and PFLOP/s of SC20's case on CS-1 (preset wse1), priced as the
    published kernel and as the emulator's own mix on the same placed grid."""
    shape = SC20_SHAPE
    # Mixed only, as published: the fp32 variant's seven fp32 vectors do not fit a CS-1 PE.
    wafer = grid_wafer(assumed_spec("wse1"), shape, mesh_shape=(1, 1))
    grid = place_bicgstab(wafer, shape, "mixed", pair=False)
    kernels = {
        "published": perf.bicgstab_sc20_iteration(grid),
        "emulator": perf.bicgstab_iteration(grid, "mixed", bicgstab_spmv(grid)),
    }
    model = PerfModel(grid.wafer.spec)
    rows = []
    for kernel, phases in kernels.items():
        with recording() as got:  # hunt 69: the hop latency moved these 15%, unlisted
            timing = model.evaluate(phases)
        params = {
            "wafer": "wse1",
            "grid": "600x595x1536",
            "nz": shape[2],
            "precision": "mixed",
            "kernel": kernel,
            "bound": timing.bound,
            "critical_phase": timing.critical().name,
            "allreduce_us": sum(timing.leaf(n).seconds for n in ("allreduce_1", "allreduce_2"))
            * 1e6,
            "flop_per_pe": phases.total_work().flops(),
            "sram_bytes_per_pe": grid.bytes_per_pe,
            "per": "iteration",
        }
        flops = phases.total_work().flops() * shape[0] * shape[1]
        mech = timing.by_mechanism()
        us, pflops = timing.seconds * 1e6, flops / timing.seconds / 1e15
        rows += read_by(
            got,
            PredictionRow("us_per_iteration", us, "us", params, None, SC20, mech),
            PredictionRow("pflops", pflops, "PFLOP/s", params, None, SC20, mech),
        )
    return rows


def bicgstab_sc20(*, quick: bool, seed: int) -> ExperimentResult:
    """BiCGSTAB on CS-1 (preset wse1) at 600 x 595 x 1536, mixed precision: predicted
    microseconds per iteration and PFLOP/s (counted flops of one inner iteration), for the
    kernel SC20 describes and for the emulator's own mix. No published figure is in
    REFERENCES.md (None)."""
    rows = bicgstab_sc20_predictions()
    n = (16, 16, 32) if quick else (48, 48, 96)
    measured = [
        _measured(
            run_stencil(
                StencilConfig(
                    kind="bicgstab", grid=n, spec=assumed_spec("wse1"), dtype=p, steps=500
                )
            )
        )
        for p in ("mixed", "fp32")
    ]
    return ExperimentResult(
        "sc20-bicgstab", seed, {"quick": quick}, measured, rows, _bicgstab_figure(measured)
    )


def _bicgstab_figure(measured):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    labels = [f"{m['grid']}" for m in measured]
    ax.bar(range(len(measured)), [m["max_error_vs_discrete_solution"] for m in measured])
    ax.set_xticks(
        range(len(measured)),
        [f"{lab}\n{p}" for lab, p in zip(labels, ("mixed", "fp32"), strict=True)],
    )
    ax.set(yscale="log", ylabel="max |x - u_exact|", title="BiCGSTAB, reduced grid (emulated)")
    fig.tight_layout()
    return fig
