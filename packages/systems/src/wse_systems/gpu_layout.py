"""A training job's layouts on GPUs (data x tensor x pipeline parallel): the bytes each GPU
holds (`train_bytes`), the layouts Megatron-LM runs (`layouts`), the fewest GPUs that hold
the training state (`min_train_gpus`), the refusal where no layout runs (`no_layout_error`)
and the sends between pipeline stages (`stage_hop_s`). `wse_systems.gpu` prices a step on
them (`train_step`) and re-exports their public names; split out of it at hunt 77, when it
reached 400 lines.

Memory: 16 bytes per parameter (bf16 weights and gradients, fp32 master and two Adam
moments; ZeRO's mixed precision accounting) over tp x pp GPUs, plus activations under full
recompute (each layer's bf16 input kept, 2 s d bytes a sequence a layer, and one layer's
working set 34 s d bytes, Korthikanti et al. 2022 with flash attention), micro-batches of
one sequence, within `USABLE_MEMORY` of HBM.

Layouts: tensor parallel 1, 2, 4 or 8 inside a node dividing the attention and KV heads,
pipeline parallel dividing the layers, the rest data parallel, where dp divides the global
batch: Megatron-LM's checks by default ("num_attention_heads must be divisible by
tensor_model_parallel_size", "number of layers should be divisible by the pipeline parallel
size"; hunt 77: 24 H100s ran 16 sequences of Llama 3 8B as pp 3, 10.67 of its 32 layers a
stage, where the busiest runs 11, and `min_train_gpus` counted such stages; tco-training's
GPUs to match were 48, 192 and 768, pp 3 of 40 layers, now 64, 256 and 1,024). Megatron-LM
refuses a global batch that micro-batch x dp does not divide (its num_microbatches_calculator:
"global batch size ... is not divisible by micro batch size ... times data parallel
size"), so every rank runs batch / dp micro-batches and none idles. Hunt 77: dp 12 was
priced for 16 sequences as if each rank ran 1.33 (the busiest runs 2: 0.7995 s a step
priced, 1.199 s run); `wse plan train`'s GPUs to match were 40, 152 and 600 H100s for
tco-training's 32, 128 and 512 sequences (dp 10, 38, 150: ranks of 4 sequences, the pace
of 32, 128 and 512 GPUs).

Sends between stages (hunt 77: 1,024 GPUs in dp 16 x tp 8 x pp 8 were priced as the 128 of
pp 1): each micro-batch's activations go forward to the next stage and their gradients
back, one sequence's seq_len x d_model bf16 values each way, a hop each at the serving
model's price (`wse_systems.serving.gpu_step`: bytes over one GPU's link + its latency).
Megatron's rank order puts tensor, then data ranks inside a stage (tp-dp-pp), so on more
than one node at least one hop crosses nodes and sets the pace: InfiniBand, as the gradient
ring; NVLink on one node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from wse_core.errors import WseError

from wse_systems.transformer import DecoderShape, num_params

if TYPE_CHECKING:
    from wse_systems.gpu import GpuSpec

__all__ = ["BYTES_PER_PARAM_TRAIN", "USABLE_MEMORY", "WEIGHT_BYTES", "ACT_WORKING",
           "GpuMemoryError", "GpuLayoutError", "TrainLayout", "train_bytes", "layouts",
           "min_train_gpus", "no_layout_error", "stage_hop_s", "SENDS_PER_MICRO"]  # fmt: skip

BYTES_PER_PARAM_TRAIN = 16  # bf16 weight + bf16 grad + fp32 master + Adam m, v
USABLE_MEMORY = 0.9  # of HBM left to the model by the framework and allocator (assumption)
WEIGHT_BYTES = 2  # bf16 weights, gradients and activations
ACT_WORKING = 34  # one layer's activations, bytes per token per d_model (Korthikanti 2022)
SENDS_PER_MICRO = 2  # a stage's hops a micro-batch: activations forward, gradients back
TENSOR_PARALLEL = (1, 2, 4, 8)


class GpuMemoryError(WseError):
    """A model does not fit the GPUs asked for."""


class GpuLayoutError(GpuMemoryError):
    """No layout of the GPUs asked runs the global batch (data-parallel ranks that divide
    it), though some hold the model: a `GpuMemoryError` to the callers that skip a count."""


@dataclasses.dataclass(frozen=True)
class TrainLayout:
    dp: int
    tp: int
    pp: int
    bytes_per_gpu: float  # states + activations

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def train_bytes(model: DecoderShape, seq_len: int, tp: int, pp: int) -> float:
    """Bytes a GPU holds in a tp x pp replica (module docstring)."""
    states = BYTES_PER_PARAM_TRAIN * num_params(model) / (tp * pp)
    inputs = model.n_layers * WEIGHT_BYTES * seq_len * model.d_model / tp
    working = ACT_WORKING * seq_len * model.d_model / tp
    return states + inputs + working


def _splits(model: DecoderShape, gpu: GpuSpec) -> Iterator[tuple[int, int]]:
    """Every (tp, pp) Megatron-LM accepts for `model` (module docstring): tp 1, 2, 4 or 8 in
    a node dividing the attention heads and the KV heads, pp dividing the layers."""
    heads = (model.n_heads, model.n_kv_heads)
    for tp in TENSOR_PARALLEL:
        if tp <= gpu.gpus_per_node and all(h % tp == 0 for h in heads):
            yield from ((tp, pp) for pp in range(1, model.n_layers + 1) if model.n_layers % pp == 0)


def _fitting(model: DecoderShape, gpu: GpuSpec, num_gpus: int, seq_len: int):
    """Every (dp, tp, pp) of `num_gpus` whose training state fits memory."""
    usable = USABLE_MEMORY * gpu.memory_bytes
    for tp, pp in _splits(model, gpu):
        if num_gpus % (tp * pp) == 0 and (need := train_bytes(model, seq_len, tp, pp)) <= usable:
            yield TrainLayout(num_gpus // (tp * pp), tp, pp, need)


def layouts(
    model: DecoderShape, gpu: GpuSpec, num_gpus: int, seq_len: int, batch: int
) -> Iterator[TrainLayout]:
    """Every layout of `num_gpus` that fits memory and whose dp divides `batch` (Megatron's
    rule for micro-batches of one sequence: module docstring)."""
    return (x for x in _fitting(model, gpu, num_gpus, seq_len) if batch % x.dp == 0)


def min_train_gpus(model: DecoderShape, gpu: GpuSpec, *, seq_len: int) -> int:
    """The fewest GPUs (a tp x pp Megatron-LM accepts: `_splits`) whose training state fits."""
    usable = USABLE_MEMORY * gpu.memory_bytes
    best = [tp * pp for tp, pp in _splits(model, gpu)
            if train_bytes(model, seq_len, tp, pp) <= usable]  # fmt: skip
    if not best:
        raise GpuMemoryError(f"no layout of {gpu.name} GPUs holds this model's training state")
    return min(best)


def _runs(model: DecoderShape, gpu: GpuSpec, num_gpus: int, seq_len: int, batch: int) -> bool:
    return any(True for _ in layouts(model, gpu, num_gpus, seq_len, batch))


def no_layout_error(
    model: DecoderShape, gpu: GpuSpec, num_gpus: int, *, seq_len: int, batch: int
) -> GpuMemoryError:  # fmt: skip
    """Why no layout of `num_gpus` runs: memory (naming the fewest GPUs that hold the model),
    or no data-parallel count that divides `batch` (a `GpuLayoutError` naming the nearest
    counts that run it, below and above)."""
    need = min_train_gpus(model, gpu, seq_len=seq_len)
    if not any(True for _ in _fitting(model, gpu, num_gpus, seq_len)):
        return GpuMemoryError(
            f"{num_gpus} x {gpu.name} cannot train this model "
            f"({num_params(model) / 1e9:.3g}B parameters x {BYTES_PER_PARAM_TRAIN} bytes + "
            f"activations, batch {batch}): use at least {need} GPUs, at most "
            f"{batch} data-parallel ranks x tensor x pipeline"
        )
    below = next((k for k in range(num_gpus - 1, need - 1, -1)
                  if _runs(model, gpu, k, seq_len, batch)), None)  # fmt: skip
    above = next((k for k in range(num_gpus + 1, 2 * num_gpus + 1)
                  if _runs(model, gpu, k, seq_len, batch)), None)  # fmt: skip
    near = " or ".join(str(k) for k in (below, above) if k is not None)
    return GpuLayoutError(
        f"{num_gpus} x {gpu.name}: no layout runs the global batch of {batch} sequences: "
        f"Megatron-LM needs data-parallel ranks that divide it (tensor parallel "
        f"{'/'.join(map(str, TENSOR_PARALLEL))} in a node dividing the heads, pipeline "
        f"parallel dividing the {model.n_layers} layers, the rest data parallel); use "
        f"{near or 'another count of'} GPUs"
    )


def stage_hop_s(model: DecoderShape, gpu: GpuSpec, layout: TrainLayout, seq_len: int) -> float:
    """One hop between pipeline stages: a micro-batch's seq_len x d_model bf16 activations
    (or their gradients) over one GPU's link, plus its latency: NVLink where the job is on
    one node, else InfiniBand (module docstring). 0 at pp 1."""
    if layout.pp == 1:
        return 0.0
    in_node = layout.dp * layout.tp * layout.pp <= gpu.gpus_per_node
    bw = gpu.nvlink_bytes_per_s if in_node else gpu.ib_bytes_per_s
    lat = gpu.nvlink_latency_s if in_node else gpu.ib_latency_s
    return WEIGHT_BYTES * seq_len * model.d_model / bw + lat
