"""Predicted batch-1 decode on one or several wafers: a `PipelinePlan` priced as a `RunReport`.

Contract. This module adds no cost of its own: one token is `wse_systems.token.price_token`
(the one pricer of a decode token; `decode_assumptions` is its). One token of a decoder laid
out as a `wse_systems.pipeline.PipelinePlan` is `wse_systems.decoder.decode_phases` (every layer's
instructions, SRAM bytes, link words, hops and relays on its region, the activation moves
between products and between regions as words over the plan's links, the named
`per_token` costs, and each pass between wafers), evaluated mechanism by mechanism by
`wse_core.PerfModel` (the constants of `wse_core.cost.mechanisms`; nothing is fitted on a decode:
Llama 3.1 8B at 1,800 tokens/s on one WSE-3 is a check row of `wse_core.cost.calibration`). The
result is a `wse_core.RunReport` with `units="token"`: `predicted_s` is the wafer time of
one token, `extra["tokens_per_s"]` its inverse, `extra["plan"]` the plan's regions.

- `predict_decode(config, plan, ...)`: one token of `config` on `plan` — the same plan object
  `wse_inference.pipeline.PipelineEngine` lays its stages out from (`engine.report()`).
- `predict_model(model, spec=, num_wafers=, context_len=)`: a `wse_models` preset (or a
  config) planned by `plan_for` on the fewest wafers that hold it (or `num_wafers`), 16-bit
  weights -> (report, plan).
- `predict_speculative(target, draft, plans, ...)`: one emitted token of speculative decoding
  at a measured number of rounds per token, each
  `wse_systems.serving.speculative.speculative_round` (the serving model's round too);
  `plan_speculative` places the draft on a few rows of each wafer: `plans`, (target plan,
  draft plan); `plan_speculative_job` is the placement `wse plan infer --draft` serves one
  user of a job on (the serving model's search), the one a run of that job prices.

Several wafers pass the residual stream (d_model values) at the system I/O rate, plus
`spec.system_latency_s` per pass (an assumption: `--assume system_latency_s=...`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from wse_core.cost.calibration import DECODE_8B_TOKENS_PER_S
from wse_core.cost.report import Measured, RunReport
from wse_core.hw.spec import WaferSpec
from wse_systems.pipeline import (
    LAYOUTS,
    PipelinePlan,
    PipelinePlanError,
    Regions,
    min_wafers,
)
from wse_systems.placement import data_note
from wse_systems.planning.infer_wafers import wafer_serving
from wse_systems.serving import Speculation
from wse_systems.serving.speculative import (
    ParamBytes,
    RoundSetup,
    place_speculative,
    speculative_round,
)
from wse_systems.token import (
    choose_layout,
    decode_assumptions,
    fastest_plan,
    price_token,
    token_report,
    token_seconds_fn,
)

__all__ = [
    "CALIBRATION_TOKENS_PER_S",
    "decode_assumptions",
    "predict_decode",
    "predict_model",
    "predict_speculative",
    "plan_speculative",
    "plan_speculative_job",
    "plan_for",
    "tokens_per_s",
    "TokenSetup",
]

CALIBRATION_TOKENS_PER_S = DECODE_8B_TOKENS_PER_S  # Llama 3.1 8B, one WSE-3 (REFERENCES.md)


def tokens_per_s(report: RunReport) -> float:
    """Predicted tokens/s of a per-token report (its `units_per_s`)."""
    return report.units_per_s


# One batch-1 decode token of `config` on `plan`: the one pricer of a decode token.
predict_decode = price_token


class TokenSetup(NamedTuple):
    """The decode token a layout is chosen on, as `price_token` takes it: `kv_tokens` cached
    tokens read (None: half the context) and, with `token_out`, the token's trip to the host
    on the step's path."""

    kv_tokens: int | None = None
    token_out: bool = False


