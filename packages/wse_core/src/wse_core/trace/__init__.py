"""Per-PE traces of a run: where the bytes, the busy cycles and the wavelets lie on the wafer.

Contract. `trace_from(wafer_or_spec, report, per_pe_work=..., regions=..., sram=...)` spreads a
`RunReport` over the PEs of its `rows x cols` logical grid. A phase's `Work` is, by the cost
model's contract, the work of its busiest PE; `per_pe_work` says, per phase (a leaf's name or
the name of a group above it, nearest first), what fraction of that work each PE does: a
`(rows, cols)` array with maximum 1, or a `Region` (1 inside, 0 outside); a phase it does not
name runs on every PE. Each PE's numbers are then the report's own, scaled:

    layer            unit       block reduction   per PE
    sram_bytes       B          sum               the ledger's allocations covering the PE
    busy_cycles      cycles     max               the phase tree evaluated on the PE (serial
                                                  adds, overlap takes the max), host I/O out
    compute_cycles,
    sram_cycles,
    fabric_cycles,
    latency_cycles   cycles     max               each resource's cycles summed over phases
    link_N/S/E/W     wavelets   sum               32-bit words leaving the PE that way
    detour_hops      hops       sum               physical hops beyond one on its E and S links

so that the busiest PE's `busy_cycles` equals `critical_cycles(report)` (with weights of
maximum 1) and the `sram_bytes` layer sums to the ledger's total. Grids of up to `max_cells`
PEs are kept exact; larger ones (the full 762 x 1176 WSE-3) are reduced in square blocks of
`block` x `block` PEs by each layer's reduction, so sums and maxima survive downsampling
(`downsample`). Dead PEs are a list of physical (row, col); named regions, SRAM allocations
and each leaf phase's critical PE (full-grid coordinates) live in the header.

The schema (`PeTrace`, `LAYERS`, `MAX_CELLS`, `downsample`, `PeTrace.save`) lives in
`wse_core.trace.schema`, the checked reading of its file (`load`) in `wse_core.trace.reader`;
both are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from wse_core.cost.perf import Phase, Phases, Timing
from wse_core.cost.report import RunReport
from wse_core.hw.defects import DefectMap, remap
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region, SramLedger
from wse_core.trace.reader import load
from wse_core.trace.schema import (
    DIRECTIONS,
    LAYERS,
    MAX_CELLS,
    PARTS,
    SCHEMA_VERSION,
    LayerSpec,
    PeTrace,
    TraceError,
    downsample,
)

__all__ = [
    "SCHEMA_VERSION",
    "LAYERS",
    "MAX_CELLS",
    "TraceError",
    "LayerSpec",
    "PeTrace",
    "trace_from",
    "trace_uniform",
    "critical_cycles",
    "downsample",
    "load",
]


# Building -------------------------------------------------------------------------------


def critical_cycles(report: RunReport) -> float:
    """The report's predicted cycles on the wafer: its phase tree in cycles, host I/O out."""
    return float(_tree(report.phases, report.predicted, 1.0, lambda _p: 1.0)[0])


def _tree(node: Phase | Phases, timing: Timing, k: float, weight_of):
    """(busy cycles, {part: cycles}, {direction: words}) of a phase subtree, scaled by the
    per-PE weight of each leaf (a scalar or an array) and `k`, the repeats above it."""
    if isinstance(node, Phase):
        c, w = timing.cost, weight_of(node)
        assert c is not None
        n = k * node.repeat * w
        parts = {
            "compute": c.compute_cycles * n,
            "sram": c.sram_cycles * n,
            "fabric": c.fabric_cycles * n,
            "latency": c.latency_cycles * n,
        }
        links = {d: node.work.links.get(d, 0.0) * n for d in DIRECTIONS}
        return c.cycles * n, parts, links
    # Accumulate child by child: keeping every child's per-PE arrays alive at once cost
    # gigabytes on a full wafer with hundreds of leaf phases.
    busy: Any = None
    parts = dict.fromkeys(PARTS, 0.0)
    links = dict.fromkeys(DIRECTIONS, 0.0)
    for p, t in zip(node.parts, timing.children, strict=True):
        kid_busy, kid_parts, kid_links = _tree(p, t, k * node.repeat, weight_of)
        if busy is None:
            busy = kid_busy
        elif node.mode == "serial":
            busy = busy + kid_busy
        else:
            busy = np.maximum(busy, kid_busy)
        parts = {q: parts[q] + kid_parts[q] for q in PARTS}
        links = {d: links[d] + kid_links[d] for d in DIRECTIONS}
    return (0.0 if busy is None else busy), parts, links


