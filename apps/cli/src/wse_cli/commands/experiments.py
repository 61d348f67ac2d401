"""`wse experiments list|run|assumptions`: named, seeded, reproducible runs (shared/DESIGN.md
output).

Each experiment is a function `run(*, quick: bool, seed: int) -> ExperimentResult` in its
package; the registry below maps names to "module:function" so listing imports nothing. `run
NAME --sweep KEY=a,b,c` reruns only the predictions once per value of one assumption (the
module's `<function>_predictions(*, seed)` when it has one, else the quick run) and prints how
each moves (`wse_core.studies.sweeps`); a key (or an --assume) the predictions never read is
refused, as a run refuses an --assume, once the first value shows what they read
(`_read_or_refused`). On a terminal a rich progress line shows while an experiment runs and a
bar counts a sweep's values; piped or captured output stays exactly the same
(`wse_core.host.progress`). A run or sweep holds `--out`'s lock for its experiment while it
works (`_writing`): a second one into the same `--out` is refused at once.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import typer

from wse_cli.errors import UserInputError, WseGroup, fail, note
from wse_cli.options import SEED, number, typed
from wse_cli.outputs import output_dir

# name -> ("module:function", one-line description). Packages add their experiments here.
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "wafer-yield": (
        "wse_core.studies.wafer_yield:run",
        "Repairable fraction and usable PEs against defect rate and spares",
    ),
    "cost-model-calibration": (
        "wse_systems.studies.calibration_check:run",
        "Every cost-model constant, the calibration rows that fit or check it, leave-one-out",
    ),
    "fabric-collectives": (
        "wse_core.studies.fabric_collectives:run",
        "Emulation cost and predicted wafer cycles of shift, broadcast, allreduce",
    ),
    "sc22-stencil25": (
        "wse_hpc.studies.stencil_bicgstab:stencil25",
        "25-point stencil Gcell/s on WSE-2 vs Table II",
    ),
    "sc22-stencil25-nz": (
        "wse_hpc.studies.stencil_bicgstab:stencil25_nz",
        "25-point Gcell/s vs nz and Z block on 755 x 994",
    ),
    "netl-rayleigh-benard": (
        "wse_hpc.studies.netl_rayleigh_benard:run",
        "Rayleigh-Benard on a CS-2, ~200 M cells: predicted s/step by mechanism vs nz",
    ),
    "domain-translation-swe": (
        "wse_hpc.studies.domain_translation_swe:run",
        "Shallow water with Domain Translation on 1-64 CS-3: predicted steps/s",
    ),
    "sc20-bicgstab": (
        "wse_hpc.studies.stencil_bicgstab:bicgstab_sc20",
        "BiCGSTAB 600 x 595 x 1536 on CS-1: us/iteration, PFLOP/s",
    ),
    "weight-streaming": (
        "wse_trainer.studies.weight_streaming:run",
        "Weight-streaming step time, stall and scaling on WSE-3 vs GPUs",
    ),
    "sparsity-speedup": (
        "wse_trainer.studies.sparsity_speedup:run",
        "ReLU MLP zero fraction per layer, trained here; predicted zero-skipping speedup",
    ),
    "trillion-scaling": (
        "wse_trainer.studies.trillion_scaling:run",
        "1T-parameter Llama on 1-64 CS-3, strong and weak scaling: step parts, tokens/s, speedup",
    ),
    "varlen-packing": (
        "wse_trainer.studies.varlen_packing:run",
        "Padding fraction of stdlib documents; predicted padded vs packed training time",
    ),
    "ltaief23-tlrmvm": ("wse_hpc.studies.ltaief23_tlrmvm:run", "TLR-MVM: compression, speed, PB/s"),
    "santos24-md": (
        "wse_hpc.studies.santos24_md:run",
        "EAM MD, one atom per PE: timesteps/s, drift",
    ),
    "leviathan23-speculative": (
        "wse_inference.studies.leviathan23_speculative:run",
        "Speculative speedup vs gamma against (1-a^(g+1))/((1-a)(gc+1))",
    ),
    "hotchips24-inference": (
        "wse_inference.studies.hotchips24_inference:run",
        "Batch-1 decode tokens/s on 1..N WSE-3s (8B: a calibration check)",
    ),
    "tco-training": (
        "wse_trainer.studies.tco_training:run",
        "12B model to a token budget: CS-3 vs H100 time, energy, cost",
    ),
    "trtllm-h100": (
        "wse_systems.studies.trtllm_h100:run",
        "GPU serving model vs TensorRT-LLM v0.19.0 H100 FP8 rows (ISL<=OSL fitted, rest checks)",
    ),
    "hc24-frontier": (
        "wse_inference.studies.hc24_frontier:run",
        "8B/70B serving frontier: CS-3 vs H100 DGX",
    ),
}

# The experiments whose runs draw nothing at random: every figure is the same at any seed
# (their emulated runs start from fixed fields, their predictions are arithmetic). A typed
# --seed is refused there, as `wse hpc md` refuses a --seed that draws nothing (hunt 81: it
# was recorded in results.json as if it had been used, and changed nothing).
DRAWS_NOTHING = frozenset(
    {
        "cost-model-calibration",
        "sc22-stencil25",
        "sc22-stencil25-nz",
        "sc20-bicgstab",
        "netl-rayleigh-benard",
        "domain-translation-swe",
        "trillion-scaling",
        "varlen-packing",
        "tco-training",
        "trtllm-h100",
    }
)

app = typer.Typer(cls=WseGroup, help="Reproducible paper-style experiments.", no_args_is_help=True)


def load(name: str):
    from wse_core.errors import shown, suggest

    if name not in EXPERIMENTS:
        close = suggest(name, EXPERIMENTS)
        known = ", ".join(EXPERIMENTS)  # hunt 76: as an unknown --assume key, the names given
        fail(f"unknown experiment {shown(name)}{close}; known: {known} (`wse experiments list`)")
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
    ctx: typer.Context,
    name: str = typer.Argument(..., help="Experiment name (see `wse experiments list`)."),
    out: Path = output_dir(Path("experiments_out"), "--out", help="Output folder."),
    quick: bool = typer.Option(False, "--quick", help="Reduced measured part, fit for CI."),
    seed: int = number(
        0, "--seed", help="Seed (refused where the experiment draws nothing).", **SEED
    ),
    assume: list[str] = typer.Option(
        [],
        "--assume",
        help="KEY=VALUE: rerun the predictions with another value of an assumption "
        "(repeatable; `wse experiments assumptions` lists them). A wafer field (clock_hz) "
        "changes the wafers priced; calibration.FIELD (calibration.clock_hz) the WSE-2 the "
        "calibration rows were measured on, and the calibration is refitted under it, as "
        "under a setting or a fitted constant held.",
    ),
    sweep: list[str] = typer.Option(  # a list, so a second --sweep is refused, not dropped
        None,
        "--sweep",
        help="KEY=a,b,c (or KEY for its plausible range): print how every prediction moves "
        "over these values of one assumption, instead of running the experiment.",
    ),
) -> None:
    """Run one experiment; writes results.json, table.md, table.csv, figure.png (and
    mechanisms.png and any per-experiment view beside it)."""
    from wse_core import write_experiment
    from wse_core.cost.assumptions import assume as assumed
    from wse_core.cost.assumptions import parse_assumptions
    from wse_core.host.progress import progress

    from wse_cli.commands.plan_assumed import register_system_constants

    register_system_constants(fields=True)  # gpu.kernel_s and the others, as plan's
    fn = load(name)
    if name in DRAWS_NOTHING and typed(ctx, "seed"):
        fail(f"--seed {seed}: {name} draws nothing at random (its figures are the same at any "
             "seed), so a seed would change nothing; leave --seed out")  # fmt: skip
    changes = parse_assumptions(assume)
    if len(sweep or ()) > 1:
        fail(f"--sweep takes one assumption, given {len(sweep)} times ({', '.join(sweep)}); "
             "give one --sweep KEY=a,b,c per run")  # fmt: skip
    if sweep:
        _sweep(name, fn, sweep[0], changes, out, seed)
        return
    from wse_core.cost.calibration import current
    from wse_core.cost.listing import refuse_unread
    from wse_core.studies.experiment import RESULT_FILES, run_experiment, table_markdown

    _check_folder(out, name, RESULT_FILES, figures=True)
    with _writing(out, name):
        with assumed(**changes), progress(None, f"experiment {name}"):
            result = run_experiment(fn, quick=quick, seed=seed)  # what it read, recorded
            # hunt 69: an --assume its predictions never read was written as if priced
            refuse_unread(changes, result.assumed, current(), f"experiment {name}")
        if changes:
            result.config["assume"] = changes
        earlier = _earlier_run(out / result.experiment)
        folder = write_experiment(result, out)
    if earlier:  # hunt 61: a rerun into the same --out replaced the results without a word
        note(f"note: {folder} held {earlier}; its files are replaced by this run's")
    # from memory: under `umask 777` the file just written cannot be read (hunt 67)
    typer.echo(table_markdown(result))
    csv = ", measurements.csv" if result.measurements else ""  # hunt 71: a second CSV
    typer.echo(f"wrote {folder}/results.json, table.md, table.csv{csv}, {_pngs(folder)}")


def _pngs(folder: Path) -> str:
    """The figures written (hunt 71: the line left out mechanisms.png and the extra views);
    "figure.png" where the folder cannot be listed (under `umask 777`, hunt 67)."""
    try:
        return ", ".join(sorted(p.name for p in folder.glob("*.png"))) or "figure.png"
    except OSError:
        return "figure.png"


def _check_folder(out: Path, name: str, files: tuple[str, ...], *, figures: bool) -> None:
    """Refuse, before the run, an `out/<name>` that is there but no folder (hunt 62: the
    writer failed with a traceback after the experiment had run), and one of the `files`
    it writes there (with `figures`, any .png too: a figure it may replace) that is there
    but no regular file (hunt 64: a FIFO hung the writer after the run, a folder was a
    traceback)."""
    import os

    from wse_core.host.readers import not_regular

    folder = out / name
    if os.path.lexists(folder) and not folder.is_dir():
        fail(f"--out {out} holds {name!r}, which is not a folder, where the experiment writes "
             f"its folder {folder}; remove or rename it, or give another --out")  # fmt: skip
    if not folder.is_dir():
        return
    pictures = sorted(p.name for p in folder.glob("*.png")) if figures else []
    for file in dict.fromkeys([*files, *pictures]):
        if why := not_regular(folder / file):
            fail(f"--out {out} holds {name}/{file}, which {why}; remove it or give another --out")


@contextlib.contextmanager
def _writing(out: Path, name: str) -> Iterator[None]:
    """`out/name` held by this command while the block runs (`wse_trainer.run_lock`, as `wse
    train` holds its model_dir; the lock file is `out/.wse-experiments-NAME.lock`), or one
    line naming the holder (hunt 68: two runs into one --out both said "wrote", one run's
    results were lost). The folders made for the lock file (owner-writable whatever the
    umask, as the writer makes them) are removed again when left empty."""
    from wse_trainer.run_lock import hold, release

    lock = f".wse-experiments-{name}.lock"
    made = [p for p in (out, *out.parents) if not p.exists()][::-1]

    def in_use(holder: str) -> UserInputError:
        return UserInputError(f"--out {out / name} is being written by another wse experiments "
                              f"run ({holder}); wait for it, or give another --out")  # fmt: skip

    try:
        for p in made:
            p.mkdir(exist_ok=True)
            p.chmod(stat.S_IMODE(p.stat().st_mode) | 0o300)
        hold(out, lock_name=lock, in_use=in_use)
        try:
            yield
        finally:
            release(out, lock_name=lock)
    finally:
        for p in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(p)  # only while empty: the results stay


def _earlier_run(
    folder: Path, file: str = "results.json", what: str = "an earlier run's results"
) -> str | None:
    """What `folder` holds from an earlier run ("an earlier run's results (written
    2026-12-04 18:05 UTC)"), or None where it holds no `file`."""
    import datetime

    try:
        when = (folder / file).stat().st_mtime
    except OSError:
        return None
    utc = datetime.datetime.fromtimestamp(when, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"{what} (written {utc})"


def _sweep(name: str, fn, item: str, changes: dict, out: Path, seed: int) -> None:
    """The predictions at each value of one assumption (under the other --assume changes)."""
    from wse_core.cost.assumptions import assume as assumed
    from wse_core.host.progress import progress
    from wse_core.studies.sweeps import parse_sweep, sweep, sweep_values

    key, parsed = parse_sweep(item)
    if key in changes:  # hunt 58: the sweep's values replaced the --assume one, silently
        fail(f"--sweep {key} and --assume {key}={changes[key]:g} set the same assumption; "
             f"drop --assume {key} (the sweep sets it to each of its values)")  # fmt: skip
    _check_folder(out, name, (f"sweep_{key}.md", f"sweep_{key}.csv"), figures=False)
    with _writing(out, name):
        values = sweep_values(key, parsed)  # the constant's range when no values are given
        module = importlib.import_module(fn.__module__)
        predict = getattr(module, f"{fn.__name__}_predictions", None)
        if predict is None:  # no prediction-only entry: the quick run's predictions

            def predict(*, seed: int):
                return fn(quick=True, seed=seed).predictions

        calls, read = 0, False

        with assumed(**changes), progress(len(values), f"{name}: {key}") as done:

            def counted(*, seed: int):  # one call per value of the sweep: the bar's unit
                nonlocal calls, read
                calls += 1
                try:
                    if read:
                        return predict(seed=seed)
                    # the first value that runs: what it read says whether the key moves them
                    # (a value refused at plan time is the sweep's to note: hunt 82 L1)
                    rows = _read_or_refused(predict, seed, name, key, changes)
                    read = True
                    return rows
                finally:
                    done(calls)

            result = sweep(counted, key, values, seed=seed)
        earlier = _earlier_run(out / name, f"sweep_{key}.md", f"an earlier sweep of {key}")
        path = result.write(out / name)
    if earlier:  # hunt 68: a sweep rerun replaced the earlier one's files without a word
        note(f"note: {path.parent} held {earlier}; its files are replaced by this run's")
    typer.echo(result.markdown())
    typer.echo(f"wrote {path}, {path.with_suffix('.csv').name}")


def _read_or_refused(predict, seed: int, name: str, key: str, changes: dict) -> list:
    """`predict(seed=)` (the sweep's first value, its key assumed), refused (one line, exit 2)
    where its pricing never read the swept key or an --assume one (hunt 76: `wafer-yield
    --sweep clock_hz` printed 32 rows of +0.0%, `leviathan23-speculative` reran its measured
    run per value): `wse_core.cost.listing.refuse_unread`, as a run refuses an --assume.
    What they read is known once they have run: the first value alone runs before it."""
    from wse_core.cost.assumptions import active
    from wse_core.cost.calibration import current
    from wse_core.cost.listing import refuse_unread
    from wse_core.cost.reads import recording
    from wse_core.errors import SpecError

    with recording() as got:
        rows = predict(seed=seed)
    refuse_unread(changes, got, current(), f"experiment {name}")
    try:
        refuse_unread({key: active()[key]}, got, current(), f"experiment {name}")
    except SpecError as e:  # the same line, naming the option given
        fail(str(e).replace("--assume", "--sweep", 1))
    return rows


@app.command("assumptions")
def assumptions() -> None:
    """Every constant of the cost model: its value on each wafer preset (fitted ones as the
    calibration sets them), units, mechanism, basis and source or fitting rows."""
    from wse_core.cost.assumptions import ASSUMED_FIELDS, value_of
    from wse_core.cost.calibration import current
    from wse_core.cost.perf import PerfModel
    from wse_core.hw.spec import preset

    names = ("wse1", "wse2", "wse3")
    rates = [PerfModel(preset(p)).rates for p in names]
    typer.echo(f"{'constant':<24} {'wse1':>10} {'wse2':>10} {'wse3':>10}  units, mechanism, basis")
    for key, why in ASSUMED_FIELDS.items():
        values = " ".join(f"{value_of(r, key):>10.4g}" for r in rates)
        typer.echo(f"{key:<24} {values}  {why}")
    from wse_core.cost.assumptions import constant_of, system_constant, system_keys

    from wse_cli.commands.plan_assumed import register_system_constants

    register_system_constants(fields=True)
    for key in system_keys():  # hunt 68: the GPU's kernel cost was an assumption not listed
        value = f"{system_constant(key):.4g}"
        typer.echo(f"{key:<24} {value:>10} (a model's, not a spec's)  {constant_of(key).line()}")
    typer.echo(f"calibration: {current().describe()}")
    typer.echo(
        "--assume FIELD=VALUE changes the wafers priced; --assume calibration.FIELD=VALUE "
        "the calibration's WSE-2 (the calibration is refitted under it); --assume "
        "MODEL.FIELD a model's constant (gpu.kernel_s: the GPU serving step's kernel, "
        "gpu.launched_kernel_s: the field experiments' GPU kernel, attention.exp_fmacs: the "
        "wafer's exponential); a key the predictions never read is refused"
    )


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="experiments")
