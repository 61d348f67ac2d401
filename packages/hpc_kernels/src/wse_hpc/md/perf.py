"""The predicted wafer time of one EAM timestep, priced by mechanism from the plan the
emulation runs.

Contract: `step_phases(wafer, pot, plan, rebuild_every=..., check_every=...) -> Phases`
counts, on the busiest PE, what one velocity-Verlet step of the neighbour-list kernel
(`wse_hpc.md.neighbours`, stepped by `wse_hpc.md.integrate`) executes for `plan` (`EamPlan`:
window k_rows x k_cols, candidate capacities `caps`, dtype), and `predict(spec, wafer, pot,
plan, ...)` evaluates it with `wse_core.cost.perf.PerfModel` into a `wse_core.RunReport` (units
"step"), whose `cycles_by_mechanism()` splits it by mechanism. Nothing is fitted here: the
constants are wse_core's (`wse_core.cost.mechanisms`).

What is counted, per step (the instruction tables are `wse_hpc.md.pe_program`'s; vectors
of M = `caps[-1]` candidates, every list slot evaluated and masked, as the kernel does):
- `integrate`: two half kicks, the drift, the force store and the PE's own displacement
  check (|x - x_build|^2 and its running maximum): no fabric; scalar instructions, three
  components each (`pe_program.scalar_count`), not length-3 DSDs.
- `density`: the window multicast of positions (X stage: row windows E and W over k_cols;
  Y stage: `depth` marching steps N and S of the (2 k_cols + 1)-wide row windows), each
  word received on the PE's ramp; per candidate the pair geometry, once (1/r by Newton
  iterations, `pe_program.RSQRT`), the density spline and its slope.
- `embed`: F(rho) and F'(rho) per atom, as scalar instructions (no DSD set-up).
- `force`: the F' multicast (1 word); per candidate the pair spline z2r, psi', the force,
  pair energy and virial sums with the geometry phase 1 kept (not computed again).
- `rebuild` (1 / `rebuild_every` times per step): the swap sweep (four odd-even
  transposition phases, `eam.sort_fn`), the list build (the whole window multicast of x,
  y, z, species; per window slot the geometry and reach test; the compaction into M
  candidates) and its coverage test (`eam.window_overflow`: fabric reductions and
  doubling shifts).
- `check` (1 / `check_every` times per step): one wafer-wide max reduction of the PEs'
  displacement records (`neighbours.drift_fn`; Luczynski et al.'s allreduce,
  `wse_core.cost.collectives.allreduce_2d`): the shell's check once per chunk of steps. No
  reduction runs every step.

Task activations: one per fabric operation a PE receives (each multicast stage, each
marching step in each direction) and one per compute phase. Fabric words per link
direction and hops come from the traced ledger of the real functions (`fabric.count` /
`wafer.traffic.scope()` over `neighbours.neighbour_fns` and `eam.sort_fn`); every word a
multicast brings also crosses the PE's ramp to its core ("ramp": the words of all four
directions). `fold` then applies the fold placement: each periodic ring (a PE row or
column) is cut in two and laid interleaved, one half reversed, so ring neighbours are 1-2
physical hops apart (no wafer-long wrap link). A logical neighbour is then 2 physical hops
away (latency x 2), and a logical shift east moves half the PEs' words physically east and
half west: when the multicast runs both ways at once each physical direction carries the
words of both (words per direction E = W = logical E + W, N = S = logical N + S).

SRAM: every DSD element reads two 32-bit operands and writes one (an upper bound; the
datapath, not the memory ports, bounds these vectors).

A run's report is `run_md(...).report` (`run_report`, built from the `MdResult`'s own plan).
Per PE (`pe_trace(res, res.report)`, `wse hpc md --trace FILE`): the plan has one candidate
capacity M for every PE (each evaluates all M slots, masked), so every PE that holds an atom
does the busiest PE's step and an empty PE none; the regions are the atoms' grid and the
(2 k_rows + 1) x (2 k_cols + 1) window of its middle PE.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from wse_core.cost.collectives import allreduce_2d
from wse_core.cost.perf import Op, Phase, Phases, Work, serial
from wse_core.cost.report import RunReport
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region
from wse_core.hw.traffic import Traffic
from wse_core.hw.wafer import Wafer
from wse_core.trace import PeTrace, trace_from

from wse_hpc.md import mapping
from wse_hpc.md.config import MdConfig
from wse_hpc.md.eam import EamPlan, eam, geometry
from wse_hpc.md.mapping import NFIELDS
from wse_hpc.md.neighbour_plan import plan_window
from wse_hpc.md.neighbours import neighbour_fns
from wse_hpc.md.pe_program import (
    BUILD_SLOT,
    DENSITY,
    EMBED,
    FORCE,
    INTEGRATE,
    INTEGRATE_SCALAR,
    PAIR_GEOMETRY,
    SLOPE,
    SWAP,
    ops,
    scalar_count,
)
from wse_hpc.md.potentials import EamPotential
from wse_hpc.md.state import Atoms

__all__ = [
    "FOLD_HOPS",
    "CHECK_EVERY",
    "ASSUMPTIONS",
    "candidates",
    "step_phases",
    "fabric_counts",
    "fold",
    "predict",
    "run_report",
    "pe_trace",
]

FOLD_HOPS = 2.0  # physical hops per logical ring link under the fold placement
CHECK_EVERY = 100  # steps per displacement check (the shell's chunk: thermo_every's default)
ASSUMPTIONS = {
    "md.candidates": "every list slot (M = the plan's capacity) is evaluated and masked, "
    "as the kernel does; SIMD lanes do not skip empty slots",
    "md.round": "round, floor and float->int are priced as one 'convert' each",
    "md.compare": "a comparison is priced as a subtract (its sign is the mask)",
    "md.gather": "an indexed load (a candidate's value out of a received slab, a spline "
    "coefficient at a pair's knot) is a move at the worst stride: one element per cycle",
    "md.rsqrt": "1/r by 3 Newton iterations from a bit-trick seed on the FMAC datapath "
    "(fp32 precision); no square root, no division per pair",
    "md.geometry": "the pair geometry of phase 1 is kept in SRAM and reused by phase 2",
    "md.sram": "each DSD element reads two 32-bit operands and writes one",
    "md.fold": "fold placement on both periodic axes: 2 physical hops per logical link, "
    "E and W (N and S) words share both physical directions",
    "md.ramp": "every word of a multicast a PE receives crosses its ramp to the core",
    "md.tasks": "one task activation per fabric operation received and per compute phase",
    "md.overlap": "the systolic march overlaps the pair arithmetic of each phase",
}


def candidates(plan: EamPlan) -> int:
    """Pair evaluations per PE per phase: the list capacity M, or every window slot but the
    PE itself without lists (the full-window kernel)."""
    return int(plan.caps[-1]) if plan.caps else plan.window_pes - 1


def _sram(ops: Sequence[Op]) -> dict[str, float]:
    elems = sum(op.count * op.length for op in ops)
    return {"sram_read_bytes": 8.0 * elems, "sram_write_bytes": 4.0 * elems}


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


def fold(traffic: Traffic) -> Traffic:
    """The fold placement's traffic (see the module docstring): opposite directions share
    both physical links of an axis, and every hop is FOLD_HOPS physical hops."""
    ln = traffic.links
    ew, ns = ln.get("E", 0.0) + ln.get("W", 0.0), ln.get("N", 0.0) + ln.get("S", 0.0)
    links = {d: v for d, v in (("E", ew), ("W", ew), ("N", ns), ("S", ns)) if v}
    if ew + ns:  # every word the PE receives crosses its ramp
        links["ramp"] = ew + ns + ln.get("ramp", 0.0)
    return Traffic(
        traffic.op,
        traffic.words,
        traffic.word_hops * FOLD_HOPS,
        traffic.max_words_per_pe,
        traffic.latency_hops * FOLD_HOPS,
        traffic.count,
        links,
        traffic.relay_stages,
    )


def _chain(entries: Sequence[Traffic]) -> Traffic:
    """Sum of ledger entries where two consecutive entries of one op in opposite directions
    (multicast E / W, shift S / N) run at once: their latency is the larger, not the sum."""
    opposite = {"E": "W", "W": "E", "N": "S", "S": "N"}
    total, i = Traffic(), 0
    while i < len(entries):
        e = entries[i]
        nxt = entries[i + 1] if i + 1 < len(entries) else None
        if nxt is not None and nxt.op[:-1] == e.op[:-1] and opposite.get(e.op[-1]) == nxt.op[-1]:
            both = e + nxt
            lat = max(e.latency_hops, nxt.latency_hops)
            total = total + Traffic(both.op, both.words, both.word_hops, both.max_words_per_pe,
                                    lat, both.count, both.links, both.relay_stages)  # fmt: skip
            i += 2
        else:
            total, i = total + e, i + 1
    return total


def _traced(wafer: Wafer, fn, *args) -> list[Traffic]:
    with wafer.traffic.scope() as entries:
        jax.eval_shape(fn, *args)
    return list(entries)


def fabric_counts(wafer: Wafer, pot: EamPotential, plan: EamPlan) -> dict[str, Traffic]:
    """Per part of a step, the ledger of the real functions traced abstractly (no field is
    allocated): 'density' and 'force' (the two window multicasts of `forces_fn`), 'swaps'
    (`sort_fn`) and 'build' (`build_fn` with its coverage test); unfolded. (The step's
    displacement check moves nothing; the shell's `drift_fn` is priced as a collective.)"""
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
        "density": _chain(forces[:half]),
        "force": _chain(forces[half:]),
        "swaps": _chain(_traced(wafer, eam(wafer, pot, plan).sort_fn, state, geo)),
        "build": _chain(build),
    }


