"""Serving whole requests at an operating point: users in flight, tokens/s per user against
tokens/s in all, time to first token and speculative decoding, on wafers and on GPUs, priced
the same way. Every request is P prompt and O output tokens on both systems; throughput,
per-user speed, time to first token and cost include the prompt's work.

- `frontier`: `Workload`, `Speculation`, `OperatingPoint` (output and input tokens/s, the
  prompts' share of the time), `Frontier`, the `ServingSystem` protocol, with Leviathan's
  tokens per round and speedup;
- `selection`: the selections every caller uses (`at_users`, `meeting` by per-user speed
  and/or time to first token: the most output among the loads that meet them, a queued
  load meeting no speed; `knee`);
- `blocks`: the one pricer of a decode token and a prompt block on the `wse_systems.pipeline`
  plan the inference engine runs (`wse_systems.decoder` and `PerfModel`);
- `wafer`: `WaferServing`, users and their requests on the pipelined wafer(s), prompt blocks
  ahead of decode tokens at every region;
- `gpus`: `GpuServing`, chunked prefill on tp x pp GPUs in bf16 or fp8 (`wse_systems.gpu`'s
  figures) at an MFU and HBM fraction (fitted on `trtllm_h100`'s rows unless given), and
  `gpus_to_match`;
- `trtllm_h100`: NVIDIA's TensorRT-LLM v0.19.0 H100 FP8 rows, the model at each, the fit.

`wse plan infer` and the experiments `hc24-frontier` and `trtllm-h100` are built on these.
"""

from wse_systems.serving.frontier import (
    Frontier,
    OperatingPoint,
    RequestTimes,
    ServingError,
    ServingSystem,
    Speculation,
    Workload,
    decode_steps,
    frontier,
    loads,
    speculative_speedup,
    tokens_per_round,
    user_speed,
)
from wse_systems.serving.gpus import GpuServing, gpus_to_match
from wse_systems.serving.selection import at_users, knee, meeting, queued
from wse_systems.serving.wafer import RequestWork, SramBudget, WaferServing

__all__ = [
    "Frontier",
    "GpuServing",
    "OperatingPoint",
    "RequestTimes",
    "RequestWork",
    "ServingError",
    "ServingSystem",
    "Speculation",
    "SramBudget",
    "WaferServing",
    "Workload",
    "at_users",
    "decode_steps",
    "frontier",
    "gpus_to_match",
    "knee",
    "loads",
    "meeting",
    "queued",
    "speculative_speedup",
    "tokens_per_round",
    "user_speed",
]
