"""Performance model of pipelined batch-1 decoding on one or several wafers.

Contract. For a `PipelinePlan`, one token's time is the sum over the regions it passes (the
head, then every stage in order; at batch 1 only one region works at a time) of that region's
`wse_core.PerfModel` time for:

- SRAM: every PE reads its slice of the region's weights and of its KV cache once per token
  (`kv_tokens` cached tokens attended, default half the context);
- compute: 2 flops per weight plus 4 * d_model flops per attended token per layer, spread
  over the region's PEs, in fp16;
- fabric latency: each layer runs `PHASES_PER_LAYER` matrix-vector phases, each a broadcast
  of the input across the region's rows and a reduction of partial sums across its columns
  (rows + cols hops), plus the hops to the next region;

plus, per wafer boundary (and the way back to wafer 0), the activation's bytes over the
system I/O and `INTER_WAFER_LATENCY_S` (an assumption, not fitted).

Calibration: the ONLY fitted number is `efficiency`, the fraction of the modelled on-wafer
rates a real decoder achieves, fitted so that Llama 3.1 8B (16-bit) on one WSE-3 decodes
1,800 tokens/s (Cerebras, Hot Chips 2024; shared/REFERENCES.md). Every other model / wafer
count is then a prediction.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from wse_core.perf import PerfModel, Work
from wse_core.spec import WaferSpec, preset

from wse_inference.planner import PipelinePlan, StagePlan, plan_pipeline

__all__ = [
    "PHASES_PER_LAYER",
    "INTER_WAFER_LATENCY_S",
    "CALIBRATION_TOKENS_PER_S",
    "DecodePrediction",
    "predict_decode",
    "efficiency",
]

PHASES_PER_LAYER = 5  # qkv, attention scores/values, o-proj, up/gate, down
INTER_WAFER_LATENCY_S = 2e-6  # assumption: one system-to-system activation hop
CALIBRATION_TOKENS_PER_S = 1800.0  # Llama 3.1 8B, one WSE-3, Hot Chips 2024 (REFERENCES.md)
CALIBRATION_CASE = ("llama3-8b", "wse3", 1)  # model preset, wafer preset, wafers


@dataclasses.dataclass(frozen=True)
class DecodePrediction:
    tokens_per_s: float
    seconds_per_token: float
    on_wafer_s: float  # modelled (uncalibrated) on-wafer time per token
    inter_wafer_s: float
    sram_s: float
    compute_s: float
    latency_s: float
    efficiency: float

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def _region_work(config: Any, plan: PipelinePlan, stage: StagePlan, kv_tokens: int) -> Work:
    pes = stage.region.num_pes
    layers = stage.num_layers
    kv_read = stage.kv_bytes * kv_tokens / (plan.context_len * plan.slots)  # one user's tokens
    weight_params = stage.weight_bytes / plan.bytes_per_param
    flops = 2 * weight_params + 4 * config.d_model * kv_tokens * layers
    hops = max(layers, 1) * PHASES_PER_LAYER * (stage.region.rows + stage.region.cols) + 1
    return Work(
        flops={"fp16": flops / pes},
        sram_read_bytes=(stage.weight_bytes + kv_read) / pes,
        latency_hops=hops,
    )


def _raw(config: Any, plan: PipelinePlan, kv_tokens: int | None) -> dict[str, float]:
    kv_tokens = plan.context_len // 2 if kv_tokens is None else kv_tokens
    model = PerfModel(plan.spec)
    parts = {"on_wafer_s": 0.0, "sram_s": 0.0, "compute_s": 0.0, "latency_s": 0.0}
    for stage in (plan.head, *plan.stages):
        pred = model.predict(_region_work(config, plan, stage, kv_tokens))
        parts["on_wafer_s"] += pred.seconds
        parts["sram_s"] += pred.sram_cycles / pred.clock_hz
        parts["compute_s"] += pred.compute_cycles / pred.clock_hz
        parts["latency_s"] += pred.latency_cycles / pred.clock_hz
    act_bytes = config.d_model * plan.bytes_per_param
    per_hop = act_bytes / plan.spec.host_io_bytes_per_s + INTER_WAFER_LATENCY_S
    parts["inter_wafer_s"] = plan.wafer_crossings * per_hop
    return parts


@functools.cache
def efficiency() -> float:
    """Fitted: modelled on-wafer time of the calibration case / its published time."""
    from wse_models import preset_config

    name, wafer, n = CALIBRATION_CASE
    plan = plan_pipeline(preset_config(name), preset(wafer), num_wafers=n, context_len=8192)
    raw = _raw(preset_config(name), plan, None)
    return raw["on_wafer_s"] / (1.0 / CALIBRATION_TOKENS_PER_S - raw["inter_wafer_s"])


def predict_decode(
    config: Any, plan: PipelinePlan, *, kv_tokens: int | None = None, calibrated: bool = True
) -> DecodePrediction:
    """Batch-1 decode time per token and tokens/s of `config` laid out as `plan`."""
    parts = _raw(config, plan, kv_tokens)
    eff = efficiency() if calibrated else 1.0
    seconds = parts["on_wafer_s"] / eff + parts["inter_wafer_s"]
    return DecodePrediction(
        tokens_per_s=1.0 / seconds,
        seconds_per_token=seconds,
        on_wafer_s=parts["on_wafer_s"],
        inter_wafer_s=parts["inter_wafer_s"],
        sram_s=parts["sram_s"],
        compute_s=parts["compute_s"],
        latency_s=parts["latency_s"],
        efficiency=eff,
    )


def predict_model(
    model: str,
    *,
    wafer: str | WaferSpec = "wse3",
    num_wafers: int | None = None,
    context_len: int = 8192,
) -> tuple[DecodePrediction, PipelinePlan]:
    """Prediction for a `wse_models` preset on the fewest wafers that hold it (or `num_wafers`)."""
    from wse_models import preset_config

    from wse_inference.planner import min_wafers

    config = preset_config(model)
    spec = preset(wafer) if isinstance(wafer, str) else wafer
    if num_wafers is None:
        num_wafers = min_wafers(config, spec, context_len=context_len)
    plan = plan_pipeline(config, spec, num_wafers=num_wafers, context_len=context_len)
    return predict_decode(config, plan), plan
