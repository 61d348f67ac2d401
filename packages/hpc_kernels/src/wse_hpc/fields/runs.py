"""The CFD shell: build a case, step it in jitted chunks, write fields, restart, report.

`run_cfd(cfg, on_progress=None) -> CfdRun` runs `CfdConfig.case` ("rayleigh-benard" or
"cavity") for `steps` steps on the emulated wafer, its settings checked first
(`run_config.check_config`). At every step n that is a multiple of `output_every` (n the
absolute step, a restart's too, as OpenFOAM's writeInterval and LAMMPS's `dump N` count) and
at the end (but for a restart that runs no step: it writes nothing, and its step file is
left as it was) it writes `step_<n>.npz` (arrays `u`, `v`, `w`, `p`, `T` of shape
(nx, ny, nz): the MAC face velocities as stored, `w` zeros in 2D; `T` the full temperature,
none for the cavity, which solves no temperature (`_stored`); plus `step`, `time`,
`lengths`, `case` and the physics, `run_physics`: ra and pr or re, time_scheme, dt) and
`step_<n>.vtk` (legacy VTK structured points, ParaView opens it: the velocity averaged to
cell centres, the faces wrapping on the periodic axes, p and T) into `out_dir`. With
`restart=True` it continues from the newest `step_<n>.npz` there (of the same case, domain
and physics: FieldError otherwise, or when there is none), and the report's
`restarted_from_step` / `restarted_from` say which; the fields are read as fp32 whatever
their stored dtype, and a rayleigh-benard step's T is the full temperature (one without
`case` is refused: its T could be either), written in float64 so that theta comes back bit
for bit (`convection.theta_from`; hunt 72: a restart of 20 + 20 steps differed from 40 by
1.2e-7 in T; now equal, as the cavity's).
`on_progress(step, nusselt, kinetic_energy)` is called after each chunk. `CfdRun.report` is
the `wse_core.RunReport` of the whole run: each step priced from its program
(`wse_hpc.fields.perf`) with the measured mean CG iterations, times the steps run (0 s for
none, as `wse_hpc.stencil` has it), then the step files it wrote, their fields copied off
the wafer through the host I/O (`STEP_FILES`); `extra["predicted_s_per_step"]` is one step's
price, `traffic` the fabric ledger's count of the steps' shifts and reductions.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from wse_core import RunReport
from wse_core.cost.perf import Phase, Work, serial

from wse_hpc.cfd_steps import StepFileError, latest_output, read_step, step_case, step_of
from wse_hpc.fields.convection import (
    RbCase,
    full_temperature,
    rayleigh_benard,
    stable_dt,
    theta_from,
)
from wse_hpc.fields.flow import FlowState, kinetic_energy, nusselt
from wse_hpc.fields.grid import FieldError
from wse_hpc.fields.perf import WORD_BYTES, assumptions, traced_step
from wse_hpc.fields.run_config import CASES, CfdConfig, check_config
from wse_hpc.fields.run_physics import check_restart, physics, recorded_dt, stored
from wse_hpc.fields.vtk import write_vtk

__all__ = ["CASES", "CfdConfig", "CfdRun", "check_config", "latest_output", "run_cfd",
           "unconverged"]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class CfdRun:
    config: CfdConfig
    history: tuple[tuple[int, float, float, float], ...]  # (step, time, Nu, KE)
    fields: dict[str, np.ndarray]
    written: tuple[Path, ...]
    report: RunReport


def _build(cfg: CfdConfig):
    """(grid, flow, fns, state, kappa) of the case."""
    if cfg.case == "rayleigh-benard":
        if cfg.time_scheme != "euler":
            raise FieldError("time_scheme 'rk3' is the cavity's; rayleigh-benard runs 'euler'")
        case = RbCase(ra=cfg.ra, pr=cfg.pr, aspect=cfg.aspect, dt=cfg.dt, amplitude=1e-2,
                      mesh_shape=cfg.mesh_shape, defect_seed=cfg.defect_seed)  # fmt: skip
        grid, flow, fns, state = rayleigh_benard(cfg.spec, cfg.grid, case)
        return grid, flow, fns, state, flow.kappa
    if cfg.case == "cavity":
        from wse_hpc.fields.cavity import cavity_case

        grid, flow, fns, state = cavity_case(cfg.spec, cfg.grid, re=cfg.re, dt=cfg.dt,
                                             time_scheme=cfg.time_scheme,
                                             mesh_shape=cfg.mesh_shape,
                                             defect_seed=cfg.defect_seed)  # fmt: skip
        return grid, flow, fns, state, 1.0
    raise FieldError(f"unknown case {cfg.case!r}; use one of {', '.join(CASES)}")


def check_dt(cfg: CfdConfig, dt: float) -> None:
    """Refuse a time step beyond the explicit scheme's diffusion / CFL limit; the refusal
    suggests the case's default step (rayleigh-benard: half the limit; cavity: SAFETY = 0.8
    of it; hunt 68: it said half for both)."""
    d = 3 if cfg.grid[2] > 1 else 2
    if cfg.case == "rayleigh-benard":
        default, share = stable_dt(cfg.grid, cfg.aspect, cfg.ra, cfg.pr), 0.5
        rule = (  # hunt 72: the central-flux bound was missing here and in `stable_dt`
            "diffusion h^2 / (2 d max(nu, kappa)), CFL h / U, central advection "
            "2 min(nu, kappa) / U^2, U = 1"
        )
    else:
        from wse_hpc.fields.cavity import SAFETY
        from wse_hpc.fields.cavity import stable_dt as cavity_dt

        default, share = cavity_dt(cfg.grid, cfg.re, cfg.time_scheme), SAFETY
        rule = (
            "SSP-RK3: diffusion 2.51 h^2 / (4 d nu), advection sqrt(3) h / (d U)"
            if cfg.time_scheme == "rk3"
            else "diffusion h^2 / (2 d nu), CFL h / U, central advection 2 nu / U^2"
        )
    limit = default / share
    if dt > limit:
        # the rule names d, so the printed limit can be checked by hand (hunt 71: it printed
        # the 2D figure under the 3D formula)
        raise FieldError(
            f"--dt {dt:g} breaks the explicit step's limit {limit:.4g} ({rule}; d = {d}); "
            f"use --dt {default:.4g} (the {cfg.case} default, {share:g} of the limit)"
        )


def _lengths(grid) -> tuple[float, ...]:
    """The domain's sides, as a step file stores them (`lengths`)."""
    return tuple(float(x) for x in np.asarray(grid.spacing) * grid.shape)


