"""`wse hpc md`: EAM molecular dynamics on the emulated wafer, one atom per PE.

`wse hpc md (--structure in.xyz | --lattice fcc --element Cu --a 3.615 --cells NX NY NZ)
--potential FILE [--steps N] [--dt-fs 1] [--temperature-K T] [--create-velocities]
[--thermostat none|langevin|nose-hoover] [--damp-fs TDAMP] [--tchain M] [--seed S] [--out
traj.xyz] [--thermo-every K] [--reset-timestep N] [--json]` (a thermostat needs its
--temperature-K, as LAMMPS's fix langevin / nvt need Tstart) prints one line saying where the
velocities come from (and the step the run counts from, when it is not 0), then LAMMPS-style
thermo rows and a closing `Performance:` line, with the predicted wafer rate
next to it; `--steps 0` evaluates energies and forces and writes them to `--out`.

Velocities follow LAMMPS, where `velocity all create T seed` and a thermostat's target are
separate commands (hunt 68: --temperature-K replaced a file's velocities without a word, so a
thermostatted run could never continue from a file): a structure's velocities are kept (a
thermostat's --temperature-K is only its target; a Nose-Hoover bath the file carries is
restored); they are drawn at --temperature-K (--seed, zero momentum) when the structure has
none or with --create-velocities. An NVE run's --temperature-K on a file with velocities would
do nothing, and --seed where nothing is drawn: both are refused (the checks of the options
against each other and the structure are `hpc_md_inputs`'s). The trajectory --out (*.xyz,
*.extxyz, gzipped with .gz; its size bound, whole frames, what a stop or a fault keeps of it)
is `hpc_md_trajectory`'s.

The PEs hold the tables of the structure's elements; `--potential-knots N` resamples each
table of more knots to N (LAMMPS's splines) where a PE's SRAM cannot hold them (the refusal
names the most that fit), and a line says what that costs (hunt 68). Such `notes` come first
(a structure shifted by its OVITO Origin, or wrapped into its box), on stderr with --json.
`wse hpc md potential --table zhou04 --elements Cu [Ni ...] --out FILE.eam.alloy` writes the
setfl of Zhou, Johnson & Wadley (2004). Heavy imports wait inside the commands (`wse --help`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from wse_cli import multiprocess
from wse_cli.commands.hpc_md_inputs import (
    TCHAIN,
    THERMOSTATS,
    MdGroup,
    check_bath,
    check_out_name,
    check_velocities,
    read_potential_for,
    read_structure,
)
from wse_cli.commands.hpc_md_trajectory import Trajectory, check_size, refuse_nonfinite
from wse_cli.errors import fail
from wse_cli.options import INT32_MAX, SEED, number
from wse_cli.outputs import output_file, refuse_overlap
from wse_cli.wafer_choice import SPEC_FILE, preset_option, wafer_spec

app = typer.Typer(
    cls=MdGroup, help="EAM molecular dynamics, one atom per PE.", invoke_without_command=True
)


@app.callback()
def md(
    ctx: typer.Context,
    structure: Path = typer.Option(
        None,
        "--structure",
        help="Extended XYZ input (last frame; gzipped too); velocities from momenta:R:3 (ASE's, "
        "what --out writes), velocities:R:3 (A/ps) or vel:R:3 (A/fs, GPUMD's; A/ps in a LAMMPS "
        "dump extxyz, whose comment line has Timestep=). The step count goes on from the "
        "frame's step= or Timestep= (as LAMMPS's read_restart).",
    ),
    lattice: str = typer.Option(None, "--lattice", help="fcc | bcc | hcp (instead of a file)."),
    element: str = typer.Option(None, "--element", help="Element of the --lattice crystal."),
    a: float = number(None, "--a", help="Lattice constant (A).", gt=0, unit="A"),
    cells: tuple[int, int, int] = number(None, "--cells", help="NX NY NZ", kind=int, ge=1),
    potential: list[Path] = typer.Option(
        None,
        "--potential",
        help="EAM file (.eam.alloy, .eam.fs, or .eam funcfl: repeat --potential for each "
        "funcfl file, --potential a.eam --potential b.eam).",
    ),
    potential_knots: int = number(
        None,
        "--potential-knots",
        help="Resample each --potential table of more knots to this many, with LAMMPS's "
        "splines, so tables too big for a PE's SRAM fit; prints the error it costs.",
        kind=int,
        ge=5,
        le=INT32_MAX,
    ),
    steps: int = number(
        0,
        "--steps",
        help="Timesteps (0: energies and forces only).",
        kind=int,
        ge=0,
        le=INT32_MAX,
        limit="time_steps",
    ),
    # hunt 63: 1e-300 ran (dt 0 in fp32). A 300 K Cu atom moves 2e-6 A in 1e-3 fs, one fp32
    # spacing of a 16-64 A coordinate: a shorter step rounds away (LAMMPS metal: 0.1-5 fs)
    dt_fs: float = number(
        1.0, "--dt-fs", help="Timestep (fs).", ge=1e-3, unit="fs", limit="md_dt_fs"
    ),
    temperature_k: float = number(
        None,
        "--temperature-K",
        help="Thermostat target (K; Tstart = Tstop). Velocities are drawn at it (--seed, zero "
        "momentum) only when the structure has none (a --lattice crystal, a file without "
        "velocities) or with --create-velocities: a file's are kept under a thermostat, and "
        "NVE with a file's velocities needs --create-velocities. A run stops past 1e5 K.",
        ge=0,
        lt=1e5,
        unit="K",
    ),
    create_velocities: bool = typer.Option(
        False,
        "--create-velocities",
        help="Draw new Maxwell-Boltzmann velocities at --temperature-K with --seed, replacing "
        "the structure file's (LAMMPS `velocity all create T seed mom yes dist gaussian`).",
    ),
    thermostat: str = typer.Option("none", "--thermostat", help=THERMOSTATS),
    # hunt 63: 1e300 overflowed (Nose-Hoover's Q ~ Tdamp^2). A bath slower than the longest
    # run the limits allow (10^7 steps x 1,000 fs) never acts; LAMMPS's guide: Tdamp = 100 dt
    damp_fs: float = number(
        100.0,
        "--damp-fs",
        help="Damping time (fs): Langevin damp, Nose-Hoover Tdamp (LAMMPS: ~100 x dt).",
        gt=0,
        le=10**10,  # an int: the help reads 10000000000, not 10000000000.0
        unit="fs",
    ),
    tchain: int = TCHAIN,
    seed: int = number(0, "--seed", help="Seed of drawn velocities and of Langevin noise.", **SEED),
    out: Path = output_file(
        None,
        "--out",
        help="Extended XYZ output, *.xyz or *.extxyz (*.gz: gzipped): a frame per thermo row "
        "with ASE's momenta:R:3 and masses:R:1, forces, energies and a Nose-Hoover bath; kept "
        "when stopped, as LAMMPS keeps a dump.",
    ),
    thermo_every: int = number(
        100, "--thermo-every", help="Thermo row every K steps.", kind=int, ge=1
    ),
    reset_timestep: int = number(
        None,
        "--reset-timestep",
        help="Number the steps from N (LAMMPS's reset_timestep N); default: the --structure "
        "frame's step (its step= or Timestep=, as LAMMPS's read_restart keeps it), else 0.",
        kind=int,
        ge=0,
        le=2**63 - 1,  # LAMMPS's timestep: a bigint
    ),
    precision: str = typer.Option("fp32", "--precision", help="fp32 | fp64"),
    preset: str = preset_option("wse3", help="Wafer preset (its PE grid)"),
    spec_file: Path = SPEC_FILE,
    defect_seed: int = number(None, "--defect-seed", help="Draw and repair defects.", **SEED),
    mesh: tuple[int, int] = number(
        None,
        "--mesh",
        help="Device mesh ROWS COLS (default: one device per 8192 PEs; every device when "
        "run over several processes).",
        kind=int,
        ge=1,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    trace: Path = output_file(None, "--trace", help="Write the per-PE trace (wse view FILE)."),
    num_processes: int = multiprocess.NUM_PROCESSES,
    process_id: int = multiprocess.PROCESS_ID,
    coordinator: str = multiprocess.COORDINATOR,
) -> None:
    """Run EAM molecular dynamics on the emulated wafer (see `wse hpc md --help`)."""
    if ctx.invoked_subcommand is not None:
        return
    multiprocess.join(num_processes, process_id, coordinator)
    if not potential:
        fail("--potential FILE is required (or use `wse hpc md potential` to make one)")
    check_out_name(out)
    for name, path in [("--structure", structure), *(("--potential", p) for p in potential)]:
        refuse_overlap({name: path}, {"--out": out, "--trace": trace})
    if precision not in ("fp32", "fp64"):
        from wse_core.errors import shown

        fail(f"--precision must be fp32 or fp64, got {shown(precision)}")
    dtype = "float64" if precision == "fp64" else "float32"
    check_bath(ctx, thermostat, temperature_k)
    spec = wafer_spec(preset, spec_file, "wse3")
    notes: list[str] = []  # lines before the run's first: what was made of the inputs
    s = read_structure(structure, lattice, element, a, cells, dtype, spec, notes)
    # hunt 64: 10^7 frames began to write, ~386 GB
    check_size(out, steps, thermo_every, s, reset_timestep)
    draw = check_velocities(ctx, s, structure, thermostat, temperature_k, create_velocities)
    pot = read_potential_for(
        s, potential, potential_knots, notes, temperature_k=temperature_k, seed=seed
    )
    from wse_hpc.md import MdConfig, Thermostat  # JAX: after the files' checks (hunt 57)

    cfg = MdConfig(
        steps=steps,
        dt_fs=dt_fs,
        thermostat=Thermostat(thermostat, temperature_k or 0.0, damp_fs, tchain),  # NVE: no T
        temperature_K=temperature_k if draw else None,  # LAMMPS's `velocity all create`
        thermo_every=thermo_every,
        seed=seed,
        dtype=dtype,
        spec=spec,
        defect_seed=defect_seed,
        first_step=reset_timestep,
        mesh_shape=None if mesh is None else (int(mesh[0]), int(mesh[1])),
    )
    from wse_hpc.md.run_setup import start_line

    source = structure.name if structure is not None else "the --lattice crystal"
    _run(s, pot, cfg, out, as_json, trace, start=start_line(s, pot, cfg, source), notes=notes)


def _run(s, pot, cfg, out, as_json, trace=None, start: str = "", notes=()) -> None:
    import jax
    from rich.console import Console
    from wse_core.host.runtime import keep_freed_memory
    from wse_hpc.md.run_setup import first_step
    from wse_hpc.md.simulate import run_md
    from wse_hpc.md.thermo import format_header, format_row, performance_line

    keep_freed_memory()  # each build's XLA temporaries reuse mapped pages (no page faults)
    primary = multiprocess.is_primary()  # every process runs the same MD; process 0 reports
    bath = cfg.thermostat.kind == "nose-hoover"  # print ecouple / econserve as LAMMPS would
    console = Console(stderr=as_json, highlight=False, soft_wrap=True, quiet=not primary)
    banner = [*notes] if as_json else [  # notes: on stderr with --json
        *notes,
        f"{s.num_atoms} atoms, {', '.join(pot.elements)} ({pot.kind}), "
        f"cutoff {pot.cutoff_A:.4f} A, dt {cfg.dt_fs} fs",
        *([start] if start else []),  # where the velocities come from (hunt 68)
        format_header(bath),
    ]  # fmt: skip

    def print_banner():  # with the first row: everything run_md checks comes before it
        while banner:
            console.print(banner.pop(0))

    first = first_step(s, cfg)  # the rows' steps count from it (hunt 82)

    def on_row(row):
        if row.step == first:
            _refuse_nonfinite_start(row)
        if not as_json:
            print_banner()
            console.print(format_row(row, bath))

    traj = Trajectory(out, primary=primary)  # the frames and what is kept of them

    def on_frame(step, frame):
        refuse_nonfinite(step, frame)
        traj.write(step, frame)  # one frame per thermo row: a trajectory

    from wse_core.host.progress import progress

    # outermost: a stop's line comes after the progress bar is gone
    with traj.kept(), progress(cfg.steps, "MD steps", quiet=not primary) as done:

        def on_thermo(row):
            on_row(row)
            traj.reached(row.step)
            done(row.step - first)

        with jax.enable_x64(cfg.dtype == "float64"):
            res = run_md(s, pot, cfg, on_thermo=on_thermo, on_frame=on_frame if out else None)
    print_banner()
    # the prediction counts the run's words in its dtype (hunt 62: outside x64 an fp64 run's
    # words were priced as fp32's, 1,196 against 2,392 a step, with three JAX warnings)
    with jax.enable_x64(cfg.dtype == "float64"):
        summary = _summary(res, cfg, s.num_atoms, trace if primary else None)
    if start:
        summary["velocities"] = start
    if notes:
        summary["notes"] = list(notes)
    if not primary:
        return
    if as_json:
        typer.echo(json.dumps(summary, default=float))
        return
    console.print(performance_line(res.steps, res.loop_wall_s, s.num_atoms, cfg.dt_fs))
    console.print(
        f"wafer {summary['grid'][0]} x {summary['grid'][1]} PEs (tile {res.tile[0]} x "
        f"{res.tile[1]}), window +-{res.window[0]} rows x +-{res.window[1]} cols "
        f"({summary['window_pes']} PEs), {summary['candidates']} candidates per PE (cutoff + "
        f"{cfg.skin_A:g} A skin), list builds {res.list_builds} (reruns {res.list_reruns}), "
        f"{summary['sram_bytes_per_pe']} B SRAM per PE, re-plans {res.replans}; "
        f"{summary['words_per_step']:.4g} fabric words/step; "
        f"predicted on {cfg.spec.name}{_priced_as(summary)}: "
        f"{summary['predicted_timesteps_per_s']:.4g} timesteps/s "
        f"({summary['bound']}-bound), measured here "
        f"{summary['timesteps_per_s'] or 0:.4g} timesteps/s"
    )
    # hunt 81: the figure's N_h is the list capacity (slots walked), said where it is printed
    console.print(res.report.assumptions["md.hits"], markup=False, soft_wrap=True)
    if listed := res.report.assumed_compact():  # hunt 70: stood beside no assumption listed
        console.print(listed, markup=False, soft_wrap=True)
    if out is not None:
        console.print(f"wrote {out}")
    if trace is not None:
        console.print(f"per-PE trace: {summary['trace']} (wse view FILE)")


def _priced_as(summary: dict) -> str:
    """Hunt 67: an fp64 run's figure is the fp32 program's (no fp64 PE datapath): said here."""
    extra = summary["report"]
    if extra.get("run_precision") == extra.get("wafer_precision"):
        return ""
    return (
        f" as the {extra['wafer_precision']} program (the PE has no {extra['run_precision']} "
        f"datapath; {extra['run_precision']} ran on the host emulator only)"
    )


def _refuse_nonfinite_start(row) -> None:
    """Energies of the starting structure that are not finite stop the run before a row or
    frame is shown or written (hunt 63: `--steps 0` printed `"press": -Infinity` and wrote
    `nan` forces, exit 0; with steps, the first chunk then blamed --dt-fs)."""
    import math

    from wse_core.errors import RunFault

    values = {"potential energy": (row.pe, "eV"), "pressure": (row.press, "bar")}
    bad = [f"{k} {v:g} {unit}" for k, (v, unit) in values.items() if not math.isfinite(v)]
    if bad:
        raise RunFault(
            f"the starting structure's {' and '.join(bad)} (step 0, before any time step): "
            "the potential file's tables or the structure give values that are not finite, "
            "not the time step; nothing was written"
        )


def _summary(res, cfg, n_atoms, trace=None) -> dict:
    from wse_hpc.md.perf import pe_trace

    report = res.report  # the emulated plan, measured rebuild cadence
    if trace is not None:  # every PE holding an atom runs the step
        report = report.with_trace(pe_trace(res, report))
    return {
        "atoms": n_atoms,
        "steps": res.steps,
        "thermo": [r.to_dict() for r in res.thermo],
        "loop_wall_s": res.loop_wall_s,
        "compile_s": res.compile_s,
        "timesteps_per_s": res.steps / res.loop_wall_s if res.loop_wall_s > 0 else None,
        "grid": list(res.grid),
        "tile": list(res.tile),
        "window": list(res.window),
        "window_pes": (2 * res.window[0] + 1) * (2 * res.window[1] + 1),
        # per PE: the list capacity M the emulator evaluates (the report prices it as N_h)
        "candidates": int(report.extra["hits"]),
        "skin_A": cfg.skin_A,
        "list_builds": res.list_builds,
        "list_reruns": res.list_reruns,
        "replans": res.replans,
        "sram_bytes_per_pe": int(sum(res.sram.values())),
        "predicted_timesteps_per_s": report.units_per_s,
        "words_per_step": report.extra["words_per_step"],
        "bound": report.bound,
        "report": report.to_dict(),
        "wafer": cfg.spec.name,
        **({"trace": str(report.trace.save(trace))} if trace is not None else {}),
    }


@app.command("potential")
def potential_cmd(
    table: str = typer.Option("zhou04", "--table", help="Parameter table: zhou04."),
    elements: list[str] = typer.Option(..., "--elements", help="Element symbols, e.g. Cu Ni."),
    more: list[str] = typer.Argument(None, help="More elements (after --elements Cu ...)."),
    out: Path = output_file(..., "--out", help="Output setfl file (*.eam.alloy)."),
    knots: int = number(
        1000,
        "--knots",
        help="Points of each r and rho table (tables live in PE SRAM: a 48 KiB PE holds "
        "~12,000 fp32 values; LAMMPS files use 500-10,000).",
        kind=int,
        ge=100,  # hunt 62: the help said [2, 100000], zhou04 refused fewer than 100 knots
        le=100_000,
    ),
) -> None:
    """Write an eam/alloy (setfl) potential generated from a published parameter table."""
    if table != "zhou04":
        from wse_core.errors import shown

        fail(f"unknown --table {shown(table)}; the only table is zhou04")
    if not out.name.lower().endswith((".eam.alloy", ".setfl")) and str(out) != os.devnull:
        fail(f"--out {out}: wse reads a setfl by its name (`--potential` takes another name "
             "for a funcfl file): give a name ending in .eam.alloy (or .setfl)")  # fmt: skip
    names = [e for item in [*elements, *(more or [])] for e in item.replace(",", " ").split()]
    # hunt 61: 16 elements at 100,000 knots wrote 397 MB in 15 s, a file `--potential` (and
    # its file_bytes limit) then refused; 24 characters a value ("%.16e ")
    values = len(names) * 2 * knots + len(names) * (len(names) + 1) // 2 * knots
    from wse_core.host.limits import check

    what = f"the size of a setfl of {len(names)} elements, {knots:,} knots"
    check("file_bytes", 24 * values, what)
    from wse_hpc.md import write_setfl, zhou04

    pot = zhou04(names, knots=knots)
    write_setfl(
        pot,
        out,
        [
            "Generated by wse hpc md potential from the parameter table of",
            "X. W. Zhou, R. A. Johnson, H. N. G. Wadley, PRB 69, 144113 (2004)",
            f"elements {' '.join(names)}, {knots} knots",
        ],
    )
    typer.echo(
        f"wrote {out}: {' '.join(names)}, cutoff {pot.cutoff_A:.4f} A, {knots} knots; "
        f"LAMMPS: pair_style eam/alloy / pair_coeff * * {out.name} {' '.join(names)}"
    )


def register(parent: typer.Typer) -> None:
    """Add `md` (and `md potential`) to the `wse hpc` group."""
    parent.add_typer(app, name="md")
