"""The predicted wafer time of one EAM timestep, priced by mechanism as the published PE
program runs it (`wse_hpc.md.pe_program`), on the plan the emulation runs.

Contract: `step_phases(wafer, pot, plan, rebuild_every=..., hits=...) -> Phases` counts, on
the busiest PE, what one step of the published program executes for `plan` (`EamPlan`:
window k_rows x k_cols, candidate capacities `caps`) with `hits` neighbours within the
cutoff on that PE (default: the plan's capacity M, an upper bound: cutoff + skin), and
`predict(spec, wafer, pot, plan, ...)` evaluates it with `wse_core.cost.perf.PerfModel`
into a `wse_core.RunReport` (units "step"; `Measured`: what an emulated run measured, shown
beside the prediction), whose `cycles_by_mechanism()` splits it by
mechanism. Nothing is fitted here: the constants are wse_core's
(`wse_core.cost.mechanisms`). Precision: the figure prices the published fp32 program; an
fp64 run (the host emulator's) is priced as it, and the report says so (`wafer_plan`,
`md.precision`, `extra["wafer_precision"]`): the PE has no fp64 datapath.

What is counted, per step (the instruction tables are `pe_program`'s: the source Cerebras
released with Santos et al.; N_c = the window's candidates, (2 k_rows + 1)(2 k_cols + 1) - 1;
N_h = `hits`):
- `integrate`: the drift and the kick, scalar instructions (`ATOM_SCALAR`).
- `density`: the window multicast of positions (X stage: row windows E and W over k_cols;
  Y stage: `depth` marching steps N and S of the (2 k_cols + 1)-wide row windows), each
  word received on the PE's ramp; the candidate filter EVERY step (3 DSDs over N_c at the
  payload's stride, a scalar loop over N_c, the hits' compaction), 1/r (scalar loop), the
  spline coordinate and the coefficient lookups (scalar loops over N_h), rho, its sum, rho'
  and phi' (DSDs over N_h).
- `embed`: F'(rho-bar), scalar.
- `force`: the F' multicast (1 word); f = phi' + rho' F'_i, f / r and the three force sums
  (DSDs over N_h), the neighbours' F' by slot index (a scalar loop over N_h).
- `swaps` (1 / `rebuild_every` times per step): the paper's atom swaps (four odd-even
  transposition phases, `eam.sort_fn`), which the released source does not hold: priced
  as the emulator runs them, at its list cadence. No list build, coverage test or
  displacement check is priced: the published step filters its whole window every step.
- a thermostat's work as the emulator runs it (the released source is NVE):
  `thermostat_perf.bath_phases`, named in the report's `md.thermostat`.

Task activations: one per fabric operation a PE receives (each multicast stage, each
marching step in each direction) and one per compute phase. Fabric words per link
direction and hops come from the traced ledger of the real functions (`fabric.count` /
`wafer.traffic.scope()` over `neighbours.neighbour_fns` and `eam.sort_fn`); every word a
multicast brings also crosses the PE's ramp to its core ("ramp": the words of all four
directions). `fold_walk` then applies the fold placement: each periodic ring (a PE row or
column) is cut in two and laid interleaved, one half reversed, so ring neighbours are 1-2
physical hops apart (no wafer-long wrap link). A chain of k logical links is then the
slowest run between ring PEs up to k apart, up to 2k physical links, each at its own hops
(`wse_core.fabric.ledger.on_mesh`; 2k without dead PEs), and a logical shift east moves
half the PEs' words physically east and half west: when the multicast runs both ways at
once each physical direction carries the words of both (words per direction E = W =
logical E + W, N = S = logical N + S).

SRAM: each DSD element reads its `Op.reads` vector operands and writes `mem_writes` (32-bit
words); each instruction is also bounded by its own ports (`Op.bounds`).

A run's report is `run_md(...).report` (`run_report`, built from the `MdResult`'s own plan).
Per PE (`pe_trace(res, res.report)`, `wse hpc md --trace FILE`): every PE that holds an atom
is priced as the busiest PE's step (N_h hits) and an empty PE none; the regions are the
atoms' grid and the (2 k_rows + 1) x (2 k_cols + 1) window of its middle PE.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from wse_core.cost.perf import Op, Phase, Phases, Work, serial
from wse_core.cost.report import Measured, RunReport
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region
from wse_core.hw.traffic import Traffic
from wse_core.hw.wafer import Wafer
from wse_core.trace import PeTrace, trace_from

from wse_hpc.md import mapping
from wse_hpc.md.config import MdConfig
from wse_hpc.md.eam import EamPlan, eam, geometry
from wse_hpc.md.fold_traffic import FOLD_HOPS, chain, fold, fold_walk
from wse_hpc.md.integrate import Thermostat
from wse_hpc.md.mapping import NFIELDS
from wse_hpc.md.neighbour_plan import plan_window
from wse_hpc.md.neighbours import neighbour_fns
from wse_hpc.md.pe_program import (
    ATOM_SCALAR,
    CANDIDATE_SCALAR,
    DENSITY_DSDS,
    FORCE_DSDS,
    HIT_SCALAR,
    SWAP,
    candidate_ops,
    pair_ops,
    scalar_count,
)
from wse_hpc.md.potentials import EamPotential
from wse_hpc.md.state import Atoms
from wse_hpc.md.thermostat_perf import bath_assumption, bath_phases

__all__ = [
    "FOLD_HOPS",
    "ASSUMPTIONS",
    "candidates",
    "window_candidates",
    "slots_assumption",
    "step_phases",
    "fabric_counts",
    "fabric_entries",
    "fold",
    "Measured",
    "Lists",
    "predict",
    "run_report",
    "pe_trace",
    "precision_assumption",
    "wafer_plan",
]

ASSUMPTIONS = {
    "md.program": "the PE program Cerebras released with Santos et al. (Tungsten EAM source): "
    "the window's candidates filtered every step, vectors over the hits within the cutoff",
    "md.hits": "N_h, the busiest PE's neighbours within the cutoff, sets every vector's length",
    "md.loops": "a forall with one vector statement is one DSD; one whose body holds several "
    "statements or scalar temporaries is a loop of scalar instructions, one per operation "
    "(a word copied or loaded by index: one)",
    "md.fold": "fold placement on both periodic axes: 2 physical hops per logical link, "
    "E and W (N and S) words share both physical directions",
    "md.ramp": "every word of a multicast a PE receives crosses its ramp to the core",
    "md.detours": "dead PEs' detours on each chain walked on its folded ring: a chain of k "
    "logical links at the most physical hops between two ring PEs up to k apart on any row "
    "or column of the grid, each link at its own hops (wse_core.fabric.ledger.on_mesh), so a "
    "detour is paid once",
    "md.tasks": "one task activation per fabric operation received and per compute phase",
    "md.overlap": "the systolic march overlaps the pair arithmetic of each phase",
    "md.swaps": "the paper's atom swaps (not in the released source) run as the emulator's "
    "sort, once per list rebuild cadence",
}


def candidates(plan: EamPlan) -> int:
    """The list capacity M (the most candidates within cutoff + skin of any PE), or every
    window slot but the PE itself without lists: the default N_h, an upper bound."""
    return int(plan.caps[-1]) if plan.caps else plan.window_pes - 1


def slots_assumption(plan: EamPlan) -> str:
    """The report's `md.hits` line when N_h is the list capacity (a run's price, `run_report`):
    the step is priced per list slot, what each PE's program walks, not per neighbour within
    the cutoff (issue 41's model; hunt 81: say so where the figure is printed)."""
    return (
        f"priced per list slot: N_h = M = {candidates(plan)}, the neighbour-list capacity each "
        f"PE's step walks (the most atoms within cutoff + {plan.skin_A:g} A skin of any PE when "
        "the lists were planned, with headroom), not the neighbours within the cutoff, which "
        "are fewer: an upper bound, fixed by the plan"
    )


def window_candidates(plan: EamPlan) -> int:
    """N_c: the window's slots but the PE's own, which the published step filters."""
    return plan.window_pes - 1


def _sram(ops: Sequence[Op]) -> dict[str, float]:
    reads = sum(op.count * op.length * op.reads for op in ops)
    writes = sum(op.count * op.length * op.mem_writes for op in ops)
    return {"sram_read_bytes": 4.0 * reads, "sram_write_bytes": 4.0 * writes}


def _work(ops: Sequence[Op], traffic: Traffic | None = None, tasks: float = 1.0) -> Work:
    """A phase's work: its ops, and with `traffic` (folded) its link words, hops, relay
    stages and one task activation per fabric operation (`tasks`: the compute phase's)."""
    t = traffic or Traffic()
    return Work(
        ops=tuple(ops),
        links=dict(t.links),
        latency_hops=t.latency_hops,
        relay_stages=t.relay_stages,
        task_activations=tasks + t.count,
        **_sram(ops),
    )


def _traced(wafer: Wafer, fn, *args) -> list[Traffic]:
    with wafer.traffic.scope() as entries:
        jax.eval_shape(fn, *args)
    return list(entries)


def fabric_entries(wafer: Wafer, pot: EamPotential, plan: EamPlan) -> dict[str, list[Traffic]]:
    """Per part of a step, the ledger entries of the real functions traced abstractly (no
    field is allocated): 'density' and 'force' (the two window multicasts of `forces_fn`),
    'swaps' (`sort_fn`) and 'build' (`build_fn` with its coverage test: the emulator's,
    traced for the ledger, not priced: the published step has no list build); unfolded."""
    pr, pc = wafer.padded_shape
    dtype = jnp.dtype(plan.dtype)
    state = jax.eval_shape(Atoms.of, jax.ShapeDtypeStruct((pr, pc, NFIELDS), dtype))
    geo = jax.eval_shape(lambda: geometry(wafer))
    lists = neighbour_fns(wafer, pot, plan)
    build = _traced(wafer, lists.build_fn, state, geo)
    nbrs = jax.eval_shape(lists.build_fn, state, geo)[0]
    forces = _traced(wafer, lists.forces_fn, state, geo, nbrs)
    half = len(forces) // 2  # two window_apply of the same shape: positions, then F'
    return {
        "density": forces[:half],
        "force": forces[half:],
        "swaps": _traced(wafer, eam(wafer, pot, plan).sort_fn, state, geo),
        "build": build,
    }


def fabric_counts(wafer: Wafer, pot: EamPotential, plan: EamPlan) -> dict[str, Traffic]:
    """`fabric_entries`, each part's entries summed as they run (`chain`); unfolded."""
    return {k: chain(v) for k, v in fabric_entries(wafer, pot, plan).items()}


def _dtype(plan: EamPlan) -> str:
    return "fp32" if jnp.dtype(plan.dtype).itemsize <= 4 else "fp64"


def wafer_plan(plan: EamPlan) -> EamPlan:
    """The plan the wafer figure prices: `plan` itself, or for an fp64 run the same plan in
    fp32. The PE has no fp64 datapath (`wse_core.hw.simd` prices fp16, bf16 and fp32 only)
    and the published program is fp32; no source gives an fp64 EAM step's cycles, so the
    figure is the fp32 program's, said so (`precision_assumption`), never an fp64 one."""
    return plan if _dtype(plan) == "fp32" else dataclasses.replace(plan, dtype="float32")


def precision_assumption(plan: EamPlan) -> dict[str, str]:
    """The report's `md.precision` line: which program's precision the figure prices."""
    if _dtype(plan) == "fp32":
        return {"md.precision": "fp32, the published program's precision"}
    return {
        "md.precision": "an fp64 run priced as the fp32 program (its instructions and its "
        "fp32 fabric words): the PE has no fp64 datapath and the published program is "
        "fp32, so this is not an fp64 wafer figure; the fp64 arithmetic ran on the host "
        "emulator only (traffic and words_per_step are the emulated fp64 run's, 2 words "
        "per value)"
    }


def step_phases(
    wafer: Wafer,
    pot: EamPotential,
    plan: EamPlan,
    *,
    rebuild_every: float,
    hits: float | None = None,
    traffic: Mapping[str, Sequence[Traffic]] | None = None,
    bath: Sequence[Phase] = (),
) -> Phases:
    """The phases of one timestep on the busiest PE (see the module docstring);
    `rebuild_every`: steps per swap sweep (>= 1); `hits`: N_h (default `candidates(plan)`);
    `traffic`: `fabric_entries` if known; `bath`: a thermostat's (`bath_phases`)."""
    if not rebuild_every >= 1:
        raise ValueError(f"rebuild_every must be >= 1 step, got {rebuild_every}")
    nh = float(candidates(plan) if hits is None else hits)
    nc = float(window_candidates(plan))
    if not 0 <= nh <= max(nc, candidates(plan)):
        raise ValueError(f"hits must be in 0..{max(nc, candidates(plan))}, got {hits}")
    t = {k: fold_walk(wafer, v) for k, v in (traffic or fabric_entries(wafer, pot, plan)).items()}
    per_hit = {k: scalar_count(HIT_SCALAR[k]) for k in HIT_SCALAR}
    density_scalar = nc * scalar_count(CANDIDATE_SCALAR) + nh * (
        per_hit["detect"] + per_hit["invsqrt"] + per_hit["spline_coord"] + per_hit["lookup"]
    )
    density = candidate_ops(nc) + pair_ops(nh, DENSITY_DSDS)
    force_scalar = nh * per_hit["force_gather"] + scalar_count(ATOM_SCALAR["force_init"])
    dt = "fp32"  # the published program's; an fp64 run is priced as it (`wafer_plan`)
    swaps = tuple(Op(k, dt, 1, n * 4) for k, n in SWAP.items()) + (Op("move", dt, NFIELDS, 2 * 4),)
    return serial(
        Phase("integrate", _work(()) + _scalar(ATOM_SCALAR["integrate"])),
        Phase("density", _work(density, t["density"]) + Work(scalar_instructions=density_scalar)),
        Phase("embed", _work(()) + _scalar(ATOM_SCALAR["embed"])),
        Phase("force", _work(pair_ops(nh, FORCE_DSDS), t["force"])
              + Work(scalar_instructions=force_scalar)),
        Phase("swaps", _work(swaps, t["swaps"], tasks=0.0), repeat=1.0 / rebuild_every),
        *bath,
        name="step",
    )  # fmt: skip


def _scalar(table: Mapping[str, float]) -> Work:
    return Work(scalar_instructions=scalar_count(table))


class Lists(NamedTuple):
    """The neighbour lists a step prices: a swap sweep every `rebuild_every` steps (>= 1) and
    N_h hits per atom (`hits`; None: the list capacity, an upper bound)."""

    rebuild_every: float
    hits: float | None = None


def predict(
    spec: WaferSpec,
    wafer: Wafer,
    pot: EamPotential,
    plan: EamPlan,
    *,
    lists: Lists,
    measured: Measured = Measured(),
    assumptions: Mapping[str, str] | None = None,
    thermostat: Thermostat = Thermostat(),
) -> RunReport:
    """The `RunReport` of one timestep of `plan` on `spec` (`wafer`: the emulated PE grid,
    or one planned abstractly); `lists`: the swap cadence and N_h (`step_phases`);
    `measured`: the emulated run's figures, if any; `thermostat`: the run's. `extra` carries
    the window, candidates (N_c), hits (N_h), words per step, the thermostat and predicted
    timesteps/s."""
    rebuild_every, hits = lists
    entries = fabric_entries(wafer, pot, plan)  # the run's own traffic, in its dtype
    counts = {k: chain(v) for k, v in entries.items()}
    priced = wafer_plan(plan)
    wafer_entries = entries if priced is plan else fabric_entries(wafer, pot, priced)
    bath = bath_phases(spec, wafer, thermostat)  # its work added to the step
    phases = step_phases(wafer, pot, plan, rebuild_every=rebuild_every, hits=hits,
                         traffic=wafer_entries, bath=bath)  # fmt: skip
    every = counts["density"] + counts["force"]
    traffic = every + counts["swaps"].scaled(1.0 / rebuild_every)
    words = fold(traffic).links
    figures = {
        "grid": f"{wafer.rows}x{wafer.cols}",
        "window": f"{2 * plan.k_rows + 1}x{2 * plan.k_cols + 1}",
        "candidates": window_candidates(plan),
        "hits": float(candidates(plan) if hits is None else hits),
        "rebuild_every": rebuild_every,
        "thermostat": thermostat.kind,
        "run_precision": _dtype(plan),
        "wafer_precision": _dtype(priced),  # what the predicted rate prices
        "words_per_step": float(traffic.max_words_per_pe),
        "link_words_per_step": dict(words),
    }
    return RunReport.build(
        "md.step",
        spec,
        phases,
        measured_wall_s=measured.wall_s,
        traffic=traffic,
        sram=measured.sram,
        reads=wafer.sram.sized_reads(),  # the reserve decided the fit (hunt 82)
        units="step",
        assumptions={
            **ASSUMPTIONS,
            **precision_assumption(plan),
            "md.rebuild": f"a swap sweep every {rebuild_every:.3g} steps",
            **bath_assumption(spec, wafer, thermostat, phases),
            **({} if hits is not None else {"md.hits": slots_assumption(plan)}),
            **dict(assumptions or {}),
        },
        extra=lambda t: {**figures, "timesteps_per_s": t.per_s},
    )


def run_report(res) -> RunReport:
    """The `RunReport` of an emulated run (`simulate.MdResult`, whose `.report` this is) on
    its wafer's spec: its plan and potential, its measured wall time per step and its
    measured rebuild cadence (steps per list build; the whole run when none happened). A run
    that used the full-window kernel (lists over the host budget) is priced as the list
    algorithm the wafer runs, with capacities planned on the host from its final structure."""
    plan, note, pot = res.plan, {}, res.potential
    if not plan.caps:
        s = res.structure
        grid, pos = (res.wafer.rows, res.wafer.cols), mapping.rewrap(s.positions_A, s.box_A)
        state = mapping.pack(
            mapping.initial_map(pos, grid, s.box_A, res.tile), pos, np.zeros(s.num_atoms, np.int32)
        )
        cfg = MdConfig(skin_A=plan.skin_A or 1.0, dtype=plan.dtype, spec=res.wafer.spec)
        plan = plan_window(state, s.box_A, pot, cfg, res.wafer, host_lists=False)
        note = {"md.lists": "the emulator ran the full-window kernel; lists priced as planned"}
    steps = max(res.steps, 1)
    every = steps / res.list_builds if res.list_builds else float(steps)
    return predict(
        res.wafer.spec,
        res.wafer,
        pot,
        plan,
        lists=Lists(max(every, 1.0)),
        measured=Measured(res.loop_wall_s / res.steps if res.steps else None, res.sram),
        assumptions=note,
        thermostat=res.thermostat,
    )


def pe_trace(res, report: RunReport) -> PeTrace:
    """The per-PE trace of an emulated run (`simulate.MdResult`) and its `report`: its
    wafer's grid, SRAM ledger and dead PEs; every phase on the PEs holding an atom (the
    final structure mapped as `mapping.initial_map` deals it)."""
    s, (rows, cols) = res.structure, res.grid
    pos = mapping.rewrap(s.positions_A, s.box_A)
    occupied = (mapping.initial_map(pos, (rows, cols), s.box_A, res.tile) >= 0).astype(float)
    work = {leaf.name: occupied for leaf, _ in report.phases.leaves()}
    kr, kc = min(res.window[0], (rows - 1) // 2), min(res.window[1], (cols - 1) // 2)
    regions = [
        Region(f"atoms ({s.num_atoms} on {rows} x {cols} PEs)", 0, 0, rows, cols),
        Region(f"window of PE ({rows // 2}, {cols // 2})", rows // 2 - kr, cols // 2 - kc,
               2 * kr + 1, 2 * kc + 1),
    ]  # fmt: skip
    return trace_from(res.wafer, report, per_pe_work=work, regions=regions)
