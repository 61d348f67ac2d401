"""Memory plans from the model's analytic counts (nothing is allocated).

- `plan_activations(model, spec, micro_batch, seq_len)` asks a replica's SRAM ledger
  (`wse_core.SramLedger`) what fits next to the streamed weights (the current and the
  prefetched layer), one layer's gradient and one layer's working set: it keeps every layer's
  input when they fit, otherwise the inputs of every `stride`-th layer, recomputing the others
  segment by segment in the backward pass (at most ceil(L / stride) + stride - 1 layer inputs
  held at once). Too little SRAM even for that is a `SramBudgetError` from the ledger.
- `memory_plan(...)` is the `--validate_only` table: weights, gradients, optimizer state and
  activations in total and per PE, for a model resident in wafer SRAM and for weight
  streaming (wafer: two layers, MemoryX: fp32 masters and optimizer state).
- `host_bytes(...)` is what the emulator holds in host memory for a run on one process
  (MemoryX, and every local replica's streamed layers and activations: CPU devices are host
  memory); `wse train` refuses a run whose total exceeds the host (`wse_core.hostmem`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_core import SramLedger, WaferSpec
from wse_core.spec import dtype_bytes

__all__ = [
    "ActivationPlan",
    "MemoryPlan",
    "plan_activations",
    "memory_plan",
    "layer_counts",
    "host_bytes",
]


def layer_counts(model: Any) -> tuple[int, int]:
    """(parameters per layer, parameters outside the layers)."""
    per_layer = int(model.layer_params())
    return per_layer, int(model.num_params()) - per_layer * int(model.n_layers)


def working_bytes(model: Any, micro_batch: int, seq_len: int) -> int:
    """Transient bytes inside one layer, which runs one sequence at a time: its q/k/v and
    MLP hidden, and one attention head's scores (the wafer computes heads in turn)."""
    del micro_batch  # sequences run one after another through the layer's working set
    s = seq_len
    hidden = (2 if model.arch == "llama" else 1) * model.d_ff
    elems = s * (3 * model.d_model + hidden) + s * s
    return elems * dtype_bytes(model.dtype)


@dataclasses.dataclass(frozen=True)
class ActivationPlan:
    stride: int  # inputs of layers 0, stride, 2*stride, ... are kept
    held_layers: int  # layer inputs held at once at most
    activation_bytes_per_pe: int  # one layer input, per PE
    sram: dict[str, Any]  # the ledger's summary

    def keeps(self, layer: int) -> bool:
        return layer % self.stride == 0


def _held(n_layers: int, stride: int) -> int:
    return n_layers if stride == 1 else math.ceil(n_layers / stride) + stride - 1


