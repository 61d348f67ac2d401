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
names the fix: the least `--rank-chunk` that fits where one was given and one does, else the
largest `--batch` at which some rank chunk fits both the rectangle and a PE's SRAM (hunt 77: it
said "compress with a larger --nb" where a smaller --batch ran). A planner describes each
arrangement it may choose as a `ChunkFit` (the least chunk whose grid fits the rectangle, and
its bytes per PE); `refuse_sram` takes them too, so that the --batch it names fits the
rectangle as well as SRAM (it named 46 where only 5 ran).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, NoReturn

from wse_core.errors import PlacementError, SramBudgetError
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import SramLedger

__all__ = [
    "ChunkFit",
    "fits_program",
    "least_chunk",
    "least_fitting",
    "most_batch",
    "program_rectangle",
    "refuse_grid",
    "refuse_sram",
]


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
    grid_for: Callable[[int], tuple[int, int]], spec: WaferSpec, most: int
) -> int | None:
    """The least rank chunk w in 1..`most` whose grid `grid_for(w)` (no larger as w grows)
    fits `program_rectangle(spec)`, else None."""
    if not fits_program(grid_for(most), spec):
        return None
    lo, hi = 1, most
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits_program(grid_for(mid), spec) else (mid + 1, hi)
    return lo


class ChunkFit(NamedTuple):
    """One arrangement a planner may choose (a group size of `grouped`; `banded` and
    `packed` have one): `least`, the least rank chunk whose grid fits the program rectangle
    (a larger chunk's grid is no larger; None: none fits), `bytes_for(w, batch)`, its bytes
    per PE (non-decreasing in the batch; not always in w: banded's vector buffers shrink with
    its bands), and `most`, the largest rank chunk the planner considers. Its plan at
    (w, batch) fits both the rectangle and a PE's `free` bytes when least <= w and
    bytes_for(w, batch) <= free."""

    least: int | None
    bytes_for: Callable[[int, int], int]
    most: int


def least_fitting(fits: Sequence[ChunkFit], batch: int, free: int) -> int | None:
    """The least rank chunk at which some arrangement's plan of `batch` vectors fits both
    the rectangle and `free` bytes a PE, else None."""
    ok = (
        next((w for w in range(f.least, f.most + 1) if f.bytes_for(w, batch) <= free), None)
        for f in fits
        if f.least is not None
    )
    return min((w for w in ok if w is not None), default=None)


def _runs(fits: Sequence[ChunkFit], w: int, batch: int, free: int) -> bool:
    """Whether some arrangement's plan at rank chunk `w` and `batch` fits both."""
    return any(f.least is not None and f.least <= w and f.bytes_for(w, batch) <= free for f in fits)


def most_batch(ok: Callable[[int], bool], batch: int) -> int:
    """The largest b in 1..batch - 1 with `ok(b)` (true up to some batch, false past it: a
    PE's bytes grow with the batch, its grid does not), 0 if not even 1."""
    lo, hi = 0, batch - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def _smaller_batch(fits: Sequence[ChunkFit], asked: int | None, batch: int, free: int) -> str:
    """The largest --batch below `batch` at which some rank chunk runs, as a refusal's last
    words, with the chunk where one was asked: `asked` where it runs there, else the least
    that does ("" where not even --batch 1 runs)."""
    b = most_batch(lambda b: least_fitting(fits, b, free) is not None, batch)
    if not b or asked is None:
        return f"at most --batch {b} fits" if b else ""
    if _runs(fits, asked, b, free):
        return f"at most --batch {b} fits at --rank-chunk {asked}"
    return f"at most --batch {b} fits (at --rank-chunk {least_fitting(fits, b, free)})"


