"""One decode token priced: the one function every consumer of a batch-1 token time calls.

Contract. `price_token(shape, plan, kv_tokens=...)` is one decode token of `shape` (a
`DecoderShape`) on `plan` (a `wse_systems.pipeline.PipelinePlan`): its phases are
`wse_systems.decoder.decode_phases`, evaluated by `wse_core.PerfModel` (the one calibration,
or the `model` given), returned as a `wse_core.RunReport` with `units="token"`:
`predicted_s` is the wafer time of one token, `extra["plan"]` the plan's regions,
`extra["tokens_per_s"]` its inverse, and the assumptions (`decode_assumptions`) say what
the figure rests on. The pipelined engine's report (`wse_inference.pipeline.perf`), the
per-wafer traces (`wse_systems.trace`), the serving model's pipeline elements
(`wse_systems.serving.wafer.price_pipeline`, from this report's phases) and so `wse plan
infer` all price a token here; a test holds them to the same batch-1 time to the cycle.

`fastest_plan(shape, spec, seconds_fn, **plan_kwargs)` is the planner's placement: of the
head's rows on the wafer's ladder (`head_rows_ladder`), on the whole wafer and on each
footprint below it (the PE rows of each wafer a plan takes: `footprint_plans`, where
`wse_systems.serving.speculative` places a draft too), the plan whose token `seconds_fn`
prices shortest among those that hold it (a larger reservation holds the same or fewer, so
its token is never faster; `placement_plans` are those candidates, `ladder_plans` one
wafer's, `kept_plan` carries a choice to more users where it stays the choice).
`token_seconds_fn(shape, kv_tokens=, token_out=)` is the `seconds_fn` of a batch-1 token
(`price_token`'s seconds, each distinct element priced once).
`choose_layout(shape, spec, ...)` plans the regions banded and compact
(`wse_systems.pipeline.LAYOUTS`), each in its fastest placement priced by it, and returns
the faster plan (its `layout` says which, its head's rows how the wafer is split) with both
times; a caller with the layout fixed calls `fastest_plan` with the same `token_seconds_fn`.

The published setup and the calibration set's 8B check (`PUBLISHED_SETUP`, `decode_case`,
`decode_check_row`) are `wse_systems.published`'s: the check prices the plan `wse plan infer`
serves it on, whose search (stage counts too) lives above this module.

`token_report(...)` builds the per-token report of any phase tree on a plan (the
speculative round of `wse_inference.pipeline.perf` uses it with its own phases).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from wse_core.cost.listing import listed
from wse_core.cost.perf import PerfModel, Phases
from wse_core.cost.reads import recording
from wse_core.cost.report import Measured, RunReport
from wse_core.hw.spec import WaferSpec

from wse_systems.decoder import DECODER_ASSUMPTIONS, decode_phases, token_out_work
from wse_systems.pipeline import (
    GEMV_ASSUMPTIONS,
    LAYOUTS,
    PipelinePlan,
    PipelinePlanError,
    Regions,
    compact_strips,
    once_per_plan,
    plan_pipeline,
    split_even,
)

__all__ = [
    "GRID_STEP",
    "FOOTPRINT_EXHAUSTIVE_ROWS",
    "HEAD_ROWS_STEP",
    "choose_layout",
    "fastest_plan",
    "footprint_plans",
    "footprint_rows",
    "head_rows_ladder",
    "kept_plan",
    "ladder_plans",
    "placement_plans",
    "token_seconds_fn",
    "decode_assumptions",
    "price_token",
    "token_report",
]


def decode_assumptions(plan: PipelinePlan, kv_tokens: int | None) -> dict[str, str]:
    """The assumptions behind a decode prediction on `plan` (beside the spec's own)."""
    spec = plan.spec
    kv = plan.context_len // 2 if kv_tokens is None else kv_tokens
    return {
        **DECODER_ASSUMPTIONS,
        "kv_tokens": f"the attention reads {kv} cached tokens, the filled ones (context "
        f"{plan.context_len}; the alternative, the whole allocated buffer as WaferLLM's decode "
        "computes over it, is swept beside the 8B check: wse_systems.published.check_sweeps)",
        "batch": "batch 1: one region works at a time, so the regions' times add",
        "between wafers": (
            f"{plan.wafer_crossings} pass(es) per token (each wafer boundary and the way back to "
            f"wafer 0): {plan.edge_hops} fabric hops to and from the wafers' edges, d_model "
            f"values at the system I/O rate "
            f"({spec.host_io_bytes_per_s / 1e9:g} GB/s) plus system_latency_s "
            f"({spec.system_latency_s:g} s, assumed) each"
        ),
        "weights": f"{plan.bytes_per_param} bytes per parameter and per cached value",
        "regions": _regions_note(plan),
        "gemv program": f"{plan.gemv}: {GEMV_ASSUMPTIONS[plan.gemv]} "
        "(wse_systems.pipeline.GEMV_PROGRAMS; plan_pipeline(..., gemv=...))",
    }


def _regions_note(plan: PipelinePlan) -> str:
    """The layout and how much of the wafers each kind of region holds."""
    head, pes = plan.head.region, plan.num_wafers * plan.spec.pe_rows * plan.spec.pe_cols
    layers = sum(s.region.num_pes for s in plan.stages)
    return (
        f"{plan.layout} (wse_systems.pipeline.LAYOUTS): the head on {head.rows} x {head.cols} "
        f"PEs, the layers on {layers:,} of the {pes:,} PEs ({layers / pes:.1%})"
    )


def token_report(
    name: str,
    plan: PipelinePlan,
    phases: Phases,
    *,
    assumptions: Mapping[str, str],
    measured: Measured = Measured(),
    extra: Mapping[str, Any] | None = None,
    tail: Mapping[str, Any] | None = None,
    model: PerfModel | None = None,
) -> RunReport:
    """The per-token report of `phases` on `plan` (on its `num_wafers` systems): `assumptions`
    those of the decode (`decode_assumptions(plan, kv_tokens)`) and any beside them;
    `extra` holds the plan, `extra`, tokens/s, then `tail`."""
    head = {"plan": plan.summary(), **(extra or {})}
    return RunReport.build(
        name,
        plan.spec,
        phases,
        measured_wall_s=measured.wall_s,
        sram=measured.sram,
        assumptions=assumptions,
        units="token",
        systems=plan.num_wafers,
        model=model,
        extra=lambda t: {**head, "tokens_per_s": t.per_s, **(tail or {})},
    )


def price_token(
    shape: Any,
    plan: PipelinePlan,
    *,
    kv_tokens: int | None = None,
    name: str | None = None,
    measured: Measured = Measured(),
    tokens: int | None = None,
    model: PerfModel | None = None,
    token_out: bool = False,
) -> RunReport:
    """One batch-1 decode token of `shape` on `plan` (units "token"; seconds per token).

    `measured`: the emulator's wall time per token and the SRAM ledger summary of the wafer
    that ran it, shown beside the prediction; `tokens`: the decode tokens the measurement
    covers (`extra["tokens"]`); `token_out`: the token's trip to the host is on the step's
    path (`wse_systems.decoder.token_out_work`)."""
    with recording() as got:  # building the phases reads constants too (exp_fmacs)
        phases = decode_phases(shape, plan, kv_tokens=kv_tokens, token_out=token_out)
        report = token_report(
            name or f"decode {getattr(shape, 'name', 'model')}",
            plan,
            phases,
            assumptions=decode_assumptions(plan, kv_tokens),
            measured=measured,
            tail=None if tokens is None else {"tokens": tokens},
            model=model,
        )
    return dataclasses.replace(report, assumed=listed(got))


# The ratio between the head sizes `fastest_plan` prices: 2^(1/4), a head within 19% of any
# row count, 4 log2(rows) sizes (35 of a WSE-3's 762 rows; the 8B, one user: 8 compact, 15
# banded hold it). 2^(1/2) halves the planning time, but its best 8B token (compact, 256 head
# rows) is 0.1% slower than the regions by the bytes of 8 users at an 8k context.
HEAD_ROWS_STEP = 2**0.25


def head_rows_ladder(spec: WaferSpec, *, step: float = HEAD_ROWS_STEP) -> tuple[int, ...]:
    """The head's PE rows `fastest_plan` tries: round(step^k) below the wafer's rows, and
    all of them (a head alone in its strip), each once, ascending. It depends on the wafer
    only, never on what a plan holds (see `fastest_plan`)."""
    out, k = [], 0
    while (rows := round(step**k)) < spec.pe_rows:
        out += [rows] if not out or rows != out[-1] else []
        k += 1
    return (*out, spec.pe_rows)


def ladder_plans(
    config: Any, spec: WaferSpec, *, step: float = HEAD_ROWS_STEP, **plan_kwargs: Any
) -> list[PipelinePlan]:
    """The plans of `plan_pipeline(config, spec, **plan_kwargs)` with the head on each size
    of `head_rows_ladder(spec, step=step)` that holds it, fewest head rows first (the head's
    rows asked in `regions`: that plan alone, if it holds)."""
    asked = plan_kwargs.pop("regions", Regions())
    sizes = head_rows_ladder(spec, step=step) if asked.head_rows is None else (asked.head_rows,)
    held = []
    for rows in sizes:
        try:
            regions = dataclasses.replace(asked, head_rows=rows)
            held.append(plan_pipeline(config, spec, regions=regions, **plan_kwargs))
        except PipelinePlanError:
            continue
    return held


# The ratio between the footprints of the ladder a plan is tried on (`footprint_rows`: the PE
# rows of each wafer it takes, from the top, below the whole wafer; the compact layout's strip
# changes beside them since hunt 82) and between the head sizes on each: 2,
# a quarter of `HEAD_ROWS_STEP`'s steps in each dimension, as every footprint times its head
# sizes is planned and priced (10 footprints of a WSE-3's 762 rows, 1 to 512, each with up
# to 10 head sizes). `wse_systems.serving.speculative.place_speculative` places a draft on
# the same footprints. Llama 3.1 8B with 3.2 1B, both layouts: 26 placements priced and a
# round of 915.2 us; on `HEAD_ROWS_STEP`'s grid 387 (ten times the planning time) for
# 914.0 us.
GRID_STEP = 2.0
# A wafer of at most this many PE rows (rows) is tried on every footprint below it
# (`footprint_rows`): the tiny test preset (8) and a 16-row cut of `small`, where a brute
# force over every row count checks the search; a larger one on the ladder and the compact
# layout's strip changes (each a footprint planned with its head sizes: a WSE-3's 762 rows
# every one would plan 761 footprints a layout).
FOOTPRINT_EXHAUSTIVE_ROWS = 16


def footprint_rows(
    config: Any, spec: WaferSpec, *, step: float = GRID_STEP, **plan_kwargs: Any
) -> tuple[int, ...]:
    """The PE rows of the footprints below the whole wafer that a plan of
    `plan_pipeline(config, ..., **plan_kwargs)` is tried on, ascending: every count on a
    wafer of at most `FOOTPRINT_EXHAUSTIVE_ROWS`; else `head_rows_ladder(spec, step=step)`
    less its last and, for the compact layout, the fewest rows that give each count of its
    column strips (`compact_strips` of each wafer's regions): within one count a region is
    shorter on fewer rows, so that count's fastest footprint is at or near its fewest
    (hunt 82, jobs18 L4: Llama 3.2 1B, one user, compact, 110.66 us a token on 474 of a
    WSE-3's 762 rows, where 6 strips start, against 111.50 on the ladder's 512). The rows
    depend on the wafer, the stage count and the wafers only, never on what a plan holds."""
    if spec.pe_rows <= FOOTPRINT_EXHAUSTIVE_ROWS:
        return tuple(range(1, spec.pe_rows))
    rows = set(head_rows_ladder(spec, step=step)[:-1])
    asked = plan_kwargs.get("regions", Regions())
    if asked.layout == "compact":
        stages = config.n_layers if asked.stages is None else asked.stages
        spread = split_even(stages, int(plan_kwargs.get("num_wafers", 1)))
        for n in {b - a + (w == 0) for w, (a, b) in enumerate(spread)}:  # the head on wafer 0
            seen = set()
            for r in range(1, spec.pe_rows):
                strips = compact_strips(n, spec, pe_rows=r)
                if strips not in seen:
                    seen.add(strips)
                    rows.add(r)
    return tuple(sorted(rows))


def footprint_plans(
    config: Any, spec: WaferSpec, *, step: float = GRID_STEP, **plan_kwargs: Any
) -> Iterator[tuple[WaferSpec, list[PipelinePlan]]]:
    """For each footprint below the whole wafer, fewest rows first: (the wafer of its PE
    rows, `spec` cut to each of `footprint_rows`; the plans of `ladder_plans` on it, the
    head on the ladder of `step` of its rows). A plan on a footprint is `plan_pipeline`'s
    on the cut wafer: its regions tile the footprint, the wafer's top `rows` rows (its
    `rows_below` the rest: a trip to the wafer's edge ends at the wafer's), the other rows
    idle (or, the footprint a draft's, the target's: `place_speculative`)."""
    for rows in footprint_rows(config, spec, step=step, **plan_kwargs):
        cut = spec.replace(pe_rows=rows)
        below = spec.pe_rows - rows
        yield cut, [p.within(below=below) for p in ladder_plans(config, cut, step=step,
                                                                **plan_kwargs)]  # fmt: skip


def placement_plans(config: Any, spec: WaferSpec, **plan_kwargs: Any) -> list[PipelinePlan]:
    """Every placement `fastest_plan` weighs: the whole wafer's (`ladder_plans`), then each
    footprint's below it (`footprint_plans`; none when the head's rows are asked: the whole
    wafer's plan alone)."""
    whole = ladder_plans(config, spec, **plan_kwargs)
    if plan_kwargs.get("regions", Regions()).head_rows is not None:
        return whole
    return whole + [p for _, plans in footprint_plans(config, spec, **plan_kwargs) for p in plans]


def fastest_plan(
    config: Any, spec: WaferSpec, seconds_fn: Callable[[PipelinePlan], float],
    **plan_kwargs: Any,
) -> PipelinePlan:  # fmt: skip
    """The plan of `plan_pipeline(config, spec, **plan_kwargs)` whose token `seconds_fn`
    prices shortest among the head sizes of `head_rows_ladder` that hold it on the whole
    wafer and the footprints below it (`placement_plans`; a tie keeps the whole wafer, then
    the fewer rows, then the fewer head rows); the `regions` asked otherwise as given (a
    `head_rows` given: that plan alone, on the whole wafer). Nothing holds it: the regions in
    proportion to their bytes; those do not hold it either (then nothing does, but for a row
    of rounding): their error.

    Why the footprint (hunt jobs17, session 81): the regions tiling the whole wafer, a small
    model's token crossed regions a thirteenth of the wafer apart: GPT-2 124M's was 70.4 us
    (51.2 us of it hops and fixed cycles) where the same pricer gave 52.4 us on 64 of a
    WSE-3's 762 rows, and a speculative round with the model as its own draft (placed on a
    footprint) priced faster than plain decoding. A model that fills the wafer (Llama 3.1 8B,
    70B on 4 wafers) has no faster footprint and keeps its plan.

    Why (hunt 66): sized by bytes alone, a plan holding more KV cache gave the layers more
    of the wafer (the head less), so reserving context a run never reads made its tokens
    faster (8B, 8 users: 328.0 us a token at a 4,096-token context, 325.4 us at 8,192). The
    head holds its embedding table, of which a token reads one row, beside its one product;
    the layers stream all their weights every token: how the rows are best split is the
    pricer's to say, not the bytes'. The ladder is the wafer's, the same for every
    reservation, and each region holds more bytes under a larger one, so a larger context or
    more users leave the same or fewer candidates: their fastest is never faster (exactly
    while a ladder size holds the plan and the stages hold equal layers, as by default:
    unequal stages share the rest by bytes, which a reservation can move by a row). The
    footprints are the wafer's too, and a plan's regions tile its footprint."""
    # by bytes (or as asked) first: what those regions cannot hold no placement holds, so
    # their error comes at once, not after the ladder's 35 tries (a search over 512 wafers)
    first = plan_pipeline(config, spec, **plan_kwargs)
    if plan_kwargs.get("regions", Regions()).head_rows is not None:
        return first
    held = placement_plans(config, spec, **plan_kwargs)
    return min(held, key=seconds_fn) if held else first


def kept_plan(
    config: Any, plan: PipelinePlan, *, slots: int, step: float = HEAD_ROWS_STEP
) -> PipelinePlan | None:
    """`plan`, a `fastest_plan` choice, for `slots` users: its regions asked again (its
    head's rows, layout, stages, GEMV program, wafers, context and bytes), when its head's
    rows are on the ladder of `step`, its stages hold equal layers and the plan for `slots`
    holds in the same regions; else None. For `slots` above `plan.slots` it is
    `fastest_plan`'s choice for them, to the plan, under a `seconds_fn` that prices a
    placement by its regions alone (as `token_seconds_fn`): more users hold the same or fewer
    of the ladder's candidates (equal stages keep their regions at any reservation), and the
    fastest for fewer users is among them (a serving model's loads search once: hunt 68)."""
    rows = plan.head.region.rows
    if (
        rows not in head_rows_ladder(plan.spec, step=step)
        or len({s.num_layers for s in plan.stages}) > 1
    ):
        return None
    asked = Regions(stages=plan.num_stages, layout=plan.layout, gemv=plan.gemv, head_rows=rows)
    try:
        again = plan_pipeline(
            config, plan.spec, num_wafers=plan.num_wafers, context_len=plan.context_len,
            slots=slots, bytes_per_param=plan.bytes_per_param, regions=asked,
        )  # fmt: skip
    except PipelinePlanError:
        return None
    return again if _regions_of(again) == _regions_of(plan) else None


def _regions_of(plan: PipelinePlan) -> tuple:
    return tuple((s.wafer, s.region) for s in (plan.head, *plan.stages))


def token_seconds_fn(
    shape: Any,
    *,
    kv_tokens: int | None = None,
    model: PerfModel | None = None,
    token_out: bool = False,
) -> Callable[[PipelinePlan], float]:
    """plan -> seconds of one batch-1 token of `shape` on it, the `seconds_fn` of
    `fastest_plan` that `choose_layout` (and `wse_inference.pipeline.perf.plan_for` in a
    layout given) prices its candidates by: `wse_systems.serving.blocks.price_pipeline`
    (the same phases as `price_token`, each distinct element priced once: its seconds to the
    cycle, a test holds them) reading `kv_tokens` cached tokens (None: half the plan's
    context), plus the token's trip to the host when `token_out`. Each plan is priced once
    (a chosen plan asked again is not priced again)."""

    def seconds(plan: PipelinePlan) -> float:
        from wse_systems.serving.blocks import price_pipeline  # serving imports this module

        m = model or PerfModel(plan.spec)
        kv = plan.context_len // 2 if kv_tokens is None else kv_tokens
        trip = m.cost(token_out_work(plan)).seconds if token_out else 0.0
        return price_pipeline(shape, plan, kv_tokens=kv, model=m).token_s + trip

    return once_per_plan(seconds)


def choose_layout(
    shape: Any,
    spec: Any,
    *,
    kv_tokens: int | None = None,
    model: PerfModel | None = None,
    token_out: bool = False,
    **plan_kwargs: Any,
) -> tuple[PipelinePlan, dict[str, float]]:
    """(the faster plan, seconds per batch-1 token of each layout that fits): `shape` planned
    banded and compact (the `regions` asked, else `Regions()`, in each layout), each in its
    fastest placement (`fastest_plan`, each candidate priced by `token_seconds_fn`: the
    token `kv_tokens` and `token_out` describe); a tie keeps bands. PipelinePlanError (the
    banded plan's) when neither fits."""
    asked = plan_kwargs.pop("regions", Regions())
    seconds = token_seconds_fn(shape, kv_tokens=kv_tokens, model=model, token_out=token_out)
    plans: dict[str, PipelinePlan] = {}
    error: PipelinePlanError | None = None
    for layout in LAYOUTS:
        regions = dataclasses.replace(asked, layout=layout)
        try:
            plans[layout] = fastest_plan(shape, spec, seconds, regions=regions, **plan_kwargs)
        except PipelinePlanError as e:
            error = error or e
    if not plans:
        assert error is not None
        raise error
    times = {k: seconds(p) for k, p in plans.items()}
    return plans[min(times, key=lambda k: (times[k], LAYOUTS.index(k)))], times
