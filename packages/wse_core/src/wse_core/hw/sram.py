"""The SRAM ledger: every kernel declares the bytes per PE of the fields it plans; over budget
is an error. The kernel allocates, once, where it plans a field (`wse_hpc`'s placements,
`grid.field`, the pipeline's plan); `Wafer.place` / `full` / `zeros` record nothing, since a
kernel places the same field many times (hunt 74: the docs said every placement allocated).

A ledger belongs to a wafer. Allocations are named and live in a region (a rectangle of PEs;
the default region is the whole grid). A PE's use is the sum of the allocations of every
region that covers it. Every PE also holds its program (code, stack, the runtime's buffers):
`reserved_bytes_per_pe` of its `bytes_per_pe` are never offered to data (`for_spec` takes
the spec's `code_stack_bytes_per_pe`, an assumption; hunt 81: the whole 48 kB was data's).
Going over the rest raises `SramBudgetError` naming the allocation, the region and one PE in
it, the bytes needed and the bytes free — never a silent spill. Planners ask what fits:
`free_bytes(region)`, `fits(...)` and `largest(...)` (the largest n whose per-PE bytes fit,
e.g. a batch, a Z-column length, layers per region); `reserve_note()` is the clause their
messages add so that "B free" says what the program holds, and `describe_use(summary)` the
words of a PE's use against the data budget, the program's share said beside it (hunt 82:
"39904 of 49152 B" set data against the whole PE).

The reserve is an assumption (`code_stack_bytes_per_pe`); a ledger of a spec notes it as
read (`wse_core.cost.reads`) where a planner sizes against the budget, in those three
queries and in a refused allocation, never where a wafer is merely built (hunt 82: every
`build_wafer` listed it, so fabric-collectives named a reserve that moves none of its rows
and a stencil whose fit it decides did not). `sized_reads()` gives what those queries read,
for a report built outside the block that placed the plan.

Every count is checked where it enters (PlacementError naming it): the grid and the budget are
integers >= 1, a region's corner and size integers inside the grid (a `Region` given to
`allocate` too), an allocation's bytes a whole number >= 0. Bool, NaN and fractions are
refused: rounding 2.9 B down under-counts, and a NaN budget let every allocation fit (hunt
67). Bytes may be a float with a whole value (a planner's product of sizes), counted exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from wse_core.errors import (
    PlacementError,
    SramBudgetError,
    is_finite,
    is_int,
    require_int,
    shown_setting,
)

if TYPE_CHECKING:
    from wse_core.cost.reads import Reads
    from wse_core.hw.description import WaferSpec

__all__ = ["Region", "Allocation", "SramLedger", "describe_use"]


@dataclasses.dataclass(frozen=True)
class Region:
    """A rectangle of logical PEs: rows [row0, row0 + rows), cols [col0, col0 + cols)."""

    name: str
    row0: int
    col0: int
    rows: int
    cols: int

    @property
    def num_pes(self) -> int:
        return self.rows * self.cols

    def overlaps(self, other: Region) -> bool:
        return not (
            self.row0 + self.rows <= other.row0
            or other.row0 + other.rows <= self.row0
            or self.col0 + self.cols <= other.col0
            or other.col0 + other.cols <= self.col0
        )

    def __str__(self) -> str:
        return f"{self.name} [{self.rows} x {self.cols} PEs at ({self.row0}, {self.col0})]"


@dataclasses.dataclass(frozen=True)
class Allocation:
    name: str
    bytes_per_pe: int
    region: Region


class SramLedger:
    """Per-PE SRAM accounting for a `rows` x `cols` grid with `bytes_per_pe` each, of which
    `reserved_bytes_per_pe` hold the program (never data's)."""

    def __init__(self, rows: int, cols: int, bytes_per_pe: int, reserved_bytes_per_pe: int = 0):
        for what, value in (("rows", rows), ("cols", cols), ("bytes_per_pe", bytes_per_pe)):
            require_int(f"an SRAM ledger's {what}", value, 1, error=PlacementError)
        require_int(
            "an SRAM ledger's reserved_bytes_per_pe",
            reserved_bytes_per_pe,
            0,
            bytes_per_pe - 1,
            error=PlacementError,
        )
        self.rows, self.cols, self.bytes_per_pe = rows, cols, bytes_per_pe
        self.reserved_bytes_per_pe = reserved_bytes_per_pe
        self.grid = Region("grid", 0, 0, rows, cols)
        self._allocs: list[Allocation] = []
        self._assumed = False  # the reserve is the spec's code_stack_bytes_per_pe (for_spec)
        self._sized = False  # a planner asked what fits (the reserve decided it)

    @classmethod
    def for_spec(
        cls, spec: WaferSpec, rows: int | None = None, cols: int | None = None
    ) -> SramLedger:
        """The ledger of `spec`'s PEs (its whole grid, or `rows` x `cols` of them): its SRAM,
        less its program's code and stack (`code_stack_bytes_per_pe`, noted as read only
        where a planner sizes against the rest: module docstring)."""
        ledger = cls(
            spec.pe_rows if rows is None else rows,
            spec.pe_cols if cols is None else cols,
            spec.sram_bytes_per_pe,
            spec.code_stack_bytes_per_pe,
        )
        ledger._assumed = True
        return ledger

    @property
    def data_bytes_per_pe(self) -> int:
        """What a PE offers data: its bytes less the program's."""
        return self.bytes_per_pe - self.reserved_bytes_per_pe

    def _budget(self) -> int:
        """`data_bytes_per_pe` where a fit is decided against it: the assumed reserve noted
        as read (module docstring)."""
        if self._assumed:
            from wse_core.cost.reads import read  # the cost model sits above the hardware

            read("code_stack_bytes_per_pe", float(self.reserved_bytes_per_pe))
            self._sized = True
        return self.data_bytes_per_pe

    def sized_reads(self) -> Reads | None:
        """The assumed reserve as read, where a planner has sized against this ledger's
        budget (None where none has, or the reserve is no assumption): for a report built
        outside the block that placed its plan (`RunReport.build(reads=...)`)."""
        if not self._sized:
            return None
        from wse_core.cost.reads import Reads

        got = Reads()
        got.add("code_stack_bytes_per_pe", float(self.reserved_bytes_per_pe))
        return got

    def reserve_note(self) -> str:
        """The clause a "B free" message adds: the program's share of each PE, assumed
        ("" without one)."""
        if not self.reserved_bytes_per_pe:
            return ""
        return (
            f" (of the {self.bytes_per_pe} B a PE holds, {self.reserved_bytes_per_pe} B are its "
            "program's code and stack, assumed: code_stack_bytes_per_pe)"
        )

    # Regions ---------------------------------------------------------------------------
    def region(self, name: str, row0: int, col0: int, rows: int, cols: int) -> Region:
        """A validated rectangle of the grid."""
        for what, value in (("row0", row0), ("col0", col0), ("rows", rows), ("cols", cols)):
            if not is_int(value):
                raise PlacementError(
                    f"region {name!r} {what} must be an integer (a PE index or count), got "
                    f"{shown_setting(value)}"
                )
        if rows <= 0 or cols <= 0:
            raise PlacementError(f"region {name!r} must have positive size, got {rows} x {cols}")
        if row0 < 0 or col0 < 0 or row0 + rows > self.rows or col0 + cols > self.cols:
            raise PlacementError(
                f"region {name!r} ({rows} x {cols} at ({row0}, {col0})) does not lie inside the "
                f"{self.rows} x {self.cols} PE grid"
            )
        return Region(name, row0, col0, rows, cols)

    # Queries ---------------------------------------------------------------------------
    def used_bytes(self, region: Region | None = None) -> int:
        """The most bytes in use on any PE of `region` (default: the whole grid)."""
        return self.fullest_pe(region)[0]

    def fullest_pe(self, region: Region | None = None) -> tuple[int, int, int]:
        """(bytes in use, row, col): the PE of `region` (default: the whole grid) whose use
        is greatest, the first in row-major order among ties (as NumPy's argmax)."""
        region = region or self.grid
        # Use is a sum of rectangle indicators; its maximum is attained at a point whose row
        # is some rectangle's first row and whose column is some rectangle's first column
        # (no rectangle starts between such a row and the next, so use only falls there);
        # the row-major first maximum is one of these points too.
        inside = [a.region for a in self._allocs if a.region.overlaps(region)]
        rows = {region.row0} | {max(r.row0, region.row0) for r in inside}
        cols = {region.col0} | {max(r.col0, region.col0) for r in inside}
        used, row, col = max((self._use_at(r, c), -r, -c) for r in rows for c in cols)
        return used, -row, -col

    def free_bytes(self, region: Region | None = None) -> int:
        """Bytes still free for data on the fullest PE of `region` (the program's aside)."""
        return self._budget() - self.used_bytes(region)

    def fits(self, bytes_per_pe: int, region: Region | None = None) -> bool:
        return bytes_per_pe <= self.free_bytes(region)

    def largest(
        self,
        bytes_for: Callable[[int], int],
        lo: int = 1,
        hi: int = 1 << 40,
        region: Region | None = None,
    ) -> int:
        """The largest n in [lo, hi] with bytes_for(n) fitting (bytes_for non-decreasing).

        Returns lo - 1 when even `lo` does not fit.
        """
        free = self.free_bytes(region)
        if bytes_for(lo) > free:
            return lo - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if bytes_for(mid) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo

    @property
    def allocations(self) -> tuple[Allocation, ...]:
        return tuple(self._allocs)

    def _use_at(self, r: int, c: int) -> int:
        return sum(
            a.bytes_per_pe
            for a in self._allocs
            if a.region.row0 <= r < a.region.row0 + a.region.rows
            and a.region.col0 <= c < a.region.col0 + a.region.cols
        )

    # Changes ---------------------------------------------------------------------------
    def allocate(self, name: str, bytes_per_pe: int, region: Region | None = None) -> Allocation:
        """Reserve `bytes_per_pe` on every PE of `region`; SramBudgetError if it does not fit."""
        region = self.grid if region is None else self._inside(region)
        bytes_per_pe = _whole_bytes(name, bytes_per_pe)
        if any(a.name == name for a in self._allocs):
            raise PlacementError(f"allocation {name!r} exists already; free it first")
        used, row, col = self.fullest_pe(region)
        free = self.data_bytes_per_pe - used
        if bytes_per_pe > free:
            self._budget()  # the reserve decided the refusal: noted as read
            asked = shown_setting(bytes_per_pe)  # 10**400 B is not echoed digit by digit
            raise SramBudgetError(  # the PE named is the fullest one (hunt 76: was the corner)
                f"SRAM over budget: allocation {name!r} needs {asked} B per PE in region "
                f"{region} but PE ({row}, {col}) has {free} B free "
                f"({used} of {self.data_bytes_per_pe} B in use){self.reserve_note()}"
            )
        alloc = Allocation(name, bytes_per_pe, region)
        self._allocs.append(alloc)
        return alloc

    def _inside(self, region: Region) -> Region:
        """`region` checked as `region(...)` checks one built here (a Region is a plain
        dataclass: anyone can build one off the grid)."""
        if not isinstance(region, Region):
            raise PlacementError(
                f"an allocation's region must be a Region, got {type(region).__name__}"
            )
        return self.region(region.name, region.row0, region.col0, region.rows, region.cols)

    def free(self, name: str) -> None:
        before = len(self._allocs)
        self._allocs = [a for a in self._allocs if a.name != name]
        if len(self._allocs) == before:
            raise PlacementError(f"no allocation named {name!r} to free")

    def summary(self) -> dict[str, object]:
        """Bytes per PE by allocation, the peak in use, and the budget."""
        return {
            "bytes_per_pe": self.bytes_per_pe,
            "reserved_bytes_per_pe": self.reserved_bytes_per_pe,
            "data_bytes_per_pe": self.data_bytes_per_pe,
            "used_bytes_per_pe": self.used_bytes(),
            "allocations": [
                {"name": a.name, "bytes_per_pe": a.bytes_per_pe, "region": str(a.region)}
                for a in self._allocs
            ],
        }


def describe_use(summary: Mapping[str, Any]) -> str:
    """A PE's use against what it offers data, from `SramLedger.summary()`: "39,904 of the
    47,104 B a PE holds for data (its 49,152 B less 2,048 B of program, assumed)", data
    against data (hunt 82: "39904 of 49152 B" set data against the whole PE); a summary
    without a reserve, against the PE's bytes."""
    used, whole = int(summary["used_bytes_per_pe"]), int(summary["bytes_per_pe"])
    reserve = int(summary.get("reserved_bytes_per_pe", 0))
    if not reserve:
        return f"{used:,} of the {whole:,} B a PE holds"
    return (
        f"{used:,} of the {whole - reserve:,} B a PE holds for data (its {whole:,} B less "
        f"{reserve:,} B of program, assumed: code_stack_bytes_per_pe)"
    )


def _whole_bytes(name: str, value: object) -> int:
    """An allocation's bytes per PE as an int: an integer, or a float with a whole value
    (module docstring), >= 0."""
    whole = is_int(value) or is_finite(value) and float(value).is_integer()  # type: ignore[arg-type]
    if not whole or value < 0:  # type: ignore[operator]
        raise PlacementError(
            f"allocation {name!r} must ask for a whole number of bytes >= 0 per PE, got "
            f"{shown_setting(value)}"
        )
    return int(value)  # type: ignore[call-overload]
