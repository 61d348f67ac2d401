"""The predicted wafer time of one EAM timestep, priced from the plan the emulation runs.

Contract: `step_phases(wafer, pot, plan, rebuild_every=...) -> Phases` counts, on the busiest
PE, what one velocity-Verlet step of the neighbour-list kernel (`wse_hpc.md.nlist`, stepped
by `wse_hpc.md.integrate.nve`) executes for `plan` (`EamPlan`: window k_rows x k_cols,
candidate capacities `caps`, dtype), and `predict(spec, wafer, pot, plan, ...)` evaluates it
with `wse_core.perf.PerfModel` into a `wse_core.RunReport` (units "step"). Nothing is fitted
here: the one calibration is wse_core's.

What is counted, per step (`Op` = DSD instructions by kind and dtype over a vector length):
- `integrate`: two half kicks (v += dt/2 F / m: scale, multiply by the PE's precomputed
  1/m, add over 3 components), the drift, the force store, and the PE's own displacement
  check (`track_fn`: |x - x_build|^2; no fabric).
- `density`: the window multicast of positions (X stage: row windows E and W over k_cols;
  Y stage: `depth` marching steps N and S of the (2 k_cols + 1)-wide row windows), then per
  candidate (vectors of M = `caps[-1]` elements, every list slot evaluated and masked, as the
  kernel does): the candidate's position fetched (3 moves), the pair geometry (`PAIR_GEOMETRY`:
  displacement, minimum image, r^2, cutoff test, sqrt, knot location) and the density spline
  (4 coefficients, 3 FMAC Horner steps), its slope kept for phase 2, the density sum.
- `embed`: F(rho) and F'(rho) per atom (vectors of length 1: issue cost dominates).
- `force`: the F' multicast (1 word), the geometry again (the kernel recomputes it), the pair
  spline z2r with one reciprocal of r, psi', the force sum, pair energy and virial.
- `rebuild` (repeated 1 / `rebuild_every` times per step): the swap sweep (four odd-even
  transposition phases, `eam.sort_fn`), the list build (the whole window multicast of
  x, y, z, species; per window slot the geometry and cutoff test; the compaction into M
  candidates) and its coverage test (`eam.window_overflow`: fabric reductions and doubling shifts).

Fabric words per link direction and latency hops come from the traced ledger of the real
functions (`fabric.count` / `wafer.traffic.scope()` over `nlist.neighbour_fns` and
`eam.sort_fn`), then `fold` applies the fold placement: each periodic ring (a PE row or
column) is cut in two and laid interleaved, one half reversed, so ring neighbours are 1-2
physical hops apart (no wafer-long wrap link). A logical neighbour is then 2 physical hops
away (latency x 2), and a logical shift east moves half the PEs' words physically east and
half west: when the multicast runs both ways at once each physical direction carries the
words of both (words per direction E = W = logical E + W, N = S = logical N + S). Without
the fold the wrap-around words would cross the whole ring (the same link load, but ~n hops
of latency instead of ~2 k).

SRAM: every DSD element reads two 32-bit operands and writes one (an upper bound; the
datapath, not the memory ports, bounds these vectors).

Per PE (`pe_trace(res, report)`, `wse hpc md --trace FILE`): the plan has one candidate
capacity M for every PE (each evaluates all M slots, masked), so every PE that holds an atom
does the busiest PE's step and an empty PE none; the regions are the atoms' grid and the
(2 k_rows + 1) x (2 k_cols + 1) window of its middle PE.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from wse_core.perf import Op, Phase, Phases, Work, serial
from wse_core.report import RunReport
from wse_core.spec import WaferSpec
from wse_core.sram import Region
from wse_core.trace import PeTrace, trace_from
from wse_core.traffic import Traffic
from wse_core.wafer import Wafer

from wse_hpc.md.eam import EamPlan, eam, geometry
from wse_hpc.md.mapping import NFIELDS
from wse_hpc.md.nlist import neighbour_fns
from wse_hpc.md.potentials import EamPotential
from wse_hpc.md.state import Atoms

__all__ = [
    "PAIR_GEOMETRY",
    "FOLD_HOPS",
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
# DSD ops per candidate of `nlist.pairs` (one per element of each M-vector):
# d = x_j - x_i (3 sub), minimum image d - b round(d / b) (3 mul, 3 round, 3 fmac),
# r^2 (1 mul, 2 fmac), r^2 < c^2 (1 sub), r^2 masked (1 move), sqrt, knot location
# p = r / dr + 1 (fmac), floor (convert), clamp (2 max), p - m (sub), min(p, 1) (max), int.
PAIR_GEOMETRY = {"sub": 5, "mul": 4, "convert": 5, "fmac": 6, "move": 1, "sqrt": 1, "max": 3}
DENSITY = {"move": 3 + 4 + 1, "fmac": 3, "add": 1}  # fetch x, 4 coeffs + value; mask, sum
SLOPE = {"move": 3, "scale": 3, "fmac": 2}  # rho': 3 coeffs, (3 c0 p + 2 c1) p + c2, / dr
# phase 2 per candidate: fetch x (3) and F'_j, the kept slope; z2r: 4 coeffs, value (3
# fmac), 1/r (div), phi = v / r (mul), phi' = (slope - phi) / r (3 scale, 2 fmac, sub,
# mul); psi' = F'_i rho' + F'_j rho' + phi' (scale, fmac, add), mask; psi'/r (mul), the
# force sum (3 fmac), pair energy (mask, add), virial (fmac)
FORCE = {
    "move": 3 + 1 + 1 + 4 + 1 + 1,
    "fmac": 3 + 2 + 1 + 3 + 1,
    "div": 1,
    "mul": 1 + 1 + 1,
    "scale": 3 + 1,
    "sub": 1,
    "add": 1 + 1,
}
# per atom (length 1): F(rho) and F'(rho): locate (fmac, convert, 2 max, sub, max,
# convert), 4 coeffs, slope (3 scale, 2 fmac), value (3 fmac), linear extension (sub, fmac,
# move); the pair energy's 1/2 (scale)
EMBED = {"fmac": 1 + 2 + 3 + 1, "convert": 2, "max": 3, "sub": 2, "move": 4 + 1, "scale": 4}
# per window slot of a build (`list_build.select`): the geometry without sqrt and locate, the
# species and self tests (2 sub), the bit of the slot (shift)
BUILD_SLOT = {"sub": 6, "mul": 4, "convert": 3, "fmac": 5, "shift": 1}
ASSUMPTIONS = {
    "md.candidates": "every list slot (M = the plan's capacity) is evaluated and masked, "
    "as the kernel does; SIMD lanes do not skip empty slots",
    "md.round": "round, floor and float->int are priced as one 'convert' each",
    "md.compare": "a comparison is priced as a subtract (its sign is the mask)",
    "md.gather": "a PE keeps its candidates' values as the slabs pass; fetching one is a move",
    "md.sram": "each DSD element reads two 32-bit operands and writes one",
    "md.fold": "fold placement on both periodic axes: 2 physical hops per logical link, "
    "E and W (N and S) words share both physical directions",
    "md.overlap": "the systolic march overlaps the pair arithmetic of each phase",
}


def candidates(plan: EamPlan) -> int:
    """Pair evaluations per PE per phase: the list capacity M, or every window slot but the
    PE itself without lists (the full-window kernel)."""
    return int(plan.caps[-1]) if plan.caps else plan.window_pes - 1


def _ops(table: Mapping[str, float], length: float, dtype: str, count: float = 1.0):
    return tuple(Op(k, dtype, length, n * count) for k, n in table.items() if n)


def _sram(ops: Sequence[Op]) -> dict[str, float]:
    elems = sum(op.count * op.length for op in ops)
    return {"sram_read_bytes": 8.0 * elems, "sram_write_bytes": 4.0 * elems}


def _work(ops: Sequence[Op], traffic: Traffic | None = None) -> Work:
    t = traffic or Traffic()
    return Work(ops=tuple(ops), links=dict(t.links), latency_hops=t.latency_hops, **_sram(ops))


def fold(traffic: Traffic) -> Traffic:
    """The fold placement's traffic (see the module docstring): opposite directions share
    both physical links of an axis, and every hop is FOLD_HOPS physical hops."""
    ln = traffic.links
    ew, ns = ln.get("E", 0.0) + ln.get("W", 0.0), ln.get("N", 0.0) + ln.get("S", 0.0)
    links = {d: v for d, v in (("E", ew), ("W", ew), ("N", ns), ("S", ns)) if v}
    return Traffic(
        traffic.op,
        traffic.words,
        traffic.word_hops * FOLD_HOPS,
        traffic.max_words_per_pe,
        traffic.latency_hops * FOLD_HOPS,
        traffic.count,
        links,
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
                                    lat, both.count, both.links)  # fmt: skip
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
    (`sort_fn`) and 'build' (`build_fn` with its coverage test); unfolded."""
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
    traffic: Mapping[str, Traffic] | None = None,
) -> Phases:
    """The phases of one timestep on the busiest PE (see the module docstring);
    `rebuild_every`: steps per list rebuild (>= 1); `traffic`: `fabric_counts` if known."""
    if not plan.caps:
        raise ValueError("step_phases prices the neighbour-list kernel: the plan needs caps")
    if not rebuild_every >= 1:
        raise ValueError(f"rebuild_every must be >= 1 step, got {rebuild_every}")
    dt = _dtype(plan)
    if dt == "fp64":  # no fp64 datapath on the PE: the prediction prices fp32
        dt = "fp32"
    t = {k: fold(v) for k, v in (traffic or fabric_counts(wafer, pot, plan)).items()}
    m = candidates(plan)
    verlet = (
        _ops({"scale": 2, "mul": 2, "add": 2}, 3, dt)  # two half kicks (F * 1/m)
        + _ops({"fmac": 1, "move": 1}, 3, dt)  # drift, force store
        + _ops({"sub": 1, "fmac": 1}, 3, dt)  # |x - x_build|^2
        + _ops({"sub": 1}, 1, dt)  # > (skin / 2)^2
    )
    density = _ops(PAIR_GEOMETRY, m, dt) + _ops(DENSITY, m, dt) + _ops(SLOPE, m, dt)
    force = _ops(PAIR_GEOMETRY, m, dt) + _ops(FORCE, m, dt)
    width, offsets = 2 * plan.k_cols + 1, 2 * plan.k_rows + 1
    swaps = _ops({"sub": 2, "move": 2 * NFIELDS}, 1, dt, count=4)  # 4 odd-even phases
    build = (
        _ops(BUILD_SLOT, width, dt, count=offsets)
        + _ops({"move": 2}, m, dt)  # compaction: slot and species of each candidate
        + _ops({"max": 2, "add": 1}, 1, dt, count=t["build"].count)  # coverage extremes
    )
    return serial(
        Phase("integrate", _work(verlet)),
        Phase("density", _work(density, t["density"])),
        Phase("embed", _work(_ops(EMBED, 1, dt))),
        Phase("force", _work(force, t["force"])),
        serial(
            Phase("swaps", _work(swaps, t["swaps"])),
            Phase("build", _work(build, t["build"])),
            name="rebuild",
            repeat=1.0 / rebuild_every,
        ),
        name="step",
    )