def plan_for(
    config: Any,
    *,
    spec: WaferSpec,
    num_wafers: int | None = None,
    context_len: int = 8192,
    bytes_per_param: int = 2,
    layout: str | None = None,
    token: TokenSetup = TokenSetup(),
    gemv: str = "sdk",
) -> PipelinePlan:
    """One region per layer on `num_wafers` wafers (default: the fewest that hold weights
    and one user's KV cache of `context_len` tokens), its regions `layout` (default: banded
    or compact, whichever prices the shorter `token`, `wse_systems.token.choose_layout`)
    in the placement that prices the shortest `token` (`wse_systems.token.fastest_plan`),
    each GEMV priced as `gemv` (`wse_systems.pipeline.GEMV_PROGRAMS`: "sdk" or WaferLLM's
    "meshgemv")."""
    kwargs: dict[str, Any] = dict(context_len=context_len, bytes_per_param=bytes_per_param)
    if num_wafers is None:
        num_wafers = min_wafers(config, spec, **kwargs)
    kwargs |= dict(num_wafers=num_wafers, regions=Regions(layout=layout, gemv=gemv))
    if layout is not None:  # hunt 68: by bytes, a larger context priced a faster token
        return fastest_plan(config, spec, token_seconds_fn(config, **token._asdict()), **kwargs)
    return choose_layout(config, spec, **token._asdict(), **kwargs)[0]


def predict_model(
    model: str | Any,
    *,
    spec: WaferSpec,
    num_wafers: int | None = None,
    context_len: int = 8192,
    kv_tokens: int | None = None,
    token_out: bool = False,
    gemv: str = "sdk",
) -> tuple[RunReport, PipelinePlan]:
    """(report, plan) of one 16-bit decode token of `model` (a `wse_models` preset name or a
    config) on `num_wafers` wafers (default: the fewest that hold weights and KV cache),
    reading `kv_tokens` cached tokens (default: half the context), with the token's trip to
    the host on the step's path when `token_out` (`wse_systems.token.price_token`), each
    GEMV priced as `gemv` (`plan_for`)."""
    from wse_models import preset_config

    config = preset_config(model) if isinstance(model, str) else model
    token = TokenSetup(kv_tokens, token_out)
    plan = plan_for(
        config, spec=spec, num_wafers=num_wafers, context_len=context_len, token=token, gemv=gemv
    )
    return predict_decode(config, plan, **token._asdict()), plan


def plan_speculative(
    target: Any,
    draft: Any,
    *,
    spec: WaferSpec,
    gamma: int,
    context_len: int = 8192,
    kv_tokens: int | None = None,
    bytes_per_param: int = 2,
    draft_bytes_per_param: int | None = None,
) -> tuple[PipelinePlan, PipelinePlan]:
    """(target plan, draft plan) by `wse_systems.serving.speculative.place_speculative` on
    the fewest wafers of `spec` that hold both (the draft on a few PE rows of each), its
    regions banded or compact: whichever round of `gamma` drafts is shorter (a tie keeps
    bands). The serving model weighs the layouts by its policy, the whole request's output
    and first token, not the round alone: a run of a known job is priced on its placement
    (`plan_speculative_job`; session 84: the two took different layouts on an 8 x 8 wafer).
    Its one caller is a report given no job (`SpeculativeDecoder.report` without a
    workload: a round at a KV read, no request); session 85: every command's report gives
    its job (`wse infer generate` the run's, `wse infer serve` its nominal request)."""
    kv = context_len // 2 if kv_tokens is None else kv_tokens
    first = min_wafers(target, spec, context_len=context_len, bytes_per_param=bytes_per_param)
    for n in range(first, target.n_layers + 1):
        placed = []
        for layout in LAYOUTS:
            try:
                plans = place_speculative(
                    target, draft, spec, num_wafers=n, context_len=context_len,
                    round=RoundSetup(gamma, kv), regions=Regions(layout=layout),
                    param_bytes=ParamBytes(target=bytes_per_param, draft=draft_bytes_per_param),
                )  # fmt: skip
            except PipelinePlanError:
                continue
            rnd = speculative_round(target, plans[0], draft, plans[1], gamma=gamma, kv_tokens=kv)
            placed.append((rnd.seconds, LAYOUTS.index(layout), plans))
        if placed:
            return min(placed, key=lambda p: p[:2])[2]
    raise PipelinePlanError(
        f"no number of {spec.name} wafers holds the target and its draft{data_note(spec)}"
    )