def _dtype(plan: EamPlan) -> str:
    return "fp32" if jnp.dtype(plan.dtype).itemsize <= 4 else "fp64"


def step_phases(
    wafer: Wafer,
    pot: EamPotential,
    plan: EamPlan,
    *,
    rebuild_every: float,
    check_every: float = CHECK_EVERY,
    traffic: Mapping[str, Traffic] | None = None,
    spec: WaferSpec | None = None,
) -> Phases:
    """The phases of one timestep on the busiest PE (see the module docstring);
    `rebuild_every`: steps per list rebuild (>= 1); `check_every`: steps per displacement
    check (>= 1); `traffic`: `fabric_counts` if known; `spec`: the constants that pick the
    check's reduction (default the wafer's)."""
    if not plan.caps:
        raise ValueError("step_phases prices the neighbour-list kernel: the plan needs caps")
    if not (rebuild_every >= 1 and check_every >= 1):
        raise ValueError(f"cadences must be >= 1 step, got {rebuild_every}, {check_every}")
    dt = "fp32"  # no fp64 datapath on the PE: an fp64 emulation is priced as fp32
    t = {k: fold(v) for k, v in (traffic or fabric_counts(wafer, pot, plan)).items()}
    m, ne = candidates(plan), len(pot.elements)
    # per-atom work as scalar instructions (pe_program.scalar_count)
    verlet = Work(scalar_instructions=scalar_count(INTEGRATE, 3) + scalar_count(INTEGRATE_SCALAR))
    # with several elements rho_i' is a second slope, from the other table's coefficients
    slopes = ops(SLOPE, m, dt, count=1 if ne == 1 else 2) + ops({"gather": 4 * (ne > 1)}, m, dt)
    density = ops(PAIR_GEOMETRY, m, dt) + ops(DENSITY, m, dt) + slopes
    width, offsets = 2 * plan.k_cols + 1, 2 * plan.k_rows + 1
    swaps = ops(SWAP, 1, dt, count=4) + ops({"move": 2}, NFIELDS, dt, count=4)
    build = (
        ops(BUILD_SLOT, width, dt, count=offsets)
        + ops({"move": 2}, m, dt)  # compaction: slot and species of each candidate
    )
    extremes = Work(scalar_instructions=3.0 * t["build"].count)  # coverage: 2 max, 1 add
    check = allreduce_2d(spec or wafer.spec, wafer.rows, wafer.cols, 1.0)
    return serial(
        Phase("integrate", _work(()) + verlet),
        Phase("density", _work(density, t["density"])),
        Phase("embed", _work(()) + Work(scalar_instructions=scalar_count(EMBED))),
        Phase("force", _work(ops(FORCE, m, dt), t["force"])),
        serial(
            Phase("swaps", _work(swaps, t["swaps"], tasks=0.0)),
            Phase("build", _work(build, t["build"]) + extremes),
            name="rebuild",
            repeat=1.0 / rebuild_every,
        ),
        Phase("check", check + Work(scalar_instructions=1.0), repeat=1.0 / check_every),
        name="step",
    )