def _read_step(path: Path, grid, case: str) -> dict[str, np.ndarray]:
    """A step file's arrays, or FieldError naming what is wrong (`wse_hpc.cfd_steps`): a step
    of another case or domain included (hunt 62)."""
    try:
        return read_step(path, tuple(grid.shape), case=case, lengths=_lengths(grid))
    except StepFileError as e:
        raise FieldError(str(e)) from None


def _check_courant(path: Path, data: dict[str, np.ndarray], grid, dt: float, chosen: str):
    """FieldError for a step file whose velocities cross more than a cell per step at `dt`
    (the explicit step's CFL limit h / U, `stable_dt`'s): the run would blow up from its
    first steps (hunt 64: it did, and the message blamed --dt)."""
    d = 3 if grid.shape[2] > 1 else 2
    for name, h in zip("uvw"[:d], grid.spacing[:d], strict=True):
        speed = float(np.abs(data[name]).max(initial=0))
        if speed * dt > h:
            raise FieldError(
                f"--restart: {path}'s {name} reaches {speed:.3g}: at {chosen} {dt:.4g} that "
                f"crosses {speed * dt / h:.3g} cells of {h:.3g} per step (the explicit step's "
                f"CFL limit is 1); restart from a sound step file, or give --dt "
                f"{h / speed / 2:.2g} or less"
            )


