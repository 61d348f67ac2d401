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
PEs are kept exact; larger ones (the full 762 x 1176 WSE-3) are built in square blocks of
`block` x `block` PEs, each cell its PEs' values by the layer's reduction, so sums and maxima
survive (what `downsample` makes of the full grid), computed per rectangle of equal values,
never per PE (`_Cells`). Dead PEs are a list of physical (row, col); named regions, SRAM
allocations and each leaf phase's critical PE (full-grid coordinates) live in the header.

The inputs are checked first (`wse_core.trace.inputs`: the grid within the spec's, names of
the report's phases, finite fractions, regions on the grid) and the trace built is refused,
as `TraceError`, where `load` would refuse its file (`_loadable`, the reader's own checks):
what `trace_from` returns, `save` writes and `wse view` reads (hunt 77).

The schema (`PeTrace`, `LAYERS`, `MAX_CELLS`, `downsample`, `PeTrace.save`) lives in
`wse_core.trace.schema`, the checked reading of its file (`load`) in `wse_core.trace.reader`;
both are re-exported here.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from wse_core.cost.perf import Phase, Phases, Timing
from wse_core.cost.report import RunReport
from wse_core.errors import numpy_file_problem, shown
from wse_core.hw.defects import DefectMap, remap
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region, SramLedger
from wse_core.trace import reader
from wse_core.trace.inputs import check_sram, checked_regions, grid_of, leaves, used_weights
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
        parts = {p: getattr(c, f"{p}_cycles") * n for p in PARTS}
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


class _Cells:
    """The grid cut into rectangles on which every layer is constant (by the block edges, the
    regions' and allocations' edges, and the rows and columns where a per-PE array changes):
    each layer is computed once a rectangle and reduced to blocks, so memory grows with the
    blocks, not the PEs (hunt 72: every layer at full size before `downsample` took 9.2 GB,
    then a MemoryError, on a 12,000 x 12,000 spec)."""

    def __init__(self, shape: tuple[int, int], block: int, cuts: tuple[np.ndarray, ...]):
        self.block = block
        self.edges = tuple(
            np.unique(np.concatenate([np.arange(0, n, block), np.clip(c, 0, n), [n]]))
            for n, c in zip(shape, cuts, strict=True)
        )
        self.shape = (len(self.edges[0]) - 1, len(self.edges[1]) - 1)
        # each block's first band (band edges include every block edge)
        self._starts = tuple(np.searchsorted(e, np.arange(0, e[-1], block)) for e in self.edges)

    def rect(self, r: Region) -> tuple[slice, ...]:
        """The rectangles inside `r` (clipped to the grid), as slices of `shape`."""
        ends = ((r.row0, r.row0 + r.rows), (r.col0, r.col0 + r.cols))
        return tuple(
            slice(*(int(np.searchsorted(e, np.clip(x, 0, e[-1]))) for x in lohi))
            for e, lohi in zip(self.edges, ends, strict=True)
        )

    def squeeze(self, w: np.ndarray) -> np.ndarray:
        """A per-PE array's value on each rectangle (its first PE's; all are equal)."""
        return w[np.ix_(self.edges[0][:-1], self.edges[1][:-1])]

    def blocks(self, values: Any, reduction: str) -> np.ndarray:
        """Each block's sum (values times PEs) or max of per-rectangle values."""
        v = np.broadcast_to(np.asarray(values, dtype=np.float64), self.shape)
        ufunc: Any = np.add if reduction == "sum" else np.maximum
        if reduction == "sum":
            v = v * np.outer(*(np.diff(e).astype(np.float64) for e in self.edges))
        return ufunc.reduceat(ufunc.reduceat(v, self._starts[0], 0), self._starts[1], 1)


def _breaks(w: np.ndarray) -> np.ndarray:
    """The rows where `w` differs from the row before (a bool temporary, an eighth of `w`)."""
    return 1 + np.flatnonzero((w[1:] != w[:-1]).any(axis=1))


def _cuts(used: dict[int, Any], rects: list[Region]) -> tuple[np.ndarray, np.ndarray]:
    """Where the layers may change value: the rectangles' edges and the arrays' changes."""
    arrays = {id(w): w for w in used.values() if isinstance(w, np.ndarray)}.values()
    edges = [[(r.row0, r.row0 + r.rows) for r in rects], [(r.col0, r.col0 + r.cols) for r in rects]]
    return tuple(  # type: ignore[return-value]
        np.concatenate(
            [np.ravel(np.asarray(e, np.int64)), *(_breaks(w if a == 0 else w.T) for w in arrays)]
        )
        for a, e in enumerate(edges)
    )


def _rect(r: Region) -> list[int]:
    return [int(r.row0), int(r.col0), int(r.rows), int(r.cols)]  # JSON ints, as load reads


def _weights(used: dict[int, Any], cells: _Cells) -> dict[int, Any]:
    """Each leaf's weight per rectangle of `cells` (1.0: every PE), one array per entry."""
    made: dict[int, Any] = {id(None): 1.0}
    for w in used.values():
        if id(w) not in made and isinstance(w, Region):
            made[id(w)] = np.zeros(cells.shape)
            made[id(w)][cells.rect(w)] = 1.0
        elif id(w) not in made:
            made[id(w)] = cells.squeeze(w)
    return {leaf: made[id(w)] for leaf, w in used.items()}


def _sram_layer(ledger: SramLedger | None, cells: _Cells):
    layer = np.zeros(cells.shape)
    if ledger is None:
        return layer, []
    allocs = []
    for a in ledger.allocations:
        r = a.region
        layer[cells.rect(r)] += a.bytes_per_pe
        allocs.append({"name": a.name, "bytes_per_pe": a.bytes_per_pe, "region": _rect(r)})
    return layer, allocs


def _detours(remap: Any, cells: _Cells) -> np.ndarray:
    """Each block's extra physical hops on its PEs' outgoing E and S links (0 without a
    remap), summed from the remap's own link arrays with no per-PE copy."""
    rows, cols = int(cells.edges[0][-1]), int(cells.edges[1][-1])
    out = np.zeros((len(cells._starts[0]), len(cells._starts[1])))
    if remap is None:
        return out
    b = cells.block
    for links in (remap.link_hops(1)[:rows, : cols - 1], remap.link_hops(0)[: rows - 1, :cols]):
        if links.size == 0 or (not any(links.strides) and links.flat[0] == 1):
            continue  # no link, or every link one hop (the identity repair)
        rs, cs = np.arange(0, links.shape[0], b), np.arange(0, links.shape[1], b)
        hops = np.add.reduceat(np.add.reduceat(links, rs, 0), cs, 1).astype(np.float64)
        count = np.outer(np.diff([*rs, links.shape[0]]), np.diff([*cs, links.shape[1]]))
        out[: len(rs), : len(cs)] += hops - count
    return out


def _require_memory(shape: tuple[int, int], cells: _Cells, root: Phases, arrays: int) -> None:
    """Refuse a trace whose per-rectangle arrays will not fit, before building them: layers,
    distinct weights, and the phase tree's accumulators (busy, parts, links) at each level
    and its child's."""
    from wse_core.host.memory import require

    def _depth(node: Phase | Phases) -> int:
        return 0 if isinstance(node, Phase) else 1 + max(map(_depth, node.parts), default=0)

    depth = _depth(root)
    per_cell = 8 * (len(LAYERS) + arrays + 2 * (depth + 1) * (1 + len(PARTS) + len(DIRECTIONS)))
    require(
        f"the per-PE trace of a {shape[0]:,} x {shape[1]:,} PE grid "
        f"({cells.shape[0]:,} x {cells.shape[1]:,} rectangles of equal values)",
        per_cell * cells.shape[0] * cells.shape[1],
        fits=lambda b: (
            f"at most {b // per_cell:,} rectangles fit: give per-PE work as "
            "Regions or arrays with fewer distinct rows and columns"
        ),
    )


def _critical_pe(w: Any, busy: Any, cells: _Cells) -> list[int] | None:
    """The PE doing the most of a phase (ties: the one with the most busy cycles overall, then
    the first in row-major order, as np.argmax over the PEs)."""
    w = np.broadcast_to(np.asarray(w, dtype=np.float64), cells.shape)
    top = w.max()
    if top <= 0:
        return None
    score = np.where(w >= top, np.broadcast_to(busy, cells.shape), -np.inf)
    r, c = np.unravel_index(int(np.argmax(score)), cells.shape)  # its rectangle's first PE
    return [int(cells.edges[0][r]), int(cells.edges[1][c])]


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
    whole = (spec.pe_rows, spec.pe_cols) if is_spec else (wafer_or_spec.rows, wafer_or_spec.cols)
    shape = grid_of(spec, grid, whole)
    sram = sram if sram is not None or is_spec else wafer_or_spec.sram
    check_sram(sram, shape)
    regions = checked_regions(regions, shape)
    used = used_weights(report, shape, per_pe_work or {})
    rects = [w for w in used.values() if isinstance(w, Region)]
    rects += [a.region for a in sram.allocations] if sram is not None else []
    cells = _Cells(shape, _block(shape, max_cells), _cuts(used, rects))
    distinct = len({id(w) for w in used.values() if w is not None})
    _require_memory(shape, cells, report.phases, distinct)
    weights = _weights(used, cells)
    busy, parts, links = _tree(report.phases, report.predicted, 1.0, lambda p: weights[id(p)])
    sram_layer, allocs = _sram_layer(sram, cells)
    per_rect = {"sram_bytes": sram_layer, "busy_cycles": busy}
    per_rect |= {f"{p}_cycles": parts[p] for p in PARTS}
    per_rect |= {f"link_{d}": links[d] for d in DIRECTIONS}
    layers = {
        k.key: cells.blocks(per_rect[k.key], k.reduction) for k in LAYERS if k.key in per_rect
    }
    if not is_spec:
        defects, repaired = wafer_or_spec.defects, wafer_or_spec.remap
    else:
        repaired = None if defects is None else remap(spec, defects)
    layers["detour_hops"] = _detours(repaired, cells)
    phases = _phase_rows(report, weights, busy, cells)
    shown = [{"name": r.name, "rect": _rect(r)} for r in regions]
    trace = PeTrace(
        name=report.name,
        wafer=spec.name,
        rows=shape[0],
        cols=shape[1],
        block=cells.block,
        layers=layers,
        dead=np.argwhere(defects.dead) if defects is not None else np.zeros((0, 2), np.int64),
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
            # the SRAM layer's capacity: the ledger's PE, else the spec's (hunt 82 L2)
            "sram_bytes_per_pe": spec.sram_bytes_per_pe if sram is None else sram.bytes_per_pe,
            "code_stack_bytes_per_pe": (
                spec.code_stack_bytes_per_pe if sram is None else sram.reserved_bytes_per_pe
            ),
        },
    )
    return _loadable(trace)


def _loadable(trace: PeTrace) -> PeTrace:
    """`trace`, if `load` reads back what `PeTrace.save` writes of it; else a TraceError naming
    what the reader would refuse (its own checks, on the header as JSON gives it back).
    Hunt 77: traces were built and saved that `wse view` then refused."""
    try:
        head = json.loads(json.dumps(trace.header()))
        reader._checked(reader._trace(head, {"dead": np.asarray(trace.dead), **trace.layers}))
        reader._require_plain(head, "")  # after: a NaN layer is named, not its total
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise TraceError(
            f"trace {shown(trace.name)} is not one wse view reads: {numpy_file_problem(e)}"
        ) from None
    return trace


def _block(shape: tuple[int, int], max_cells: int) -> int:
    """The smallest square block whose grid of cells holds at most `max_cells` (`load`
    refuses more). The square root alone overshot by a row and a column of edge blocks:
    725 x 723 PEs in 2 x 2 blocks are 363 x 362 = 131,406 cells (hunt 64)."""
    rows, cols = shape
    block = max(1, math.ceil(math.sqrt(rows * cols / max_cells)))
    while -(-rows // block) * -(-cols // block) > max_cells:  # a step or two
        block += 1
    return block


def _phase_rows(report: RunReport, weights: dict[int, Any], busy: Any, cells: _Cells) -> list[dict]:
    rows = []
    timings = {id(p): t for p, t in _pairs(report.phases, report.predicted)}
    walk = zip(leaves(report.phases), report.phases.leaves(), strict=True)
    for (leaf, path), (_, repeats) in walk:
        t = timings[id(leaf)]
        rows.append(
            {
                "name": leaf.name,
                "path": "/".join((*path, leaf.name)),
                "cycles": t.cost.cycles * repeats if t.cost else 0.0,  # all repeats
                "bound": t.bound,
                "critical_pe": _critical_pe(weights[id(leaf)], busy, cells),
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
    ledger = SramLedger.for_spec(spec)
    for a in report.sram.get("allocations", []):
        ledger.allocate(a["name"], a["bytes_per_pe"], region)
    work = {leaf.name: region for leaf, _ in report.phases.leaves()}
    trace = trace_from(
        spec, report, per_pe_work=work, regions=[region], sram=ledger, defects=defects
    )
    return _no_links_out(trace, region)


# Per direction, the lines of a region whose PEs send that way: all but the edge line it
# points at ((first row, first col) shifts of the region's start and end).
_SENDING = {"N": (1, 0, 0, 0), "S": (0, 0, -1, 0), "W": (0, 1, 0, 0), "E": (0, 0, 0, -1)}


def _no_links_out(trace: PeTrace, region: Region) -> PeTrace:
    """`trace` with no wavelet leaving `region` (hunt 82: a Dirichlet stencil's column 7
    showed 200 wavelets east where it has no east neighbour): a region that runs every phase
    alone (`trace_uniform`) sends each link word to a PE of its own, so its edge line toward
    a direction sends nothing that way, on the wafer's edge or not. Its link layers are
    uniform on the region (every phase's weight 1 there), so each block keeps the share of
    its region PEs that send that way, exactly."""
    b, layers = trace.block, dict(trace.layers)

    def inside(lo: int, hi: int, n: int, cells: int) -> np.ndarray:  # PEs of [lo, hi) a block
        start = np.arange(cells) * b
        return np.clip(np.minimum(start + b, min(hi, n)) - np.maximum(start, lo), 0, None)

    r0, c0 = region.row0, region.col0
    r1, c1 = r0 + region.rows, c0 + region.cols
    for d, (dr0, dc0, dr1, dc1) in _SENDING.items():
        a = layers[f"link_{d}"]
        whole = np.outer(
            inside(r0, r1, trace.rows, a.shape[0]), inside(c0, c1, trace.cols, a.shape[1])
        )
        send = np.outer(
            inside(r0 + dr0, r1 + dr1, trace.rows, a.shape[0]),
            inside(c0 + dc0, c1 + dc1, trace.cols, a.shape[1]),
        )
        share = np.divide(send, whole, out=np.zeros(a.shape), where=whole > 0)
        layers[f"link_{d}"] = np.asarray(a, np.float64) * share
    return dataclasses.replace(trace, layers=layers)