def refuse_grid(
    layout: str,
    grid: tuple[int, int],
    rank_chunk: int,
    spec: WaferSpec,
    *,
    asked: int | None,
    batch: int,
    fits: Sequence[ChunkFit],
) -> NoReturn:
    """Raise PlacementError for a `layout` plan of `grid` PEs at `rank_chunk` and `batch`,
    past `program_rectangle(spec)`. `asked`: the rank chunk the caller gave (None: the
    planner's own, the largest a PE's SRAM holds); `fits`: the planner's arrangements, from
    which the fix is named: the least rank chunk that fits at `batch`, else the largest
    --batch at which one does, else a larger --nb or wafer."""
    (rows, cols), (pe_rows, pe_cols) = program_rectangle(spec), (spec.pe_rows, spec.pe_cols)
    has = f"{spec.name} has {rows} x {cols} PEs"
    if (rows, cols) != (pe_rows, pe_cols):
        has = f"a {spec.name} program gets {rows} x {cols} of its {pe_rows} x {pe_cols} PEs"
    head = f"TLR-MVM ({layout}) needs {grid[0]} x {grid[1]} PEs (rank chunk {rank_chunk}) but {has}"
    free = spec.data_bytes_per_pe  # a fresh ledger's, as every planner sizes a PE
    least = least_fitting(fits, batch, free)
    if asked is not None and least is not None:  # hunt 76: it said "use a larger nb or wafer"
        more = "larger" if least > asked else "smaller"
        raise PlacementError(f"{head}: give a {more} --rank-chunk ({least} fits)")
    smaller = _smaller_batch(fits, asked, batch, free) if least is None else ""
    if smaller:  # hunt 77: "compress with a larger --nb" where a smaller --batch ran
        raise PlacementError(f"{head}, and at --batch {batch} no rank chunk fits both them and "
                             f"a PE's SRAM: {smaller}")  # fmt: skip
    none = "" if asked is None else ", and no --rank-chunk fits both them and a PE's SRAM"
    raise PlacementError(f"{head}{none}: {LARGER}")


LARGER = "compress with a larger --nb or a looser --threshold, or use a larger wafer"


def refuse_sram(
    ledger: SramLedger,
    bytes_for: Callable[[int, int], int],
    wafer: str,
    *,
    rank_chunk: int | None,
    batch: int,
    nb: int,
    fits: Sequence[ChunkFit] = (),
) -> NoReturn:
    """Raise SramBudgetError for a plan at `rank_chunk` (None: the planner's choice, at
    least 1) and `batch` that does not fit `ledger`'s free bytes per PE. `fits`: the
    planner's arrangements, so that the value named fits the program rectangle too (none
    given: SRAM alone)."""
    free, w = ledger.free_bytes(), rank_chunk or 1
    head = f"but a {wafer} PE has {free:,} B{ledger.reserve_note()}"
    if fits and rank_chunk is None and (fix := _smaller_batch(fits, None, batch, free)):
        raise SramBudgetError(  # the planner's chunk: --batch is the one option (hunt 77)
            f"--batch {batch} needs {bytes_for(w, batch):,} B of SRAM per PE for its vectors "
            f"and the bases {head}: {fix}"
        )
    if bytes_for(1, 1) > free:  # nothing the options set fits: the tiles are too tall
        raise SramBudgetError(
            f"one rank row of tiles of {nb} needs {bytes_for(1, 1):,} B of SRAM per PE (at "
            f"--rank-chunk 1 and --batch 1) {head}: compress with a smaller --nb or use a "
            "larger wafer"
        )
    if bytes_for(w, 1) > free:  # the rank chunk alone is too large
        fits_at = batch if bytes_for(1, batch) <= free else 1
        best = ledger.largest(lambda k: bytes_for(k, fits_at), 1, w)
        fix = f"at most --rank-chunk {best} fits" + (f" at --batch {fits_at}" if batch > 1 else "")
        if fits and not _runs(fits, best, fits_at, free):  # SRAM's largest is past the PEs
            least = least_fitting(fits, batch, free)
            fix = f"--rank-chunk {least} fits" if least else _smaller_batch(fits, w, batch, free)
        raise SramBudgetError(
            f"--rank-chunk {w} needs {bytes_for(w, batch):,} B of SRAM per PE {head}: "
            + (fix or f"no --rank-chunk fits a program's PEs as well: {LARGER}")
        )
    best = ledger.largest(lambda b: bytes_for(w, b), 1, batch)
    fix = f"at most --batch {best} fits" + (f" at --rank-chunk {w}" if rank_chunk else "")
    if fits:  # the largest batch whose plan fits the program rectangle too (hunt 77)
        fix = _smaller_batch(fits, rank_chunk, batch, free)
    raise SramBudgetError(
        f"--batch {batch} needs {bytes_for(w, batch):,} B of SRAM per PE for its vectors and "
        f"the bases {head}: " + (fix or f"no --batch fits a program's PEs as well: {LARGER}")
    )
