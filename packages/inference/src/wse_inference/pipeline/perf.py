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
- `predict_speculative(...)`: one emitted token of speculative decoding, the draft and the
  target each on their own plan, at a measured number of rounds per token.

Several wafers pass the residual stream (d_model values) at the system I/O rate, plus
`spec.system_latency_s` per pass (an assumption: `--assume system_latency_s=...`).
"""

from __future__ import annotations

from typing import Any

from wse_core.cost.calibration import DECODE_8B_TOKENS_PER_S
from wse_core.cost.perf import overlap, serial
from wse_core.cost.report import RunReport
from wse_core.hw.spec import WaferSpec
from wse_systems.decoder import decode_phases
from wse_systems.pipeline import PipelinePlan, min_wafers, plan_pipeline
from wse_systems.token import decode_assumptions, price_token, token_report

__all__ = [
    "CALIBRATION_TOKENS_PER_S",
    "decode_assumptions",
    "predict_decode",
    "predict_model",
    "predict_speculative",
    "plan_for",
    "tokens_per_s",
]

CALIBRATION_TOKENS_PER_S = DECODE_8B_TOKENS_PER_S  # Llama 3.1 8B, one WSE-3 (REFERENCES.md)


def tokens_per_s(report: RunReport) -> float:
    """Predicted tokens/s of a per-token report (its `units_per_s`)."""
    return report.units_per_s


# One batch-1 decode token of `config` on `plan`: the one pricer of a decode token.
predict_decode = price_token


def plan_for(
    config: Any,
    *,
    spec: WaferSpec,
    num_wafers: int | None = None,
    context_len: int = 8192,
    bytes_per_param: int = 2,
) -> PipelinePlan:
    """One region per layer on `num_wafers` wafers (default: the fewest that hold weights
    and one user's KV cache of `context_len` tokens)."""
    kwargs: dict[str, Any] = dict(context_len=context_len, bytes_per_param=bytes_per_param)
    if num_wafers is None:
        num_wafers = min_wafers(config, spec, **kwargs)
    return plan_pipeline(config, spec, num_wafers=num_wafers, **kwargs)


def predict_model(
    model: str | Any,
    *,
    spec: WaferSpec,
    num_wafers: int | None = None,
    context_len: int = 8192,
) -> tuple[RunReport, PipelinePlan]:
    """(report, plan) of one 16-bit decode token of `model` (a `wse_models` preset name or a
    config) on `num_wafers` wafers (default: the fewest that hold weights and KV cache)."""
    from wse_models import preset_config

    config = preset_config(model) if isinstance(model, str) else model
    plan = plan_for(config, spec=spec, num_wafers=num_wafers, context_len=context_len)
    return predict_decode(config, plan), plan


def predict_speculative(
    target: Any,
    target_plan: PipelinePlan,
    draft: Any,
    draft_plan: PipelinePlan,
    *,
    gamma: int,
    rounds_per_token: float,
    kv_tokens: int | None = None,
    measured_wall_s: float | None = None,
    name: str | None = None,
) -> RunReport:
    """One emitted token of speculative decoding (units "token"): `rounds_per_token` rounds
    (measured: rounds / tokens emitted), each `gamma` draft decode tokens on `draft_plan`,
    then the target's pass over gamma + 1 tokens on `target_plan`, the gamma tokens behind
    the first pipelined through the target's regions (the slowest region sets their rate)."""
    draft_step = decode_phases(draft, draft_plan, kv_tokens=kv_tokens)
    target_step = decode_phases(target, target_plan, kv_tokens=kv_tokens)
    verify = serial(
        target_step,
        overlap(*target_step.parts, name="pipelined_drafts", repeat=gamma),
        name="verify",
    )
    draft_part = serial(draft_step, name="draft", repeat=gamma)
    phases = serial(draft_part, verify, name="round", repeat=rounds_per_token)
    spec_assumptions = {
        "speculative placement": "the draft runs on its own plan (its own regions/wafers); "
        "handing drafted tokens to the target is not priced",
        "verification": f"the target's pass over {gamma + 1} tokens is one token's pass plus "
        f"{gamma} tokens pipelined behind it at the slowest region's rate",
    }
    return token_report(
        name or f"speculative {target.name or 'target'} / {draft.name or 'draft'}",
        target_plan,
        phases,
        kv_tokens=kv_tokens,
        measured_wall_s=measured_wall_s,
        assumptions=spec_assumptions,
        extra={"draft_plan": draft_plan.summary(), "gamma": gamma,
               "rounds_per_token": rounds_per_token},
        systems=target_plan.num_wafers + draft_plan.num_wafers,
    )  # fmt: skip
