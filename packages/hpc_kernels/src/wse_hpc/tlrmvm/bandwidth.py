"""Cerebras' bandwidth accounting of a TLR-MVM plan (priced by `perf`, which re-exports it).

Contract. `cerebras_bandwidth(plan, model, systems=, copies=, phase1=)` gives the relative and
absolute bytes/s the SDK's `single-tile-matvec` reports for the plan's PE programs
(`pe_programs.pe_tiles`), in the bytes the plan's PEs hold (`bytes_convention`: "held",
complex64, or "real-split"), timed by the slowest PE's phases 1 and 3 at the SDK's clock
(`SDK_CLOCK_HZ`); the SDK's rule scales the average tile PE to `PROGRAM_RECTANGLE` per system.
`copies_per_system(plan, spec)`: copies of the plan's grid that fill one system's program
rectangle. `perf`'s module doc says how these figures sit beside the model's own.
"""

from __future__ import annotations

from wse_core.cost.perf import PerfModel
from wse_core.errors import PlacementError
from wse_core.hw.spec import WaferSpec

from wse_hpc.tlrmvm.budget import program_rectangle
from wse_hpc.tlrmvm.grouped_plan import GroupedPlan
from wse_hpc.tlrmvm.packed import PackedPlan
from wse_hpc.tlrmvm.pe_programs import PHASE1_FORM, PeProgram, pe_tiles, real_pairs
from wse_hpc.tlrmvm.wafer import TlrPlan

__all__ = [
    "SDK_CLOCK_HZ",
    "PROGRAM_RECTANGLE",
    "bytes_convention",
    "cerebras_bandwidth",
    "copies_per_system",
]

SDK_CLOCK_HZ = 850e6  # the SDK's benchmark scripts divide cycles by this (REFERENCES.md)
PROGRAM_RECTANGLE = (750, 994)  # the largest user rectangle of a CS-2 (SDK examples)


def copies_per_system(plan, spec: WaferSpec) -> int:
    """Copies of the plan's grid (frequency slices) that fill one system's program
    rectangle (`budget.program_rectangle`: `spec.program_rows x program_cols`, 750 x 994 on
    a CS-2, clipped to the grid; else the spec's logical grid); at least 1. PlacementError
    for a plan past the rectangle, which the planners refuse (hunt 76: a 1 x 995 plan was
    priced as 0 copies beside 36 PB/s in the SDK's count)."""
    (r, c), (rows, cols) = program_rectangle(spec), plan.grid
    if rows > r or cols > c:
        raise PlacementError(
            f"the plan's {rows} x {cols} PEs do not fit a {spec.name} program's {r} x {c}; "
            "plan it for this wafer"
        )
    return (r // rows) * (c // cols)


def bytes_convention(plan) -> str:
    """What the plan's PEs hold of a complex operator: "real-split" (each complex m x n tile
    as its real 2m x 2n tile, 16 mn bytes: `plan.real_split`) or "held" (complex64, 8 mn)."""
    return "real-split" if plan.real_split else "held"


def _held_share(plan) -> float:
    """The plan's bytes over the SDK count of the real (2m x 2n) tiles `pe_tiles` lists:
    1 when the PEs hold those tiles (real-split, or a real operator), else 1/2 (complex64)."""
    return 0.5 if real_pairs(plan) == 2 and not plan.real_split else 1.0


def cerebras_bandwidth(
    plan: TlrPlan | PackedPlan | GroupedPlan,
    model: PerfModel,
    *,
    systems: int = 1,
    copies: int = 1,
    phase1: str = PHASE1_FORM,
) -> dict[str, object]:
    """Relative and absolute bandwidth (bytes/s) as the SDK reports a matvec, in the bytes
    this plan's PEs hold (`bytes`: `bytes_convention`): the SDK's count of each PE's real
    (2m x 2n) tiles (`pe_tiles`), halved for a complex operator held as complex64. Time: the
    slowest PE's cycles of phases 1 and 3 over 850 MHz. Time and bytes both count the
    product's `plan.batch` vectors (`vectors_per_product`), so the rates do not depend on
    the batch. `sdk_*_bytes_per_s` (the SDK's rule,
    the main figure): the average tile PE's bytes times the 750 x 994 program rectangle per
    system; `*_bytes_per_s`: the bytes of every tile-holding PE of the plan, times `copies`
    per system, times `systems`. `relative_bytes_per_pe_max`: the most relative bytes one
    PE counts for one vector (its tiles once, their x and y), and `relative_exceeds_sram`
    flags a plan where that is more than its SRAM (`ltaief23_tlrmvm` refuses such a row).
    `phase1`: the phase-1 form the PEs run (`pe_programs.FORMS`), `phase1_form` in the result;
    `slowest_pe_mechanisms`: the slowest PE's cycles by mechanism (`Cost.timed_mechanisms`),
    which sum to `slowest_pe_cycles`, the time every figure here divides by."""
    b, programs = plan.batch, pe_tiles(plan, phase1)
    costs = (model.cost(p.work(1, b) + p.work(3, b)) for p in programs)
    slowest = max(costs, key=lambda c: c.cycles)
    cycles = slowest.cycles
    held = [p for p in programs if p.phase1 or p.phase3]
    tile_pes = sum(p.pes for p in held)
    share = _held_share(plan)

    def one(p: PeProgram, attr: str) -> float:  # one PE's bytes (or flops) per vector
        return sum(getattr(t, attr) for t in p.phase1 + p.phase3)

    def total(attr: str) -> float:  # one copy's bytes (or flops) over its tile PEs
        return b * sum(p.pes * one(p, attr) for p in held)

    seconds = cycles / SDK_CLOCK_HZ
    scale = copies * systems
    rect = PROGRAM_RECTANGLE[0] * PROGRAM_RECTANGLE[1] * systems
    most = share * max((one(p, "relative_bytes") for p in held), default=0.0)
    out: dict[str, object] = {
        "bytes": bytes_convention(plan),
        "phase1_form": phase1,
        # the time and the bytes below both cover every vector of one product (hunt 70)
        "vectors_per_product": b,
        "slowest_pe_cycles": cycles,
        # what sets them, summing to them (hunt 76: the rows showed the deployment's host I/O)
        "slowest_pe_mechanisms": slowest.timed_mechanisms(),
        "seconds": seconds,
        "tile_pes_per_copy": tile_pes,
        "program_pes": tile_pes * scale,
        "rectangle_pes": rect,
        "flops_per_s": total("flops") * scale / seconds,
        "relative_bytes_per_pe_max": most,
        # a plan past its SRAM in this count (a small test wafer) is flagged, not refused:
        # the emulated run placed its own tiles in the ledger
        "relative_exceeds_sram": float(most > model.spec.data_bytes_per_pe),
    }
    for kind in ("relative", "absolute"):
        per_pe = share * total(f"{kind}_bytes") / tile_pes
        out[f"{kind}_bytes_per_pe"] = per_pe
        out[f"{kind}_bytes_per_s"] = per_pe * tile_pes * scale / seconds
        out[f"sdk_{kind}_bytes_per_s"] = per_pe * rect / seconds
    return out
