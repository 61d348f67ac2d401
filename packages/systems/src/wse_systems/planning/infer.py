"""`wse plan infer`'s model: wafers against GPUs serving a model at an operating point.

Contract. `plan_infer(choice, ...)` builds both serving systems of `wse_systems.serving` — the
wafers (`WaferServing`: the pipeline plan the inference engine runs, with users in flight
up to what fits its SRAM, on the wafers `infer_wafers.wafer_serving` finds) and the GPUs
(`GpuServing`: a batch on every tp x pp layout of one node, or of the fewest whole nodes that
hold the model) — for one `Workload` (prompt,
output and context tokens per user, within the model's context; None: `default_workload`),
optionally with speculative decoding (a draft model, gamma, alpha). It returns a
`ServingPlan`: each system's frontier (aggregate tokens/s against tokens/s per user as the
load grows), the point chosen on each side —

- `users=N`: N users in flight on each side (refused, with the budget, where they do not fit);
- `min_user_tokens_per_s=S` and/or `max_ttft_s=T`: of the loads that meet them on each side,
  the most output within 1%, then the soonest first token (`wse_systems.serving.meeting`; a
  side that cannot meet them even for one user says so; neither is an error; at one output
  token S has nothing to meet, and a note says so);
- neither: each side's knee (`wse_systems.serving.knee`: per-user speed x aggregate maximal) —

and at that point: energy and cost per million tokens (replicas sized for the tokens per
day; default one wafer replica busy all day at its point), and the GPUs that match the
wafers' per-user speed, and that speed together with their aggregate throughput
(`wse_systems.serving.gpus_to_match`; None where no count can, and the speed's None at one
output token, where no load has a per-user speed). Nothing here compiles.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_core.cost.reads import recording
from wse_core.hw.dtypes import dtype_bytes, dtype_name

from wse_systems import economics as eco
from wse_systems import gpu as gpum
from wse_systems import gpu_links
from wse_systems import serving as sv
from wse_systems.decoder import token_out_work
from wse_systems.pipeline import GEMV_PROGRAMS
from wse_systems.planning.choice import ModelChoice, PlanError
from wse_systems.planning.infer_inputs import (
    GEMV_NOTE,
    Costing,
    Draft,
    GpuSetup,
    Target,
    WaferSetup,
    check_inputs,
    check_request,
    default_workload,
    draft_inputs,
    speculation_of,
    wafer_bytes,
)
from wse_systems.planning.infer_wafers import wafer_serving
from wse_systems.planning.sides import (
    SideResult,
    check_positive,
    check_rates,
    gpu_rates,
    grid_note,
    plan_dict,
    power_notes,
    wafer_rates,
)
from wse_systems.serving import gpu_step
from wse_systems.transformer import DecoderShape, num_params

__all__ = [
    "Costing",
    "Draft",
    "GpuSetup",
    "ServingPlan",
    "Target",
    "WaferSetup",
    "default_workload",
    "plan_infer",
    "wafer_serving",
]

DAY_S = 86400.0


@dataclasses.dataclass(frozen=True)
class ServingPlan:
    """Both sides at the chosen point, both frontiers, the GPU matches, the assumptions."""

    model: str
    n_params: int
    inputs: dict[str, Any]
    choice: str  # "knee", "users" or "min_user_tokens_per_s"
    wafer: SideResult
    gpu: SideResult
    wafer_point: sv.OperatingPoint
    gpu_point: sv.OperatingPoint
    wafer_frontier: sv.Frontier
    gpu_frontier: sv.Frontier
    gpus_to_match: dict[str, int | None]
    assumptions: list[str]
    workload: str = "infer"

    def to_dict(self) -> dict[str, Any]:
        fronts = {"wafer": self.wafer_frontier.to_dict(), "gpu": self.gpu_frontier.to_dict()}
        return {**plan_dict(self), "choice": self.choice, "frontiers": fronts}


def _default_gpus(shape: DecoderShape, g: gpum.GpuSpec, workload, speculation, precision) -> int:
    """One node, or the fewest whole nodes that hold the model, its draft and one user."""
    need = gpu_step.min_gpus(shape, g, held_tokens=workload.held_tokens, precision=precision,
                            draft=None if speculation is None else speculation.draft)  # fmt: skip
    return max(need, g.gpus_per_node)


def _choose(system, front, users, speed, ttft) -> tuple[sv.OperatingPoint, bool]:
    """(the point, whether it meets the asked speed and first-token time) — see the module
    contract."""
    if users is not None:
        return sv.at_users(system, users), True
    if speed is not None or ttft is not None:
        p = sv.meeting(system, speed, max_ttft_s=ttft, front=front)
        return (p, True) if p is not None else (system.point(1), False)
    return sv.knee(system, front), True


def _serve(
    name: str, units: int, point: sv.OperatingPoint, tokens_per_day: float, days: float,
    power: tuple[float, float], rates: eco.Rates, figures: dict[str, Any],
) -> SideResult:  # fmt: skip
    """Replicas of `units` at `point` enough for `tokens_per_day` output tokens (and the
    prompts that come with them), busy for their share of the day and idle the rest."""
    tok_s = point.aggregate_tokens_per_s
    replicas = max(1, math.ceil(tokens_per_day / (tok_s * DAY_S)))
    busy_s = tokens_per_day / tok_s  # summed over replicas
    peak_w, idle_w = power
    energy = days * eco.energy_j(busy_s, units * peak_w, units * idle_w, replicas * DAY_S)
    total_tokens = tokens_per_day * days
    input_tokens = total_tokens * point.input_tokens_per_s / tok_s
    hours = replicas * units * days * 24
    b = eco.bill(system_hours=hours, energy_j=energy, rates=rates)
    costs = eco.token_costs(
        usd=b.hardware_usd,
        input_tokens=input_tokens,
        output_tokens=total_tokens,
        input_share=point.input_time_share,
    )
    figures = {
        **figures,
        "point": point.to_dict(),
        "users": point.users,
        "tokens_per_s_per_user": point.user_tokens_per_s,
        # a user's time per output token (vLLM's TPOT, 1 / tokens/s per user); the side's
        # `s_per_output_token` is the system's: 1 / output tokens/s in all (hunt 75)
        # none at one output token: no time between tokens (vLLM's TPOT n/a; hunt 75), and
        # `gpus_to_match` is then asked for any speed (0)
        "tpot_s": None if point.user_tokens_per_s is None else 1.0 / point.user_tokens_per_s,
        "tokens_per_s": tok_s,
        "input_tokens_per_s": point.input_tokens_per_s,
        "ttft_s": point.ttft_s,
        "bound": point.bound,
        "replicas": replicas,
        "system_hours": hours,
        "busy_fraction": busy_s / (replicas * DAY_S),
        "energy_j_per_token": eco.per(energy, total_tokens),
        "energy_kwh_per_million_tokens": eco.per(energy, total_tokens) * 1e6 / 3.6e6,
        "usd_per_million_tokens": eco.per(b.total_usd, total_tokens) * 1e6,
        "hardware_usd_per_million_tokens": eco.per(b.hardware_usd, total_tokens) * 1e6,
        "usd_per_million_input_tokens": costs.usd_per_million_input,
        "usd_per_million_output_tokens": costs.usd_per_million_output,
        "usd_per_million_tokens_blend": costs.usd_per_million_blend,
    }
    return SideResult(name, units * replicas, 1.0 / tok_s, energy, b, figures,
                      time_key="s_per_output_token")  # fmt: skip


def _speed(point: sv.OperatingPoint) -> str:
    """Tokens/s per user as printed: "n/a" at one output token (no time between tokens)."""
    return "n/a" if point.user_tokens_per_s is None else f"{point.user_tokens_per_s:,.4g}"


def _limits(speed: float | None, ttft: float | None) -> str:
    parts = [f"{speed:g} tokens/s per user" if speed else "", f"a first token in {ttft:g} s"
             if ttft else ""]  # fmt: skip
    return " and ".join(p for p in parts if p)


def plan_infer(
    choice: ModelChoice,
    *,
    wafer: WaferSetup,
    gpu: GpuSetup = GpuSetup(),
    workload: sv.Workload | None = None,
    target: Target = Target(),
    costing: Costing = Costing(),
    draft: Draft = Draft(),
    stages: int | None = None,
) -> ServingPlan:
    """Serve `choice` on wafers and on GPUs at an operating point (module contract)."""
    spec, wafers, gemv, dtype = wafer
    users, min_user_tokens_per_s, max_ttft_s = target
    tokens_per_day, days, rates = costing
    gpus, gpu_precision = gpu.gpus, gpu.precision
    check_positive(wafers=wafers, gpus=gpus, tokens_per_day=tokens_per_day, days=days)
    hbm_fraction = gpu_step.FITTED_HBM_FRACTION if gpu.hbm_fraction is None else gpu.hbm_fraction
    mfu = gpu_step.FITTED_MFU if gpu.mfu is None else gpu.mfu
    check_inputs(users, min_user_tokens_per_s, max_ttft_s, hbm_fraction, mfu)
    rates = rates or {}
    check_rates(rates)
    if gemv not in GEMV_PROGRAMS:
        raise PlanError(f"--gemv {gemv!r}: the known GEMV programs are {', '.join(GEMV_PROGRAMS)}")
    bpp = wafer_bytes(dtype)
    cfg, g = choice.config, gpum.gpu_spec(gpu.gpu)
    work = default_workload(cfg) if workload is None else workload
    check_request(cfg, work)
    power = eco.system_power_w(spec)
    grid = grid_note(spec)  # a wafer that does not repair is refused before any work
    speculation = speculation_of(draft, choice, work)
    if speculation is not None and draft.dtype is not None:  # the draft's own (session 85)
        speculation = dataclasses.replace(
            speculation, draft_bytes_per_param=wafer_bytes(draft.dtype, draft)
        )
    ws = wafer_serving(cfg, spec, num_wafers=wafers, workload=work, speculation=speculation,
                       gemv=gemv, bytes_per_param=bpp, stages=stages)  # fmt: skip
    shape = cfg
    m = gpus or _default_gpus(shape, g, work, speculation, gpu_precision)
    kw = dict(workload=work, fractions=gpu_step.GpuFractions(hbm_fraction, mfu),
              speculation=speculation, precision=gpu_precision)  # fmt: skip
    try:
        gs = sv.GpuServing(shape, g, num_gpus=m, **kw)  # type: ignore[arg-type]
    except gpum.GpuMemoryError:  # hunt 63: it named its smallest replica ("1 x H100 ...")
        raise gpu_step.memory_error(
            shape, g, m, held_tokens=work.held_tokens, precision=gpu_precision,
            draft=None if speculation is None else speculation.draft,
        ) from None  # fmt: skip
    wf, gf = sv.frontier(ws), sv.frontier(gs)
    wp, w_ok = _choose(ws, wf, users, min_user_tokens_per_s, max_ttft_s)
    gp, g_ok = _choose(gs, gf, users, min_user_tokens_per_s, max_ttft_s)
    if not (w_ok or g_ok):
        raise PlanError(
            f"no system meets {_limits(min_user_tokens_per_s, max_ttft_s)}: {ws.units} x "
            f"{ws.name} reach {_speed(wp)} tokens/s and a first token in "
            f"{wp.ttft_s:.3g} s, {m} x {g.name} {_speed(gp)} tokens/s and "
            f"{gp.ttft_s:.3g} s with one user"
        )
    per_day = tokens_per_day or wp.aggregate_tokens_per_s * DAY_S
    w_side = _serve(ws.name, ws.units, wp, per_day, days, power, wafer_rates(spec, rates),
                    {"wafers_per_replica": ws.units, "max_users": ws.max_users,
                     "meets_speed": w_ok, "sram_budget": ws.budget().describe()})  # fmt: skip
    idle = _idle_gpus(m, gp.layout)
    g_side = _serve(g.name, m, gp, per_day, days, _gpu_power_w(g, m, idle), gpu_rates(g, rates),
                    {"gpus_per_replica": m, "max_users": gs.max_users, "meets_speed": g_ok,
                     "tp": gp.layout["tp"], "pp": gp.layout["pp"],
                     "idle_gpus": idle})  # fmt: skip
    speed, both = sv.gpus_to_match(
        shape, g, user_tokens_per_s=wp.user_tokens_per_s or 0.0,
        aggregate_tokens_per_s=wp.aggregate_tokens_per_s, **kw,
    )  # fmt: skip
    speed = None if wp.user_tokens_per_s is None else speed  # one output token: n/a (hunt 76)
    inputs = {"wafers": ws.units, "gpus": m, "users": users, "tokens_per_day": per_day,
              "min_user_tokens_per_s": min_user_tokens_per_s, "days": days,
              "wafer": spec.name, "gpu": gpu.gpu, "workload": work.to_dict(),
              "hbm_fraction": hbm_fraction, "mfu": mfu, "gpu_precision": gpu_precision,
              "max_ttft_s": max_ttft_s, "gemv": gemv, "wafer_dtype": dtype_name(dtype),
              "wafer_stages": stages,
              "wafer_bytes_per_param": bpp,
              **draft_inputs(speculation, draft, dtype, bpp),
              "speculation": None if speculation is None else speculation.to_dict(),
              "wafer_rates": wafer_rates(spec, rates).to_dict(),
              "gpu_rates": gpu_rates(g, rates).to_dict()}  # fmt: skip
    how = "users" if users else "limits" if min_user_tokens_per_s or max_ttft_s else "knee"
    notes = _notes(g, wafer, work, gpu._replace(hbm_fraction=hbm_fraction, mfu=mfu), days,
                   speculation) + [grid] + _wafer_notes(ws, wp)  # fmt: skip
    if wp.user_tokens_per_s is None:  # hunt 77: a match "with speed" at 0 tokens/s per user
        notes.append("GPUs to match at one output token: no load has a per-user speed, so "
                     "gpus_to_match.user_speed is n/a and user_speed_and_throughput matches "
                     "the wafers' output tokens/s alone (throughput only)")  # fmt: skip
    if min_user_tokens_per_s and wp.user_tokens_per_s is None:  # hunt 76
        notes.append(f"at one output token no load has a per-user speed: --min-user-tokens-per-s "
                     f"{min_user_tokens_per_s:g} has nothing to meet, and each side's point is "
                     "the one chosen without it")  # fmt: skip
    if tp := gpu_step.tp_note(shape, g, m, gp.layout["tp"], gp.layout["pp"]):
        notes.append(tp)  # hunt 75: tp 3, 5, 6, 7 were priced where the engines run none
    if idle:  # review 82: unsaid, and priced at the busy power
        notes.append(f"{idle} of each replica's {m} GPUs sit idle: rented with it (its "
                     "GPU-hours count them) and drawing idle power while it serves")  # fmt: skip
    return ServingPlan(
        choice.name, num_params(shape), inputs, how, w_side, g_side, wp, gp, wf, gf,
        {"user_speed": speed, "user_speed_and_throughput": both}, notes,
    )  # fmt: skip


def _idle_gpus(gpus: int, layout: dict[str, Any]) -> int:
    """GPUs of a replica of `gpus` that its `layout` (replicas x tp x pp) leaves idle: a
    node whose count no tp group the engines run divides (tp 6 of 8 for 12 heads: vLLM runs
    it on 6, `gpu_step.tp_note`)."""
    return gpus - layout["replicas"] * layout["tp"] * layout["pp"]


def _gpu_power_w(gpu: gpum.GpuSpec, gpus: int, idle: int) -> tuple[float, float]:
    """(busy, idle) watts a GPU of a replica of `gpus`, `idle` of them idle while it serves
    (review 82: all were priced busy)."""
    peak_w, idle_w = gpu.power_w_per_gpu()
    return ((gpus - idle) * peak_w + idle * idle_w) / gpus, idle_w


def _wafer_notes(ws: sv.WaferServing, point: sv.OperatingPoint) -> list[str]:
    """What the wafer's token leaves out and what its wafers cost, in numbers (hunt 66)."""
    plan, lay = ws.plans(point.users)[0], point.layout  # the point's own (hunt 73: per load)
    with recording(isolated=True):  # a note on what is left out: no figure of the plan
        trip = ws.model.cost(token_out_work(plan)).seconds
    us = lambda s: f"{s * 1e6:.3g} us"  # noqa: E731
    notes = [
        "the token's trip to the host (its id off the wafer and one pass to the host, "
        f"{us(trip)} a token at this spec's host I/O and system latency) is not on a token's "
        "path: the wafer's I/O runs asynchronously from compute (Cerebras' release of "
        "2024-10-24); experiment hotchips24-inference prices it for its 8B and 70B rows, "
        "measured on the August 2024 release whose I/O waited on compute "
        "(wse_systems.published.PUBLISHED_SETUP)",
    ]
    if ws.units > 1:
        notes.append(
            f"{ws.units} wafers per replica: a token alone takes {us(lay['token_s'])}, of "
            f"which {us(lay['between_wafers_s'])} between wafers ({plan.wafer_crossings} "
            f"passes) and {us(lay['regions_latency_s'])} of hops and fixed cycles in the "
            f"regions ({us(lay['regions_work_s'])} of streaming work): more wafers give each "
            "layer more PEs (less streaming work) but longer hops across larger regions and "
            "more passes between wafers"
        )
    return notes


