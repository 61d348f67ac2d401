"""The pipeline planner: a model's layers -> wafer regions sized by the SRAM ledger.

It lives in wse_core because the same plan object is what the inference engine emulates
(`wse_inference.pipeline.engine`) and what the cost model prices (`wse_systems.decoder`), and
the calibration case (Llama 3.1 8B on one WSE-3) is planned here too.

Contract. `plan_pipeline(config, spec, num_wafers=..., stages=..., context_len=..., slots=...)`
splits the `n_layers` layers into `stages` contiguous groups (sizes differ by at most one),
spreads the stages over `num_wafers` wafers in order, and gives each stage a band of PE rows
of its wafer in proportion to the bytes it must hold: its weights, its KV cache for
`context_len` tokens of each of `slots` users in flight, and its activations. The embedding
and head (and final norm) get one more region, `head`, on wafer 0: the last stage's output
cycles back there for the next token. Every region's bytes are declared in that wafer's
`wse_core.SramLedger`; a model that does not fit raises `PipelinePlanError` with the numbers
(needed, available, per region) and the number of wafers that would hold it.

`config` is a `wse_systems.transformer.DecoderShape` (e.g. a `wse_models.ModelConfig`); its
sizes are `wse_systems.transformer`'s one formula.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_core.errors import SramBudgetError
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region, SramLedger

from wse_systems.transformer import DecoderShape, layer_params, num_params

__all__ = [
    "PipelinePlanError",
    "StagePlan",
    "PipelinePlan",
    "plan_pipeline",
    "min_wafers",
    "kv_bytes_per_token",
    "split_even",
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

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.act_bytes

    @property
    def bytes_per_pe(self) -> int:
        return math.ceil(self.total_bytes / self.region.num_pes)

    @property
    def num_layers(self) -> int:
        return self.layers[1] - self.layers[0]


@dataclasses.dataclass(frozen=True)
class PipelinePlan:
    spec: WaferSpec
    num_wafers: int
    stages: tuple[StagePlan, ...]  # layer stages in pipeline order
    head: StagePlan
    context_len: int
    slots: int
    bytes_per_param: int

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def total_bytes(self) -> int:
        return self.head.total_bytes + sum(s.total_bytes for s in self.stages)

    @property
    def wafer_crossings(self) -> int:
        """Inter-wafer hops per token: each boundary between wafers plus the way back."""
        return self.num_wafers - 1 + (1 if self.num_wafers > 1 else 0)

    def summary(self) -> dict[str, Any]:
        return {
            "wafer": self.spec.name,
            "num_wafers": self.num_wafers,
            "num_stages": self.num_stages,
            "context_len": self.context_len,
            "slots": self.slots,
            "total_gb": self.total_bytes / GB,
            "capacity_gb": self.num_wafers * self.spec.sram_total_bytes / GB,
            "regions": [
                {
                    "name": s.name,
                    "wafer": s.wafer,
                    "layers": list(s.layers),
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


def split_even(n: int, parts: int) -> list[tuple[int, int]]:
    """[start, stop) of `parts` contiguous groups of n items, sizes differing by <= 1."""
    bounds = [i * n // parts for i in range(parts + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _region_bytes(
    config: DecoderShape, layers: int, context_len: int, slots: int, bpp: int
) -> tuple:
    weights = layers * layer_params(config) * bpp
    kv = layers * kv_bytes_per_token(config, bpp) * context_len * slots
    # In flight per user: the residual stream, q/k/v/o and the MLP hidden of one token.
    act = (layers > 0) * slots * (4 * config.d_model + 2 * config.d_ff) * bpp
    return weights, kv, act


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


def plan_pipeline(
    config: DecoderShape,
    spec: WaferSpec,
    *,
    num_wafers: int = 1,
    stages: int | None = None,
    context_len: int | None = None,
    slots: int = 1,
    bytes_per_param: int = 2,
) -> PipelinePlan:
    """Regions for `stages` layer groups (default: one per layer) over `num_wafers` wafers."""
    stages = config.n_layers if stages is None else stages
    context_len = config.max_seq_len if context_len is None else context_len
    _check_args(config, spec, num_wafers, stages, context_len, slots)
    bpp = bytes_per_param
    head_w = (num_params(config) - config.n_layers * layer_params(config)) * bpp
    head_act = slots * (config.d_model + config.vocab_size) * 4  # hidden + fp32 logits
    groups = split_even(config.n_layers, stages)
    layout = []
    for w, (s0, s1) in enumerate(split_even(stages, num_wafers)):
        entries = [("head", (0, 0), (head_w, 0, head_act))] if w == 0 else []
        for s in range(s0, s1):
            layers = groups[s]
            bytes_ = _region_bytes(config, layers[1] - layers[0], context_len, slots, bpp)
            entries.append((f"stage{s}", layers, bytes_))
        layout.append(entries)
    need = sum(sum(b) for entries in layout for _, _, b in entries)
    placed = [
        _place_on_wafer(spec, w, entries, need, num_wafers) for w, entries in enumerate(layout)
    ]
    head, stage_plans = placed[0][0], [p for w in placed for p in w if p.name != "head"]
    return PipelinePlan(spec, num_wafers, tuple(stage_plans), head, context_len, slots, bpp)


def _check_args(config, spec, num_wafers, stages, context_len, slots) -> None:
    if num_wafers < 1 or slots < 1 or context_len < 1:
        raise PipelinePlanError(
            f"num_wafers, slots and context_len must be >= 1 (got {num_wafers}, {slots}, "
            f"{context_len})"
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


def _place_on_wafer(
    spec: WaferSpec, wafer: int, entries: list, need: int, num_wafers: int
) -> list[StagePlan]:
    """Give each entry a band of rows and declare its bytes in the wafer's ledger."""
    ledger = SramLedger(spec.pe_rows, spec.pe_cols, spec.sram_bytes_per_pe)
    rows = _rows_by_bytes(spec.pe_rows, [sum(b) for _, _, b in entries])
    out, row0 = [], 0
    for (name, layers, (w_b, kv_b, act_b)), r in zip(entries, rows, strict=True):
        region = ledger.region(name, row0, 0, r, spec.pe_cols)
        plan = StagePlan(name, wafer, region, layers, int(w_b), int(kv_b), int(act_b))
        try:
            for part, b in (("weights", w_b), ("kv_cache", kv_b), ("activations", act_b)):
                ledger.allocate(f"{name}.{part}", math.ceil(b / region.num_pes), region)
        except SramBudgetError:
            raise _too_big(spec, wafer, entries, plan, need, num_wafers) from None
        out.append(plan)
        row0 += r
    return out


