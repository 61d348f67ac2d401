"""`wse plan`'s model: wafers against a GPU cluster — time, energy and cost of training a model
to a token budget, or of serving it at batch 1.

Contract. `resolve_model(text)` (`wse_cli.model_choice`, re-exported here) reads `--model`
(a `wse_models` preset, a shipped trainer config, a params.yaml, an HF directory or its
config.json) into a `ModelChoice`.
`plan_train(...)` and `plan_infer(...)` return a `Plan`: one `SideResult` for the wafers and
one for the GPUs (time, energy, cost, the figures per step / token), the GPU count that
would match the wafers, and the assumptions in words. Nothing here compiles anything.

Wafer time comes from the workload packages through ONE adapter per workload
(`wafer_train_step`, `wafer_decode`), so a rewrite of those predictors is repointed here
only. GPU time, energy and cost come from `wse_core.gpu` and `wse_core.economics`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from wse_core import economics as eco
from wse_core import gpu as gpum

from wse_cli.model_choice import ModelChoice, PlanError, resolve_model

__all__ = [
    "PlanError",
    "ModelChoice",
    "SideResult",
    "Plan",
    "resolve_model",
    "wafer_train_step",
    "wafer_decode",
    "plan_train",
    "plan_infer",
]

DAY_S = 86400.0


# ---- the adapters: the only calls into the workload packages' predictors -------------------


def wafer_train_step(
    config: Any, wafer: str, *, num_csx: int, batch: int | None, seq_len: int
) -> tuple[float, int]:
    """(seconds per step, batch per system) of weight-streaming training, from the trainer's
    own prediction (`wse_trainer.performance.predict_step`, a RunReport). With `batch` None
    the batch is the smallest that keeps the streams hidden (`no_stall_batch`; 1 when no
    batch the SRAM plan places does)."""
    from wse_core import preset
    from wse_trainer.performance import no_stall_batch, predict_step

    spec = preset(wafer)
    if batch is None:
        batch = no_stall_batch(config, spec, num_csx=num_csx, seq_len=seq_len) or 1
    report = predict_step(config, spec, num_csx=num_csx, micro_batch=batch, seq_len=seq_len)
    return report.predicted_s, batch


def wafer_decode(
    config: Any, wafer: str, *, num_wafers: int | None, context_len: int, prompt_tokens: int
) -> tuple[float, float, int]:
    """(seconds per token, time to first token, wafers used) of batch-1 pipelined decode,
    from the inference engine's own prediction (`pipeline.perf.predict_model`, a RunReport on
    the planner's placement).

    Time to first token (no prefill predictor exists yet): the prompt's forward flops at the
    wafers' bf16 peak (a lower bound: no efficiency is applied), plus one token's time.
    """
    from wse_core import preset
    from wse_inference.pipeline.perf import predict_model

    spec = preset(wafer)
    report, plan = predict_model(config, wafer=spec, num_wafers=num_wafers, context_len=context_len)
    s, n = report.predicted_s, plan.num_wafers
    flops = prompt_tokens * config.flops_per_token((prompt_tokens + 1) // 2)
    prefill = flops / (n * spec.peak_flops("bf16"))
    return s, prefill + s, n


# ---- results ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SideResult:
    """One system's answer. `units`: wafer systems or GPUs; per_item: per step or per token."""

    system: str
    units: int
    time_s: float
    energy_j: float
    bill: eco.Bill
    figures: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "units": self.units,
            "time_s": self.time_s,
            "energy_j": self.energy_j,
            "energy_kwh": self.energy_j / 3.6e6,
            "cost_usd": self.bill.to_dict(),
            **self.figures,
        }


@dataclasses.dataclass(frozen=True)
class Plan:
    workload: str  # "train" | "infer"
    model: str
    n_params: int
    inputs: dict[str, Any]
    wafer: SideResult
    gpu: SideResult
    gpus_to_match: int | None
    assumptions: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "model": self.model,
            "n_params": self.n_params,
            "inputs": self.inputs,
            "wafer": self.wafer.to_dict(),
            "gpu": self.gpu.to_dict(),
            "gpus_to_match": self.gpus_to_match,
            "assumptions": self.assumptions,
        }


def _positive(**values: float | None) -> None:
    for name, v in values.items():
        if v is not None and not v > 0:
            raise PlanError(f"--{name.replace('_', '-')} must be positive, got {v:g}")


