"""What a field-equation step costs on the wafer, counted from the program it runs.

Contract. `program_phases(grid, fn, *args, repeats=...)` traces `fn` abstractly
(`wse_hpc.fields.grid.traced_program`) and turns what every field op recorded into
`wse_core.cost.work.Work` per scope (`recorded_phases` does it for a recording already
made): the code that runs is the code that is priced, as `wse_hpc.stencil.perf` does for its
kernels. `traced_step(grid, fn, *args, repeats=...)` gives those phases and, from the same
trace, the fabric ledger's count of what they price (`recorded_traffic`: each shift's and
reduction's ledger entry times its scope's repeats; a run's report's `traffic`, hunt 70: it
said 0 words beside the priced link words). A solver's loop body is
traced once under its scope ("cg_iteration", "bicgstab_iteration") and repeated by the
measured iteration count (`repeats`); everything outside a scope runs once per step.

Counting rules:
- Each recorded instruction is one fp32 DSD `Op` over the Z column; it reads two memory
  operands (one when an operand streams from the fabric) and writes one result (4 B each).
- A fabric shift moves nz 32-bit words per PE on its link direction and activates a receive
  task; each group of up to four shifts (one halo exchange) is one relay stage over one
  router hop (as `wse_hpc.stencil.perf` prices a halo exchange).
- A periodic X or Y axis sits on the wafer's 2D mesh, which has no wrap-around link, as
  `wse_core.fabric.ledger.ring_layout` lays it at a shift's reach of one PE (`layouts`):
  folded (a neighbour `FOLD_HOPS` = 2 physical hops; every axis of 3 PEs or more) or in
  place (the wrapped value n - 1 hops); each of the axis' links carries the words of both
  its directions (`ledger.both_ways`) and the report's traffic is the ledger's re-counted
  so (`ledger.on_mesh`; hunt 70: both were priced as on a torus, the wrapped value one hop
  away). A bounded axis is priced as it was.
- Detours around dead PEs (`--defect-seed`, `wse_core.hw.defects`): an exchange waits for
  its slowest shift: on a bounded axis one logical link, at most the longest physical link
  of its axis on the grid's PEs (`Remap.extra_hops_within`); on a periodic axis the slowest
  chain between ring neighbours where the layout puts them, each link at its own hops
  (`ledger.ring_hops`: folded, the slowest pair of ring-neighbour links of any line; in
  place, the slowest line end to end; hunt 73: FOLD_HOPS, or n - 1, times the longest
  link). Its extra hops are paid on the critical path at `hop_latency_cycles` each, as
  every hop is (`exchange_hops`).
- A wafer-wide reduction of w words is one fp32 allreduce over the grid's PE rectangle,
  priced as Luczynski et al. model it, with the detours on its slowest path: every
  reduction's one price, `wse_core.cost.collectives.reduction`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from wse_core.cost.collectives import reduction
from wse_core.cost.perf import PerfModel, Phase, Phases, Work, serial
from wse_core.fabric import ledger
from wse_core.hw.traffic import Traffic

from wse_hpc.fields.grid import FieldError, FieldGrid, Program, traced_program

__all__ = [
    "WORD_BYTES",
    "assumptions",
    "exchange_hops",
    "layouts",
    "periodic_assumption",
    "program_phases",
    "program_work",
    "recorded_phases",
    "recorded_traffic",
    "traced_step",
]

WORD_BYTES = 4  # fp32


def _longest_links(grid: FieldGrid) -> dict[str, int]:
    """Physical hops of the longest logical link each direction's shift crosses on the
    grid's PEs (1 without detour)."""
    mine = grid.wafer.remap.extra_hops_within(grid.shape[0], grid.shape[1])
    return {"N": mine["ns_max"], "S": mine["ns_max"], "E": mine["ew_max"], "W": mine["ew_max"]}


_AXIS_LINKS = {0: ("N", "S"), 1: ("E", "W")}  # the links a grid axis' shifts move on


def _pe_axes(grid: FieldGrid, pe_rect: tuple[int, int] | None) -> tuple[int, int]:
    return pe_rect or (grid.shape[0], grid.shape[1])


def layouts(grid: FieldGrid, pe_rect: tuple[int, int] | None = None) -> dict[int, str]:
    """How each periodic PE axis (X: 0, Y: 1) sits on the mesh, "fold" or "wrap"
    (`ledger.ring_layout` at a shift's reach of one PE; over `pe_rect` when the run spans
    more PEs than the traced grid); a bounded axis has none."""
    sizes = _pe_axes(grid, pe_rect)
    return {a: ledger.ring_layout(sizes[a], 1)[0] for a in (0, 1) if grid.periodic[a]}


def _shift_hops(grid: FieldGrid, pe_rect: tuple[int, int] | None = None) -> dict[str, float]:
    """Physical hops of each direction's slowest shift: the longest link of its axis; on a
    periodic axis the slowest chain between ring neighbours as its layout lays the ring on
    the PE rectangle (`ledger.ring_hops`, what `ledger.on_mesh` prices)."""
    lay, sizes = layouts(grid, pe_rect), _pe_axes(grid, pe_rect)
    out: dict[str, float] = dict(_longest_links(grid))
    for a, layout in lay.items():
        out.update(dict.fromkeys(_AXIS_LINKS[a], ledger.ring_hops(grid.wafer, a, layout, 1, sizes)))
    return out


