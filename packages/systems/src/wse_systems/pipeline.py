"""The pipeline planner: a model's layers -> wafer regions sized by the SRAM ledger.

It lives in wse_core because the same plan object is what the inference engine emulates
(`wse_inference.pipeline.engine`) and what the cost model prices (`wse_systems.decoder`), and
the calibration case (Llama 3.1 8B on one WSE-3) is planned here too.

Contract. `plan_pipeline(config, spec, num_wafers=..., context_len=..., slots=...,
regions=Regions(stages=..., layout=..., gemv=..., head_rows=...))` splits the `n_layers`
layers into `stages` contiguous groups (sizes differ by at most one), spreads the stages over
`num_wafers` wafers in order, and gives each stage a band of PE rows of its wafer
(`layout="banded"`: full-width bands; `"compact"`: bands of `compact_strips` column
strips, so that each region is near square and a traversal of it is short) in
proportion to the bytes it must hold: its weights, its KV cache for
`context_len` tokens of each of `slots` users in flight, and its activations
(`wse_systems.placement`). The embedding and head (and final norm) get one more region,
`head`, on wafer 0: the last stage's output cycles back there for the next token; with
`head_rows` it takes that many rows of its strip, the other regions the rest by bytes.

Activations are what the pipelined engine's program holds (`wse_inference.pipeline`: one
activation a stage row, its slots' KV caches, each slot's sampling state with the head):
a region works on one item at a time, so it holds one token's activations
(`item_bytes`: a layer region's residual stream, q/k/v/o and MLP hidden; the head's hidden
and fp32 logits), whatever the users; each user's item waits at the head between passes
(the engine's schedule: stage j works on slot (k - j) mod S, stage 0 takes up a slot's
returning activation at its turn), so the head holds a hidden state and the sampling
state of every user (`head_user_bytes`, `SLOT_STATE_BYTES`). `StagePlan.item_act_bytes`
marks the one item's share. Hunt 82 (jobs18 H3): every region held a whole token's
activations for every user, and the head an fp32 logits row per user (Llama 3 8B: 90 KB a
user a region, 529 KB in the head), so at 16 + 8 tokens 5,000 users were forced onto 8
stages at 36% of the output of 3,000 users.
Sized by bytes alone, a plan holding more KV cache gave the layers more PEs and priced a
faster token (hunt 66): the planners place the head on the rows, and the regions on the PE
rows of each wafer (all of them, or a footprint of the top rows: `spec` cut to fewer
`pe_rows`), that price the fastest token (`wse_systems.token.fastest_plan`). Every region's
bytes are declared in its own `wse_core.SramLedger`; a model that does not fit raises
`PipelinePlanError` with the numbers (needed, available, per region) and the number of
wafers that would hold it.

`config` is a `wse_systems.transformer.DecoderShape` (e.g. a `wse_models.ModelConfig`); its
sizes are `wse_systems.transformer`'s one formula. `PipelinePlan.edge_hops` counts the
fabric hops of the wafer crossings (each region's trip to or from its wafer's nearest edge,
`to_edge`); `wse_systems.token.choose_layout` prices both layouts, each placed fastest, and
takes the faster.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from wse_core.errors import is_int, require_int, shown_setting
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region

from wse_systems.meshgemv import SOURCE as MESHGEMV_SOURCE
from wse_systems.placement import (
    GB,
    PipelinePlanError,
    StagePlan,
    check_head_rows,
    compact_strips,
    data_note,
    place_on_wafer,
    split_even,
    to_edge,
)
from wse_systems.transformer import DecoderShape, layer_params, num_params

__all__ = [
    "once_per_plan",
    "PipelinePlanError",
    "StagePlan",
    "PipelinePlan",
    "Regions",
    "plan_pipeline",
    "min_wafers",
    "kv_bytes_per_token",
    "item_bytes",
    "head_user_bytes",
    "SLOT_STATE_BYTES",
    "split_even",
    "LAYOUTS",
    "BYTES_PER_PARAM",
    "GEMV_PROGRAMS",
    "GEMV_ASSUMPTIONS",
    "check_gemv",
    "compact_strips",
    "to_edge",
]

T = TypeVar("T")

LAYOUTS = ("banded", "compact")
# Bytes of one user's sampling state at the head: the pipelined engine's per-slot scalars
# (`wse_inference.pipeline.schedule.PipeState`): token, position and count (int32 each), its
# key (2 x uint32), active (bool), temperature, top-k, top-p (4 B each), logprobs (bool),
# the presence, frequency and repetition penalties and min_tokens (4 B each): 50 B. Its
# dense per-vocabulary penalty rows are the emulator's representation, not counted: a
# request priced carries no penalty, and a penalty needs only the user's token ids.
SLOT_STATE_BYTES = 3 * 4 + 2 * 4 + 1 + 3 * 4 + 1 + 4 * 4
# Bytes of a parameter (and of a cached value): int8/fp8, fp16/bf16, fp32, fp64, the sizes
# `wse_core.hw.dtypes.dtype_bytes` gives a model's param_dtype.
BYTES_PER_PARAM = (1, 2, 4, 8)
# How the decode prices each GEMV on a region (`wse_systems.decoder`): "sdk", the SDK gemv
# dataflow (input flooded down, column AXPYs, reduce along rows, move back), the default; or
# "meshgemv", WaferLLM's programs: MeshGEMV per decode token (`wse_systems.meshgemv`) and, for
# a prompt block of k > 1 tokens, k MeshGEMVs or its prefill's MeshGEMM (`wse_systems.meshgemm`)
# per product, the cheaper (`wse_systems.serving.blocks`). Pricing only: the regions do not
# change.
GEMV_PROGRAMS = ("sdk", "meshgemv")
GEMV_ASSUMPTIONS = {  # each program as every decode report states it
    "sdk": "the SDK gemv dataflow (wse_systems.decoder's matvec layout): what the model takes "
    "for Cerebras' published software, whose kernels are not public",
    "meshgemv": "WaferLLM's MeshGEMV (He et al., OSDI 2025): per-PE FMACs, a two-level "
    "allreduce along one axis, no flood or move between products (wse_systems.meshgemv; "
    f"{MESHGEMV_SOURCE['repository']} at {MESHGEMV_SOURCE['commit'][:12]}); a prompt block of "
    "k > 1 tokens runs each product as the cheaper of k MeshGEMVs and one MeshGEMM on the "
    "region's largest square where its buffers fit (wse_systems.meshgemm); not the software "
    "Cerebras measured",
}


def check_gemv(gemv: str) -> str:
    """`gemv` if it is one of `GEMV_PROGRAMS`, else ValueError."""
    if gemv not in GEMV_PROGRAMS:
        raise ValueError(f"gemv must be one of {GEMV_PROGRAMS}, got {gemv!r}")
    return gemv


@dataclasses.dataclass(frozen=True, kw_only=True)
class Regions:
    """The regions asked for: `stages` layer regions (None: one per layer), laid out as
    `layout` (`LAYOUTS`; None, where a caller chooses the faster: `WaferServing`), each
    GEMV on them priced as `gemv` (`GEMV_PROGRAMS`), the head on `head_rows` PE rows of its
    column strip (None: rows in proportion to its bytes, as the layer regions;
    `wse_systems.token.fastest_plan` chooses it by price). Checked by `plan_pipeline`."""

    stages: int | None = None
    layout: str | None = "banded"
    gemv: str = "sdk"
    head_rows: int | None = None


@dataclasses.dataclass(frozen=True)
class PipelinePlan:
    spec: WaferSpec
    num_wafers: int
    stages: tuple[StagePlan, ...]  # layer stages in pipeline order
    head: StagePlan
    context_len: int
    slots: int
    bytes_per_param: int
    layout: str = "banded"  # LAYOUTS: full-width bands, or near-square rectangles in strips
    gemv: str = "sdk"  # GEMV_PROGRAMS: the program each GEMV is priced as (an assumption)
    # the wafer's PE rows above and below the plan's `spec.pe_rows` (PE rows): where a
    # footprint lies on each wafer (`wse_systems.token.footprint_plans`: from the top row; a
    # speculative target below its draft's rows, `serving.speculative`), so a region's trip
    # to its wafer's edge (`to_edge`) ends at the wafer's edge, not the footprint's
    rows_above: int = 0
    rows_below: int = 0

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def total_bytes(self) -> int:
        return self.head.total_bytes + sum(s.total_bytes for s in self.stages)

    def placed_on(self, spec: WaferSpec) -> bool:
        """Whether the plan is laid out on wafers of `spec`: on the whole wafer or on a
        footprint of it (`spec` with fewer PE rows, every other field the same:
        `wse_systems.token.footprint_plans`)."""
        rows = self.spec.pe_rows
        return rows <= spec.pe_rows and self.spec == spec.replace(pe_rows=rows)

    @property
    def wafer_crossings(self) -> int:
        """Inter-wafer hops per token: each boundary between wafers plus the way back."""
        return self.num_wafers - 1 + (1 if self.num_wafers > 1 else 0)

    @property
    def edge_hops(self) -> int:
        """Hops to and from the wafers' edges per token: for each wafer boundary the last
        region's trip to its wafer's nearest edge and the next wafer's edge to its first
        region, and the way back (the last region's trip, the head's from the edge)."""
        if self.num_wafers == 1:
            return 0
        hops, by_wafer = 0, {}
        for s in self.stages:  # hunt 63: a scan of every stage per wafer (4,096 x 4,096)
            by_wafer.setdefault(s.wafer, []).append(s)
        for w in range(self.num_wafers):
            mine = by_wafer.get(w, [])
            first = self.head if w == 0 else mine[0]
            hops += self.to_edge(first.region) + self.to_edge(mine[-1].region)
        return hops

    def within(self, *, above: int = 0, below: int = 0) -> PipelinePlan:
        """This plan on a wafer with `above` more PE rows above its footprint and `below` more
        below it (a footprint of rows that are themselves part of a wafer: the rows add)."""
        return dataclasses.replace(
            self, rows_above=self.rows_above + above, rows_below=self.rows_below + below
        )

    def to_edge(self, region: Region) -> int:
        """Hops from `region` of this plan to its wafer's nearest edge (`to_edge`), the
        wafer's rows beyond the plan's footprint counted."""
        return to_edge(region, self.spec, rows_above=self.rows_above, rows_below=self.rows_below)

    def footprint(self) -> dict[str, int]:
        """Where the plan lies on each of its wafers (PE rows and columns): its footprint's
        origin on the wafer (`row0`: the wafer's rows above it, `rows_above`; `col0`: 0, a
        footprint is a band of whole rows, `placed_on`), its size (`pe_rows` x `pe_cols`,
        the plan's `spec`) and the wafer's rows below it (`rows_below`); the whole wafer:
        0, 0 and no rows above or below. A region's place on the wafer is its own (`regions`
        of `summary`: within the footprint) offset by the origin."""
        return {"row0": self.rows_above, "col0": 0, "pe_rows": self.spec.pe_rows,
                "pe_cols": self.spec.pe_cols, "rows_above": self.rows_above,
                "rows_below": self.rows_below}  # fmt: skip

    def summary(self) -> dict[str, Any]:
        return {
            "wafer": self.spec.name,
            "footprint": self.footprint(),  # session 86: where it lies on the wafer
            "layout": self.layout,
            "gemv": self.gemv,
            "num_wafers": self.num_wafers,
            "num_stages": self.num_stages,
            "context_len": self.context_len,
            "slots": self.slots,
            "total_gb": self.total_bytes / GB,
            "capacity_gb": self.num_wafers * self.spec.data_total_bytes / GB,
            "regions": [
                {
                    "name": s.name,
                    "wafer": s.wafer,
                    "layers": list(s.layers),
                    "row0": s.region.row0,
                    "col0": s.region.col0,
                    "pe_rows": s.region.rows,
                    "pe_cols": s.region.cols,
                    "bytes_per_pe": s.bytes_per_pe,
                }
                for s in (self.head, *self.stages)
            ],
        }


def kv_bytes_per_token(config: DecoderShape, bytes_per_value: int) -> int:
    """K and V bytes of one token in one layer."""
    return 2 * config.n_kv_heads * config.hd * bytes_per_value


def _region_bytes(
    config: DecoderShape, layers: int, context_len: int, slots: int, bpp: int
) -> tuple:
    """A layer region's (weights, KV cache, activations): the activations of the one item
    it works on (`item_bytes`), whatever the users in flight (module contract)."""
    weights = layers * layer_params(config) * bpp
    kv = layers * kv_bytes_per_token(config, bpp) * context_len * slots
    return weights, kv, item_bytes(config, layers, bpp)


def item_bytes(config: DecoderShape, layers: int, bpp: int) -> int:
    """Activations of the one token a region works on: a layer region's residual stream,
    q/k/v/o and MLP hidden (`layers` > 0), the head's hidden and fp32 logits (`layers` 0)."""
    if layers == 0:
        return (config.d_model + config.vocab_size) * 4
    return (4 * config.d_model + 2 * config.d_ff) * bpp