def _notes(g, setup: WaferSetup, work, gpu: GpuSetup, days, spec) -> list[str]:
    """The assumptions in words (`gpu`: its fractions resolved; `spec`: the speculation)."""
    wafer, gemv, hbm_fraction, mfu = setup.spec, setup.gemv, gpu.hbm_fraction, gpu.mfu
    held = f"{dtype_name(setup.dtype)} weights and KV ({dtype_bytes(setup.dtype)} bytes a value"
    prec = gpu_step.gpu_precision(gpu.precision)
    notes = power_notes(g, wafer) + [
        f"each request: {work.prompt_tokens} prompt + {work.output_tokens} output tokens, "
        f"{work.held_tokens} tokens of KV cache held, {work.kv_tokens} read per decode step; "
        "throughput, per-user speed, time to first token and cost include the prompt's work",
        "wafer (wse_systems.serving.wafer): the engine's pipeline plan with every user's KV "
        f"cache in its regions' SRAM, {held}; wse plan infer --wafer-dtype: a model folder's "
        "own dtype, as the engine serves it, else 16-bit, as the seeds state); each token "
        f"priced per instruction (wse_systems.decoder, the one calibration), each GEMV as "
        f"{GEMV_NOTE[gemv]}; a region works on "
        "one item at a time, a decode token or a prompt block (the head's product and the "
        "argmax once a prompt, on its last block's last token, as the engine's prompt pass "
        "runs them: wse_systems.serving.blocks); prompt blocks go first; a "
        "request holds each region for its output tokens and its prompt blocks; another "
        "user's prompt blocks carry a user's token queued behind them to the prompt's end "
        "(a convoy: the output is a conservative bound, prompts that catch a frozen item "
        "lengthening its freeze, wse_systems.serving.request; the first token is a "
        "conservative bound, at most its mean over the users' phases: the prompt's pass "
        "behind half the other users' prompts, within the period less the output alone; "
        "clients that send together reach it, spread arrivals wait less, so --max-ttft-s "
        "is safe and may admit fewer users than spread arrivals allow)",
        "tokens/s per user: the O - 1 output tokens after the first over the time from the "
        "first token to the last as the user sees it (vLLM's and NVIDIA genai-perf's per-user "
        "output speed, 1 / TPOT; n/a at one output token, which the prompt's pass emits: "
        "both systems price O - 1 decode steps after it), "
        "the other users' work interleaved with it included (wafer: their prompt blocks' "
        "stalls; GPU: their prompt chunks in its rounds); requests paced by completions; "
        "when the busiest region is full, a new request waits to be admitted and the wait is "
        "part of its first token (a GPU admits it at its next step: no wait beyond the step "
        "under way)",
        f"GPU (wse_systems.serving.gpus), {prec.name}: a step's GEMMs (weights read once "
        "against their products) then its attention (every user's KV read and the new "
        "tokens' written against its products), each kernel class its own roofline, at "
        f"{hbm_fraction:g} of HBM bandwidth and MFU {mfu:g} of {prec.peak_flops(g) / 1e12:g} "
        f"TFLOP/s dense {prec.name} (the fractions fitted on TensorRT-LLM's H100 FP8 rows with "
        "input <= output length unless given); 2 tensor-parallel all-reduces per layer, as "
        f"{gpu_links.tp_allreduce_rule(g)} (latencies "
        f"assumed: gpu.nvlink_latency_s, gpu.ib_latency_s); {prec.name} weights and KV within "
        "90% of HBM; replicas of the best tp x pp layout for the load; pp > 1: pp stages of "
        "1/pp of the layers with pp micro-batches in flight (vLLM's virtual engines, a step "
        "budget each), a token the stages one after another plus the hops between them (1/tp "
        "of the activations on each GPU's link), stages of equal work assumed",
        f"GPU scheduling (chunked prefill): {sv.gpus.TOKEN_BUDGET} tokens a step, the decoding "
        "users' tokens first, prompt chunks in the rest; a user's rounds carry the other "
        "users' prompt chunks, its own prompt runs in its first token",
        "time to first token under load: the step or item under way, then the prompt's own "
        "chunks (GPU) or blocks (wafer) at the capacity the policy gives them, and when "
        "full the wait to be admitted; a request's period: its first token and its output "
        "(both systems, wse_systems.serving.frontier.RequestTimes; the wafer's with its least "
        "first token, users spaced evenly, and the first token shown its bound)",
        "$/M input and output tokens: hardware hours x rate split by the prompts' share of "
        "the system's time, the share of the period they add (wafer: the period less the "
        "same users' period without prompts; GPU: a request's period less its bare decode rounds, "
        "over the period: its first token and the other users' prompt chunks in its "
        "rounds); "
        "blend: over all tokens of the workload; usd_per_million_tokens: all costs (people "
        "included) over output tokens",
        f"replicas sized for the tokens per day (output tokens); rented all day, idle when not"
        f" busy; engineering hours spread over {days:g} days",
    ]
    if spec is not None:
        notes.append(
            f"speculative decoding: draft {spec.to_dict()['draft']}, gamma {spec.gamma}, "
            f"acceptance rate {spec.alpha:g} (an input): {spec.tokens_per_round:.3g} tokens "
            "per round; on the wafer the draft holds the PE rows of each wafer that price "
            "the round shortest"
            + ("" if spec.draft_bytes_per_param is None else
               f", at {spec.draft_bytes_per_param} bytes a weight and cached value")
            + ", on GPUs it shares the target's GPUs"
        )  # fmt: skip
    return notes