def _too_big(
    spec: WaferSpec, wafer: int, entries: list, plan: StagePlan, need: int, num_wafers: int
) -> PipelinePlanError:
    have = spec.sram_total_bytes
    here = sum(sum(b) for _, _, b in entries)
    return PipelinePlanError(
        f"the model does not fit: it needs {need / GB:.3g} GB (weights + KV cache + "
        f"activations) and {num_wafers} {spec.name} wafer(s) have {num_wafers * have / GB:.3g} "
        f"GB of SRAM (at least {math.ceil(need / have)} wafers by capacity); wafer {wafer} "
        f"must hold {here / GB:.3g} GB in {len(entries)} regions and region {plan.name} needs "
        f"{plan.bytes_per_pe} B per PE on {plan.region.rows} x {plan.region.cols} PEs with "
        f"{spec.sram_bytes_per_pe} B per PE available (weights {plan.weight_bytes / GB:.3g} GB, "
        f"KV {plan.kv_bytes / GB:.3g} GB); use more wafers, a shorter context or fewer slots"
    )


def min_wafers(config: DecoderShape, spec: WaferSpec, **kwargs: Any) -> int:
    """The fewest wafers `plan_pipeline` accepts (search up to the number of layers)."""
    for n in range(1, config.n_layers + 1):
        try:
            plan_pipeline(config, spec, num_wafers=n, **kwargs)
            return n
        except PipelinePlanError:
            continue
    raise PipelinePlanError(f"no number of {spec.name} wafers up to {config.n_layers} holds it")