def predict(
    spec: WaferSpec,
    wafer: Wafer,
    pot: EamPotential,
    plan: EamPlan,
    *,
    rebuild_every: float,
    check_every: float = CHECK_EVERY,
    measured_wall_s: float | None = None,
    sram: Mapping[str, int] | None = None,
    assumptions: Mapping[str, str] | None = None,
    extra: Mapping[str, object] | None = None,
) -> RunReport:
    """The `RunReport` of one timestep of `plan` on `spec` (`wafer`: the emulated PE grid,
    or one planned abstractly); `measured_wall_s`: the emulator's wall time per step.
    `extra` carries the window, candidates, words per step and predicted timesteps/s."""
    counts = fabric_counts(wafer, pot, plan)
    phases = step_phases(
        wafer,
        pot,
        plan,
        rebuild_every=rebuild_every,
        check_every=check_every,
        traffic=counts,
        spec=spec,
    )
    every = counts["density"] + counts["force"]
    rebuild = counts["swaps"] + counts["build"]
    traffic = every + rebuild.scaled(1.0 / rebuild_every)
    words = fold(traffic).links
    figures = {
        "grid": f"{wafer.rows}x{wafer.cols}",
        "window": f"{2 * plan.k_rows + 1}x{2 * plan.k_cols + 1}",
        "candidates": candidates(plan),
        "rebuild_every": rebuild_every,
        "check_every": check_every,
        "words_per_step": float(traffic.max_words_per_pe),
        "link_words_per_step": dict(words),
    }
    return RunReport.build(
        "md.step",
        spec,
        phases,
        measured_wall_s=measured_wall_s,
        traffic=traffic,
        sram=sram,
        units="step",
        assumptions={
            **ASSUMPTIONS,
            "md.rebuild": f"neighbour lists rebuilt (with a swap sweep) every "
            f"{rebuild_every:.3g} steps; the displacements checked (one wafer-wide "
            f"reduction) every {check_every:.3g} steps",
            **dict(assumptions or {}),
        },
        extra=lambda t: {**figures, "timesteps_per_s": t.per_s, **dict(extra or {})},
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
        rebuild_every=max(every, 1.0),
        measured_wall_s=res.loop_wall_s / res.steps if res.steps else None,
        sram=res.sram,
        assumptions=note,
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
