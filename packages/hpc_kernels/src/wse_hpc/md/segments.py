"""The MD shell's steps after its set-up: segments of whole neighbour-list lifetimes, each
checked as it runs and adapted when it ends, so that the run's plan (its list cadence, list
builds and re-plans, and so its price) follows from the trajectory alone, never from how
often the run reports (hunt 81: the cadence was adapted at each thermo row, so `--thermo-every
10` doubled it past any rebuild in 1,000 steps where `--thermo-every 100` rebuilt 8 times,
overflowed the crystal's list capacity and re-planned it from 97 to 121 candidates: the same
trajectory was priced at 1.338e5 and 1.184e5 timesteps/s).

Contract: `advance(run, fixed, key, row_fn, emit_fn)` runs `fixed.config.steps` steps from
`run.state` (a `Progress`, the shell's record, updated in place) and returns the steps done. A
segment starts right after a list build (or the run's first lists, age 0) and ends with the
build that closes its k-th lifetime: k x every steps, k = ceil(MIN_CHECK_STEPS / every), cut at
the run's last step. Inside it the steps run in chunks (`Runner.chunk`, the number of steps an
argument: one program for every length) that end at the thermo rows (the steps
`config.first_step + at` that are multiples of `thermo_every`, and the last step, as LAMMPS's
thermo output after read_restart; `at` counts from 0 in the run), at the segment's end and
around each rebuild step: a lifetime's other steps run in the program without the rebuild
(`Runner.kept_fits`), its rebuild step in the one with it (`_chunk_steps`), so a step's
program, and so its rounding, never depends on where a row falls. An overflow (a build's, seen
after any chunk) re-plans from the segment's start (`replan`). At a row and at the segment's
end: the row (`row_fn`, which stops a blown-up run before anything else), and one fabric
reduction (`drift_fn`) checks that no atom moved more than skin / 2 from its build position
while its lists were in use; if one did, the segment runs again from its start at half the
cadence (`Progress.reruns`). A check that passes means right rows: a row step's row is handed
on then (`emit_fn(row, state)`), once: a segment run again after some of its rows were handed
on recomputes them (equal to rounding, its lists were right there) and hands on only the rest.
When a segment ends, its builds are counted and the cadence doubles (at most MAX_REBUILD_EVERY)
if every atom stayed within a quarter of the skin over the whole segment. Segment boundaries,
reruns, builds and re-plans depend on the cadence and the atoms only. The full-window kernel
(no lists; past LIST_BUDGET_BYTES) has no cadence: its segments are one chunk, to the next row,
and an overflow re-plans from the chunk's start.

`replan(fixed, state, plan, replans, seen)` re-maps a state and plans a wider window (below);
`placed_drift` and `no_drift` give a state's lists a placed, zero displacement record.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from wse_core.errors import SramBudgetError
from wse_core.hw.wafer import Wafer

from wse_hpc.md import mapping
from wse_hpc.md.config import MdConfig
from wse_hpc.md.eam import EamPlan, geometry, sram_plan
from wse_hpc.md.neighbour_plan import Margins, plan_window
from wse_hpc.md.potentials import EamPotential
from wse_hpc.md.runners import Runner, runner_for
from wse_hpc.md.state import Atoms, MdState
from wse_hpc.md.thermo import ThermoRow

__all__ = [
    "MAX_REBUILD_EVERY",
    "MIN_CHECK_STEPS",
    "Progress",
    "RunFixed",
    "advance",
    "replan",
    "placed_drift",
    "no_drift",
]

MAX_REBUILD_EVERY = 1024  # steps per list rebuild, at most (the shell's doubling stops there)
# steps a segment spans at least (whole list lifetimes): each chunk end is a host round trip
# (a row gathered, one fabric reduction); MdConfig's default thermo interval, the cadence at
# which the shell checked before hunt 81, so a short cadence costs no more round trips
MIN_CHECK_STEPS = 100


class RunFixed(NamedTuple):
    """What a run keeps from its start to its end: a re-plan's context."""

    wafer: Wafer
    pot: EamPotential
    config: MdConfig
    masses: np.ndarray
    box: np.ndarray
    tile: tuple[int, int]
    runners: dict | None
    images: np.ndarray  # (n, 3) int64, the boxes from the placed positions to the unwrapped
    # ones: `replan` adds what its `rewrap` moved, in place, so the frames' flags never jump


@dataclasses.dataclass
class Progress:
    """The run's record from segment to segment: the committed state and the plan it runs
    on, and the counts the result reports (`advance` updates it in place)."""

    state: MdState
    runner: Runner
    plan: EamPlan
    sram: dict[str, int]
    seen: list[np.ndarray]  # the overflowed states, gathered: their counts size each re-plan
    replans: int = 0
    builds: int = 0  # list builds in committed segments (LAMMPS: "Neighbor list builds")
    reruns: int = 0  # segments run again at half the cadence
    loop_s: float = 0.0  # the timed steps (a segment run again counts: it ran)
    compile_s: float = 0.0


