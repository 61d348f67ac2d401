"""`wse hpc stencil`: 7-point Jacobi / heat, BiCGSTAB and the 25-point wave stencil on a wafer.

Prints the history (residual, deviation or amplitude), the measured emulation rate and the
predicted wafer time per step / iteration with Gcell/s and FLOP/s; `--png` writes a slice
and the convergence curve, `--json` prints one JSON object instead of the table. Heavy
packages are imported inside the command so `wse --help` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from wse_cli import multiprocess
from wse_cli.errors import fail

KINDS = ("jacobi", "heat", "bicgstab", "wave25")


def stencil(
    kind: str = typer.Option(..., "--kind", help="jacobi | heat | bicgstab | wave25"),
    grid: tuple[int, int, int] = typer.Option(..., "--grid", help="NX NY NZ"),
    preset: str = typer.Option("wse2", "--preset", help="Wafer preset (grid X x Y <= PEs)."),
    steps: int = typer.Option(None, "--steps", help="Steps (BiCGSTAB: iteration cap)."),
    tol: float = typer.Option(None, "--tol", help="BiCGSTAB relative residual target."),
    dtype: str = typer.Option(
        None, "--dtype", help="fp32 | fp16 (jacobi, heat) | mixed (bicgstab, default)"
    ),
    boundary: str = typer.Option("dirichlet", "--boundary", help="dirichlet | periodic"),
    block_z: int = typer.Option(None, "--block-z", help="wave25: Z block size (divides NZ)."),
    defect_seed: int = typer.Option(None, "--defect-seed", help="Draw and repair defects."),
    png: Path = typer.Option(None, "--png", help="Write a slice and the history as PNG."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    num_processes: int = multiprocess.NUM_PROCESSES,
    process_id: int = multiprocess.PROCESS_ID,
    coordinator: str = multiprocess.COORDINATOR,
) -> None:
    """Run a stencil kernel on the emulated wafer and predict its wafer time."""
    multiprocess.join(num_processes, process_id, coordinator)
    if kind not in KINDS:
        from wse_core import suggest

        fail(f"unknown --kind {kind!r}{suggest(kind, KINDS)}; use one of {', '.join(KINDS)}")
    if tol is not None and kind != "bicgstab":
        fail("--tol applies to --kind bicgstab only; use --steps for the others")
    from rich.console import Console
    from wse_hpc.stencil.runs import StencilConfig, run_stencil

    default_dtype = "mixed" if kind == "bicgstab" else "fp32"
    cfg = StencilConfig(
        kind=kind,
        grid=tuple(grid),
        preset=preset,
        steps=steps,
        tol=tol,
        dtype=dtype or default_dtype,
        boundary=boundary,
        block_z=block_z,
        defect_seed=defect_seed,
    )
    console = Console(stderr=as_json, quiet=not multiprocess.is_primary())
    run = _run_with_progress(console, cfg, run_stencil)
    if not multiprocess.is_primary():
        return  # every process computed the same run; process 0 reports it
    if png is not None:
        from wse_hpc.stencil.plots import plot_run

        plot_run(run, png)
    if as_json:
        typer.echo(json.dumps(run.to_dict(), default=float))
        return
    _print_table(console, run, png)


def _run_with_progress(console, cfg, run_stencil):
    if not console.is_terminal:
        return run_stencil(cfg)
    from rich.progress import Progress

    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"{cfg.kind} {cfg.grid}", total=None)
        return run_stencil(cfg, lambda done, total: bar.update(task, completed=done, total=total))


def _print_table(console, run, png) -> None:
    from rich.table import Table

    cfg = run.config
    hist = Table(
        title=f"{cfg.kind} on {' x '.join(map(str, cfg.grid))} ({cfg.preset}, "
        f"{cfg.dtype}, {cfg.boundary})"
    )
    hist.add_column("iteration" if cfg.kind == "bicgstab" else "step", justify="right")
    hist.add_column(run.metric, justify="right")
    shown = run.history if len(run.history) <= 12 else run.history[:: len(run.history) // 10]
    for step, value in shown if shown[-1] == run.history[-1] else [*shown, run.history[-1]]:
        hist.add_row(str(step), f"{value:.4e}")
    console.print(hist)
    for key, value in run.final.items():
        console.print(f"  {key}: {value:.6g}")
    p = run.predicted
    unit = "iteration" if cfg.kind == "bicgstab" else "step"
    console.print(
        f"measured: {run.steps_done} {unit}s in {run.wall_s:.3f} s = "
        f"{run.cells_per_s / 1e6:.2f} Mcell/s emulated\n"
        f"predicted on {cfg.preset}: {p.seconds * 1e6:.3f} µs per {unit} ({p.bound}-bound), "
        f"{run.predicted_gcells_per_s:.1f} Gcell/s, {run.predicted_flops / 1e12:.3f} TFLOP/s\n"
        f"SRAM per PE: {run.sram['used_bytes_per_pe']} of {run.sram['bytes_per_pe']} B"
    )
    if png is not None:
        console.print(f"figure: {png}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `wse hpc` group."""
    app.command("stencil")(stencil)