def _leaves(node: Phase | Phases, path: tuple[str, ...] = ()):
    """(leaf, path of group names above it, nearest last)."""
    if isinstance(node, Phase):
        yield node, path
        return
    for p in node.parts:
        yield from _leaves(p, path + ((node.name,) if node.name else ()))


def _weights(report: RunReport, shape: tuple[int, int], per_pe_work) -> dict[int, Any]:
    """Per-PE weight of every leaf phase (by id), checked to have maximum 1."""
    out: dict[int, Any] = {}
    checked: dict[str, np.ndarray] = {}  # one array per name, shared by its leaves
    for leaf, path in _leaves(report.phases):
        name = next((n for n in (leaf.name, *reversed(path)) if n in per_pe_work), None)
        if name is None:
            out[id(leaf)] = 1.0
            continue
        if name in checked:
            out[id(leaf)] = checked[name]
            continue
        w = per_pe_work[name]
        if isinstance(w, Region):
            arr = np.zeros(shape)
            arr[w.row0 : w.row0 + w.rows, w.col0 : w.col0 + w.cols] = 1.0
            w = arr
        w = np.asarray(w, dtype=np.float64)
        if w.shape != shape or w.min() < 0 or w.max() > 1 + 1e-12:
            raise ValueError(
                f"per_pe_work[{name!r}] must be a {shape} array in [0, 1] (the fraction of the "
                f"phase's busiest-PE work each PE does), got shape {w.shape}"
            )
        out[id(leaf)] = checked[name] = w
    return out


def _sram_layer(ledger: SramLedger | None, shape: tuple[int, int]):
    layer = np.zeros(shape)
    if ledger is None:
        return layer, []
    if (ledger.rows, ledger.cols) != shape:
        raise ValueError(f"the SRAM ledger is {ledger.rows} x {ledger.cols}; the grid {shape}")
    allocs = []
    for a in ledger.allocations:
        r = a.region
        layer[r.row0 : r.row0 + r.rows, r.col0 : r.col0 + r.cols] += a.bytes_per_pe
        rect = [r.row0, r.col0, r.rows, r.cols]
        allocs.append({"name": a.name, "bytes_per_pe": a.bytes_per_pe, "region": rect})
    return layer, allocs


def _detours(remap: Any, shape: tuple[int, int]) -> np.ndarray:
    """Extra physical hops on each PE's outgoing E and S links (0 without a remap)."""
    rows, cols = shape
    out = np.zeros(shape)
    if remap is None:
        return out
    ew = remap.link_hops(1)[:rows, : cols - 1] - 1
    ns = remap.link_hops(0)[: rows - 1, :cols] - 1
    out[:, : cols - 1] += ew
    out[: rows - 1, :] += ns
    return out


def _full(x: Any, shape: tuple[int, int]) -> np.ndarray:
    return np.broadcast_to(np.asarray(x, dtype=np.float64), shape).copy()


def _critical_pe(w: Any, busy: np.ndarray) -> list[int] | None:
    """The PE doing the most of a phase (ties: the one with the most busy cycles overall)."""
    w = np.broadcast_to(np.asarray(w, dtype=np.float64), busy.shape)
    top = w.max()
    if top <= 0:
        return None
    score = np.where(w >= top, busy, -np.inf)
    r, c = np.unravel_index(int(np.argmax(score)), busy.shape)
    return [int(r), int(c)]


