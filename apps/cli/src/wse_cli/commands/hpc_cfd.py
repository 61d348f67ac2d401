"""`wse hpc cfd`: incompressible Boussinesq flow (projection method) on the emulated wafer.

Cases: `rayleigh-benard` (`--ra --pr --aspect`; no-slip plates at T = 1 and 0, periodic
sides) and `cavity` (`--re`; the lid-driven square / cube). `--grid NX NY NZ` (NZ = 1: 2D;
the vertical is Y in 2D, Z in 3D). Prints the Nusselt number (rayleigh-benard) and kinetic
energy as it goes (a rich progress bar on a terminal, nothing in between otherwise), writes
`<out>/step_<n>.npz` (arrays u v w p, and T for rayleigh-benard) and `.vtk` at every step n
that is a multiple of `--output-every` (n the absolute step, a restart's too, as OpenFOAM's
writeInterval and LAMMPS's `dump N`) and at the end, and lists them ("wrote FILE" each, or
"wrote N files: FIRST .. LAST"); `--restart` continues from the newest of them (and says
which: "restarted from step N (FILE)"; a folder with none is refused, and so is a step
written with another --ra, --pr, --re or --time-scheme, or, --dt left out, at a step other
than this run's default; a --dt given that differs is said on that line; one that runs no
step writes nothing and says so), `--png` the
temperature (cavity: the speed), `--trace` the per-PE trace for `wse view`, then the
measured emulation time beside the predicted wafer time (`run_cfd(...).report`), and a
warning line when pressure solves stopped at their iteration cap unconverged (the solver,
the cap and the residual reached; on stderr with `--json`, whose report counts them in
`unconverged_solves`). Bad input (Ra < 1, a grid beyond the PEs, a step beyond the explicit
limit, a Z column beyond SRAM) is one line, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from wse_cli import interrupts
from wse_cli.errors import fail
from wse_cli.options import INT32_MAX, SEED, number, typed
from wse_cli.outputs import output_dir, output_file, png_file
from wse_cli.wafer_choice import SPEC_FILE, preset_option, wafer_spec

CASES = ("rayleigh-benard", "cavity")


# Each case's own options: given to the other case they were taken and ignored (hunt 57)
CASE_OPTIONS = {"rayleigh-benard": ("--ra", "--pr", "--aspect"), "cavity": ("--re",)}


def _refuse_other_case(ctx: typer.Context, case: str) -> None:
    for other, names in CASE_OPTIONS.items():
        for param in ctx.command.params:
            if other != case and typed(ctx, str(param.name)) and param.opts[0] in names:
                fail(f"{param.opts[0]} applies to --case {other} only; leave it out for {case}")


def cfd(
    ctx: typer.Context,
    case: str = typer.Option("rayleigh-benard", "--case", help="rayleigh-benard | cavity"),
    grid: tuple[int, int, int] = number(
        (64, 32, 1), "--grid", kind=int, ge=1, help="NX NY NZ cells (NZ 1: 2D)"
    ),  # fmt: skip
    # hunt 56: 1e308 ran with a Nusselt number of inf, exit 0 (kappa = (Ra Pr)^-1/2 is 0 in
    # float32); 1e17 is the highest measured (Niemela et al. 2000, cryogenic helium). Hunt 63:
    # 1e-100 blew up (nu = (Ra / Pr)^-1/2 is inf in float32) with a JAX warning; 1e-40 ran
    # with a kinetic energy of 0. Below Ra 1, three decades under convection's onset (1708,
    # rigid plates), the fluid only conducts (Nu = 1) while the default step shrinks as
    # sqrt(Ra): 1 keeps every conduction case and float32 far from its ends
    ra: float = number(
        1e4, "--ra", ge=1, le=1e17, help="Rayleigh number (rayleigh-benard; onset ~1708)."
    ),
    pr: float = number(1.0, "--pr", ge=1e-6, le=1e6, help="Prandtl number (rayleigh-benard)."),
    aspect: float = number(
        2.0, "--aspect", ge=1e-3, le=1e3, help="Width / height (rayleigh-benard)."
    ),
    re: float = number(100.0, "--re", ge=1e-3, le=1e9, help="Reynolds number (cavity)."),
    steps: int = number(
        200, "--steps", kind=int, ge=0, le=INT32_MAX, limit="time_steps", help="Time steps."
    ),
    # hunt 57: 1e-300 overflowed a float32 cast (a NumPy warning); below ~1e-7 of the run's
    # time a float32 step no longer advances it, so 1e-9 is far below any useful step
    dt: float = number(
        None,
        "--dt",
        ge=1e-9,
        help="Time step (default: rayleigh-benard half the explicit limit, cavity 0.8 of it).",
    ),  # fmt: skip
    time_scheme: str = typer.Option(
        "euler", "--time-scheme", help="euler | rk3 (cavity: SSP-RK3, the advective step)."
    ),  # fmt: skip
    output_every: int = number(
        0,
        "--output-every",
        kind=int,
        ge=0,
        le=INT32_MAX,  # run_config's bound, said here with the flag's name (hunt new77)
        help="Write NPZ + VTK at every step that is a multiple of N (0: at the end only).",
    ),  # fmt: skip
    out: Path = output_dir(None, "--out", help="Folder for step_<n>.npz / .vtk."),
    restart: bool = typer.Option(
        False, "--restart", help="Continue from --out's newest step, running --steps more."
    ),
    preset: str = preset_option("wse2", help="Wafer preset (grid X x Y <= PEs)"),
    spec_file: Path = SPEC_FILE,
    defect_seed: int = number(None, "--defect-seed", help="Draw and repair defects.", **SEED),
    png: Path = png_file(None, "--png", help="Write the temperature (cavity: speed)."),
    trace: Path = output_file(None, "--trace", help="Write the per-PE trace (wse view FILE)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
) -> None:
    """Run a CFD case on the emulated wafer and predict its wafer time."""
    if case not in CASES:
        from wse_core.errors import shown, suggest

        fail(f"unknown --case {shown(case)}{suggest(case, CASES)}; use one of {', '.join(CASES)}")
    _refuse_other_case(ctx, case)
    if time_scheme not in ("euler", "rk3"):
        from wse_core.errors import shown

        fail(f"unknown --time-scheme {shown(time_scheme)}; use euler or rk3")
    if time_scheme == "rk3" and case != "cavity":
        fail("--time-scheme rk3 is the cavity's (rayleigh-benard runs euler)")
    if restart and out is None:
        fail("--restart needs --out (the folder holding step_<n>.npz)")
    if output_every > 0 and out is None:  # hunt 65: nothing was written, nothing said
        fail("--output-every needs --out (the folder for step_<n>.npz / .vtk)")
    _check_out(out, restart, steps, output_every)
    spec = wafer_spec(preset, spec_file, "wse2")
    nx, ny, nz = grid
    if nx > spec.pe_rows or ny > spec.pe_cols:
        fail(f"--grid {nx} {ny} {nz}: a {nx} x {ny} PE grid does not fit the {spec.name} "
             f"wafer's {spec.pe_rows} x {spec.pe_cols} PEs")  # fmt: skip
    if nz * 4 > spec.data_bytes_per_pe:  # hunt 61: NZ 10^8 built 95 GiB of host arrays first
        fail(f"--grid {nx} {ny} {nz}: one field's Z column of {nz:,} fp32 cells needs "
             f"{nz * 4:,} B per PE but a {spec.name} PE holds {spec.data_bytes_per_pe:,} B of "
             f"data ({spec.code_stack_bytes_per_pe:,} B of its {spec.sram_bytes_per_pe:,} are "
             "code and stack, assumed); give NZ well under "
             f"{spec.data_bytes_per_pe // 4:,}")  # fmt: skip
    if restart:  # hunt 60: a bad step file was refused after JAX's import and the build (1.5 s)
        from wse_hpc.cfd_steps import latest_output, read_step, step_of

        if (last := latest_output(out)) is None:  # hunt 65: it started from step 0 silently
            fail(f"--restart: --out {out} holds no step_<n>.npz to continue from; leave out "
                 "--restart to start a run")  # fmt: skip
        read_step(last, (nx, ny, nz))  # the run reads it again, for the grid it built
    from rich.console import Console
    from wse_hpc.fields.runs import CfdConfig, run_cfd

    cfg = CfdConfig(case=case, grid=(nx, ny, nz), spec=spec, steps=steps, ra=ra, pr=pr,
                    aspect=aspect, re=re, dt=dt, time_scheme=time_scheme,
                    output_every=output_every, out_dir=out,
                    restart=restart, defect_seed=defect_seed)  # fmt: skip
    console = Console(stderr=as_json)
    start = step_of(last) if restart else 0
    try:
        run = _run(console, cfg, run_cfd)
    except (KeyboardInterrupt, interrupts.Stopped) as e:
        _stopped(e, out, start + steps)
    if (x := run.report.extra)["restarted_from"] is not None:  # as `wse train`'s "resumed from"
        old, dt = x["restarted_from_dt"], f"{x['dt']:.6g}"  # an explicit --dt may change it
        changed = (
            f"; dt {old:.6g} there, {dt} now" if old is not None and f"{old:.6g}" != dt else ""
        )
        _line(console, f"restarted from step {x['restarted_from_step']} ({x['restarted_from']})"
                       f"{changed}")  # fmt: skip
        if not x["steps"]:  # hunt 77: it rewrote the step file, recording a dt it never ran
            _line(console, f"no step run, so nothing written ({x['restarted_from']} is left "
                           "as it was)")  # fmt: skip
    if png is not None:
        from wse_hpc.fields.plots import plot_temperature

        plot_temperature(run, png)
    if trace is not None:
        from wse_core import Region, defect_map
        from wse_core.trace import trace_uniform

        region = Region("cfd", 0, 0, nx, ny)
        dm = defect_map(spec, defect_seed) if defect_seed is not None else None
        trace_uniform(spec, run.report, region=region, defects=dm).save(trace)
    from wse_hpc.fields.runs import unconverged

    if as_json:
        if warning := unconverged(run.report.extra):  # stdout stays one JSON object
            typer.echo(warning, err=True)
        typer.echo(json.dumps(run.report.to_dict(), default=float))
        return
    _summary(console, run, png, trace)


def _stopped(e: BaseException, out: Path | None, target: int) -> None:
    """A stopped run's one line: the step files --out keeps and the --restart that reaches the
    step it was to end at (hunt 69: it said only "interrupted (Ctrl-C)"); exit 128 + signal."""
    import signal

    from wse_hpc.cfd_steps import latest_output, step_of

    sig = e.signum if isinstance(e, interrupts.Stopped) else signal.SIGINT
    last = latest_output(out) if out is not None and out.is_dir() else None
    if last is None:
        kept = "nothing kept (no --out)" if out is None else f"--out {out} holds no step file yet"
    else:
        done = step_of(last)
        more = f" --steps {target - done}" if target > done else ""
        kept = (f"--out {out} keeps the step files up to {last.name}; give --restart{more} to "
                f"continue to step {target}")  # fmt: skip
    typer.echo(f"{interrupts.described(sig)}; {kept}", err=True)
    interrupts.said()
    raise typer.Exit(128 + sig) from None


def _check_out(out: Path | None, restart: bool, steps: int, output_every: int) -> None:
    """Refuse, before any work, a run that would write more step files than the limit
    `step_files`, or one that would mix its step files with another run's in `--out` (hunt
    61: a second run there overwrote the first's files of the same steps, and `--restart`
    then continued from whichever run's step was newest)."""
    if out is None:
        return
    if output_every > 0:
        from wse_core.host.limits import check

        files = steps // output_every + 1
        check("step_files", files, f"the count of step files of --steps {steps} "
              f"--output-every {output_every}")  # fmt: skip
    if not restart and out.is_dir():
        from wse_hpc.cfd_steps import latest_output, step_of

        if (last := latest_output(out)) is not None:
            # hunt 69: "continue that run" with the same --steps ran them all again, past
            # the step the stopped run was to end at (--steps counts the steps run, as
            # LAMMPS's `run N`)
            done = step_of(last)
            more = f" --steps {steps - done} to reach step {steps}" if steps > done else ""
            fail(f"--out {out} holds another run's step files (the newest {last.name}); give "
                 f"--restart{more} to continue that run from step {done} (--steps counts "
                 "the steps run after it), or a new folder")  # fmt: skip


