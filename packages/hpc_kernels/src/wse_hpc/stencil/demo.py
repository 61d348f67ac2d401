"""The stencil part of `wse demo`: BiCGSTAB in mixed precision and a 25-point wave run, each
checked against its manufactured answer, with the wafer prediction beside the emulation."""

from __future__ import annotations

from pathlib import Path

from wse_core.cost.assumptions import assumed_spec

from wse_hpc.stencil.plots import plot_run
from wse_hpc.stencil.runs import StencilConfig, run_stencil

__all__ = ["part"]


def part(console, *, out_dir: Path, quick: bool) -> None:
    """Solve a Poisson problem with BiCGSTAB and run the 25-point wave stencil (< ~40 s)."""
    wse2 = assumed_spec("wse2")  # the demo is an edge: the published runs' wafer, resolved once
    n = 24 if quick else 48
    cfg = StencilConfig(kind="bicgstab", grid=(n, n, 2 * n), dtype="mixed", spec=wse2)
    run = run_stencil(cfg).report
    x = run.extra
    console.print(
        f"BiCGSTAB (fp16 SpMV/AXPY, fp32 allreduce dots) on {n} x {n} x {2 * n}: "
        f"{x['steps']} iterations to true residual {x['final']['true_residual']:.1e}, max "
        "error vs the discrete system's solution "
        f"{x['final']['max_error_vs_discrete_solution']:.1e}; emulated "
        f"{run.measured_wall_s / max(x['steps'], 1) * 1e3:.2f} ms/iteration; predicted on "
        f"WSE-2 {x['predicted_s_per_step'] * 1e6:.2f} µs/iteration ({run.bound}-bound)"
    )
    plot_run(run, out_dir / "stencil_bicgstab.png")
    m = 32 if quick else 48
    # The Ricker source peaks after ~70 steps; 160 steps let the front travel.
    steps = 80 if quick else 160
    wave = run_stencil(
        StencilConfig(kind="wave25", grid=(m, m, m), steps=steps, chunks=4, spec=wse2)
    ).report
    console.print(
        f"25-point wave (4-PE localized broadcasts, Z blocks of "
        f"{wave.extra['final']['block_z']:.0f}) on {m}^3: {wave.extra['steps']} steps, "
        f"{wave.extra['measured_cells_per_s'] / 1e6:.1f} Mcell/s emulated; predicted "
        f"{wave.extra['predicted_gcells_per_s']:.1f} Gcell/s on {m} x {m} PEs of WSE-2"
    )
    plot_run(wave, out_dir / "stencil_wave25.png")
    console.print(f"figures: {out_dir / 'stencil_bicgstab.png'}, {out_dir / 'stencil_wave25.png'}")
