"""What fits a PE's SRAM: the TLR-MVM planners' one refusal when a plan's bases and vector
buffers do not fit, in the words of the options a user sets.

A planner sizes a PE by `bytes_for(w, batch)`, non-decreasing in both: the bases grow with
the rank chunk w (`--rank-chunk`), the vector buffers with the batch (`--batch`).
`refuse_sram` names the one to change and the largest value of it that fits (hunt 69: the
refusal named the ledger's allocation, "'tlrmvm.vectors' needs 59200 B per PE", which a
user of `--batch 200` could not read as the batch, nor learn what would fit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from wse_core.errors import SramBudgetError
from wse_core.hw.sram import SramLedger

__all__ = ["refuse_sram"]


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