RowFn = Callable[[int, MdState], ThermoRow]
EmitFn = Callable[[ThermoRow, MdState], None]


def advance(run: Progress, fixed: RunFixed, key: jax.Array, row_fn: RowFn, emit_fn: EmitFn) -> int:
    """Run `fixed.config.steps` steps from `run.state` in checked segments (module doc);
    `row_fn(step, state)` the row of a checked chunk's end (raising for a blown-up run),
    `emit_fn(row, state)` hands on a thermo row once its chunk passed. Returns steps done."""
    config, geo = fixed.config, geometry(fixed.wafer)
    done, shown = 0, 0  # the steps committed; the last step whose row was handed on
    while done < config.steps:
        start = run.state
        end = min(done + _segment_steps(start, config, done), config.steps)
        at, state, moved_A = done, start, 0.0
        while at < end:
            n, kept = _chunk_steps(run.runner, state, min(_next_row(at, config), end) - at)
            args = (state, geo, key, jnp.int32(at), jnp.int32(n))
            t_c = time.perf_counter()
            compiled = run.runner.chunk(*args, kept=kept)
            t_r = time.perf_counter()
            run.compile_s += t_r - t_c
            new, ran = compiled(*args)
            ran, over = int(ran), bool(new.eam.overflow)
            checked = at + ran == end or _on_row(at + ran, config)
            if over or checked:
                row = row_fn(at + ran, new)  # a blown-up chunk stops here, never re-planned
            if over:
                _replan_from(run, fixed, start, new)
                break
            moved_A = _moved_A(run.runner, new) if checked else moved_A
            run.loop_s += time.perf_counter() - t_r
            if not moved_A <= 0.5 * config.skin_A:  # NaN too (hunt 76)
                _rerun(run, start)
                break
            state, at = new, at + ran
            if checked and at > shown and (_on_row(at, config) or at == config.steps):
                emit_fn(row, state)
                shown = at
        else:
            run.state, done = _closed(run, state, moved_A, config.skin_A), end
    return done


def _chunk_steps(runner: Runner, state: MdState, limit: int) -> tuple[int, bool]:
    """(steps, kept) of the next chunk from `state`, at most `limit`: a list lifetime's steps
    before its rebuild in the program without the rebuild (`Runner.kept_fits`), its rebuild
    step alone in the program with it, so that which program runs a step depends on the
    step's place in its lifetime only (the two programs agree to rounding, not always bit
    for bit: 256 Cu atoms in fp32 were 2.4e-7 eV apart at step 100 when a thermo row decided
    it); a cadence of 1 (no step keeps its lists) and the full-window kernel: one program."""
    if state.nbrs is None or int(state.nbrs.every) == 1:
        return limit, False
    due = int(state.nbrs.every) - int(state.nbrs.age)  # the due-th step from here rebuilds
    if due <= 1:
        return 1, False
    n = min(due - 1, limit)
    return n, runner.kept_fits(n, state)