def head_user_bytes(config: DecoderShape, bpp: int) -> int:
    """What the head holds for each user in flight: its item's hidden state waiting there
    between passes and its sampling state (`SLOT_STATE_BYTES`)."""
    return config.d_model * bpp + SLOT_STATE_BYTES


def plan_pipeline(
    config: DecoderShape,
    spec: WaferSpec,
    *,
    num_wafers: int = 1,
    context_len: int | None = None,
    slots: int = 1,
    bytes_per_param: int = 2,
    regions: Regions = Regions(),
) -> PipelinePlan:
    """Regions for `regions.stages` layer groups (default: one per layer) over `num_wafers`
    wafers, each wafer's regions as full-width bands (`layout="banded"`) or as bands of
    column strips (`"compact"`: `compact_strips` strips, so each region is near square);
    `gemv` (`GEMV_PROGRAMS`) is the program the decode prices each GEMV as."""
    stages, layout, gemv = regions.stages, regions.layout, regions.gemv
    if layout not in LAYOUTS:
        raise PipelinePlanError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if gemv not in GEMV_PROGRAMS:
        raise PipelinePlanError(f"gemv must be one of {GEMV_PROGRAMS}, got {gemv!r}")
    stages = config.n_layers if stages is None else stages
    context_len = config.max_seq_len if context_len is None else context_len
    _check_args(config, spec, num_wafers, stages, context_len, slots)
    if not (is_int(bytes_per_param) and bytes_per_param in BYTES_PER_PARAM):
        raise PipelinePlanError(  # hunt 67: 0 planned no weights, 1.5 fractional bytes
            f"bytes_per_param must be one of {', '.join(map(str, BYTES_PER_PARAM))} (bytes of "
            f"a parameter's dtype), got {shown_setting(bytes_per_param)}"
        )
    check_head_rows(regions.head_rows, spec)
    bpp = bytes_per_param
    head_w = (num_params(config) - config.n_layers * layer_params(config)) * bpp
    head_act = item_bytes(config, 0, bpp) + slots * head_user_bytes(config, bpp)
    groups = split_even(config.n_layers, stages)
    layout_ = []
    for w, (s0, s1) in enumerate(split_even(stages, num_wafers)):
        entries = [("head", (0, 0), (head_w, 0, head_act))] if w == 0 else []
        for s in range(s0, s1):
            layers = groups[s]
            bytes_ = _region_bytes(config, layers[1] - layers[0], context_len, slots, bpp)
            entries.append((f"stage{s}", layers, bytes_))
        layout_.append(entries)
    need = sum(sum(b) for entries in layout_ for _, _, b in entries)
    placed = []
    for w, entries in enumerate(layout_):
        rows = regions.head_rows if w == 0 else None
        placed.append(place_on_wafer(spec, w, entries, (need, num_wafers), layout, rows))
    marked = [_with_item(config, p, bpp) for w in placed for p in w]
    head, stage_plans = marked[0], tuple(p for p in marked if p.name != "head")
    return PipelinePlan(spec, num_wafers, stage_plans, head, context_len, slots, bpp, layout, gemv)