def plan_activations(
    model: Any, spec: WaferSpec, micro_batch: int, seq_len: int, stride: int = 0
) -> ActivationPlan:
    """Keep or recompute layer inputs within one replica's SRAM (`stride` 0: choose)."""
    ledger = SramLedger(spec.pe_rows, spec.pe_cols, spec.sram_bytes_per_pe)
    per_pe = lambda n: -(-int(n) // spec.num_pes)
    per_layer, _ = layer_counts(model)
    size = dtype_bytes(model.dtype)
    ledger.allocate("weights: current + prefetched layer", per_pe(2 * per_layer * size))
    ledger.allocate("gradient of one layer", per_pe(per_layer * size))
    ledger.allocate("working set of one layer", per_pe(working_bytes(model, micro_batch, seq_len)))
    act = per_pe(micro_batch * seq_len * model.d_model * size)
    L = int(model.n_layers)
    if stride <= 0:
        fit = ledger.free_bytes() // max(act, 1)
        choices = [k for k in range(1, L + 1) if _held(L, k) <= fit]
        stride = choices[0] if choices else min(range(1, L + 1), key=lambda k: _held(L, k))
    held = _held(L, min(stride, L))
    ledger.allocate(f"activations: {held} layer inputs (stride {stride})", held * act)
    return ActivationPlan(
        stride=stride, held_layers=held, activation_bytes_per_pe=act, sram=ledger.summary()
    )


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    rows: list[dict[str, Any]]  # {"item", "where", "bytes", "bytes_per_pe"}
    resident_bytes: int
    sram_total_bytes: int
    resident: bool  # whole training state fits in wafer SRAM
    streaming: ActivationPlan | None
    streaming_error: str | None


def memory_plan(
    model: Any,
    spec: WaferSpec,
    micro_batch: int,
    seq_len: int,
    optimizer_slots: int = 2,
    stride: int = 0,
    streaming: ActivationPlan | None = None,
) -> MemoryPlan:
    """Training memory, resident vs streamed, for one replica of `micro_batch` sequences.

    `streaming`: the `ActivationPlan` a trainer already runs (default: planned here), so
    that the prediction (`wse_trainer.performance.predict_step`) reads the same object."""
    n_params = int(model.num_params())
    per_layer, _ = layer_counts(model)
    size = dtype_bytes(model.dtype)
    act_all = model.n_layers * micro_batch * seq_len * model.d_model * size
    items = [
        ("weights (fp32 master)", 4 * n_params),
        ("gradients (fp32)", 4 * n_params),
        ("optimizer state (fp32)", 4 * optimizer_slots * n_params),
        ("activations (every layer input)", act_all),
        ("working set (one layer)", working_bytes(model, micro_batch, seq_len)),
    ]
    rows = [
        {"item": k, "where": "wafer if resident", "bytes": v, "bytes_per_pe": -(-v // spec.num_pes)}
        for k, v in items
    ]
    rows += [
        {
            "item": "streamed weights (current + prefetched layer)",
            "where": "wafer, streaming",
            "bytes": 2 * per_layer * size,
            "bytes_per_pe": -(-2 * per_layer * size // spec.num_pes),
        },
        {
            "item": "masters + optimizer state",
            "where": "MemoryX",
            "bytes": 4 * (1 + optimizer_slots) * n_params,
            "bytes_per_pe": 0,
        },
    ]
    resident = sum(v for _, v in items)
    error = None
    try:
        if streaming is None:
            streaming = plan_activations(model, spec, micro_batch, seq_len, stride)
    except Exception as e:  # a SramBudgetError: reported in the plan, raised by the run
        error = str(e)
    return MemoryPlan(
        rows, resident, spec.sram_total_bytes, resident <= spec.sram_total_bytes, streaming, error
    )


def host_bytes(
    model: Any,
    micro_batch: int,
    seq_len: int,
    replicas: int = 1,
    optimizer_slots: int = 2,
) -> dict[str, int]:
    """Host bytes by item for `replicas` local replicas of `micro_batch` sequences.

    MemoryX keeps fp32 masters, optimizer state and (clipping needs them all) the gradients;
    each replica holds two streamed layers and one layer's gradient in the compute dtype, its
    layer inputs (every layer's at most), one layer's fp32 working set for all its sequences
    and heads at once (q/k/v, MLP hidden, attention scores and probabilities, forward and
    backward), and the fp32 logits, their softmax and gradient."""
    n_params = int(model.num_params())
    per_layer, _ = layer_counts(model)
    size = dtype_bytes(model.dtype)
    b, s = micro_batch, seq_len
    hidden = (2 if model.arch == "llama" else 1) * model.d_ff
    work = 2 * 4 * b * (s * (3 * model.d_model + hidden) + 2 * model.n_heads * s * s)
    per_replica = {
        "streamed layers and a gradient": 3 * per_layer * size,
        "layer inputs": int(model.n_layers) * b * s * model.d_model * size,
        "working set of one layer": work,
        "logits, softmax and gradient (fp32)": 3 * 4 * b * s * int(model.vocab_size),
    }
    return {
        "MemoryX: masters, optimizer state, gradients": 4 * (2 + optimizer_slots) * n_params,
        **{k: replicas * v for k, v in per_replica.items()},
    }
