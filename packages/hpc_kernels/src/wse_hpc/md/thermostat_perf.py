"""What a thermostat adds to the predicted MD step: the work the emulator's thermostat does
(`wse_hpc.md.integrate`), priced on the busiest PE beside the published NVE program's step
(`wse_hpc.md.perf`, which appends these phases to its own).

Contract: `bath_phases(spec, wafer, thermostat)` -> the phases one step adds (none for NVE);
`bath_assumption(spec, wafer, thermostat, step)` -> the report's `md.thermostat` line,
which for Langevin shows the rate of `step` (the priced step's phases) at both ends of the
assumed generator's sweep (`UNIFORM`), its Langevin phase repriced at each.

- Nosé–Hoover (LAMMPS `fix nvt ... tchain M`, M = `Thermostat.chain`, LAMMPS's default 3):
  each of the step's two half steps sums 2 KE over the PEs (`fabric.reduce` in
  `integrate._nose_hoover_fn`) and every PE needs the sum: one fp32 allreduce of one word
  over the run's PE grid, priced as every allreduce of the stack is
  (`wse_core.cost.collectives.reduction`: Luczynski et al.'s model, with the dead PEs'
  detours on its slowest path, as `wse_hpc.fields.perf` prices its CG dots); then the
  bath's update and the velocities' scale, scalar (`pe_program.NOSE_HOOVER_HALF`, and
  `NOSE_HOOVER_LINK` for each of the chain's M - 1 further elements: every PE updates the
  whole chain alike, no more sums), in the task the sum's arrival activates.
- Langevin (LAMMPS `fix langevin`): 3 uniform numbers per atom per step and the force terms
  (`pe_program.LANGEVIN_FORCE`), scalar, in the kick's task (no task of their own, no
  fabric). The SDK documents no random-number instruction, so a number is priced as an
  ASSUMED generator (`UNIFORM`: xorshift32 and the conversion, swept to Philox4x32-10).
"""

from __future__ import annotations

import dataclasses

from wse_core.cost.collectives import reduction
from wse_core.cost.mechanisms import Constant
from wse_core.cost.perf import PerfModel, Phase, Phases, Work
from wse_core.hw.spec import WaferSpec
from wse_core.hw.wafer import Wafer

from wse_hpc.md.integrate import Thermostat
from wse_hpc.md.pe_program import (
    LANGEVIN_FORCE,
    LANGEVIN_UNIFORMS,
    NOSE_HOOVER_HALF,
    NOSE_HOOVER_LINK,
    UNIFORM_SCALAR,
    scalar_count,
)

__all__ = [
    "UNIFORM",
    "UNIFORM_INSTRUCTIONS",
    "NOSE_HOOVER_SUMS",
    "kinetic_sum_work",
    "half_instructions",
    "bath_phases",
    "swept_rate",
    "bath_assumption",
]

NOSE_HOOVER_SUMS = 2  # kinetic-energy sums per step: one in each half step
UNIFORM_INSTRUCTIONS = scalar_count(UNIFORM_SCALAR)  # 9: xorshift32 and the conversion
UNIFORM = Constant(
    units="scalar instructions/number",
    mechanism="one uniform fp32 random number in [0, 1) on a PE (Langevin draws 3 per atom "
    "per step); times scalar_instruction_cycles",
    basis="assumed",
    source="the SDK's instruction tables (wse_core.hw.simd) and docs/ name no random-number "
    "instruction; 9: Marsaglia's xorshift32 (J. Stat. Softw. 8(14), 2003: 3 shifts, 3 xors "
    "on a word of state per PE) and the conversion to [0, 1) (shift, convert, mul); 28: "
    "Philox4x32-10 (Salmon et al., SC11), counter-based: 10 rounds of 2 32x32->64-bit "
    "multiplies (4 instructions), 4 xors and 2 key adds per 4 numbers, about 25 a number, "
    "and the same conversion",
    sweep=(UNIFORM_INSTRUCTIONS, 18.0, 28.0),
    limits=(1.0, 1000.0),
)


def kinetic_sum_work(spec: WaferSpec, wafer: Wafer) -> Work:
    """One Nosé–Hoover kinetic-energy sum: an fp32 allreduce of one word over `wafer`'s
    rows x cols PEs at `spec`'s constants, with its detours around dead PEs."""
    return reduction(PerfModel(spec).rates, wafer.remap, wafer.rows, wafer.cols, 1).work