def _with_item(config: DecoderShape, region: StagePlan, bpp: int) -> StagePlan:
    """`region` with the bytes of its one item marked (`StagePlan.item_act_bytes`)."""
    return dataclasses.replace(region, item_act_bytes=item_bytes(config, region.num_layers, bpp))


def _check_args(config, spec, num_wafers, stages, context_len, slots) -> None:
    """hunt 67: context 1,000 was planned on a model of 128 positions (transformers and vLLM
    refuse a max_model_len past max_position_embeddings), slots 1.5 and context 2.5 were
    priced, NaN and 1.0 were a ValueError / TypeError from deep inside."""
    for name, value in (("num_wafers", num_wafers), ("slots", slots), ("stages", stages)):
        require_int(name, value, 1, error=PipelinePlanError)
    limit = config.max_seq_len
    if not (is_int(context_len) and 1 <= context_len <= limit):
        raise PipelinePlanError(
            f"context_len must be an integer in 1..{limit} (the model's max_seq_len), got "
            f"{shown_setting(context_len)}"
        )
    if not num_wafers <= stages <= config.n_layers:
        raise PipelinePlanError(
            f"stages must be between the number of wafers ({num_wafers}) and the number of "
            f"layers ({config.n_layers}); got {stages}"
        )
    if stages // num_wafers + 1 > spec.pe_rows:
        raise PipelinePlanError(
            f"{stages} stages on {num_wafers} wafer(s) need more regions per wafer than the "
            f"{spec.pe_rows} PE rows of {spec.name}"
        )


def min_wafers(config: DecoderShape, spec: WaferSpec, **kwargs: Any) -> int:
    """The fewest wafers `plan_pipeline` accepts (search up to the number of layers)."""
    for n in range(1, config.n_layers + 1):
        try:
            plan_pipeline(config, spec, num_wafers=n, **kwargs)
            return n
        except PipelinePlanError:
            continue
    raise PipelinePlanError(
        f"no number of {spec.name} wafers up to {config.n_layers} holds it{data_note(spec)}"
    )


def once_per_plan(fn: Callable[[PipelinePlan], T]) -> Callable[[PipelinePlan], T]:
    """`fn` evaluated once per plan: by id, the plan kept alive beside its value (an id is
    unique only while it lives), so a chosen plan asked again is not priced again."""
    seen: dict[int, tuple[PipelinePlan, T]] = {}

    def once(plan: PipelinePlan) -> T:
        if id(plan) not in seen:
            seen[id(plan)] = (plan, fn(plan))
        return seen[id(plan)][1]

    return once
