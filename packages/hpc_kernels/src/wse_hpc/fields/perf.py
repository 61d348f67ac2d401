"""What a field-equation step costs on the wafer, counted from the program it runs.

Contract. `program_phases(grid, fn, *args, repeats=...)` traces `fn` abstractly
(`wse_hpc.fields.grid.traced_program`) and turns what every field op recorded into
`wse_core.cost.work.Work` per scope (`recorded_phases` does it for a recording already
made): the code that runs is the code that is priced, as `wse_hpc.stencil.perf` does for its
kernels. A solver's loop body is
traced once under its scope ("cg_iteration", "bicgstab_iteration") and repeated by the
measured iteration count (`repeats`); everything outside a scope runs once per step.

Counting rules:
- Each recorded instruction is one fp32 DSD `Op` over the Z column; it reads two memory
  operands (one when an operand streams from the fabric) and writes one result (4 B each).
- A fabric shift moves nz 32-bit words per PE on its link direction and activates a receive
  task; each group of up to four shifts (one halo exchange) is one relay stage over one
  router hop (as `wse_hpc.stencil.perf` prices a halo exchange).
- A wafer-wide reduction of w words is one fp32 allreduce over the grid's PE rectangle,
  priced as Luczynski et al. model it (`wse_core.cost.collectives.allreduce_2d`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from wse_core.cost.collectives import allreduce_2d
from wse_core.cost.perf import PerfModel, Phase, Phases, Work, serial

from wse_hpc.fields.grid import FieldGrid, Program, traced_program

__all__ = ["WORD_BYTES", "program_phases", "program_work", "recorded_phases"]

WORD_BYTES = 4  # fp32


def program_work(
    grid: FieldGrid, prog: Program, scope: str, pe_rect: tuple[int, int] | None = None
) -> Work:
    """The busiest PE's work of everything `prog` recorded under `scope`; reductions span
    `pe_rect` (default: the grid's X x Y PEs)."""
    ops = tuple(op for s, op in prog.ops if s == scope)
    reads = sum(op.count * op.length * WORD_BYTES * (1 if op.fabric_in else 2) for op in ops)
    writes = sum(op.count * op.length * WORD_BYTES for op in ops)
    links: dict[str, float] = {}
    shifts = [(d, w) for s, d, w in prog.shifts if s == scope]
    for d, w in shifts:
        links[d] = links.get(d, 0.0) + w
    exchanges = math.ceil(len(shifts) / 4)
    work = Work(
        ops=ops,
        sram_read_bytes=reads,
        sram_write_bytes=writes,
        links=links,
        latency_hops=float(exchanges),
        relay_stages=float(exchanges),
        task_activations=float(len(shifts)),
    )
    rates = PerfModel(grid.wafer.spec).rates
    for s, words in prog.reductions:
        if s == scope:
            rows, cols = pe_rect or (grid.shape[0], grid.shape[1])
            work = work + allreduce_2d(rates, rows, cols, words)
    return work


def program_phases(
    grid: FieldGrid,
    fn: Callable,
    *args,
    repeats: Mapping[str, float] | None = None,
    name: str = "step",
    pe_rect: tuple[int, int] | None = None,
) -> Phases:
    """`fn(*args)` priced: `recorded_phases` of its `traced_program`."""
    prog = traced_program(fn, *args)
    return recorded_phases(grid, prog, repeats=repeats, name=name, pe_rect=pe_rect)


def recorded_phases(
    grid: FieldGrid,
    prog: Program,
    *,
    repeats: Mapping[str, float] | None = None,
    name: str = "step",
    pe_rect: tuple[int, int] | None = None,
) -> Phases:
    """A recorded program priced: the unscoped work once, each scope's work `repeats[scope]`
    times (default once), in series. `pe_rect`: the PE rectangle the run spans when it is
    larger than the traced grid's (every PE runs the same program on its Z column, so a grid
    of a few PEs with the real Z length traces the same per-PE work; only the reductions'
    span and the halo's hop count differ, and a halo is one hop on any rectangle)."""
    repeats = dict(repeats or {})
    scopes = sorted(({s for s, _ in prog.ops} | {s for s, _, _ in prog.shifts}) - {""})
    parts = [Phase(name, program_work(grid, prog, "", pe_rect))]
    parts += [
        Phase(s, program_work(grid, prog, s, pe_rect), repeat=repeats.get(s, 1.0)) for s in scopes
    ]
    return serial(*parts, name=name)
