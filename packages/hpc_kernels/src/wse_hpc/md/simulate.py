"""The MD shell: plan the wafer, map atoms, run jitted chunks of steps, re-plan on overflow.

Contract: `run_md(structure, pot, config)` validates the input (the settings first,
`run_setup.check_config`; atoms outside the periodic box put at their images inside, on a
copy, as LAMMPS and the CLI do, `run_setup.in_box`; no overlaps, elements known to the
potential),
runs a float64 config in JAX's 64-bit mode (`x64_for`, as the CLI's fp64 runs), builds a
wafer of one atom per PE (`config.grid` or `choose_grid`; without `config.mesh_shape` on at
most one device per MIN_PES_PER_DEVICE PEs), maps the atoms with the tile map (`rewrap`,
`initial_map`; the tile `config.tile` or the one `choose_tile` finds), picks the neighbour
window from the cutoff and the map (`window_needed` for cutoff + skin, with a margin) and
the neighbour-list capacities (`neighbour_plan.list_caps`), declares SRAM, and runs
`config.steps` velocity-Verlet steps in jitted chunks (`lax.while_loop` that stops at the
first overflow) within checked segments of whole list lifetimes (`segments.advance`); each
step evaluates the EAM splines only for its per-PE candidate lists and rebuilds them (sort
sweep + build) every `nbrs.every` steps, counted in `list_builds` (the steps between
rebuilds run as the program without the rebuild, `Runner.kept_fits`: a fifth of the
compile, and a run that never rebuilds compiles only it). At each row one fabric
reduction (`drift_fn`) checks that no atom moved more than half the skin from its build
position while its lists were in use: if one did, the segment is run again from its start
with half the cadence (`list_reruns`); if every atom stayed within a quarter of it over a
segment, the next doubles it (at most MAX_REBUILD_EVERY). The cadence starts at
`config.rebuild_every` or `initial_every`, and changes only at segment ends, which follow
the cadence, not `thermo_every`: the run's builds, re-plans and price are the same at any
thermo interval (hunt 81). Lists that would need more than LIST_BUDGET_BYTES of host memory
(800k atoms) fall back to the full-window kernel (`eam.forces_fn`, a sort sweep and a
coverage test every step). On overflow the segment is thrown away and re-run from its start
with a re-map and a larger window (`segments.replan`), so an overflow never reaches the
results. With `runners` (a dict the caller keeps) a repeat of a run with the same static
choices reuses its compiled functions (`runners.runner_for`). Thermo rows are computed on
the host in float64, and handed on once their chunk passed its checks.
A Nosé–Hoover run from a structure whose velocities it keeps starts with the bath the
structure carries (`run_setup.start_bath`), and every frame it hands `on_frame` carries its
bath in `info` (with the run's masses): 2N steps and N + N continued from the Nth frame agree,
and the continued run numbers its rows and frames on from the frame's step (`Structure.step`,
`run_setup.first_step`: LAMMPS's read_restart keeps the timestep; `config.first_step` is its
reset_timestep), its thermo rows on the multiples of `thermo_every` as LAMMPS's.
Every frame carries image flags (`Structure.images`, LAMMPS's ix iy iz): positions + images
x box is the unwrapped trajectory, counted on from the structure's own flags, re-maps too.
Returns an `MdResult` with the final structure (positions wrapped into the box, velocities,
forces, per-atom energies, masses, the bath, images), the rows, the timings, the plan it ran and
`.report`, the run's `wse_core.RunReport` (`perf.run_report`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import Callable

import jax
import numpy as np
from wse_core.cost.report import RunReport
from wse_core.errors import RunFault
from wse_core.hw.wafer import Wafer

from wse_hpc.md import mapping, pe_compile, plan_cache
from wse_hpc.md.config import MdConfig
from wse_hpc.md.eam import EamPlan, geometry, sram_plan
from wse_hpc.md.integrate import Thermostat, bath_energy
from wse_hpc.md.lattice import Structure
from wse_hpc.md.neighbour_plan import WINDOW_MARGIN_A, Margins, plan_window
from wse_hpc.md.neighbours.build import pe_kernels_for
from wse_hpc.md.potentials import EamPotential
from wse_hpc.md.run_setup import (
    EXPLODED_TEMPERATURE_K,
    MIN_PES_PER_DEVICE,
    check_config,
    first_step,
    in_box,
    md_wafer,
    prepare,
    start_bath,
)
from wse_hpc.md.runners import runner_for
from wse_hpc.md.segments import (
    MAX_REBUILD_EVERY,
    Progress,
    RunFixed,
    advance,
    placed_drift,
    replan,
)
from wse_hpc.md.state import Atoms, MdState
from wse_hpc.md.thermo import ThermoRow, state_row, state_structure
from wse_hpc.md.xyz import NOSE_HOOVER_KEYS

__all__ = [
    "MdResult",
    "MdUnstableError",
    "EXPLODED_TEMPERATURE_K",
    "run_md",
    "MIN_PES_PER_DEVICE",
    "MAX_REBUILD_EVERY",
    "initial_every",
    "x64_for",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MdResult:
    """What `run_md` returns: the final structure, the thermo rows, the timings, the plan
    and wafer the run used and the potential; `report` is the run's `wse_core.RunReport`
    (`perf.run_report`: that plan priced, with the measured wall time per step and rebuild
    cadence), built on first use."""

    structure: Structure
    thermo: list[ThermoRow]
    steps: int
    loop_wall_s: float  # the timed steps, compile excluded
    compile_s: float
    replans: int
    grid: tuple[int, int]
    window: tuple[int, int]
    wafer: Wafer
    plan: EamPlan
    sram: dict[str, int]
    # neighbour-list rebuilds in the timed steps (LAMMPS: "Neighbor list builds")
    list_builds: int = 0
    tile: tuple[int, int] = mapping.TILES[0]  # the map's tile (PE rows, cols)
    list_reruns: int = 0  # chunks run again with a shorter cadence (an atom moved > skin / 2)
    potential: EamPotential
    thermostat: Thermostat = Thermostat()  # the run's (its work is priced in `report`)

    @functools.cached_property
    def report(self) -> RunReport:
        # imported here: the price's modules load scipy.stats (a cold import of ~2 s, 15%
        # of a warm-cache run's time to its first step at 864 atoms)
        from wse_hpc.md.perf import run_report

        with x64_for(self.plan.dtype):  # fp64 words priced as fp64 (traced, as the run was)
            return run_report(self)


def initial_every(velocities_A_ps: np.ndarray, skin_A: float, dt_fs: float) -> int:
    """Steps the fastest atom takes to cross skin / 2 at its speed (1 .. MAX_REBUILD_EVERY):
    the cadence a run starts with (`pe_program.ballistic_every` is the same bound for a
    Maxwell-Boltzmann ensemble); the shell's check after each chunk keeps it exact. Skin 0
    (LAMMPS's `neighbor 0.0`): 1, every step, even from rest (forces set atoms moving, and
    any move would run the chunk again at half the cadence)."""
    if skin_A == 0:
        return 1
    fastest = float(np.sqrt((np.asarray(velocities_A_ps) ** 2).sum(-1)).max(initial=0.0))
    if fastest == 0.0:
        return MAX_REBUILD_EVERY
    steps = int(0.5 * skin_A / (fastest * dt_fs * 1e-3))
    return min(max(steps, 1), MAX_REBUILD_EVERY)


class MdUnstableError(RunFault):
    """The trajectory blew up: a non-finite energy or a temperature past
    `EXPLODED_TEMPERATURE_K` (exit 1: the input was valid, the run failed)."""


def _check_stable(row: ThermoRow, config: MdConfig) -> None:
    values = (row.pe, row.ke, row.etotal, row.temp, row.press)
    if all(math.isfinite(v) for v in values) and row.temp <= EXPLODED_TEMPERATURE_K:
        return
    raise MdUnstableError(
        f"the run blew up at step {row.step}: temperature {row.temp:.4g} K, total energy "
        f"{row.etotal:.4g} eV (past {EXPLODED_TEMPERATURE_K:.0e} K or not finite); give a "
        f"shorter --dt-fs than {config.dt_fs:g}"
    )


def x64_for(dtype) -> contextlib.AbstractContextManager:
    """JAX's 64-bit mode for a float64 run, as `wse hpc md --precision fp64` has it (hunt
    65: without it the API's float64 run was traced, run and priced in float32, JAX's
    warnings aside); nothing for float32, so a caller's own x64 setting stands."""
    return jax.enable_x64(True) if np.dtype(dtype) == np.float64 else contextlib.nullcontext()