def plan_speculative_job(
    target: Any,
    draft: Any,
    *,
    spec: WaferSpec,
    workload: Any,
    gamma: int,
    alpha: float,
    bytes_per_param: int = 2,
    draft_bytes_per_param: int | None = None,
) -> tuple[PipelinePlan, PipelinePlan]:
    """(target plan, draft plan) that `wse plan infer MODEL --draft DRAFT --gamma G --alpha A
    --users 1` serves `workload` (a `wse_systems.serving.Workload`: the job's prompt and
    output tokens) on: `wse_systems.planning.infer_wafers.wafer_serving`'s system on the
    fewest wafers of `spec` that hold both models and one user, each layout's placement
    (`place_speculative` ranked by the request's period at one user) weighed by the serving
    policy (`placements.served`: the most output tokens/s, within `OUTPUT_TIE` a tie, then
    the sooner first token), the target at `bytes_per_param` and the draft at
    `draft_bytes_per_param` (None: the target's; `Speculation.draft_bytes_per_param`, as
    `wse plan infer --wafer-dtype auto` reads a draft folder's own dtype).

    Why (session 84, hunt 82 jobs18 L4): `plan_speculative` chose the layout by the round
    alone, the planner by the policy; on an 8 x 8 PE wafer (a 2-layer float32 toy, 3 + 11
    tokens, gamma 4, a = 1) banded's round (the draft on 5 rows) is 121.96 us, compact's
    124.04, but the requests' periods are within 0.35% and compact's first token is sooner,
    so `wse plan infer` served compact and `wse infer generate` priced banded: 24.39 against
    24.81 us a token for the same job."""
    ws = wafer_serving(target, spec, num_wafers=None, workload=workload,
                       speculation=Speculation(draft=draft, gamma=gamma, alpha=alpha,
                                               draft_bytes_per_param=draft_bytes_per_param),
                       bytes_per_param=bytes_per_param)  # fmt: skip
    target_plan, draft_plan = ws.plans(1)
    assert draft_plan is not None  # a speculative system places a draft
    return target_plan, draft_plan


def predict_speculative(
    target: Any,
    draft: Any,
    plans: tuple[PipelinePlan, PipelinePlan],
    *,
    gamma: int,
    rounds_per_token: float,
    kv_tokens: int | None = None,
    measured_wall_s: float | None = None,
    name: str | None = None,
) -> RunReport:
    """One emitted token of speculative decoding (units "token"): `rounds_per_token` rounds
    (measured: rounds / tokens emitted) of `wse_systems.serving.speculative.speculative_round` (the
    one round the serving model prices too) on `plans`, (target plan, draft plan) as
    `plan_speculative` returns them."""
    target_plan, draft_plan = plans
    kv = target_plan.context_len // 2 if kv_tokens is None else kv_tokens
    rnd = speculative_round(target, target_plan, draft, draft_plan, gamma=gamma, kv_tokens=kv)
    phases = dataclasses.replace(rnd.phases, repeat=rounds_per_token)
    spec_assumptions = {
        "speculative placement": f"the draft on {draft_plan.spec.pe_rows} PE rows of each of "
        f"the target's {target_plan.num_wafers} wafer(s) (wse_systems.serving.speculative)",
        "verification": f"the target's pass over {gamma + 1} tokens in blocks of "
        f"{rnd.verify_block}, the first through every element, the rest one bottleneck apart",
    }
    return token_report(
        name or f"speculative {target.name or 'target'} / {draft.name or 'draft'}",
        target_plan,
        phases,
        assumptions={**decode_assumptions(target_plan, kv_tokens), **spec_assumptions},
        measured=Measured(measured_wall_s),
        extra={"draft_plan": draft_plan.summary(), "gamma": gamma,
               "rounds_per_token": rounds_per_token, "round_s": rnd.seconds},
    )  # fmt: skip