def _gpu_rates(g: gpum.GpuSpec, rates: dict[str, Any]) -> eco.Rates:
    given = {k: v for k, v in rates.items() if v is not None and k != "usd_per_system_hour"}
    usd = rates.get("usd_per_gpu_hour") or g.usd_per_gpu_hour
    given.pop("usd_per_gpu_hour", None)
    return eco.Rates(usd_per_system_hour=usd, **given)


def _wafer_rates(wafer: str, rates: dict[str, Any]) -> eco.Rates:
    given = {k: v for k, v in rates.items() if k != "usd_per_gpu_hour"}
    return eco.wafer_rates(wafer, **given)


def _assumptions(g: gpum.GpuSpec, wafer: str, mfu: float) -> list[str]:
    peak, idle = eco.system_power_w(wafer)
    gpeak, gidle = g.power_w_per_gpu()
    return [
        f"wafer system {eco.SYSTEMS[wafer].system}: {peak / 1e3:g} kW while busy, "
        f"{idle / 1e3:g} kW idle ({eco.SYSTEMS[wafer].source}; idle assumed); "
        "MemoryX/SwarmX power not counted",
        f"GPU {g.name}: {gpeak:g} W per GPU busy, {gidle:g} W idle (DGX node max / 8; "
        "idle assumed); switches not counted",
        f"GPU training at MFU {mfu:g} of {g.peak_flops / 1e12:g} TFLOP/s bf16; PaLM flop "
        "accounting 6N + 12LHQT; 16 bytes/param + activations with full recompute",
        "busy systems draw their maximum rated power (an upper bound)",
        "rates and engineering hours are assumptions (wse_core.economics), inputs here",
    ]


def _gpu_train_time(shape, g, *, gpus, batch, seq, steps, mfu) -> tuple[float, gpum.TrainStep]:
    s = gpum.train_step(shape, g, num_gpus=gpus, batch=batch, seq_len=seq, mfu=mfu)
    return steps * s.step_s, s


def _unless_oom(fn: Callable[[int], float]) -> Callable[[int], float | None]:
    """`fn(gpus)`, or None where that many GPUs cannot hold the model (`GpuMemoryError`)."""

    def time_on(k: int) -> float | None:
        try:
            return fn(k)
        except gpum.GpuMemoryError:
            return None

    return time_on


def _match_gpus(fn, target_s: float, start: int, limit: int) -> int | None:
    """Smallest GPU count (powers of two, refined in whole nodes) with time <= target_s."""
    m, prev = start, None
    while m <= limit:
        t = fn(m)
        if t is not None and t <= target_s:
            if prev is None:
                return m
            lo, hi = prev, m  # bisect in multiples of 8 between the last miss and this hit
            while hi - lo > 8:
                mid = (lo + hi) // 16 * 8
                if mid <= lo:
                    break
                t_mid = fn(mid)
                lo, hi = (lo, mid) if t_mid is not None and t_mid <= target_s else (mid, hi)
            return hi
        prev, m = m, m * 2
    return None


def _wafer_train_side(
    wafer: str, n: int, step_s: float, steps: int, global_batch: int, seq: int,
    rates: dict[str, Any],
) -> SideResult:  # fmt: skip
    """`n` wafer systems training for `steps` steps of `step_s` seconds."""
    peak, _ = eco.system_power_w(wafer)
    w_time = steps * step_s
    w_energy = eco.energy_j(w_time, n * peak)
    return SideResult(
        eco.SYSTEMS[wafer].system, n, w_time, w_energy,
        eco.bill(system_hours=n * w_time / 3600, energy_j=w_energy,
                 rates=_wafer_rates(wafer, rates)),
        {"steps": steps, "step_s": step_s, "energy_j_per_step": eco.per(w_energy, steps),
         "energy_j_per_token": eco.per(w_energy, steps * global_batch * seq)},
    )  # fmt: skip


def _gpu_train_side(
    shape: gpum.ModelShape, g: gpum.GpuSpec, m: int, steps: int, global_batch: int, seq: int,
    mfu: float, rates: dict[str, Any],
) -> SideResult:  # fmt: skip
    """`m` GPUs training for `steps` steps at the same global batch and sequence."""
    g_time, g_step = _gpu_train_time(
        shape, g, gpus=m, batch=global_batch, seq=seq, steps=steps, mfu=mfu
    )
    gpeak, _ = g.power_w_per_gpu()
    g_energy = eco.energy_j(g_time, m * gpeak)
    return SideResult(
        g.name, m, g_time, g_energy,
        eco.bill(system_hours=m * g_time / 3600, energy_j=g_energy, rates=_gpu_rates(g, rates)),
        {"steps": steps, "step_s": g_step.step_s, "layout": g_step.layout.to_dict(),
         "exposed_allreduce_s": g_step.exposed_allreduce_s, "bubble_s": g_step.bubble_s,
         "energy_j_per_step": eco.per(g_energy, steps),
         "energy_j_per_token": eco.per(g_energy, steps * global_batch * seq)},
    )  # fmt: skip


