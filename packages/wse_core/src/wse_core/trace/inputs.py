"""`trace_from`'s inputs, checked before any layer is built: the grid, the SRAM ledger, the
named regions and the per-PE work, each refused in one `TraceError` line (a `WseError`).

Contract. A trace is built on a `rows x cols` grid of integers >= 1 within its spec's PE grid;
an SRAM ledger, if any, of that grid; regions that are `Region`s on the grid; per-PE work
keyed by names of the report's phases (a leaf's name or a group's above it) whose values are
`Region`s on the grid or `(rows, cols)` arrays of finite fractions in [0, 1]. Hunt 77: a NaN
fraction, a region off the grid and a grid past the wafer built traces `wse view` refused; a
grid of (0, 8) was NumPy's "zero-size array" ValueError; a misspelt phase name was silently
ignored (so was `wse_systems.trace.pipeline_traces`' "head", which named no phase: the head's
work spread over every PE of every wafer): a name that is no phase is refused, with a
suggestion.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from wse_core.cost.perf import Phase, Phases
from wse_core.cost.report import RunReport
from wse_core.errors import is_int, shown, shown_setting, suggest
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region, SramLedger
from wse_core.trace.schema import TraceError

__all__ = ["leaves", "grid_of", "check_sram", "checked_regions", "used_weights"]


def leaves(node: Phase | Phases, path: tuple[str, ...] = ()):
    """(leaf, path of group names above it, nearest last)."""
    if isinstance(node, Phase):
        yield node, path
        return
    for p in node.parts:
        yield from leaves(p, path + ((node.name,) if node.name else ()))


def grid_of(spec: WaferSpec, grid: Any, default: tuple[int, int]) -> tuple[int, int]:
    """The trace's `(rows, cols)`: `grid` (default `default`), two integers >= 1 within the
    spec's PE grid."""
    if grid is None:
        return default
    pair = tuple(grid) if isinstance(grid, tuple | list) else ()
    if len(pair) != 2 or not all(is_int(n) and n >= 1 for n in pair):
        raise TraceError(f"a trace's grid must be two integers >= 1, got {shown_setting(grid)}")
    rows, cols = int(pair[0]), int(pair[1])
    if rows > spec.pe_rows or cols > spec.pe_cols:
        raise TraceError(
            f"a trace's grid of {rows} x {cols} PEs does not fit the {spec.name} wafer's "
            f"{spec.pe_rows} x {spec.pe_cols} PEs"
        )
    return rows, cols


def check_sram(sram: SramLedger | None, shape: tuple[int, int]) -> None:
    if sram is not None and (sram.rows, sram.cols) != shape:
        raise TraceError(
            f"the SRAM ledger is {sram.rows} x {sram.cols} PEs; the trace's grid "
            f"{shape[0]} x {shape[1]}: give the ledger of the traced grid"
        )


def _on_grid(r: Any, shape: tuple[int, int], what: str) -> Region:
    """`r`, a Region whose rectangle lies on the `shape` grid (as `load` requires)."""
    if not isinstance(r, Region):
        raise TraceError(f"{what} must be a Region, got a {type(r).__name__}")
    rect = (r.row0, r.col0, r.rows, r.cols)
    if not all(is_int(v) and v >= 0 for v in rect) or not (
        r.row0 + r.rows <= shape[0] and r.col0 + r.cols <= shape[1]
    ):
        raise TraceError(
            f"{what} {shown(r.name)} is {list(rect)!s:.60} [row0, col0, rows, cols]; it must "
            f"lie within the {shape[0]} x {shape[1]} grid"
        )
    return r


def checked_regions(regions: Iterable[Any], shape: tuple[int, int]) -> list[Region]:
    """The named regions, each a Region on the grid."""
    return [_on_grid(r, shape, "region") for r in regions]


def _names(report: RunReport) -> set[str]:
    """The names per-PE work may use: every leaf's and every named group's."""
    out: set[str] = set()
    for leaf, path in leaves(report.phases):
        out.update((leaf.name, *path))
    return out


def _fractions(name: str, w: Any, shape: tuple[int, int]) -> np.ndarray:
    """per_pe_work[name] as a `shape` float64 array of finite fractions in [0, 1]."""
    want = (
        f"per_pe_work[{shown(name)}] must be a Region or a {shape} array of fractions in "
        "[0, 1] (of the phase's busiest-PE work each PE does)"
    )
    try:
        a = np.asarray(w, dtype=np.float64)
    except (TypeError, ValueError):
        raise TraceError(f"{want}, got a {type(w).__name__}") from None
    if a.shape != shape:
        raise TraceError(f"{want}, got shape {a.shape}")
    bad = int(np.count_nonzero(~np.isfinite(a)))  # NaN passed a range check (hunt 77)
    if bad:
        raise TraceError(f"{want}, got {bad:,} NaN or infinite values")
    if a.size and (a.min() < 0 or a.max() > 1 + 1e-12):
        raise TraceError(f"{want}, got values from {a.min():.3g} to {a.max():.3g}")
    return a


def used_weights(
    report: RunReport, shape: tuple[int, int], per_pe_work: Mapping[str, Any]
) -> dict[int, Any]:
    """Each leaf phase's `per_pe_work` entry (by id; None: every PE), the entry checked: a
    name of the report's phases, a Region on the grid or an array of fractions."""
    known = _names(report)
    for key in per_pe_work:
        if key not in known:
            raise TraceError(
                f"per_pe_work names {shown(key)}, not a phase of {shown(report.name)}"
                f"{suggest(str(key), known)}; its phases and groups: "
                f"{', '.join(sorted(known))[:200]}"
            )
    out: dict[int, Any] = {}
    checked: dict[str, Any] = {}  # one entry per name, shared by its leaves
    for leaf, path in leaves(report.phases):
        name = next((n for n in (leaf.name, *reversed(path)) if n in per_pe_work), None)
        if name is not None and name not in checked:
            w = per_pe_work[name]
            if isinstance(w, Region):
                checked[name] = _on_grid(w, shape, f"per_pe_work[{shown(name)}]")
            else:
                checked[name] = _fractions(name, w, shape)
        out[id(leaf)] = None if name is None else checked[name]
    return out
