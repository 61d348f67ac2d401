"""`wse experiments list|run`: named, seeded, reproducible runs (shared/DESIGN.md output).

Each experiment is a function `run(*, quick: bool, seed: int) -> ExperimentResult` in its
package; the registry below maps names to "module:function" so listing imports nothing.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import typer

from wse_cli.errors import WseGroup, fail
from wse_cli.options import SEED, number

# name -> ("module:function", one-line description). Packages add their experiments here.
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "wafer-yield": (
        "wse_core.studies.wafer_yield:run",
        "Repairable fraction and usable PEs against defect rate and spares",
    ),
    "cost-model-calibration": (
        "wse_core.studies.calibration_check:run",
        "The cost model on the calibration set (Table II, 8B decode) with its efficiencies",
    ),
    "fabric-collectives": (
        "wse_core.studies.fabric_collectives:run",
        "Emulation cost and predicted wafer cycles of shift, broadcast, allreduce",
    ),
    "sc22-stencil25": (
        "wse_hpc.stencil.experiments:stencil25",
        "25-point stencil Gcell/s on WSE-2 vs Table II",
    ),
    "sc22-stencil25-nz": (
        "wse_hpc.stencil.experiments:stencil25_nz",
        "25-point Gcell/s vs nz and Z block on 755 x 994",
    ),
    "sc20-bicgstab": (
        "wse_hpc.stencil.experiments:bicgstab_sc20",
        "BiCGSTAB 600 x 595 x 1536 on CS-1: us/iteration, PFLOP/s",
    ),
    "weight-streaming": (
        "wse_trainer.experiment:run",
        "Weight-streaming step time, stall and scaling on WSE-3 vs GPUs",
    ),
    "sparsity-speedup": (
        "wse_trainer.studies.sparsity_speedup:run",
        "ReLU MLP zero fraction per layer, trained here; predicted zero-skipping speedup",
    ),
    "varlen-packing": (
        "wse_trainer.studies.varlen_packing:run",
        "Padding fraction of stdlib documents; predicted padded vs packed training time",
    ),
    "ltaief23-tlrmvm": ("wse_hpc.tlrmvm.experiments:run", "TLR-MVM: compression, speed, PB/s"),
    "santos24-md": ("wse_hpc.md.experiments:run", "EAM MD, one atom per PE: timesteps/s, drift"),
    "leviathan23-speculative": (
        "wse_inference.studies.leviathan23_speculative:run",
        "Speculative speedup vs gamma against (1-a^(g+1))/((1-a)(gc+1))",
    ),
    "hotchips24-inference": (
        "wse_inference.studies.hotchips24_inference:run",
        "Batch-1 decode tokens/s on 1..N WSE-3s (8B calibration)",
    ),
    "tco-training": (
        "wse_cli.tco_training:run",
        "12B model to a token budget: CS-3 vs H100 time, energy, cost",
    ),
}

app = typer.Typer(cls=WseGroup, help="Reproducible paper-style experiments.", no_args_is_help=True)


def load(name: str):
    from wse_core import suggest

    if name not in EXPERIMENTS:
        fail(f"unknown experiment {name!r}{suggest(name, EXPERIMENTS)}; see `wse experiments list`")
    module, func = EXPERIMENTS[name][0].split(":")
    return getattr(importlib.import_module(module), func)


@app.command("list")
def list_() -> None:
    """The experiments, one a line."""
    width = max(map(len, EXPERIMENTS))
    for name, (_, desc) in EXPERIMENTS.items():
        typer.echo(f"{name:<{width}}  {desc}")


@app.command()
def run(
    name: str = typer.Argument(..., help="Experiment name (see `wse experiments list`)."),
    out: Path = typer.Option(Path("experiments_out"), "--out", help="Output folder."),
    quick: bool = typer.Option(False, "--quick", help="Reduced measured part, fit for CI."),
    seed: int = number(0, "--seed", help="Seed.", **SEED),
    assume: list[str] = typer.Option(
        [],
        "--assume",
        help="KEY=VALUE: rerun the predictions with another value of an assumption "
        "(repeatable; `wse experiments assumptions` lists them). The calibration is refitted "
        "under it.",
    ),
) -> None:
    """Run one experiment; writes results.json, table.md, table.csv, figure.png."""
    from wse_core import write_experiment
    from wse_core.assumptions import assume as assumed
    from wse_core.assumptions import parse_assumptions

    fn = load(name)
    changes = parse_assumptions(assume)
    with assumed(**changes):
        result = fn(quick=quick, seed=seed)
    if changes:
        result.config["assume"] = changes
    folder = write_experiment(result, out)
    typer.echo((folder / "table.md").read_text())
    typer.echo(f"wrote {folder}/results.json, table.md, table.csv, figure.png")


@app.command("assumptions")
def assumptions() -> None:
    """The assumptions behind every prediction, with their values on each wafer preset."""
    from wse_core.calibration import current
    from wse_core.spec import ASSUMED_FIELDS, preset

    typer.echo(f"{'assumption':<20} {'wse1':>10} {'wse2':>10} {'wse3':>10}  why")
    for key, why in ASSUMED_FIELDS.items():
        values = " ".join(f"{getattr(preset(p), key):>10.4g}" for p in ("wse1", "wse2", "wse3"))
        typer.echo(f"{key:<20} {values}  {why}")
    typer.echo(f"calibration: {current().describe()}")


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="experiments")
