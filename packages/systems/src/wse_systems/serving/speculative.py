"""One speculative round on wafers: where the draft sits and what a round costs.

Contract. `place_speculative(target, draft, spec, num_wafers=, context_len=, slots=,
param_bytes=ParamBytes(target=, draft=), regions=Regions(...))` is the one placement of
draft-and-verify decoding: the draft takes the fewest PE rows of every wafer that hold it
(its own `plan_pipeline` on those rows), the target the rest of each wafer; -> (target
plan, draft plan), `PipelinePlanError` when they do not fit together.
`speculative_round(target, target_plan, draft, draft_plan, gamma=, kv_tokens=)` is one round
(a `Round`): gamma draft decode tokens one after another, then the target's pass over
gamma + 1 tokens in the prompt blocks that finish soonest (`wse_systems.serving.blocks.
Pipeline.pass_s`: the first block through every element, the rest one bottleneck time
apart). `Round.phases` is that round as a phase tree (the engine's report evaluates it with
`wse_core.PerfModel`), `Round.seconds` its time, `Round.held_s` the seconds each element
(the draft's named "draft ...") is held per round (the serving model's occupancy).
`wse_inference.pipeline.perf.predict_speculative` and `wse_systems.serving.wafer` both call
these two, so the engine's report and the serving model at one user give the same round.

Why draft rows on every wafer (and not the draft on wafers of its own): a draft is 10-100x
smaller than its target, so a few PE rows of each wafer hold it; wafers of its own would buy
whole systems for a model that fills a fraction of one, and every drafted token would cross
between systems (I/O serialisation plus a network latency, several microseconds against a
draft token's tens). Rows on the target's wafers cost the target only those rows' SRAM, and
the systems counted for price and power are the target's. Handing the drafted tokens to the
target's first region is a move inside a wafer (not priced separately: a few words).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_core.cost.perf import PerfModel, Phase, Phases, Work, serial
from wse_core.hw.spec import WaferSpec

from wse_systems.decoder import decode_phases
from wse_systems.pipeline import PipelinePlan, PipelinePlanError, Regions, plan_pipeline
from wse_systems.serving.blocks import price_pipeline

__all__ = ["ParamBytes", "Round", "place_speculative", "speculative_round", "block_phases"]

_LATENCY_FIELDS = ("latency_hops", "fixed_cycles", "system_hops")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParamBytes:
    """Bytes per parameter of the target and of its draft (None: the target's)."""

    target: int = 2
    draft: int | None = None


def place_speculative(
    target: Any,
    draft: Any,
    spec: WaferSpec,
    *,
    num_wafers: int,
    context_len: int,
    slots: int = 1,
    param_bytes: ParamBytes = ParamBytes(),
    regions: Regions = Regions(),
) -> tuple[PipelinePlan, PipelinePlan]:
    """(target plan, draft plan): the draft on the fewest PE rows of each of `num_wafers`
    wafers that hold it, the target on the rest (the module's placement); `regions` are the
    target's (the draft's: one per layer, laid out and priced as the target's)."""
    bpp = param_bytes.target
    dbpp = bpp if param_bytes.draft is None else param_bytes.draft
    drafted = dataclasses.replace(regions, stages=None)

    def plan(config: Any, rows: int, bpp: int, asked: Regions) -> PipelinePlan:
        return plan_pipeline(
            config, spec.replace(pe_rows=rows), num_wafers=num_wafers, context_len=context_len,
            slots=slots, bytes_per_param=bpp, regions=asked,
        )  # fmt: skip

    def fits(rows: int) -> bool:
        try:
            plan(draft, rows, dbpp, drafted)
            return True
        except PipelinePlanError:
            return False

    rows = spec.pe_rows
    if not fits(rows - 1):
        raise PipelinePlanError(
            f"the draft model does not fit {num_wafers} x {spec.name} with {slots} users"
        )
    lo, hi = 1, rows - 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    try:
        target_plan = plan(target, rows - lo, bpp, regions)
    except PipelinePlanError as e:
        raise PipelinePlanError(
            f"the target and its draft do not fit {num_wafers} x {spec.name} together "
            f"(the draft takes {lo} of the {rows} PE rows of each wafer): {e}"
        ) from None
    return target_plan, plan(draft, lo, dbpp, drafted)


def _split(work: Work) -> tuple[Work, Work]:
    stream = dataclasses.replace(work, latency_hops=0.0, fixed_cycles=0.0, system_hops=0.0)
    return stream, Work(**{f: getattr(work, f) for f in _LATENCY_FIELDS})


def block_phases(part: Phase | Phases, tokens: int, *, latency: bool = True) -> Phase | Phases:
    """`part` for a block of `tokens` tokens: each leaf's streaming work `tokens` times, its
    latency once (none when `latency` is False: a pass between wafers holds its element
    only while its bytes stream)."""
    if isinstance(part, Phases):
        kids = tuple(block_phases(p, tokens, latency=latency) for p in part.parts)
        return dataclasses.replace(part, parts=kids)
    stream, lat = _split(part.work)
    work = stream.scaled(tokens) + lat if latency else stream.scaled(tokens)
    return dataclasses.replace(part, work=work)


@dataclasses.dataclass(frozen=True)
class Round:
    """One speculative round (module contract): its phases, seconds, per-element holds and
    the verify pass's block size."""

    phases: Phases
    seconds: float
    held_s: dict[str, float]
    verify_block: int


def speculative_round(
    target: Any,
    target_plan: PipelinePlan,
    draft: Any,
    draft_plan: PipelinePlan,
    *,
    gamma: int,
    kv_tokens: int,
    model: PerfModel | None = None,
) -> Round:
    """gamma draft tokens on `draft_plan`, then the target's pass over gamma + 1 tokens on
    `target_plan` (the module's round)."""
    model = model or PerfModel(target_plan.spec)
    tpipe = price_pipeline(target, target_plan, kv_tokens=kv_tokens, model=model)
    dpipe = price_pipeline(draft, draft_plan, kv_tokens=kv_tokens, model=model)
    n = gamma + 1
    _, k, _ = tpipe.pass_s(n)
    # the phases `price_token` prices, without evaluating its whole report twice a round
    # (hunt 63: a 4,096-layer draft's plan took 30 s, most of it here)
    step = decode_phases(target, target_plan, kv_tokens=kv_tokens)
    draft_step = decode_phases(draft, draft_plan, kv_tokens=kv_tokens)
    bottleneck, _ = tpipe.bottleneck(k)
    region = dict((name, is_region) for name, is_region, _ in tpipe.elements)
    (slow,) = (p for p in step.parts if p.name == bottleneck)
    verify = serial(
        serial(*(block_phases(p, k) for p in step.parts), name="first_block"),
        serial(block_phases(slow, k, latency=region[bottleneck]), name="next_blocks",
               repeat=math.ceil(n / k) - 1),
        name="verify",
    )  # fmt: skip
    phases = serial(dataclasses.replace(draft_step, name="draft", repeat=gamma), verify,
                    name="round")  # fmt: skip
    held = {name: math.ceil(n / k) * s for name, s in tpipe.occupancy_s(k).items()}
    held |= {f"draft {name}": gamma * s for name, s in dpipe.occupancy_s(1).items()}
    return Round(phases, model.evaluate(phases).seconds, held, k)