def _load(state: FlowState, path: Path, grid, cfg: CfdConfig, now: dict):
    """(state, step, time, its run's dt or None) of the step file `path`, checked
    (`_read_step`, the physics `now` of `run_physics`, `_check_courant`)."""
    case, dt = cfg.case, now["dt"]
    data = _read_step(path, grid, case)
    check_restart(path, data, now, dt_given=cfg.dt is not None)
    _check_courant(path, data, grid, dt, "--dt" if cfg.dt is not None else "the default step")

    def field(like, values):  # fp32 as the run's carry (hunt 67: an int64 p was a traceback)
        return like.like(grid.wafer.place(jnp.asarray(values, jnp.float32)))

    vel = tuple(field(v, data[n]) for v, n in zip(state.velocity, "uvw", strict=False))
    T = _theta(path, data, grid, case)
    st = state._replace(velocity=vel, p=field(state.p, data["p"]), T=field(state.T, T))
    return st, int(data["step"]), float(data["time"]), recorded_dt(path, data)


def _theta(path: Path, data: dict[str, np.ndarray], grid, case: str) -> np.ndarray:
    """The run's temperature state from the file's `T`: a rayleigh-benard step holds the full
    temperature (`_arrays`: every step file it wrote; before hunt 62 without `case`, with
    `theta_offset`), the state is theta; a cavity's T is its state. Decided by the case
    (`read_step` refused a file of another), never by an optional key alone (hunt 67: a step
    with `case` but no `theta_offset` had the conduction profile added twice, silently)."""
    if case != "rayleigh-benard":  # the cavity's steps hold no T since hunt 71: it has none
        return data["T"] if "T" in data else np.zeros(grid.shape, np.float32)
    if step_case(data) is None:  # made by hand, or a cavity's from before hunt 62
        raise FieldError(
            f"--restart: {path} names no case (no `case` string, nor an older step's "
            "`theta_offset`), so whether its T is the full temperature (what a "
            "rayleigh-benard run writes) or theta cannot be told; save it with "
            "case='rayleigh-benard' and T the full temperature"
        )
    # float64 T less the profile, rounded once (hunt 72: T was read as fp32 first, and a
    # restart's theta differed from the run's by an ulp of T, 1.2e-7)
    return theta_from(grid, data["T"])


def _arrays(cfg: CfdConfig, grid, s: FlowState) -> dict[str, np.ndarray]:
    out = {n: grid.gather(v) for n, v in zip("uvw", s.velocity, strict=False)}
    out.setdefault("w", np.zeros(grid.shape, np.float32))
    out["p"] = grid.gather(s.p)
    theta = grid.gather(s.T)
    out["T"] = full_temperature(grid, theta) if cfg.case == "rayleigh-benard" else theta
    return out