def run_md(
    structure: Structure,
    pot: EamPotential,
    config: MdConfig,
    on_thermo: Callable[[ThermoRow], None] | None = None,
    on_frame: Callable[[int, Structure], None] | None = None,
    *,
    runners: dict | None = None,
) -> MdResult:
    """Run `config.steps` steps (0: evaluate energies and forces only); `on_thermo` gets
    each thermo row, `on_frame(step, structure)` the structure at each row; `runners`, a
    dict the caller keeps across runs, holds the compiled runners for a repeat
    (`runners.runner_for`). A float64 config runs in JAX's 64-bit mode (`x64_for`)."""
    check_config(config)  # the dtype before x64 is set by it; the rest before any planning
    with x64_for(config.dtype):
        return _run(structure, pot, config, on_thermo, on_frame, runners)


def _run(structure, pot, config, on_thermo, on_frame, runners) -> MdResult:
    structure = in_box(structure)  # as the CLI's read and LAMMPS's run (hunt 74)
    species, masses, vel = prepare(structure, pot, config)
    first = first_step(structure, config)  # rows and frames numbered from it (hunt 82)
    config = dataclasses.replace(config, first_step=first)
    if config.rebuild_every is None:
        every = initial_every(vel, config.skin_A, config.dt_fs)
        config = dataclasses.replace(config, rebuild_every=every)
    n, box = structure.num_atoms, np.asarray(structure.box_A, dtype=np.float64)
    wafer = md_wafer(n, config)
    dtype = np.dtype(config.dtype)
    # numba compiles the PE kernels aside while this plans (the build's once the window is)
    pe_compile.start(pe_kernels_for(wafer, dtype))
    pos, grid = mapping.rewrap(structure.positions_A, box), (wafer.rows, wafer.cols)
    images = _start_images(structure, pos, box)
    reach = pot.cutoff_A + config.skin_A + WINDOW_MARGIN_A
    # the tile stored on disk by its inputs, as the plan's window and counts are (`plan_cache`)
    choose = functools.partial(mapping.choose_tile, pos, grid, box, reach)
    inputs = (pos, grid, box, reach, mapping.TILES, mapping.TILE_JITTER_A)
    tile = config.tile or plan_cache.cached("tile", inputs, choose)
    state_np = mapping.pack(
        mapping.initial_map(pos, grid, box, tile), pos, species, vel, dtype=dtype
    )
    plan = plan_window(state_np, box, pot, config, wafer, Margins(spare_rows=1))
    pe_compile.start(pe_kernels_for(wafer, dtype, plan))
    sram = sram_plan(wafer, pot, plan)
    runner = runner_for(wafer, pot, plan, config, masses, n, runners)
    fixed = RunFixed(wafer, pot, config, masses, box, tile, runners, images)
    t0 = time.perf_counter()
    placed = jax.tree.map(wafer.place, Atoms.of(state_np))
    state = placed_drift(runner, runner.init(placed, geometry(wafer)))
    run = Progress(state, runner, plan, sram, seen=[])
    if (bath := start_bath(structure, config)) is not None:  # a continued Nose-Hoover run
        run.state = run.state._replace(bath=bath)
    while bool(run.state.eam.overflow):  # the margin makes this rare; the fallback: the grid
        run.replans += 1
        run.seen.append(wafer.gather(run.state.atoms.record()))
        new = replan(fixed, run.state, run.plan, run.replans, run.seen)
        run.state, run.runner, run.plan, run.sram = new
    run.compile_s = time.perf_counter() - t0
    ecouple = lambda b: bath_energy(b, config.thermostat, n)  # noqa: E731
    vol, frame = structure.volume_A3, functools.partial(_frame, fixed, n, masses[species])
    rows: list[ThermoRow] = []

    def row_fn(step: int, state: MdState) -> ThermoRow:
        row = state_row(first + step, wafer, state, masses, vol, ecouple(state.bath))
        _check_stable(row, config)
        return row

    def emit_fn(row: ThermoRow, state: MdState) -> None:
        rows.append(row)
        if on_thermo:
            on_thermo(row)
        if on_frame:
            on_frame(row.step, frame(state, row.step))

    emit_fn(state_row(first, wafer, run.state, masses, vol, ecouple(run.state.bath)), run.state)
    done = advance(run, fixed, jax.random.key(config.seed), row_fn, emit_fn)
    return MdResult(
        structure=frame(run.state, first + done),
        thermo=rows,
        steps=done,
        loop_wall_s=run.loop_s,
        compile_s=run.compile_s,
        replans=run.replans,
        grid=(wafer.rows, wafer.cols),
        window=(run.plan.k_rows, run.plan.k_cols),
        wafer=wafer,
        plan=run.plan,
        sram=run.sram,
        list_builds=run.builds,
        tile=tile,
        list_reruns=run.reruns,
        potential=pot,
        thermostat=config.thermostat,
    )