def predict(
    spec: WaferSpec,
    wafer: Wafer,
    pot: EamPotential,
    plan: EamPlan,
    *,
    rebuild_every: float,
    measured_wall_s: float | None = None,
    sram: Mapping[str, int] | None = None,
    assumptions: Mapping[str, str] | None = None,
    extra: Mapping[str, object] | None = None,
) -> RunReport:
    """The `RunReport` of one timestep of `plan` on `spec` (`wafer`: the emulated PE grid,
    or one planned abstractly); `measured_wall_s`: the emulator's wall time per step.
    `extra` carries the window, candidates, words per step and predicted timesteps/s."""
    counts = fabric_counts(wafer, pot, plan)
    phases = step_phases(wafer, pot, plan, rebuild_every=rebuild_every, traffic=counts)
    every = counts["density"] + counts["force"]
    rebuild = counts["swaps"] + counts["build"]
    traffic = every + rebuild.scaled(1.0 / rebuild_every)
    words = fold(traffic).links
    report = RunReport.build(
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
            f"{rebuild_every:.3g} steps",
            **dict(assumptions or {}),
        },
    )
    report.extra.update(
        {
            "grid": f"{wafer.rows}x{wafer.cols}",
            "window": f"{2 * plan.k_rows + 1}x{2 * plan.k_cols + 1}",
            "candidates": candidates(plan),
            "rebuild_every": rebuild_every,
            "words_per_step": float(traffic.max_words_per_pe),
            "link_words_per_step": dict(words),
            "timesteps_per_s": 1.0 / report.predicted_s,
            **dict(extra or {}),
        }
    )
    return report


