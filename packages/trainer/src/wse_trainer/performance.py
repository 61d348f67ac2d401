"""The weight-streaming performance model: per-layer compute against weight and gradient
streams, for `num_csx` WSE systems, next to a data-parallel GPU cluster.

For one system with `batch` sequences of `seq_len` tokens, layer by layer:

    compute_fwd = forward FLOPs of the layer (matmuls + causal attention) on the whole wafer
                  (`wse_core.PerfModel`: every PE at its bf16 rate — an upper bound, no
                  utilisation factor is fitted), compute_bwd = 2 x compute_fwd
    weights_in  = layer bytes (compute dtype) / min(memoryx_bytes_per_s, swarmx_bytes_per_s)
                  + tree latency (SwarmX broadcasts to every system at once)
    grads_out   = layer gradient bytes (fp32) / swarmx_bytes_per_s + tree latency
    layer_fwd   = max(compute_fwd, weights_in)      the next layer streams while one computes
    layer_bwd   = max(compute_bwd, weights_in, grads_out)   links are full duplex

The embedding and head count as one more layer. The no-stall condition is
memoryx rate >= layer bytes / layer compute time, i.e. a batch of at least
`no_stall_batch` sequences per system. With the per-system batch fixed (weak scaling) only
the SwarmX tree depth grows with `num_csx`, so throughput scales almost linearly; MemoryX's
optimizer update is assumed to overlap the streams (it runs per layer as gradients arrive).

GPU cluster (assumptions stated in `GpuSpec`): each GPU computes its batch at `mfu` of its
bf16 peak; gradients are ring-allreduced, 2 (N - 1) / N x gradient bytes over the per-GPU
network link plus 2 (N - 1) latency hops, overlapping the backward pass (as bucketed DDP
does): the exposed part is max(0, allreduce - backward).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_core import PerfModel, WaferSpec, Work

__all__ = ["GpuSpec", "H100", "StreamPrediction", "predict_stream", "predict_gpu", "layer_flops"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """A data-parallel GPU cluster's per-GPU figures (assumptions, not fitted)."""

    name: str = "H100-SXM"
    peak_flops: float = 989e12  # dense bf16, vendor datasheet
    mfu: float = 0.40  # achieved fraction of peak in training (assumption)
    memory_bytes: float = 80e9  # HBM3
    link_bytes_per_s: float = 50e9  # 400 Gb/s InfiniBand NDR per GPU (assumption)
    hop_latency_s: float = 5e-6  # per ring step (assumption)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


H100 = GpuSpec()
_TREE_LEVEL_S = 2e-6  # SwarmX latency per tree level (assumption)


def layer_flops(model: Any, tokens: int, seq_len: int) -> float:
    """Forward FLOPs of one transformer layer over `tokens` tokens (causal mean context)."""
    ctx = (seq_len + 1) // 2
    matmul = 2 * (model.attn_matmul_params() + model.mlp_matmul_params())
    attn = model.attn_flops_per_token(ctx) / model.n_layers
    return float(tokens * (matmul + attn))


def _head_flops(model: Any, tokens: int) -> float:
    return float(tokens * 2 * model.vocab_size * model.d_model)


@dataclasses.dataclass(frozen=True)
class StreamPrediction:
    step_s: float
    compute_s: float  # the step if weights were free
    stall_fraction: float  # of the step spent waiting for streams
    samples_per_s: float
    no_stall_batch: int  # smallest per-system batch (sequences) with no stall
    layer_bytes: int


def _seconds(spec: WaferSpec, flops: float) -> float:
    return PerfModel(spec).seconds(Work(flops={"bf16": flops / spec.num_pes}))


def predict_stream(
    model: Any,
    spec: WaferSpec,
    *,
    num_csx: int,
    batch: int,
    seq_len: int,
    weight_bytes_per_param: int = 2,
) -> StreamPrediction:
    """One training step of `num_csx` systems, each with `batch` sequences."""
    tokens = batch * seq_len
    depth = math.ceil(math.log2(num_csx)) if num_csx > 1 else 0
    in_bw = min(spec.memoryx_bytes_per_s, spec.swarmx_bytes_per_s)
    parts = [(layer_flops(model, tokens, seq_len), model.layer_params())] * model.n_layers
    parts.append((_head_flops(model, tokens), model.vocab_size * model.d_model))
    step = compute = 0.0
    for flops, n_params in parts:
        fwd = _seconds(spec, flops)
        w_in = n_params * weight_bytes_per_param / in_bw + depth * _TREE_LEVEL_S
        g_out = n_params * 4 / spec.swarmx_bytes_per_s + depth * _TREE_LEVEL_S
        step += max(fwd, w_in) + max(2 * fwd, w_in, g_out)
        compute += 3 * fwd
    layer_bytes = model.layer_params() * weight_bytes_per_param
    per_seq = _seconds(spec, layer_flops(model, seq_len, seq_len))
    # backward is the binding direction: 2 x compute against the fp32 gradient stream
    need = max(layer_bytes / in_bw, model.layer_params() * 4 / spec.swarmx_bytes_per_s / 2)
    return StreamPrediction(
        step,
        compute,
        1 - compute / step,
        num_csx * batch / step,
        math.ceil(need / per_seq),
        layer_bytes,
    )


def predict_gpu(
    model: Any, gpu: GpuSpec, *, num_gpus: int, batch: int, seq_len: int
) -> dict[str, float]:
    """Data-parallel step of `num_gpus` GPUs with `batch` sequences each (weak scaling)."""
    tokens = batch * seq_len
    flops = 3 * (model.n_layers * layer_flops(model, tokens, seq_len) + _head_flops(model, tokens))
    compute = flops / (gpu.peak_flops * gpu.mfu)
    grad_bytes = 4 * model.num_params()
    n = num_gpus
    ring = (
        0.0
        if n == 1
        else (2 * (n - 1) / n * grad_bytes / gpu.link_bytes_per_s + 2 * (n - 1) * gpu.hop_latency_s)
    )
    exposed = max(0.0, ring - compute * 2 / 3)
    step = compute + exposed
    fits = 16 * model.num_params() <= gpu.memory_bytes  # bf16 w + fp32 master, Adam, grads
    return {
        "step_s": step,
        "samples_per_s": n * batch / step,
        "scaling_efficiency": compute / step,
        "fits_memory": float(fits),
    }