def _run(console, cfg, run_cfd):
    if not console.is_terminal:
        return run_cfd(cfg)
    from rich.progress import Progress

    with Progress(console=console) as bar:
        task = bar.add_task(f"{cfg.case} {cfg.grid}", total=cfg.steps)

        def progress(step, nu, ke):
            nu_text = "" if cfg.case == "cavity" else f"Nu {nu:.4f}  "  # cavity: no T
            bar.update(task, completed=step, description=f"{nu_text}KE {ke:.4g}")

        return run_cfd(cfg, progress)


def _summary(console, run, png, trace) -> None:
    from rich.table import Table

    table = Table(title=f"{run.config.case} on {' x '.join(map(str, run.config.grid))}")
    heat = run.config.case != "cavity"  # the cavity is isothermal: no Nusselt (hunt 68)
    for col in ("step", "time", *(("Nusselt",) if heat else ()), "kinetic energy"):
        table.add_column(col, justify="right")
    hist = run.history
    shown = hist if len(hist) <= 12 else [*hist[:: max(1, len(hist) // 10)], hist[-1]]
    for step, t, nu, ke in dict.fromkeys(shown):
        table.add_row(str(step), f"{t:.4g}", *((f"{nu:.5f}",) if heat else ()), f"{ke:.5g}")
    console.print(table)
    r, x = run.report, run.report.extra
    _line(console, f"measured (emulated here): {x['steps']} steps in {r.measured_wall_s:.3f} s")
    _line(
        console,
        f"predicted on {r.wafer}: {r.predicted_s * 1e6:.3f} µs for the same run "
        f"({x['predicted_s_per_step'] * 1e6:.3f} µs per step, {r.bound}-bound, "
        f"{x['cg_iterations_per_step']:.1f} CG iterations per step)",
    )
    if r.assumed:  # hunt 69: the prediction stood beside no assumption that moves it
        _line(console, r.assumed_compact())
    from wse_hpc.fields.runs import unconverged

    if warning := unconverged(x):  # hunt 72: solves stopped at the cap, unsaid
        _line(console, warning)
    for line in _wrote(run.written):
        _line(console, line)
    for label, p in (("figure", png), ("trace", trace)):
        if p is not None:
            _line(console, f"{label}: {p}")


def _wrote(written) -> list[str]:
    """The lines naming the step files this run wrote: each, or for more than three steps'
    one line with their count, the first and the last (hunt 77: only the last two were named,
    though the run wrote more)."""
    if len(written) <= 6:  # an .npz and a .vtk a step
        return [f"wrote {p}" for p in written]
    return [f"wrote {len(written)} files: {written[0]} .. {written[-1]} (an .npz and a .vtk "
            f"at each of {len(written) // 2} steps)"]  # fmt: skip


def _line(console, text: str) -> None:
    """One line, whole: piped, rich wraps at 80 columns mid-sentence (hunt 65: grep missed
    "8.5 CG iterations per step"), and a path is text, not markup."""
    console.print(text, soft_wrap=True, markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add this module's command to the `wse hpc` group."""
    app.command("cfd")(cfd)
