"""One wafer's regions: a pipeline's entries (a region's name, layers and bytes) laid out as
bands of PE rows in column strips, each declared in its own SRAM ledger.

Contract. `place_on_wafer(spec, wafer, entries, need, layout, head_rows)` gives each entry a
band of rows of its column strip (`"banded"`: one strip, the whole width; `"compact"`:
`compact_strips` strips, so that each region is near square), in proportion to its bytes;
with `head_rows`, the head (the first entry of wafer 0) takes that many rows of the first
strip and the other entries share the rest of the wafer in proportion to their bytes. A
strip's regions fill its rows (a strip that bytes give no entry stays idle). It returns one
`StagePlan` per entry, or raises `PipelinePlanError` with the numbers (a head or the rest
that cannot hold its bytes, a region whose bytes overflow its PEs). `data_note(spec)` is the
clause a "no number of wafers holds it" refusal ends with: a PE's bytes for data and the
program's reserve beside them.
`wse_systems.pipeline.plan_pipeline` makes the entries; `to_edge` and `compact_strips` are
the geometry the cost model reads.
"""

from __future__ import annotations

import dataclasses
import math

from wse_core.errors import SramBudgetError
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region, SramLedger

__all__ = [
    "GB",
    "PipelinePlanError",
    "StagePlan",
    "check_head_rows",
    "compact_strips",
    "data_note",
    "place_on_wafer",
    "split_even",
    "to_edge",
]

GB = 1e9


class PipelinePlanError(SramBudgetError):
    """The model does not fit the given wafers as asked."""


@dataclasses.dataclass(frozen=True)
class StagePlan:
    """One region: which layers (or "head"), where, and its bytes (whole region and per PE)."""

    name: str
    wafer: int
    region: Region
    layers: tuple[int, int]  # [start, stop); (0, 0) for the head region
    weight_bytes: int
    kv_bytes: int
    act_bytes: int
    # of act_bytes, the activations of the one item the region works on, whatever the users
    # in flight (the rest grows with them: `user_act_bytes`); `wse_systems.pipeline` sets it
    item_act_bytes: int = 0

    @property
    def user_act_bytes(self) -> int:
        """Activations held for the users in flight beside the item worked on (all users')."""
        return self.act_bytes - self.item_act_bytes

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.act_bytes

    @property
    def bytes_per_pe(self) -> int:
        return math.ceil(self.total_bytes / self.region.num_pes)

    @property
    def num_layers(self) -> int:
        return self.layers[1] - self.layers[0]