def _stored(cfg: CfdConfig, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays a step file holds: the cavity solves no temperature (kappa 0, no buoyancy),
    so its T, carried unchanged, is left out where it is all zero (hunt 71: the .npz and the
    .vtk showed ParaView a T of zeros); a T read from an older step or one made by hand is
    kept as it was given (a cavity restart reads T where its step has one)."""
    if cfg.case == "cavity" and not np.any(arrays["T"]):
        return {k: a for k, a in arrays.items() if k != "T"}
    return arrays


def _write(cfg: CfdConfig, grid, s: FlowState, step: int, t: float, now: dict) -> list[Path]:
    assert cfg.out_dir is not None
    out_dir = Path(cfg.out_dir)  # a Path already (`check_config`)
    out_dir.mkdir(parents=True, exist_ok=True)
    arrays = _stored(cfg, _arrays(cfg, grid, s))
    npz = out_dir / f"step_{step:07d}.npz"
    extra = {"theta_offset": 1} if cfg.case == "rayleigh-benard" else {}
    from wse_core.host.atomic import atomic_path

    with atomic_path(npz) as tmp:  # a killed run leaves no half step file for --restart
        np.savez(tmp, step=step, time=t, lengths=np.asarray(_lengths(grid)),
                 case=np.asarray(cfg.case), **arrays, **extra, **stored(now))  # fmt: skip
    vtk = npz.with_suffix(".vtk")
    write_vtk(vtk, arrays, grid.spacing, periodic=grid.periodic)
    return [npz, vtk]


STEP_FILES = {
    "cfd step files": "each step file written copies the state's fields off the wafer (the "
    "velocity components, p and T: 4 B a cell each) through the system's host I/O at "
    "host_io_bytes_per_s (vendor: 1.2 Tb/s a system), in series with the steps (the run "
    "stops while they leave); the host's npz and VTK writing is not priced"
}


def wafer_bytes(grid, state: FlowState) -> int:
    """Bytes one step file copies off the wafer: the state's velocity components, p and T,
    fp32 over the grid's cells (a 2D run's zero w and the full temperature are made on the
    host)."""
    return (len(state.velocity) + 2) * grid.cells * WORD_BYTES


def step_files_phase(grid, state: FlowState, files: int) -> Phase:
    """`files` step files off the wafer (`STEP_FILES`): their bytes through the host I/O."""
    return Phase("step_files", Work(host_io_bytes=wafer_bytes(grid, state)), repeat=files)


def _restart_file(out_dir: Path | None) -> Path:
    """The step file a restart continues from, or FieldError (hunt 65: with none in out_dir
    the run started from step 0 without a word, as if `restart` were not set)."""
    if out_dir is None:
        raise FieldError("restart needs out_dir (the folder holding step_<n>.npz)")
    if (last := latest_output(out_dir)) is None:
        raise FieldError(
            f"restart: out_dir {out_dir} holds no step_<n>.npz to continue from; give "
            "restart=False to start a run"
        )
    return last


def _chunk(step: int, left: int, every: int) -> int:
    """The steps to run next from the absolute `step`, `left` to go: to the next multiple of
    `every` (the output cadence counts absolute steps, as OpenFOAM's writeInterval and
    LAMMPS's `dump N`; hunt 77: a restart from step 30 with every 20 wrote 50, not 40), else
    at most 100 (a progress report each)."""
    return min(left, every - step % every if every else 100)


def _final_write(
    cfg: CfdConfig, written: list[Path], done: int, step: int, restarted: bool
) -> bool:
    """Whether the run ends by writing its last step `step`: always, unless the cadence
    just wrote it, or a restart ran no step (its state is the step file it read, written at
    that file's dt: hunt 77, `--restart --steps 0 --dt X` rewrote it recording X, and the
    next restart was refused; OpenFOAM does not rewrite its start time either)."""
    if cfg.out_dir is None or (restarted and done == 0):
        return False
    return not written or step_of(written[-2]) != step


def run_cfd(cfg: CfdConfig, on_progress: Callable[[int, float, float], None] | None = None):
    """Run the case; see the module docstring."""
    cfg = check_config(cfg)  # out_dir a Path, grid a tuple of ints
    last = _restart_file(Path(cfg.out_dir) if cfg.out_dir else None) if cfg.restart else None
    grid, flow, fns, state, kappa = _build(cfg)
    check_dt(cfg, flow.dt)
    step0, t0, old_dt, now = 0, 0.0, None, physics(cfg, flow.dt)
    chosen = "--dt" if cfg.dt is not None else "the default step"
    if last is not None:
        state, step0, t0, old_dt = _load(state, last, grid, cfg, now)

    @jax.jit
    def advance(s, n):
        def body(i, c):  # hunt 72: solves stopped at the cap were counted nowhere
            st, its, bad, worst = c
            st = fns.step_fn(st)
            short = (st.cg_iterations >= fns.cg_maxiter) & (st.cg_residual > flow.cg_tol)
            worst = jnp.where(short, jnp.maximum(worst, st.cg_residual), worst)
            return st, its + st.cg_iterations, bad + short.astype(jnp.int32), worst

        zero = (jnp.int32(0), jnp.int32(0), jnp.float32(0))
        s, its, bad, worst = lax.fori_loop(0, n, body, (s, *zero))
        return s, its, bad, worst, nusselt(s, kappa), kinetic_energy(s)

    history, written, total_its, done, short, worst = [], [], 0, 0, 0, 0.0
    start = time.perf_counter()
    while done < cfg.steps:
        n = _chunk(step0 + done, cfg.steps - done, cfg.output_every)
        state, its, bad, res, nu, ke = advance(state, n)
        done, total_its = done + n, total_its + int(its)
        short, worst = short + int(bad), max(worst, float(res))
        step, t = step0 + done, t0 + done * flow.dt
        history.append((step, t, float(nu), float(ke)))
        if not np.isfinite(float(ke)):  # hunt 63: "use a smaller --dt" when none was given
            since = f" (restarted from {last})" if last else ""
            raise FieldError(
                f"the run{since} blew up at step {step} (kinetic energy {float(ke)}) with "
                f"{chosen} {flow.dt:.4g}; give a smaller --dt"
            )
        if on_progress:
            on_progress(step, float(nu), float(ke))
        if cfg.out_dir is not None and cfg.output_every and step % cfg.output_every == 0:
            written += _write(cfg, grid, state, step, t, now)
    wall = time.perf_counter() - start
    if _final_write(cfg, written, done, step0 + done, restarted=last is not None):
        written += _write(cfg, grid, state, step0 + done, t0 + done * flow.dt, now)
    mean_its = total_its / max(done, 1)
    step_phases, step_traffic = traced_step(
        grid, fns.step_fn, state, repeats={"cg_iteration": mean_its}
    )
    # the run is its steps and the step files it copied off the wafer; building the case is
    # host work (hunt 68: zero steps were priced as one step, 3.686 µs "for the same run"
    # where `wse hpc stencil --steps 0` said 0)
    files = len(written) // 2  # an .npz and a .vtk a step
    phases = serial(step_phases, name="run", repeat=done)
    if files:  # hunt 70: 4 step files were priced as none
        phases = serial(phases, step_files_phase(grid, state, files), name="run_and_output")
    report = RunReport.build(
        f"cfd-{cfg.case}", grid.wafer.spec, phases,
        measured_wall_s=wall, sram=grid.wafer.sram.summary(), units="timesteps",
        reads=grid.wafer.sram.sized_reads(),  # the reserve decided the fit (hunt 82)
        traffic=step_traffic.scaled(done),  # hunt 70: it was reported as 0
        # hunt 67: the halo and detour lines, as swe has them
        assumptions={**assumptions(grid), **(STEP_FILES if files else {})},
        extra=lambda t: {
               "case": cfg.case, "grid": list(cfg.grid), "lengths": list(_lengths(grid)),
               "steps": done, **now,
               # one step's price (a node's seconds are per repeat of its parent), also
               # with no step run, when the run's own is 0 s
               "predicted_s_per_step": t.leaf(step_phases.name).seconds,
               "step_files": files, "step_file_wafer_bytes": files * wafer_bytes(grid, state),
               "cg_iterations_per_step": mean_its,
               # pressure solves that stopped at the cap above their tolerance, and the
               # largest relative residual ||r|| / ||b|| they stopped at (`unconverged`)
               "unconverged_solves": short, "cg_max_iterations": fns.cg_maxiter,
               "cg_tolerance": flow.cg_tol, "cg_worst_residual": worst if short else None,
               "restarted_from_step": step0 if last else None,
               "restarted_from": str(last) if last else None,
               "restarted_from_dt": old_dt,  # the step file's run's dt (None: unrecorded)
               # the cavity is isothermal (T = 0): no Nusselt number (hunt 68: it said 1)
               "nusselt": history[-1][2] if history and cfg.case != "cavity" else None,
               "kinetic_energy": history[-1][3] if history else None},
    )  # fmt: skip
    return CfdRun(cfg, tuple(history), _arrays(cfg, grid, state), tuple(written), report)


def unconverged(extra: dict) -> str | None:
    """The warning line of a run whose pressure solves stopped at the iteration cap above
    their tolerance (None if none did), naming the solver, the cap and the residual reached,
    as OpenFOAM's solver lines and PETSc's KSP_DIVERGED_ITS do."""
    if not (short := extra.get("unconverged_solves")):
        return None
    return (
        f"warning: {short} of {extra['steps']} pressure solves (Jacobi-PCG) stopped at the "
        f"{extra['cg_max_iterations']}-iteration cap unconverged: relative residual up to "
        f"{extra['cg_worst_residual']:.3g} (tolerance {extra['cg_tolerance']:g}), so div u is "
        "not held to it"
    )
