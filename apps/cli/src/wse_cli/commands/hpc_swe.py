"""`wse hpc swe`: the nonlinear shallow-water equations on one emulated wafer.

A Gaussian hump on depth 1 in the periodic unit square (`wse_hpc.fields.swe`: C grid,
centred differences, SSP-RK3), `--steps` steps at `--cfl` of the gravity-wave limit. Prints
the relative mass drift (round-off), the wave energy's change, signed, relative to its
initial value (the energy above the same mass at rest, `wave_energy`: the scheme's own
change, RK3's damping of short waves and the centred space discretisation's; hunt 72: it
was the fp32 cancellation of the total less the rest energy, unsigned), the measured
emulation time and the predicted wafer time (`run_swe(...).report`). Bad input is
one line, exit 2. `--domain-translation` moves the state one PE east every step (Domain
Translation, `wse_hpc.fields.swe`); the multi-process flags (or `wse launch`) run it over
`jax.distributed` processes standing for systems.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from wse_cli import multiprocess
from wse_cli.errors import fail
from wse_cli.options import INT32_MAX, SEED, number
from wse_cli.wafer_choice import SPEC_FILE, preset_option, wafer_spec


def swe(
    n: int = number(64, "--n", kind=int, ge=3, help="Cells per side (n x n, periodic)."),
    steps: int = number(
        200, "--steps", kind=int, ge=0, le=INT32_MAX, limit="time_steps", help="Time steps."
    ),
    # hunt 56: g 1e308 ran to NaN drifts with exit 0; the float32 fluxes g h^2 summed over up
    # to 10^6 cells stay finite to 1e30 (10^29 times the Earth's 9.81). Hunt 63: 1e-300 ran
    # to NaN (g is 0 in float32; dt = cfl h / sqrt(g h) infinite), 1e-40 to an energy drift
    # of -0.00: the gravity term g dh/dx of the smallest depth step float32 resolves on a
    # depth of 1 (6e-8) stays a normal float32 (>= 1.2e-38) from g 1e-30 (g only rescales
    # time: the waves are the same at every g)
    g: float = number(9.81, "--g", ge=1e-30, le=1e30, help="Gravity."),
    cfl: float = number(0.4, "--cfl", gt=0, le=0.6, help="c dt / h (RK3 limit 0.6)."),
    preset: str = preset_option("wse2", help="Wafer preset (n x n <= PEs)"),
    spec_file: Path = SPEC_FILE,
    defect_seed: int = number(None, "--defect-seed", help="Draw and repair defects.", **SEED),
    translate: bool = typer.Option(
        False, "--domain-translation", help="Move the state one PE east every step."
    ),  # fmt: skip
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
    num_processes: int = multiprocess.NUM_PROCESSES,
    process_id: int = multiprocess.PROCESS_ID,
    coordinator: str = multiprocess.COORDINATOR,
) -> None:
    """Run shallow water on the emulated wafer and predict its wafer time."""
    multiprocess.join(num_processes, process_id, coordinator)
    spec = wafer_spec(preset, spec_file, "wse2")
    if n > spec.pe_rows or n > spec.pe_cols:
        fail(f"--n {n}: a {n} x {n} PE grid does not fit the {spec.name} wafer's "
             f"{spec.pe_rows} x {spec.pe_cols} PEs")  # fmt: skip
    from wse_hpc.fields.swe import SweConfig, run_swe

    cfg = SweConfig(n=n, steps=steps, g=g, cfl=cfl, defect_seed=defect_seed,
                    translate_domain=translate)  # fmt: skip
    run = run_swe(spec, cfg)
    if not multiprocess.is_primary():
        return  # every process computed the same run; process 0 reports it
    r = run.report
    if as_json:
        d = r.to_dict() | {"mass_drift": run.mass_drift, "energy_drift": run.energy_drift}
        d["h"] = run.h.tolist() if n <= 64 else None  # for comparisons of runs
        typer.echo(json.dumps(d, default=float))
        return
    typer.echo(
        f"shallow water {n} x {n}, {steps} steps: mass drift {run.mass_drift:.2e}, wave "
        f"energy drift {run.energy_drift:+.2e} of its initial value; emulated "
        f"{r.measured_wall_s:.3f} s; predicted "
        f"on {r.wafer} {r.extra['predicted_s_per_step'] * 1e6:.3f} µs per step ({r.bound}-bound)"
    )
    if r.assumed:  # hunt 69: the prediction stood beside no assumption that moves it
        typer.echo(r.assumed_compact())


def register(app: typer.Typer) -> None:
    """Add this module's command to the `wse hpc` group."""
    app.command("swe")(swe)
