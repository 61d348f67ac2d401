"""What fits a PE's SRAM and a program's PEs: the TLR-MVM planners' refusals when a plan's
bases and vector buffers do not fit a PE, or its grid the PEs a program gets, in the words of
the options a user sets.

A planner sizes a PE by `bytes_for(w, batch)`, non-decreasing in both: the bases grow with
the rank chunk w (`--rank-chunk`), the vector buffers with the batch (`--batch`).
`refuse_sram` names the one to change and the largest value of it that fits (hunt 69: the
refusal named the ledger's allocation, "'tlrmvm.vectors' needs 59200 B per PE", which a
user of `--batch 200` could not read as the batch, nor learn what would fit).

A plan's grid must fit the spec's program rectangle (`program_rectangle`: 750 x 994 of a
CS-2's 757 x 996 PEs, the SDK's rule; the whole grid where the spec sets none), the PEs that
`bandwidth.copies_per_system` fills with copies (hunt 76: a 1 x 995 plan was run on the 996
columns, then priced as 0 copies per system beside 36 PB/s in the SDK's count). `refuse_grid`
names the fix: the least `--rank-chunk` that fits where one was given and one does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from wse_core.errors import PlacementError, SramBudgetError
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import SramLedger

__all__ = ["fits_program", "least_chunk", "program_rectangle", "refuse_grid", "refuse_sram"]


def program_rectangle(spec: WaferSpec) -> tuple[int, int]:
    """(rows, cols) of PEs a program gets on `spec`: its program rectangle (`program_rows x
    program_cols`), clipped to the grid (hunt 62: a rectangle kept under a grid shrunk by
    `--set pe_rows=...`), else the whole logical grid."""
    rows = min(spec.program_rows or spec.pe_rows, spec.pe_rows)
    return rows, min(spec.program_cols or spec.pe_cols, spec.pe_cols)


def fits_program(grid: tuple[int, int], spec: WaferSpec) -> bool:
    """Whether a plan's (rows, cols) grid fits `program_rectangle(spec)`."""
    rows, cols = program_rectangle(spec)
    return grid[0] <= rows and grid[1] <= cols


def least_chunk(
    grid_for: Callable[[int], tuple[int, int]],
    spec: WaferSpec,
    fits_pe: Callable[[int], bool],
    most: int,
) -> int | None:
    """The least rank chunk w in 1..`most` whose grid `grid_for(w)` (no larger as w grows)
    fits `program_rectangle(spec)` and whose bytes fit a PE (`fits_pe(w)`, no truer as w
    grows), else None."""
    if not fits_program(grid_for(most), spec):
        return None
    lo, hi = 1, most
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits_program(grid_for(mid), spec) else (mid + 1, hi)
    return lo if fits_pe(lo) else None


def refuse_grid(
    layout: str,
    grid: tuple[int, int],
    rank_chunk: int,
    spec: WaferSpec,
    *,
    asked: int | None,
    least: int | None,
) -> NoReturn:
    """Raise PlacementError for a `layout` plan of `grid` PEs at `rank_chunk`, past
    `program_rectangle(spec)`. `asked`: the rank chunk the caller gave (None: the planner's
    own, the largest a PE's SRAM holds); `least`: the least rank chunk whose plan fits both
    the rectangle and a PE's SRAM (None: none does)."""
    (rows, cols), (pe_rows, pe_cols) = program_rectangle(spec), (spec.pe_rows, spec.pe_cols)
    has = f"{spec.name} has {rows} x {cols} PEs"
    if (rows, cols) != (pe_rows, pe_cols):
        has = f"a {spec.name} program gets {rows} x {cols} of its {pe_rows} x {pe_cols} PEs"
    head = f"TLR-MVM ({layout}) needs {grid[0]} x {grid[1]} PEs (rank chunk {rank_chunk}) but {has}"
    if asked is not None and least is not None:  # hunt 76: it said "use a larger nb or wafer"
        more = "larger" if least > asked else "smaller"
        raise PlacementError(f"{head}: give a {more} --rank-chunk ({least} fits)")
    none = "" if asked is None else ", and no --rank-chunk fits both them and a PE's SRAM"
    raise PlacementError(
        f"{head}{none}: compress with a larger --nb or a looser --threshold, or use a larger wafer"
    )


def refuse_sram(
    ledger: SramLedger,
    bytes_for: Callable[[int, int], int],
    wafer: str,
    *,
    rank_chunk: int | None,
    batch: int,
    nb: int,
) -> NoReturn:
    """Raise SramBudgetError for a plan at `rank_chunk` (None: the planner's choice, at
    least 1) and `batch` that does not fit `ledger`'s free bytes per PE."""
    free, w = ledger.free_bytes(), rank_chunk or 1
    head = f"but a {wafer} PE has {free:,} B"
    if bytes_for(1, 1) > free:  # nothing the options set fits: the tiles are too tall
        raise SramBudgetError(
            f"one rank row of tiles of {nb} needs {bytes_for(1, 1):,} B of SRAM per PE (at "
            f"--rank-chunk 1 and --batch 1) {head}: compress with a smaller --nb or use a "
            "larger wafer"
        )
    if bytes_for(w, 1) > free:  # the rank chunk alone is too large
        best = ledger.largest(lambda k: bytes_for(k, batch), 1, w)
        at = f" at --batch {batch}" if best >= 1 and batch > 1 else ""
        if best < 1:
            best = ledger.largest(lambda k: bytes_for(k, 1), 1, w)
            at = " at --batch 1"
        raise SramBudgetError(
            f"--rank-chunk {w} needs {bytes_for(w, batch):,} B of SRAM per PE {head}: at "
            f"most --rank-chunk {best} fits{at}"
        )
    best = ledger.largest(lambda b: bytes_for(w, b), 1, batch)
    at = f" at --rank-chunk {w}" if rank_chunk is not None else ""
    raise SramBudgetError(
        f"--batch {batch} needs {bytes_for(w, batch):,} B of SRAM per PE for its vectors and "
        f"the bases {head}: at most --batch {best} fits{at}"
    )