def plan_train(
    choice: ModelChoice,
    *,
    tokens: float,
    systems: int | None = None,
    gpus: int | None = None,
    wafer: str = "wse3",
    gpu: str = "h100",
    mfu: float = 0.4,
    batch_per_system: int | None = None,
    seq_len: int | None = None,
    rates: dict[str, Any] | None = None,
) -> Plan:
    """Train `choice` on `tokens` tokens: N wafer systems against M GPUs, same global batch."""
    _positive(tokens=tokens, systems=systems, gpus=gpus, mfu=mfu, batch=batch_per_system)
    rates = rates or {}
    cfg, g = choice.config, gpum.gpu_spec(gpu)
    eco.system_power_w(wafer)  # an unknown system fails before any work
    n = systems or choice.num_csx or 1
    seq = seq_len or choice.seq_len or min(cfg.max_seq_len, 8192)
    batch = batch_per_system or choice.batch_per_system
    # batch None: the smallest batch that keeps the wafer fed
    step_s, batch = wafer_train_step(cfg, wafer, num_csx=n, batch=batch, seq_len=seq)
    global_batch = n * batch
    steps = math.ceil(tokens / (global_batch * seq))
    w_side = _wafer_train_side(wafer, n, step_s, steps, global_batch, seq, rates)
    shape = gpum.ModelShape.of(cfg)
    start = gpum.min_train_gpus(shape, g, seq_len=seq)
    m = gpus or max(8 * n, g.gpus_per_node * math.ceil(start / g.gpus_per_node))
    g_side = _gpu_train_side(shape, g, m, steps, global_batch, seq, mfu, rates)
    time_on = _unless_oom(
        lambda k: _gpu_train_time(
            shape, g, gpus=k, batch=global_batch, seq=seq, steps=steps, mfu=mfu
        )[0]
    )
    limit = global_batch * g.gpus_per_node * cfg.n_layers
    match = _match_gpus(time_on, w_side.time_s, start, limit)
    inputs = {"tokens": tokens, "systems": n, "gpus": m, "wafer": wafer, "gpu": gpu, "mfu": mfu,
              "batch_per_system": batch, "global_batch": global_batch, "seq_len": seq,
              "wafer_rates": _wafer_rates(wafer, rates).to_dict(),
              "gpu_rates": _gpu_rates(g, rates).to_dict()}  # fmt: skip
    notes = _assumptions(g, wafer, mfu) + [
        "wafer time: wse_trainer's weight-streaming prediction (each layer's products priced "
        "per instruction on the wafer, weights streamed in and gradients out, overlapped; "
        "the one calibration of wse_core); same global batch and sequence on both systems",
    ]
    return Plan("train", choice.name, shape.n_params, inputs, w_side, g_side, match, notes)


def _serve(
    side: str, units: int, tok_s: float, tokens_per_day: float, days: float,
    peak_w: float, idle_w: float, rates: eco.Rates, figures: dict[str, Any],
) -> SideResult:  # fmt: skip
    """Replicas enough for `tokens_per_day`, busy for their share of the day, idle the rest."""
    replicas = max(1, math.ceil(tokens_per_day / (tok_s * DAY_S)))
    busy_s = tokens_per_day / tok_s  # summed over replicas
    wall_s = days * DAY_S
    energy = days * eco.energy_j(busy_s, units * peak_w, units * idle_w, replicas * DAY_S)
    total_tokens = tokens_per_day * days
    b = eco.bill(system_hours=replicas * units * wall_s / 3600, energy_j=energy, rates=rates)
    figures = {
        **figures,
        "tokens_per_s_per_user": tok_s,
        "replicas": replicas,
        "busy_fraction": busy_s / (replicas * DAY_S),
        "energy_j_per_token": eco.per(energy, total_tokens),
        "energy_kwh_per_million_tokens": eco.per(energy, total_tokens) * 1e6 / 3.6e6,
        "usd_per_million_tokens": eco.per(b.total_usd, total_tokens) * 1e6,
        "hardware_usd_per_million_tokens": eco.per(b.hardware_usd, total_tokens) * 1e6,
    }
    return SideResult(side, units * replicas, 1.0 / tok_s, energy, b, figures)