def trace_from(
    wafer_or_spec: Any,
    report: RunReport,
    *,
    per_pe_work: Mapping[str, np.ndarray | Region] | None = None,
    regions: Iterable[Region] = (),
    sram: SramLedger | None = None,
    grid: tuple[int, int] | None = None,
    defects: DefectMap | None = None,
    max_cells: int = MAX_CELLS,
) -> PeTrace:
    """Spread `report` over the PEs of a `Wafer` (its grid, ledger and defects) or a
    `WaferSpec` (its whole grid; `defects` if given). See the module docstring for the
    layers."""
    is_spec = isinstance(wafer_or_spec, WaferSpec)
    spec: WaferSpec = wafer_or_spec if is_spec else wafer_or_spec.spec
    if grid is None:
        grid = (spec.pe_rows, spec.pe_cols) if is_spec else (wafer_or_spec.rows, wafer_or_spec.cols)
    shape = (int(grid[0]), int(grid[1]))
    sram = sram if sram is not None or is_spec else wafer_or_spec.sram
    weights = _weights(report, shape, per_pe_work or {})
    busy, parts, links = _tree(report.phases, report.predicted, 1.0, lambda p: weights[id(p)])
    sram_layer, allocs = _sram_layer(sram, shape)
    layers = {"sram_bytes": sram_layer, "busy_cycles": _full(busy, shape)}
    layers |= {f"{p}_cycles": _full(parts[p], shape) for p in PARTS}
    layers |= {f"link_{d}": _full(links[d], shape) for d in DIRECTIONS}
    if not is_spec:
        defects, repaired = wafer_or_spec.defects, wafer_or_spec.remap
    else:
        repaired = None if defects is None else remap(spec, defects)
    layers["detour_hops"] = _detours(repaired, shape)
    phases = _phase_rows(report, weights, layers["busy_cycles"])
    shown = [{"name": r.name, "rect": [r.row0, r.col0, r.rows, r.cols]} for r in regions]
    trace = PeTrace(
        name=report.name,
        wafer=spec.name,
        rows=shape[0],
        cols=shape[1],
        block=1,
        layers=layers,
        dead=np.argwhere(defects.dead).astype(np.int64)
        if defects is not None
        else np.zeros((0, 2), np.int64),
        physical_shape=(spec.physical_rows, spec.physical_cols),
        phases=phases,
        allocations=allocs,
        regions=shown,
        meta={
            "clock_hz": spec.clock_hz,
            "units": report.units,
            "predicted_s": report.predicted_s,
            "critical_cycles": critical_cycles(report),
            "critical_phase": report.predicted.critical().name,
            "bound": report.bound,
        },
    )
    block = _block(shape, max_cells)
    return downsample(trace, block) if block > 1 else trace


def _block(shape: tuple[int, int], max_cells: int) -> int:
    """The smallest square block whose grid of cells holds at most `max_cells` (`load`
    refuses more). The square root alone overshot by a row and a column of edge blocks:
    725 x 723 PEs in 2 x 2 blocks are 363 x 362 = 131,406 cells (hunt 64)."""
    rows, cols = shape
    block = max(1, math.ceil(math.sqrt(rows * cols / max_cells)))
    while -(-rows // block) * -(-cols // block) > max_cells:  # a step or two
        block += 1
    return block


def _phase_rows(report: RunReport, weights: dict[int, Any], busy: np.ndarray) -> list[dict]:
    rows = []
    timings = {id(p): t for p, t in _pairs(report.phases, report.predicted)}
    walk = zip(_leaves(report.phases), report.phases.leaves(), strict=True)
    for (leaf, path), (_, repeats) in walk:
        t = timings[id(leaf)]
        rows.append(
            {
                "name": leaf.name,
                "path": "/".join((*path, leaf.name)),
                "cycles": t.cost.cycles * repeats if t.cost else 0.0,  # all repeats
                "bound": t.bound,
                "critical_pe": _critical_pe(weights[id(leaf)], busy),
            }
        )
    return rows


def _pairs(node: Phase | Phases, timing: Timing):
    if isinstance(node, Phase):
        yield node, timing
        return
    for p, t in zip(node.parts, timing.children, strict=True):
        yield from _pairs(p, t)


def trace_uniform(
    spec: WaferSpec,
    report: RunReport,
    *,
    region: Region,
    defects: DefectMap | None = None,
) -> PeTrace:
    """Every PE of `region` on `spec`'s whole grid runs every phase of `report` (e.g. a
    stencil's Z columns: one per PE of the X x Y grid); `report.sram`'s allocations
    (`SramLedger.summary()`) lie on `region`, which is the trace's one named region."""
    ledger = SramLedger(spec.pe_rows, spec.pe_cols, spec.sram_bytes_per_pe)
    for a in report.sram.get("allocations", []):
        ledger.allocate(a["name"], a["bytes_per_pe"], region)
    work = {leaf.name: region for leaf, _ in report.phases.leaves()}
    return trace_from(
        spec, report, per_pe_work=work, regions=[region], sram=ledger, defects=defects
    )
