"""One speculative round on wafers: where the draft sits and what a round costs.

Contract. `place_speculative(target, draft, spec, num_wafers=, context_len=,
round=RoundSetup(gamma, kv_tokens, price), slots=, param_bytes=ParamBytes(target=, draft=),
regions=Regions(...))` is the one placement of draft-and-verify decoding: the draft takes
some PE rows of every wafer (its own `plan_pipeline` on those rows, the wafer's top ones, as
a plain plan's footprint), the target the rest of each wafer below them (each plan's
`rows_above` / `rows_below`: a trip to the wafer's edge ends at the wafer's), the split
and each model's head rows those that price the round period of its `slots` users
shortest (hunt 68: not the fewest rows by bytes; hunt 72: at the load, not one user; see
it); -> (target plan, draft plan), `PipelinePlanError` when they do not fit together
(`fewest_draft_rows` says so alone, without pricing).
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
from collections.abc import Callable
from typing import Any, NamedTuple

from wse_core.cost.perf import PerfModel, Phase, Phases, Work, serial
from wse_core.hw.spec import WaferSpec

from wse_systems.decoder import decode_phases
from wse_systems.pipeline import (
    PipelinePlan,
    PipelinePlanError,
    Regions,
    once_per_plan,
    plan_pipeline,
)
from wse_systems.serving.blocks import Pipeline, price_pipeline
from wse_systems.token import GRID_STEP, fastest_plan, footprint_plans, ladder_plans

__all__ = [
    "ParamBytes",
    "PriceFn",
    "LoadFn",
    "RoundSetup",
    "Round",
    "block_phases",
    "GRID_STEP",
    "fewest_draft_rows",
    "place_speculative",
    "round_held",
    "speculative_round",
]

PriceFn = Callable[[Any, PipelinePlan], Pipeline]  # (config, plan) -> its priced pipeline
# (target, draft) plans -> the seconds a placement is ranked by, in order
LoadFn = Callable[[PipelinePlan, PipelinePlan], tuple[float, ...]]


class RoundSetup(NamedTuple):
    """The round a speculative placement is priced for: `gamma` drafts a round, `kv_tokens`
    cached tokens read, `price(config, plan)` a plan's `Pipeline` (None: `price_pipeline` at
    `kv_tokens`; the serving model passes its own), `load(target plan, draft plan)` the
    seconds a placement is ranked by at its load, in order (the serving model: a user's
    request period at its `slots` users, then its first token; None: the round period of
    `slots` users)."""

    gamma: int
    kv_tokens: int
    price: PriceFn | None = None
    load: LoadFn | None = None


_LATENCY_FIELDS = ("latency_hops", "fixed_cycles", "system_hops")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParamBytes:
    """Bytes per parameter of the target and of its draft (None: the target's)."""

    target: int = 2
    draft: int | None = None

    @property
    def of_draft(self) -> int:
        return self.target if self.draft is None else self.draft


def fewest_draft_rows(
    target: Any,
    draft: Any,
    spec: WaferSpec,
    *,
    num_wafers: int,
    context_len: int,
    slots: int = 1,
    param_bytes: ParamBytes = ParamBytes(),
    regions: Regions = Regions(),
) -> int:
    """The fewest PE rows of each wafer that hold the draft (by bytes) with the target
    holding the rest; PipelinePlanError when no split holds them (then no placement does,
    but for a row of rounding: `place_speculative` holds exactly what this holds)."""
    rows, drafted = spec.pe_rows, _draft_regions(regions)
    kw: dict[str, Any] = dict(num_wafers=num_wafers, context_len=context_len, slots=slots)

    def fits(n: int) -> bool:
        try:
            plan_pipeline(draft, spec.replace(pe_rows=n), bytes_per_param=param_bytes.of_draft,
                          regions=drafted, **kw)  # fmt: skip
            return True
        except PipelinePlanError:
            return False

    if not fits(rows - 1):
        raise PipelinePlanError(
            f"the draft model does not fit {num_wafers} x {spec.name} with {slots} users"
        )
    lo, hi = 1, rows - 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    try:
        plan_pipeline(target, spec.replace(pe_rows=rows - lo), bytes_per_param=param_bytes.target,
                      regions=regions, **kw)  # fmt: skip
    except PipelinePlanError as e:
        raise PipelinePlanError(
            f"the target and its draft do not fit {num_wafers} x {spec.name} together "
            f"(the draft takes {lo} of the {rows} PE rows of each wafer): {e}"
        ) from None
    return lo


def place_speculative(
    target: Any,
    draft: Any,
    spec: WaferSpec,
    *,
    num_wafers: int,
    context_len: int,
    round: RoundSetup,
    slots: int = 1,
    param_bytes: ParamBytes = ParamBytes(),
    regions: Regions = Regions(),
) -> tuple[PipelinePlan, PipelinePlan]:
    """(target plan, draft plan): of the draft's footprints (`wse_systems.token.
    footprint_plans`: PE rows of each wafer on the ladder of `GRID_STEP`, below the wafer's
    rows, the plain plan's footprints), the target on the rest, and each model's head rows
    on the same ladder of its rows (`wse_systems.token.ladder_plans`), the placement that
    holds both and whose round period with `slots` users in flight prices shortest: its round
    (`gamma` drafts and the target's pass over gamma + 1 tokens, `kv_tokens` cached tokens read), or
    `slots` rounds through the element a round holds longest, one at a time, whichever is longer
    (with `round.load`: the keys it gives, in order); then the shorter round, then the fewer rows
    (at one user: the shortest round, the fastest plan of each model on its rows). None holds them:
    the draft on its
    fewest rows (`fewest_draft_rows`, whose error comes first when nothing does), each model
    placed fastest there (`wse_systems.token.fastest_plan`). `regions` are the target's (the
    draft's: one per layer, laid out and priced as the target's); `price(config, plan)`
    prices a plan's `Pipeline` (default: `price_pipeline` at `kv_tokens`; the serving model
    passes its own, which prices a placement once over every load).

    Why (hunt 68): the draft on the fewest rows that hold it and each model's regions by
    bytes made a larger reservation faster: more context or users gave the draft more rows
    (its tokens, on a round's path gamma times, faster) and each model's layers more of its
    rows (Llama 3.1 8B and 3.2 1B, gamma 4: 1,035.15 us a round at a 2,048-token context,
    1,028.98 us at 4,096). Priced, more rows than the fewest make the draft faster than they
    make the target slower. The round is the draft's part plus the target's, so each model's
    fastest head on its rows gives the fastest round of those rows. Every candidate is the
    wafer's, the same for every reservation, and is priced by its regions, so a larger
    reservation leaves the same or fewer and its round is never shorter (exactly while one
    holds them, the stages hold equal layers and the verify pass's blocks are not cut by free
    SRAM, `blocks.max_block_tokens`). Why the load (hunt 72): with many users the round
    period is set by the busiest element's holds, not the round's latency, and the one
    user's placement served 8% less at 16-64 users (Llama 3 8B with 3.2 1B, gamma 4: the
    draft on 256 rows; at 16 users and more, 128)."""
    gamma, kv_tokens, price, load = round
    lo = fewest_draft_rows(target, draft, spec, num_wafers=num_wafers, context_len=context_len,
                           slots=slots, param_bytes=param_bytes, regions=regions)  # fmt: skip
    price = price or (lambda c, p: price_pipeline(c, p, kv_tokens=kv_tokens))
    kw: dict[str, Any] = dict(num_wafers=num_wafers, context_len=context_len, slots=slots)
    tkw = dict(kw, regions=regions, bytes_per_param=param_bytes.target)
    dkw = dict(kw, regions=_draft_regions(regions), bytes_per_param=param_bytes.of_draft)

    # each plan priced once: (seconds of its part of a round, its longest hold of one
    # element a round); a placement's round reads what its choice priced
    verify = once_per_plan(lambda plan: _verify_part(price(target, plan), gamma))
    drafting = once_per_plan(lambda plan: _draft_part(price(draft, plan), gamma))

    best: tuple[tuple[float, float], PipelinePlan, PipelinePlan] | None = None
    for cut, drafts in footprint_plans(draft, spec, **dkw):
        # the draft first (the smaller model): on rows that cannot hold it, the target's
        # placements are not planned; nothing is priced until both hold
        rest = spec.replace(pe_rows=spec.pe_rows - cut.pe_rows)  # below the draft's rows
        laid = ladder_plans(target, rest, step=GRID_STEP, **tkw) if drafts else []
        targets = [p.within(above=cut.pe_rows) for p in laid]
        # each model's plans fastest first (a tie keeps the fewer head rows): at one user the
        # pair of the two fastest, as each model alone chooses
        pairs = [(t, d) for t in sorted(targets, key=lambda p: verify(p)[0])
                 for d in sorted(drafts, key=lambda p: drafting(p)[0])]  # fmt: skip
        if pairs:
            key, t, d = min(
                (((*load(t, d), verify(t)[0] + drafting(d)[0]) if load else
                  _period(verify(t), drafting(d), slots), t, d) for t, d in pairs),
                key=lambda c: c[0],
            )  # fmt: skip
            best = (key, t, d) if best is None or key < best[0] else best  # a tie: fewer rows
    if best is not None:
        return best[1], best[2]
    rest, rows_of_draft = spec.replace(pe_rows=spec.pe_rows - lo), spec.replace(pe_rows=lo)
    below, above = dict(below=spec.pe_rows - lo), dict(above=lo)  # each model's rows around
    t = fastest_plan(target, rest, lambda p: verify(p.within(**above))[0], **tkw)
    d = fastest_plan(draft, rows_of_draft, lambda p: drafting(p.within(**below))[0], **dkw)
    return t.within(**above), d.within(**below)


def _period(verify: tuple[float, float], drafting: tuple[float, float], users: int):
    """(a user's round period with `users` in flight, its round alone): the round, or each
    user's round through the element held longest one at a time (`RequestWork.unit_s`)."""
    round_s = verify[0] + drafting[0]
    return max(round_s, users * max(verify[1], drafting[1])), round_s


def _verify_part(target: Pipeline, gamma: int) -> tuple[float, float]:
    """The target's pass over gamma + 1 tokens (`Pipeline.pass_s`) and its longest hold of
    one element (`Round.held_s`'s)."""
    seconds, k, _ = target.pass_s(gamma + 1)
    return seconds, math.ceil((gamma + 1) / k) * target.bottleneck(k)[1]


def _draft_part(draft: Pipeline, gamma: int) -> tuple[float, float]:
    """gamma draft tokens one after another, and their longest hold of one element."""
    return gamma * draft.token_s, gamma * draft.bottleneck(1)[1]


def _draft_regions(regions: Regions) -> Regions:
    """The draft's regions: one per layer, in the target's layout and GEMV program; the
    head's rows asked are the target's."""
    return dataclasses.replace(regions, stages=None, head_rows=None)


def _split(work: Work) -> tuple[Work, Work]:
    stream = dataclasses.replace(work, latency_hops=0.0, fixed_cycles=0.0, system_hops=0.0)
    return stream, Work(**{f: getattr(work, f) for f in _LATENCY_FIELDS})


def block_phases(
    part: Phase | Phases, tokens: int, *, latency: bool = True, works: dict | None = None
) -> Phase | Phases:
    """`part` for a block of `tokens` tokens: each leaf's streaming work `tokens` times, its
    latency once (none when `latency` is False: a pass between wafers holds its element
    only while its bytes stream). `works`: the blocks' `Work`s by the id of the one-token
    `Work`, for a caller that keeps the tree alive (the stages' leaves share their `Work`s:
    `decoder._own`, so each is scaled once)."""
    works = {} if works is None else works
    if isinstance(part, Phases):
        kids = tuple(block_phases(p, tokens, latency=latency, works=works) for p in part.parts)
        return dataclasses.replace(part, parts=kids)
    key = (id(part.work), tokens, latency)
    if key not in works:
        stream, lat = _split(part.work)
        works[key] = (part.work, stream.scaled(tokens) + lat if latency else stream.scaled(tokens))
    return dataclasses.replace(part, work=works[key][1])


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
    pipelines: tuple[Pipeline, Pipeline] | None = None,
) -> Round:
    """gamma draft tokens on `draft_plan`, then the target's pass over gamma + 1 tokens on
    `target_plan` (the module's round); `pipelines`: the two plans' `price_pipeline` at
    `kv_tokens` where the caller holds them (the serving model prices each once)."""
    model = model or PerfModel(target_plan.spec)
    tpipe, dpipe = pipelines or (
        price_pipeline(target, target_plan, kv_tokens=kv_tokens, model=model),
        price_pipeline(draft, draft_plan, kv_tokens=kv_tokens, model=model),
    )
    n = gamma + 1
    _, k, _ = tpipe.pass_s(n)
    # the phases `price_token` prices, without evaluating its whole report twice a round
    # (hunt 63: a 4,096-layer draft's plan took 30 s, most of it here)
    step = decode_phases(target, target_plan, kv_tokens=kv_tokens)
    draft_step = decode_phases(draft, draft_plan, kv_tokens=kv_tokens)
    bottleneck, _ = tpipe.bottleneck(k)
    region = dict((name, is_region) for name, is_region, _ in tpipe.elements)
    (slow,) = (p for p in step.parts if p.name == bottleneck)
    works: dict = {}
    verify = serial(
        serial(*(block_phases(p, k, works=works) for p in step.parts), name="first_block"),
        serial(block_phases(slow, k, latency=region[bottleneck], works=works),
               name="next_blocks", repeat=math.ceil(n / k) - 1),
        name="verify",
    )  # fmt: skip
    phases = serial(dataclasses.replace(draft_step, name="draft", repeat=gamma), verify,
                    name="round")  # fmt: skip
    return Round(phases, model.evaluate(phases).seconds, round_held(tpipe, dpipe, gamma), k)


def round_held(target: Pipeline, draft: Pipeline, gamma: int) -> dict[str, float]:
    """The seconds a round holds each element: the target's pass over gamma + 1 tokens in
    its blocks (`Pipeline.pass_s`), the draft's gamma tokens (named "draft ...")."""
    n = gamma + 1
    k = target.pass_s(n)[1]
    held = {name: math.ceil(n / k) * s for name, s in target.occupancy_s(k).items()}
    return held | {f"draft {name}": gamma * s for name, s in draft.occupancy_s(1).items()}