def _segment_steps(state: MdState, config: MdConfig, done: int) -> int:
    """Steps from `state` (at step `done`) to its segment's end: whole list lifetimes, at
    least MIN_CHECK_STEPS; without lists, to the next row."""
    if state.nbrs is None:
        return _next_row(done, config) - done
    every, age = int(state.nbrs.every), int(state.nbrs.age)
    return -(-MIN_CHECK_STEPS // every) * every - age


def _on_row(at: int, config: MdConfig) -> bool:
    """Whether the run's step `at` is a thermo row's: its step first_step + at a multiple of
    thermo_every (the last step's is `advance`'s)."""
    return (int(config.first_step or 0) + at) % config.thermo_every == 0


def _next_row(at: int, config: MdConfig) -> int:
    """The first thermo row after the run's step `at` (module docstring), in the run's steps."""
    first, every = int(config.first_step or 0), config.thermo_every
    return min(((first + at) // every + 1) * every - first, config.steps)


def _moved_A(runner: Runner, state: MdState) -> float:
    """The largest displacement (A) of any atom from its build position while the segment's
    lists were in use (one fabric max reduction, `drift_fn`); 0 without lists."""
    return 0.0 if state.nbrs is None else float(runner.drift(state.nbrs)) ** 0.5


def _rerun(run: Progress, start: MdState) -> None:
    """The segment from `start` again at half its cadence (every = 1 rebuilds each step)."""
    shorter = jnp.int32(max(1, int(start.nbrs.every) // 2))
    run.state = start._replace(nbrs=start.nbrs._replace(every=shorter))
    run.reruns += 1


def _closed(run: Progress, state: MdState, moved_A: float, skin_A: float) -> MdState:
    """The state a segment ends with: its builds counted, its cadence doubled when every
    atom stayed within skin / 4 of its build positions, its displacement record cleared."""
    if state.nbrs is None:
        return state
    run.builds += int(state.nbrs.builds)
    every = int(state.nbrs.every)
    if moved_A < 0.25 * skin_A:
        every = min(2 * every, MAX_REBUILD_EVERY)
    drift2 = no_drift(run.runner.wafer, state.nbrs.drift2.dtype)
    nbrs = state.nbrs._replace(builds=jnp.int32(0), every=jnp.int32(every), drift2=drift2)
    return state._replace(nbrs=nbrs)


def _replan_from(run: Progress, fixed: RunFixed, start: MdState, overflowed: MdState) -> None:
    """Re-plan from the segment's `start` for the state that overflowed (`replan`)."""
    run.replans += 1
    run.seen.append(fixed.wafer.gather(overflowed.atoms.record()))
    new = replan(fixed, start, run.plan, run.replans, run.seen)
    run.state, run.runner, run.plan, run.sram = new


def placed_drift(runner: Runner, state: MdState) -> MdState:
    """`state` with its lists' displacement record a placed field (as each step leaves it;
    `init_fn` makes it a constant, which jit may lay out otherwise); `drift_fn` compiled
    here, with the set-up (at its first use it took 0.33 s of 4,000 atoms' timed steps)."""
    if state.nbrs is None:
        return state
    nbrs = state.nbrs._replace(drift2=no_drift(runner.wafer, state.nbrs.drift2.dtype))
    jax.block_until_ready(runner.drift(nbrs))
    return state._replace(nbrs=nbrs)


def no_drift(wafer: Wafer, dtype) -> jax.Array:
    """The lists' displacement record, zero on every PE, placed from the host: `wafer.zeros`
    jits its filler, ~0.3 s of a warm start's time to its first step (32,000 atoms)."""
    return wafer.place(np.zeros((wafer.rows, wafer.cols), dtype))


def replan(fixed: RunFixed, state: MdState, plan, replans: int, seen: list[np.ndarray]):
    """Re-map `state`, widen the window by at least one PE and give the neighbour lists' row
    offsets more headroom and one more spare row offset (both grow with every re-plan, so
    re-plans end); the bath carries over. `seen`: the states (gathered, each on its own map)
    that overflowed in this run so far, the last this one's: the window covers them and every
    capacity holds their counts with the plan's headroom (`Margins.seen`), so no re-plan
    gives back what an earlier one measured (Cu at 1600 K, 32,000 atoms: M 97 from the
    crystal, 115 in reach at step 21; a re-plan for the window at step 42 planned M from the
    start state alone, 97 again, and overflowed once more). The total M (the work of every
    force evaluation) gets the extra headroom only from the third re-plan on: an atom's total
    is measured, and fluctuates less than a row offset's count. Returns (state, runner,
    plan, sram)."""
    wafer, pot, config, masses, box, tile, runners, images = fixed
    grown = replans > 2 or not plan.caps
    st = wafer.gather(state.atoms.record())
    u = mapping.unpack(st, int((st[..., mapping.SPECIES] >= 0).sum()))
    grid, pos = (wafer.rows, wafer.cols), mapping.rewrap(u["positions_A"], box)
    images += np.rint((u["positions_A"] - pos) / box).astype(np.int64)  # what rewrap moved
    state_np = mapping.pack(
        mapping.initial_map(pos, grid, box, tile),
        pos,
        u["species"],
        u["velocities_A_ps"],
        u["forces_eV_A"],
        dtype=np.dtype(config.dtype),
    )
    wider, same = (plan.k_rows + 1, plan.k_cols + 1), (plan.k_rows, plan.k_cols)
    tries = [(wider, 0.5 * replans), (wider, 0.0), (same, 0.0)]  # the first that fits SRAM
    for i, (at_least, more) in enumerate(tries):  # (caps come from this state's own counts)
        extra = more if grown else 0.0
        margins = Margins(at_least, more, extra, spare_rows=1 + replans, seen=tuple(seen))
        new_plan = plan_window(state_np, box, pot, config, wafer, margins)
        try:
            sram = sram_plan(wafer, pot, new_plan)
            break
        except SramBudgetError:
            if i == len(tries) - 1:
                raise
    runner = runner_for(wafer, pot, new_plan, config, masses, len(u["species"]), runners)
    new = runner.init(jax.tree.map(wafer.place, Atoms.of(state_np)), geometry(wafer))
    return placed_drift(runner, new._replace(bath=state.bath)), runner, new_plan, sram
