"""The placement and prompt block that serve a load best, for `wse_systems.serving.wafer`.

Contract. `search(ws, users)` is the (placement, prompt block) a `WaferServing` serves
`users` in: `served` over every layout's candidates (each head size of the ladder, on the
whole wafer and on each footprint below it, `token.placement_plans`, or the placement asked
or searched for speculation) in each block their free SRAM allows, in each stage count of
`stage_counts` (hunt 75: one region per layer was the only count weighed).
`best(candidates, users, output_tokens)` weighs `Candidate`s: each one's requests priced
exactly (`exact()`, None where it does not hold the load) and, where known without
planning, the same requests on `scaled` regions (`bound`); a candidate whose bound falls
short of the tie below the most output found so far is never planned (it cannot be chosen
nor raise the most). The ladder's regions scaled to the load and held by `fits` stand for
their plans; the one chosen is planned, and where it is not what they stood for every
candidate is. `served` is the policy's choice: the most output tokens/s, any within
`OUTPUT_TIE` of it a tie, then the first token soonest.

Why (hunt 73): the serving model chose its layout at one user and kept a placement by one
decode token's time, where the prompt's blocks (what the regions' free SRAM holds beside
the users' caches) depend on the placement and the load; searching every head size of both
layouts at each load planned about 40 placements a load (40 ms), and the largest load
meeting a limit scans the loads. `scaled(plan, users)` is a one-user plan's regions with
`users` in flight: its bytes in proportion to the users (weights and the one item's
activations fixed; the KV cache and the activations `wse_systems.pipeline` counts per user,
the head's), the same regions where the stages hold
equal layers (the regions are then sized by equal bytes at any reservation;
`token.kept_plan`'s condition), so its price and its blocks are the plan's at that load
(tests/test_serving_layout_hunt73.py checks them against `plan_pipeline`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
from collections.abc import Callable
from typing import Any, NamedTuple

from wse_systems.pipeline import PipelinePlan, PipelinePlanError, plan_pipeline
from wse_systems.serving import blocks
from wse_systems.serving.memo import frozen
from wse_systems.serving.request import RequestWork
from wse_systems.serving.stage_counts import stage_counts
from wse_systems.token import placement_plans

__all__ = ["OUTPUT_TIE", "Candidate", "best", "fits", "scaled", "search", "served"]

OUTPUT_TIE = 0.01  # output within this fraction of the most is a tie (`served`)

Works = list[tuple[Any, RequestWork]]
Placement = tuple[PipelinePlan, PipelinePlan | None]  # (target plan, draft plan or None)


class Candidate(NamedTuple):
    """A placement to weigh: `exact()` -> (placement, its requests) at the load, or None
    where it does not hold it; `bound`: requests at least as fast, priced without planning
    (empty: unknown, so always planned)."""

    exact: Callable[[], tuple[Any, list[RequestWork]] | None]
    bound: list[RequestWork]


def _scores(users: int, output_tokens: int) -> Callable[[RequestWork], tuple[float, float]]:
    """request -> (its output tokens/s, its first token in s: the point's, `first_s`) at
    `users`, each priced once."""
    held: dict[int, tuple[RequestWork, tuple[float, float]]] = {}

    def score(w: RequestWork) -> tuple[float, float]:
        if id(w) not in held:
            times = w.times(users)
            held[id(w)] = (w, (users * output_tokens / times.period_s, w.first_s(users, times)))
        return held[id(w)][1]

    return score


def served(
    works: Works,
    users: int,
    output_tokens: int,
    score: Callable[[RequestWork], tuple] | None = None,
) -> tuple[Any, RequestWork]:
    """Of (placement, request) pairs at `users`, the one that serves best: the most output
    tokens/s, where any within `OUTPUT_TIE` of the most count as a tie, then the first token
    soonest (then the more output, then the first listed). Why (hunt 73): by the most
    output alone, 8B at 107 users took 4-token blocks for 0.04% more output than 8-token
    blocks at 2.6 times their first token, a sawtooth in the load."""
    score = score or _scores(users, output_tokens)
    scored = [(*score(w), i) for i, (_, w) in enumerate(works)]
    most = max(out for out, _, _ in scored)
    tied = [s for s in scored if s[0] >= (1.0 - OUTPUT_TIE) * most]
    return works[min(tied, key=lambda s: (s[1], -s[0], s[2]))[2]]


def best(
    candidates: list[Candidate], users: int, output_tokens: int
) -> tuple[Any, RequestWork] | None:
    """`served` over the candidates that hold `users`, those whose bound cannot reach the
    tie left unplanned (module contract); None when none holds them."""
    score = _scores(users, output_tokens)

    def most(works: list[RequestWork]) -> float:
        return max(score(w)[0] for w in works)

    bounds = [most(c.bound) if c.bound else math.inf for c in candidates]
    found: Works = []
    top = 0.0
    for i in sorted(range(len(candidates)), key=lambda j: -bounds[j]):
        if bounds[i] < (1.0 - OUTPUT_TIE) * top:
            break  # sorted: every bound after it is as short
        got = candidates[i].exact()
        if got is None:
            continue
        placement, works = got
        found += [(placement, w) for w in works]
        top = max(top, most(works))
    return served(found, users, output_tokens, score) if found else None


def scaled(plan: PipelinePlan, users: int) -> PipelinePlan | None:
    """`plan` (one user in flight) with `users`: its regions, the KV cache and the per-user
    activations times `users` (module contract); None unless its stages hold equal layers."""
    if plan.slots != 1 or len({s.num_layers for s in plan.stages}) > 1:
        return None

    def more(s: Any) -> Any:  # the one item's activations stay (`StagePlan.item_act_bytes`)
        act = s.item_act_bytes + s.user_act_bytes * users
        return dataclasses.replace(s, kv_bytes=s.kv_bytes * users, act_bytes=act)

    return dataclasses.replace(
        plan, slots=users, head=more(plan.head), stages=tuple(more(s) for s in plan.stages)
    )


def fits(plan: PipelinePlan) -> bool:
    """Whether every region's SRAM holds its weights, KV cache and activations, each
    rounded up to whole bytes a PE, as `wse_systems.placement.place_on_wafer` declares them
    in the region's ledger."""
    sram = plan.spec.data_bytes_per_pe
    return all(
        sum(math.ceil(b / s.region.num_pes) for b in (s.weight_bytes, s.kv_bytes, s.act_bytes))
        <= sram
        for s in (plan.head, *plan.stages)
    )


def search(ws: Any, users: int) -> tuple[Placement, int]:
    """(the placement, its prompt block) that serves `users` best on `ws` (a
    `wse_systems.serving.wafer.WaferServing`) under the policy (`served`) among every
    layout's candidates that hold them (`_candidates`); the first PipelinePlanError when none
    does. The ladder's regions are weighed scaled to the load (`scaled`, `fits`) and the one
    chosen is planned: where the plan is not what they stood for, every candidate is
    planned. Why (hunt 73): chosen by one user's token, 70B on 4 wafers took the compact
    layout, 21 users at most where banded holds 44, and 8B at 23 users (8,192-token prompts)
    kept a placement whose free SRAM left 1-token prompt blocks (500 tokens/s) where
    another's gave 16 (678 tokens/s, a sooner first token)."""
    o = ws.workload.output_tokens
    for trusted in (True, False):
        errors: list[PipelinePlanError] = []
        made: dict[int, tuple] = {}  # a scaled plan's id -> (it, layout, stages, head, wafer)
        kept = made if trusted else None
        weighed = [c for a in _shapes(ws) for c in _candidates(ws, users, a, errors, kept)]
        chosen = best(weighed, users, o)
        if chosen is None or id(chosen[0][0]) not in made:
            break
        bound, *shape, rows, on = made[id(chosen[0][0])]
        plans = _plan(ws, users, tuple(shape), rows, on)  # what the scaled regions stand for
        if _same(ws, plans[0], bound):
            chosen = (plans, chosen[1])
            break
    for shape in _shapes(ws) if chosen is None else ():  # no ladder size holds them
        try:
            plans = _plan(ws, users, shape)  # the regions by bytes
        except PipelinePlanError as e:
            errors.append(e)
            continue
        chosen = served([(plans, w) for w in ws._works(plans)], users, o)
        break
    if chosen is None:
        raise errors[0]
    return chosen[0], chosen[1].block


def _same(ws: Any, plan: PipelinePlan, bound: PipelinePlan) -> bool:
    """Whether `plan` prices as `bound` does: its regions' price and its blocks' caps."""
    caps = blocks.block_caps(ws.config, plan) == blocks.block_caps(ws.config, bound)
    return caps and blocks.priced_by(plan) == blocks.priced_by(bound)


def _shapes(ws: Any) -> list[tuple[str, int | None]]:
    """Each (layout, stage count) the search weighs (`stage_counts`, the asked count first)."""
    return [(a, s) for a in ws._layouts() for s in stage_counts(ws)]


def _plan(
    ws: Any, users: int, shape: tuple, head_rows: int | None = None, on: Any = None
) -> Placement:
    """(the target's plan, no draft) at `users` in `shape` (layout, stage count), the head's
    rows as asked, on the wafer `on` (a footprint, `token.footprint_plans`; None: the
    system's)."""
    asked = ws._asked(users, *shape)
    if head_rows is not None:
        asked["regions"] = dataclasses.replace(asked["regions"], head_rows=head_rows)
    spec = ws.spec if on is None else on  # a footprint: the wafer's top rows
    plan = plan_pipeline(ws.config, spec, bytes_per_param=ws.bytes_per_param, **asked)
    return plan.within(below=ws.spec.pe_rows - spec.pe_rows), None


def _candidates(
    ws: Any, users: int, shape: tuple, errors: list, made: dict | None
) -> list[Candidate]:
    """The placements in `shape` (a layout, a stage count) to weigh at `users`: each head
    size of one user's ladder on the whole wafer and on each footprint below it
    (`token.placement_plans`; more users hold the same or fewer),
    bounded by its regions scaled to the load; the head's rows asked: that plan;
    speculation: the placement its search prices shortest at this load
    (`speculative.place_speculative`, ranked by the system's `_load`; the asked stages).
    A plan that does not hold them is no candidate, its error kept in
    `errors`. `made` (a dict): a ladder entry is its regions scaled, unplanned, where they
    hold the load (`fits`), recorded in `made` for `search` to plan the one chosen."""

    def exact(plan_fn: Any, known: tuple = (None, [])) -> Any:
        try:
            plans = plan_fn()
        except PipelinePlanError as e:
            errors.append(e)
            return None
        bound, works = known  # the scaled regions' requests, where they are the plan's
        return plans, works if bound is not None and _same(ws, plans[0], bound) else ws._works(
            plans
        )

    if ws.speculation is not None or ws.head_rows is not None:
        plan_fn = functools.partial(_plan, ws)
        if ws.speculation is not None:  # its placement search keeps the asked stages
            plan_fn, shape = ws._speculative, shape[0]
        return [Candidate(functools.partial(exact, functools.partial(plan_fn, users, shape)), [])]
    if shape not in ws._ladders:
        asked = ws._asked(1, *shape)
        ws._ladders[shape] = placement_plans(
            ws.config, ws.spec, bytes_per_param=ws.bytes_per_param, **asked
        )
    out = []
    for i, one in enumerate(ws._ladders[shape]):
        bound, rows = scaled(one, users), one.head.region.rows
        works = [] if bound is None else _scaled_works(ws, shape, i, bound)
        if made is not None and bound is not None:
            made[id(bound)] = (bound, *shape, rows, one.spec)
            held = ((bound, None), works) if fits(bound) else None
            out.append(Candidate(functools.partial(lambda h: h, held), works))
        else:
            plan_fn = functools.partial(_plan, ws, users, shape, rows, one.spec)
            out.append(Candidate(functools.partial(exact, plan_fn, (bound, works)), works))
    return out


def _scaled_works(ws: Any, shape: tuple, i: int, plan: PipelinePlan) -> list[RequestWork]:
    """The system's `_works` on ladder entry `i` of `shape`'s (layout, stage count) regions
    scaled to a load: each block's request kept by the regions and MeshGEMM caps it reads,
    whatever the load."""
    caps = blocks.block_caps(ws.config, plan)
    base = (*shape, i, frozen(caps["gemm_tokens"]))
    cap = types.SimpleNamespace(max_block_tokens=caps["max_block_tokens"])  # its sizes:
    sizes = {min(k, ws.workload.prompt_tokens) for k in blocks.Pipeline.block_sizes(cap)}
    if any((base, k) not in ws._bounds for k in sizes):
        ws._bounds |= {(base, w.block): w for w in ws._works((plan, None))}
    return [ws._bounds[base, k] for k in sorted(sizes)]