def run_report(res, pot: EamPotential, wafer_name: str) -> RunReport:
    """The `RunReport` of an emulated run (`simulate.MdResult`) on the preset `wafer_name`:
    its plan, its measured wall time per step and its measured rebuild cadence (steps per
    list build; the whole run when none happened). A run that used the full-window kernel
    (lists over the host budget) is priced as the list algorithm the wafer runs, with
    capacities planned on the host from its final structure."""
    from wse_core import preset

    from wse_hpc.md import mapping
    from wse_hpc.md.simulate import MdConfig, plan_window

    plan, note = res.plan, {}
    if not plan.caps:
        s = res.structure
        grid, pos = (res.wafer.rows, res.wafer.cols), mapping.rewrap(s.positions_A, s.box_A)
        state = mapping.pack(
            mapping.initial_map(pos, grid, s.box_A, res.tile), pos, np.zeros(s.num_atoms, np.int32)
        )
        cfg = MdConfig(skin_A=plan.skin_A or 1.0, dtype=plan.dtype)
        plan = plan_window(state, s.box_A, pot, cfg, res.wafer, host_lists=False)
        note = {"md.lists": "the emulator ran the full-window kernel; lists priced as planned"}
    steps = max(res.steps, 1)
    every = steps / res.list_builds if res.list_builds else float(steps)
    return predict(
        preset(wafer_name),
        res.wafer,
        pot,
        plan,
        rebuild_every=max(every, 1.0),
        measured_wall_s=res.loop_wall_s / res.steps if res.steps else None,
        sram=res.sram,
        assumptions=note,
    )


def pe_trace(res, report: RunReport) -> PeTrace:
    """The per-PE trace of an emulated run (`simulate.MdResult`) and its `run_report`: its
    wafer's grid, SRAM ledger and dead PEs; every phase on the PEs holding an atom (the
    final structure mapped as `mapping.initial_map` deals it)."""
    from wse_hpc.md import mapping

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