def half_instructions(thermostat: Thermostat) -> float:
    """Scalar instructions of one Nosé–Hoover half step on a PE, its chain's included."""
    links = thermostat.chain - 1
    return scalar_count(NOSE_HOOVER_HALF) + links * scalar_count(NOSE_HOOVER_LINK)


def bath_phases(
    spec: WaferSpec,
    wafer: Wafer,
    thermostat: Thermostat,
    *,
    uniform_instructions: float = UNIFORM_INSTRUCTIONS,
) -> tuple[Phase, ...]:
    """The phases `thermostat` adds to one step on the busiest PE (the module docstring);
    `uniform_instructions`: scalar instructions per uniform number (`UNIFORM`)."""
    if thermostat.kind == "nose-hoover":
        half = Work(scalar_instructions=half_instructions(thermostat), task_activations=1.0)
        return (
            Phase("nose_hoover_sum", kinetic_sum_work(spec, wafer), repeat=NOSE_HOOVER_SUMS),
            Phase("nose_hoover", half, repeat=NOSE_HOOVER_SUMS),
        )
    if thermostat.kind == "langevin":
        draws = LANGEVIN_UNIFORMS * uniform_instructions
        return (Phase("langevin", Work(scalar_instructions=draws + scalar_count(LANGEVIN_FORCE))),)
    return ()


def swept_rate(
    spec: WaferSpec, wafer: Wafer, thermostat: Thermostat, step: Phases, per_number: float
) -> float:
    """Timesteps/s of `step` (a Langevin step's phases) with its Langevin phase repriced at
    `per_number` scalar instructions per uniform number."""
    again = bath_phases(spec, wafer, thermostat, uniform_instructions=per_number)
    parts = tuple(again[0] if p.name == "langevin" else p for p in step.parts)
    return 1.0 / PerfModel(spec).seconds(dataclasses.replace(step, parts=parts))


def _langevin_line(spec: WaferSpec, wafer: Wafer, thermostat: Thermostat, step: Phases) -> str:
    n = LANGEVIN_UNIFORMS * UNIFORM_INSTRUCTIONS + scalar_count(LANGEVIN_FORCE)
    lo, hi = min(UNIFORM.sweep), max(UNIFORM.sweep)
    rates = [swept_rate(spec, wafer, thermostat, step, k) for k in (lo, hi)]
    return (
        f"langevin (fix langevin): {LANGEVIN_UNIFORMS} uniform numbers per atom a step at "
        f"{UNIFORM_INSTRUCTIONS:g} scalar instructions each (ASSUMED, thermostat_perf.UNIFORM: "
        "xorshift32; the SDK has no random-number instruction) and the force terms, "
        f"{n:g} scalar instructions a step in the kick's task; swept {lo:g}..{hi:g} "
        f"instructions a number: {rates[0]:.6g}..{rates[1]:.6g} timesteps/s; not in the "
        "released source (NVE)"
    )


def bath_assumption(
    spec: WaferSpec, wafer: Wafer, thermostat: Thermostat, step: Phases
) -> dict[str, str]:
    """The report's `md.thermostat` line: what the thermostat adds and how it is priced;
    for Langevin, `step`'s timesteps/s at the ends of `UNIFORM`'s sweep (`swept_rate`)."""
    if thermostat.kind == "langevin":
        return {"md.thermostat": _langevin_line(spec, wafer, thermostat, step)}
    if thermostat.kind != "nose-hoover":
        return {"md.thermostat": "none (NVE, fix nve): no thermostat work"}
    return {
        "md.thermostat": f"nose-hoover (fix nvt, tchain {thermostat.chain}): {NOSE_HOOVER_SUMS} "
        "kinetic-energy sums a step, each an fp32 allreduce of 1 word over the run's PE grid "
        "(wse_core.cost.collectives.allreduce_2d, detours added), then "
        f"{half_instructions(thermostat):g} scalar instructions and 1 task activation per "
        "half step (pe_program.NOSE_HOOVER_HALF: the bath update, an fp32 exp, the "
        "velocities' scale; NOSE_HOOVER_LINK for each further chain element); not in the "
        "released source (NVE)"
    }
