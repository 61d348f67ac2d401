"""Serving at an operating point: users in flight, tokens/s per user against tokens/s in all,
time to first token and speculative decoding, on wafers and on GPUs, priced the same way.

- `frontier`: `Workload`, `Speculation`, `OperatingPoint`, `Frontier`, the `ServingSystem`
  protocol and the selections every caller uses (`at_users`, `meeting`, `knee`), with the
  arithmetic both systems share (Leviathan's tokens per round and speedup, the prompt's
  share of a busy system);
- `wafer`: `WaferServing`, the pipelined wafer(s) on the `wse_systems.pipeline` plan the
  inference engine runs, each token priced by `wse_systems.decoder` and `PerfModel`;
- `gpus`: `GpuServing`, a batch on tp x pp GPUs (`wse_systems.gpu`'s figures) at a stated MFU
  and HBM fraction, and `gpus_to_match`.

`wse plan infer` and the experiment `hc24-frontier` are built on these; nothing is fitted.
"""

from wse_systems.serving.frontier import (
    Frontier,
    OperatingPoint,
    ServingError,
    ServingSystem,
    Speculation,
    Workload,
    at_users,
    frontier,
    knee,
    loads,
    meeting,
    prefill_share,
    speculative_speedup,
    tokens_per_round,
)
from wse_systems.serving.gpus import GpuServing, gpus_to_match
from wse_systems.serving.wafer import SramBudget, WaferServing

__all__ = [
    "Frontier",
    "GpuServing",
    "OperatingPoint",
    "ServingError",
    "ServingSystem",
    "Speculation",
    "SramBudget",
    "WaferServing",
    "Workload",
    "at_users",
    "frontier",
    "gpus_to_match",
    "knee",
    "loads",
    "meeting",
    "prefill_share",
    "speculative_speedup",
    "tokens_per_round",
]