def exchange_hops(
    grid: FieldGrid, directions: list[str], pe_rect: tuple[int, int] | None = None
) -> float:
    """Router hops on the critical path of the shifts `directions`, in exchanges of up to
    four at once: each exchange waits for its slowest shift (one hop, or the longest detour
    of its axis; on a periodic axis as the mesh moves it, `_shift_hops`)."""
    hops = _shift_hops(grid, pe_rect)
    groups = [directions[i : i + 4] for i in range(0, len(directions), 4)]
    return float(sum(max(hops[d] for d in g) for g in groups))


def _mesh_links(links: dict[str, float], lay: Mapping[int, str]) -> dict[str, float]:
    """A periodic axis' link words on the mesh: both its directions carry both directions'
    words (`ledger.both_ways`); a bounded axis' as given."""
    out = dict(links)
    for a in lay:
        out.update(ledger.both_ways({d: links[d] for d in _AXIS_LINKS[a] if d in links}))
    return out


def periodic_assumption(grid: FieldGrid) -> dict[str, str]:
    """The report's line on how the periodic axes sit on the mesh (none when bounded)."""
    lay = layouts(grid)
    if not lay:
        return {}

    def axis(a: int) -> str:
        n = grid.shape[a]
        if lay[a] == "fold":
            return (f"{'XY'[a]} ({n} PEs) folded, each ring cut in two and interleaved, one half "
                    f"reversed: a neighbour is {ledger.FOLD_HOPS:g} physical hops")  # fmt: skip
        return f"{'XY'[a]} ({n} PEs) in place: the wrapped value crosses the axis, {n - 1} hops"

    return {
        "periodic on the mesh": "the wafer's 2D mesh has no wrap-around link: "
        f"{'; '.join(axis(a) for a in lay)}; each of its links carries both directions' shift "
        "words and the word-hops double; the emulator computes the same values on the "
        "logical grid (wse_core.fabric.ledger.on_mesh)"
    }


def assumptions(grid: FieldGrid) -> dict[str, str]:
    """The halo, detour and periodic-axis assumptions behind a field step's prediction (for
    RunReport)."""
    mine = grid.wafer.remap.extra_hops_within(grid.shape[0], grid.shape[1])
    return {
        "halo": "each group of up to four shifts is one exchange: one relay stage, one task "
        "per receive, its words on each link direction",
        "detours": "dead PEs' detours priced as extra hops on each exchange's critical path "
        "(its slowest shift: the longest link of a bounded axis; on a periodic axis the "
        "slowest chain between ring neighbours as the ring lies on the mesh, each link at its "
        "own hops) and on each reduction's slowest path, hop_latency_cycles each; this "
        f"grid's links: N-S {mine['ns_total']} extra hops (longest link {mine['ns_max']} "
        f"hops), E-W {mine['ew_total']} (longest {mine['ew_max']})",
        **periodic_assumption(grid),
    }


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
        links=_mesh_links(links, layouts(grid, pe_rect)),
        latency_hops=exchange_hops(grid, [d for d, _ in shifts], pe_rect),
        relay_stages=float(exchanges),
        task_activations=float(len(shifts)),
    )
    rates = PerfModel(grid.wafer.spec).rates
    rows, cols = pe_rect or (grid.shape[0], grid.shape[1])
    for s, words in prog.reductions:
        if s == scope:
            work = work + reduction(rates, grid.wafer.remap, rows, cols, words).work
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


def traced_step(
    grid: FieldGrid, fn: Callable, *args, repeats: Mapping[str, float] | None = None
) -> tuple[Phases, Traffic]:
    """`fn(*args)` traced once: its phases (`recorded_phases`) and the ledger's count of
    the fabric traffic they price (`recorded_traffic`), per call of `fn`."""
    with grid.wafer.traffic.scope() as entries:
        prog = traced_program(fn, *args)
    phases = recorded_phases(grid, prog, repeats=repeats)
    return phases, recorded_traffic(grid, prog, entries, repeats)


def recorded_traffic(
    grid: FieldGrid,
    prog: Program,
    entries: Sequence[Traffic],
    repeats: Mapping[str, float] | None = None,
) -> Traffic:
    """The fabric ledger's `entries` of one traced call of a program, each as the mesh moves
    it (`ledger.on_mesh` at the grid's `layouts`) and times the repeats of the scope it ran
    in (as `recorded_phases` prices it). Every field shift and reduction is one fabric op
    (`operators`), so the shift entries pair with `prog.shifts` and the others with
    `prog.reductions`, in trace order; a count that differs is a FieldError."""
    repeats = dict(repeats or {})
    shifts = [e for e in entries if e.op.startswith("shift")]
    others = [e for e in entries if not e.op.startswith("shift")]
    if len(shifts) != len(prog.shifts) or len(others) != len(prog.reductions):
        raise FieldError(
            f"the ledger holds {len(shifts)} shifts and {len(others)} other fabric ops, the "
            f"program {len(prog.shifts)} shifts and {len(prog.reductions)} reductions: a "
            "fabric op outside `wse_hpc.fields.operators` (record it there)"
        )
    scopes = [s for s, _, _ in prog.shifts] + [s for s, _ in prog.reductions]
    lay, total = layouts(grid), Traffic()
    for e, s in zip(shifts + others, scopes, strict=True):
        moved = ledger.on_mesh(grid.wafer, e, lay)
        total = total + moved.scaled(repeats.get(s, 1.0) if s else 1.0)
    return total