def split_even(n: int, parts: int) -> list[tuple[int, int]]:
    """[start, stop) of `parts` contiguous groups of n items, sizes differing by <= 1."""
    bounds = [i * n // parts for i in range(parts + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _rows_by_bytes(total_rows: int, sizes: list[int]) -> list[int]:
    """PE rows per region in proportion to bytes, >= 1 each (largest remainder)."""
    weight = sum(sizes) or 1
    spare = total_rows - len(sizes)
    exact = [spare * s / weight for s in sizes]
    rows = [1 + int(e) for e in exact]
    order = sorted(range(len(sizes)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in order[: total_rows - sum(rows)]:
        rows[i] += 1
    return rows


def to_edge(region: Region, spec: WaferSpec, *, rows_above: int = 0, rows_below: int = 0) -> int:
    """Hops from `region` (placed on `spec`'s PE rows) to the nearest edge of its wafer (0 for
    a band that spans it), the wafer having `rows_above` more PE rows above those and
    `rows_below` below (a footprint's place on it: `PipelinePlan.rows_above`; session 85:
    a footprint's last row was taken for the wafer's edge)."""
    r1, c1 = region.row0 + region.rows, region.col0 + region.cols
    return min(rows_above + region.row0, rows_below + spec.pe_rows - r1, region.col0,
               spec.pe_cols - c1)  # fmt: skip


def compact_strips(regions: int, spec: WaferSpec, *, pe_rows: int | None = None) -> int:
    """Column strips that make `regions` equal regions near square: sqrt(n cols / rows), on
    the spec's rows or a footprint's `pe_rows` of them (`token.footprint_rows` weighs every
    row count without a `spec.replace` each)."""
    rows = spec.pe_rows if pe_rows is None else pe_rows
    return max(1, min(regions, round(math.sqrt(regions * spec.pe_cols / rows))))


def _strips(layout: str, regions: int, spec: WaferSpec) -> int:
    return 1 if layout == "banded" else compact_strips(regions, spec)


def _by_strip(sizes: list[int], strips: int) -> list[int]:
    """The strip of each entry: contiguous groups of about equal bytes (by each entry's
    midpoint in the running total)."""
    total, before, out = sum(sizes) or 1, 0, []
    for b in sizes:
        out.append(min(strips - 1, int(strips * (before + b / 2) / total)))
        before += b
    return out


def _sizing(spec: WaferSpec, entries: list, c0: int, head_rows: int | None) -> list[float]:
    """What each entry's region is sized in proportion to: its bytes, except a head on
    `head_rows` rows of the first strip (`c0` columns wide), whose weight is that share of
    the wafer's PEs against the other entries' bytes. PipelinePlanError (the numbers) when
    the head or the rest cannot hold their bytes, before any region is laid out."""
    sizes = [float(sum(b)) for _, _, b in entries]
    if head_rows is None or entries[0][0] != "head":
        return sizes
    head_pes, pes, rest = head_rows * c0, spec.pe_rows * spec.pe_cols, sum(sizes[1:])
    sram = spec.data_bytes_per_pe
    if sizes[0] > head_pes * sram or rest > (pes - head_pes) * sram:
        raise PipelinePlanError(
            f"head_rows {head_rows}: the head's {head_rows} x {c0} PEs hold "
            f"{head_pes * sram / GB:.3g} GB for its {sizes[0] / GB:.3g} GB and the other "
            f"regions' {(pes - head_pes) * sram / GB:.3g} GB for their {rest / GB:.3g} GB"
        )
    return [head_pes / (pes - head_pes) * rest, *sizes[1:]]


def _strip_rows(spec: WaferSpec, weights: list[float], head_rows: int | None) -> list[int]:
    """PE rows of a strip's entries: by weight (`_rows_by_bytes`), or the head's
    `head_rows` first and the others by weight over the rest."""
    if head_rows is None:
        return _rows_by_bytes(spec.pe_rows, weights)
    if spec.pe_rows - head_rows < len(weights) - 1:
        raise PipelinePlanError(
            f"head_rows {head_rows} leaves {spec.pe_rows - head_rows} PE rows of its strip for "
            f"{len(weights) - 1} regions"
        )
    return [head_rows, *_rows_by_bytes(spec.pe_rows - head_rows, weights[1:])]


def place_on_wafer(
    spec: WaferSpec, wafer: int, entries: list, need: tuple[int, int], layout: str,
    head_rows: int | None = None,
) -> list[StagePlan]:  # fmt: skip
    """Give each entry a band of rows of its column strip (one strip: the whole width) and
    declare its bytes in its region's ledger (the regions are disjoint: a PE's use is its
    one region's); the head (the first entry of wafer 0) on `head_rows` rows when given.
    `need`: the model's bytes and wafers, for the error."""
    wafer_grid = SramLedger.for_spec(spec)
    strips = _strips(layout, len(entries), spec)
    cols = split_even(spec.pe_cols, strips)
    weights = _sizing(spec, entries, cols[0][1] - cols[0][0], head_rows)
    strip_of = _by_strip(weights, strips)
    out: list[StagePlan] = []
    for k, (c0, c1) in enumerate(cols):
        mine = [i for i in range(len(entries)) if strip_of[i] == k]
        if len(mine) > spec.pe_rows:
            raise PipelinePlanError(
                f"{len(mine)} regions in one column strip of wafer {wafer} need more than "
                f"its {spec.pe_rows} PE rows"
            )
        fixed = head_rows if mine and entries[mine[0]][0] == "head" else None
        rows = _strip_rows(spec, [weights[i] for i in mine], fixed) if mine else []
        row0 = 0
        for i, r in zip(mine, rows, strict=True):
            name, layers, (w_b, kv_b, act_b) = entries[i]
            region = wafer_grid.region(name, row0, c0, r, c1 - c0)
            plan = StagePlan(name, wafer, region, layers, int(w_b), int(kv_b), int(act_b))
            # hunt 63: one ledger for the wafer scanned every allocation before it at each
            # allocation (a 4,096-layer draft planned for minutes); the bands are disjoint,
            # so a ledger of the region's own PEs gives the same answer
            ledger = SramLedger.for_spec(spec, region.rows, region.cols)
            try:
                for part, b in (("weights", w_b), ("kv_cache", kv_b), ("activations", act_b)):
                    ledger.allocate(f"{name}.{part}", math.ceil(b / region.num_pes))
            except SramBudgetError:
                raise _too_big(spec, wafer, entries, plan, *need) from None
            out.append(plan)
            row0 += r
    return out


def _too_big(
    spec: WaferSpec, wafer: int, entries: list, plan: StagePlan, need: int, num_wafers: int
) -> PipelinePlanError:
    have = spec.data_total_bytes
    here = sum(sum(b) for _, _, b in entries)
    return PipelinePlanError(
        f"the model does not fit: it needs {need / GB:.3g} GB (weights + KV cache + "
        f"activations) and {num_wafers} {spec.name} wafer(s) have {num_wafers * have / GB:.3g} "
        f"GB of SRAM for data (at least {math.ceil(need / have)} wafers by capacity); wafer "
        f"{wafer} must hold {here / GB:.3g} GB in {len(entries)} regions and region "
        f"{plan.name} needs {plan.bytes_per_pe} B per PE on {plan.region.rows} x "
        f"{plan.region.cols} PEs with {spec.data_bytes_per_pe} B per PE available beside the "
        f"program's {spec.code_stack_bytes_per_pe} B of code and stack (weights "
        f"{plan.weight_bytes / GB:.3g} GB, KV {plan.kv_bytes / GB:.3g} GB); use more wafers, a "
        "shorter context or fewer slots"
    )


def data_note(spec: WaferSpec) -> str:
    """The clause " with N B a PE for data" and the ledger's naming the program's reserve
    (code and stack, assumed): what a refusal that no wafer count holds a model rests on
    (review 82: at code_stack_bytes_per_pe=49151, 1 B a PE for data, it went unsaid)."""
    ledger = SramLedger.for_spec(spec, 1, 1)
    return f" with {ledger.data_bytes_per_pe:,} B a PE for data{ledger.reserve_note()}"


def check_head_rows(head_rows: int | None, spec: WaferSpec) -> None:
    """`Regions.head_rows`: None, or a whole number of rows of the wafer (not a bool)."""
    whole = isinstance(head_rows, int) and not isinstance(head_rows, bool)
    if head_rows is not None and not (whole and 1 <= head_rows <= spec.pe_rows):
        raise PipelinePlanError(
            f"head_rows must be a whole number of PE rows in [1, {spec.pe_rows}] "
            f"({spec.name}'s), got {head_rows!r}"
        )