def plan_infer(
    choice: ModelChoice,
    *,
    wafers: int | None = None,
    gpus: int | None = None,
    tokens_per_day: float | None = None,
    days: float = 365.0,
    wafer: str = "wse3",
    gpu: str = "h100",
    context_len: int = 8192,
    prompt_tokens: int = 1024,
    hbm_fraction: float = 0.8,
    mfu: float = 0.4,
    rates: dict[str, Any] | None = None,
) -> Plan:
    """Batch-1 serving of `choice`: one stream per replica, `tokens_per_day` in all."""
    _positive(wafers=wafers, gpus=gpus, tokens_per_day=tokens_per_day, days=days,
              context_len=context_len, prompt_tokens=prompt_tokens, mfu=mfu)  # fmt: skip
    if not 0 < hbm_fraction <= 1:
        raise PlanError(f"--hbm-fraction must be in (0, 1], got {hbm_fraction:g}")
    rates = rates or {}
    cfg, g = choice.config, gpum.gpu_spec(gpu)
    peak, idle = eco.system_power_w(wafer)
    w_tok, w_ttft, n = wafer_decode(
        cfg, wafer, num_wafers=wafers, context_len=context_len, prompt_tokens=prompt_tokens
    )
    shape = gpum.ModelShape.of(cfg)

    def decode(k: int) -> gpum.DecodeToken:
        return gpum.decode_token(
            shape, g, num_gpus=k, context_len=context_len, prompt_tokens=prompt_tokens,
            hbm_fraction=hbm_fraction, mfu=mfu,
        )  # fmt: skip

    m = gpus or _default_gpus(shape, g, context_len)
    d = decode(m)
    per_day = tokens_per_day or 1.0 / w_tok * DAY_S
    w_side = _serve(
        eco.SYSTEMS[wafer].system, n, 1.0 / w_tok, per_day, days, peak, idle,
        _wafer_rates(wafer, rates), {"ttft_s": w_ttft, "wafers_per_replica": n},
    )  # fmt: skip
    gpeak, gidle = g.power_w_per_gpu()
    g_side = _serve(
        g.name, m, d.tokens_per_s, per_day, days, gpeak, gidle, _gpu_rates(g, rates),
        {"ttft_s": d.ttft_s, "gpus_per_replica": m, "tp": d.tp, "pp": d.pp,
         "tp_allreduce_s_per_token": d.allreduce_s},
    )  # fmt: skip
    match = _match_gpus(_unless_oom(lambda k: decode(k).seconds_per_token), w_tok, 1, 1024)
    inputs = {"wafers": n, "gpus": m, "tokens_per_day": per_day, "days": days, "wafer": wafer,
              "gpu": gpu, "context_len": context_len, "prompt_tokens": prompt_tokens,
              "hbm_fraction": hbm_fraction, "mfu": mfu,
              "wafer_rates": _wafer_rates(wafer, rates).to_dict(),
              "gpu_rates": _gpu_rates(g, rates).to_dict()}  # fmt: skip
    notes = _infer_assumptions(g, wafer, mfu, context_len, hbm_fraction, days)
    return Plan("infer", choice.name, shape.n_params, inputs, w_side, g_side, match, notes)


def _infer_assumptions(
    g: gpum.GpuSpec, wafer: str, mfu: float, context_len: int, hbm_fraction: float, days: float
) -> list[str]:
    return _assumptions(g, wafer, mfu)[:2] + [
        f"batch 1, one stream per replica; KV cache of {context_len // 2} tokens read per "
        f"token; GPU at {hbm_fraction:g} of HBM bandwidth, 2 tensor-parallel all-reduces "
        "per layer",
        "wafer time to first token: prompt flops at bf16 peak (a lower bound), plus one token",
        f"replicas sized for the tokens per day; rented all day, idle when not busy; "
        f"engineering hours spread over {days:g} days",
    ]


def _default_gpus(shape: gpum.ModelShape, g: gpum.GpuSpec, context_len: int) -> int:
    """One node (8 GPUs), or the fewest whole nodes that hold the model."""
    need = gpum.WEIGHT_BYTES * shape.n_params + shape.kv_bytes_per_token * context_len
    nodes = math.ceil(need / (gpum.USABLE_MEMORY * g.memory_bytes * g.gpus_per_node))
    return g.gpus_per_node * max(1, nodes)