def _start_images(structure: Structure, pos: np.ndarray, box: np.ndarray) -> np.ndarray:
    """(n, 3) int64: the whole boxes from the placed positions `pos` (`rewrap`ped) to the
    structure's unwrapped ones (positions + its image flags), so that a frame's image flags
    go on from the structure's (a run continued from a frame: displacements add up)."""
    given = structure.positions_A
    if structure.images is not None:
        given = given + np.asarray(structure.images, dtype=np.float64) * box
    return np.rint((given - pos) / box).astype(np.int64)


def _frame(fixed: RunFixed, n: int, masses_amu, state: MdState, step: int) -> Structure:
    """The structure of a placed state at `step` with the run's masses (the written
    momenta's), its image flags and, for Nosé–Hoover, its bath in `info`: a run continued
    from it goes on exactly, and counts on from its step."""
    config = fixed.config
    s = state_structure(fixed.wafer, state, fixed.pot, n, fixed.box, fixed.images)
    s.masses_amu = np.asarray(masses_amu, dtype=np.float64)
    s.step = int(step)
    if config.thermostat.kind == "nose-hoover":
        xi, eta = (np.asarray(v, dtype=np.float64).reshape(-1) for v in state.bath)
        # one thermostat: a number a key, as before; a chain: its values, quoted on the line
        bath = (float(v[0]) if v.size == 1 else tuple(map(float, v)) for v in (xi, eta))
        s.info = dict(zip(NOSE_HOOVER_KEYS, bath, strict=True))
    return s
