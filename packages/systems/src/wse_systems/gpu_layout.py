"""A training job's layouts on GPUs (data x tensor x pipeline parallel): the layouts
Megatron-LM runs (`layouts`), the fewest GPUs that hold the training state
(`min_train_gpus`), the refusal where no layout runs (`no_layout_error`), the sends between
pipeline stages (`stage_hop_s`), the ring all-reduce (`ring_allreduce_s`) and the tied
embeddings' all-reduce between the first and the last stage (`embedding_allreduce_s`).
`wse_systems.gpu` prices a step on them (`train_step`) and re-exports their public names;
split out of it at hunt 77, when it reached 400 lines.

Contract: this module owns which layouts run and where their ranks sit (`TrainLayout`,
`GpuMemoryError`, `GpuLayoutError`, Megatron's divisibility rules and rank order, the
traffic that order places); the bytes and parameters each GPU holds (`train_bytes`,
`stage_bytes`, `stage_params`, `last_bucket_params`, `BYTES_PER_PARAM_TRAIN`,
`TRAIN_CONFIG`...) are `wse_systems.gpu_train_memory`'s, re-exported here.

Micro-batch size (hunt 79: one sequence was fixed, so Llama 3 8B at --seq-len 1 ran 141,817
one-token micro-batches a rank, 19.85 M kernel launches, 20.1 s against 3.0 s of compute):
Megatron's `--micro-batch-size` b, any divisor of batch / dp (its num_microbatches_calculator
refuses a global batch that b x dp does not divide); `layouts` yields every b that fits, and
`gpu.train_step` prices the fastest (fewer micro-batches: fewer kernels, a longer bubble).

Layouts: tensor parallel any count up to a node dividing the attention and KV heads, each
tensor-parallel group inside one node (a count that does not divide the node only on one
node), pipeline parallel dividing the layers, the rest data parallel, where dp divides the
global batch: Megatron-LM's checks by default ("num_attention_heads must be divisible by
tensor_model_parallel_size", the query groups likewise, "number of layers should be
divisible by the pipeline parallel size"; tp <= a node is this plan's house rule; hunt 78:
tp was held to 1, 2, 4 or 8, so GPT-2 1.5B's 25 heads had tp 1 only, where Megatron runs
tp 5; hunt 77: 24 H100s ran 16 sequences of Llama 3 8B as pp 3, 10.67 of its 32 layers a
stage, where the busiest runs 11, and `min_train_gpus` counted such stages). Megatron-LM
refuses a global batch that micro-batch x dp does not divide (its num_microbatches_calculator:
"global batch size ... is not divisible by micro batch size ... times data parallel
size"), so every rank runs batch / dp micro-batches and none idles (hunt 77: dp 12 was
priced for 16 sequences as if each rank ran 1.33). The counts that have a layout are
enumerated directly as the products dp x tp x pp (`train_counts`; hunt 78: the refusal
walked every count up to twice the one asked, 96 s at 999,998 GPUs), and a count with none
is refused naming the nearest below and above (`no_layout_error`; hunt 78: any count with
no layout that fits memory was refused as too few GPUs, "use at least 2 GPUs" at 17).

Rank order: Megatron's default, tensor parallel innermost, then data, then pipeline
outermost (tp-dp-pp; context and expert parallel 1): rank = t + tp (d + dp p). So a stage's
tp x dp ranks sit together, a tensor-parallel group in a node (the rule above), a
data-parallel group in one node where its ranks do (`dp_ring_in_node`; hunt 78: the
gradient ring was priced on InfiniBand whenever the job spanned nodes), and the sends
between stages cross a node somewhere wherever the job spans nodes (the stage that holds
the node's last rank sends past it), which paces the pipeline.

Sends between stages (`stage_hop_s`; hunt 77: 1,024 GPUs in dp 16 x tp 8 x pp 8 were priced
as the 128 of pp 1): each micro-batch's activations go forward to the next stage and their
gradients back, micro_batch x seq_len x d_model bf16 values each way, split over the
tensor-parallel ranks (Megatron's scatter-gather p2p, or sequence parallelism's shards: each
of the tp GPUs sends 1/tp on its own link; hunt 78: the whole tensor was priced on one
link), a hop each at the serving model's price per GPU (bytes over one GPU's link + its
latency): InfiniBand (a NIC a GPU) where the job spans nodes, NVLink on one node; the
receiver's all-gather over NVLink is not priced (none under sequence parallelism).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from wse_core.divisors import divisors
from wse_core.errors import WseError

from wse_systems import gpu_links
from wse_systems.gpu_links import link, ring_allreduce_s
from wse_systems.gpu_train_memory import (
    ACT_WORKING,
    BYTES_PER_PARAM_TRAIN,
    FP32_BYTES,
    GRAD_BUCKET_MIN_PARAMS,
    GRAD_BUCKET_PARAMS_PER_RANK,
    GRAD_BYTES,
    LOGIT_BYTES,
    TOKEN_ID_BYTES,
    TRAIN_CONFIG,
    TRAIN_FLAGS,
    USABLE_MEMORY,
    WEIGHT_BYTES,
    StageBytes,
    end_stage_params,
    grad_bucket_params,
    last_bucket_params,
    stage_bytes,
    stage_params,
    train_bytes,
)
from wse_systems.transformer import DecoderShape, num_params

if TYPE_CHECKING:
    from wse_systems.gpu import GpuSpec

__all__ = ["BYTES_PER_PARAM_TRAIN", "USABLE_MEMORY", "WEIGHT_BYTES", "ACT_WORKING",
           "GpuMemoryError", "GpuLayoutError", "TrainLayout", "train_bytes", "layouts",
           "min_train_gpus", "train_counts", "no_layout_error", "dp_ring_in_node",
           "stage_hop_s", "stage_params", "SENDS_PER_MICRO", "StageBytes", "stage_bytes",
           "TOKEN_ID_BYTES", "LOGIT_BYTES", "embedding_pair_in_node", "ring_allreduce_s",
           "embedding_allreduce_s", "link", "GRAD_BYTES", "FP32_BYTES", "TRAIN_CONFIG",
           "TRAIN_FLAGS", "end_stage_params", "GRAD_BUCKET_MIN_PARAMS",
           "GRAD_BUCKET_PARAMS_PER_RANK", "grad_bucket_params", "last_bucket_params"]  # fmt: skip
# A middle stage's hops a micro-batch: activations forward, gradients back (the last stage
# sends no activations, the first no gradients: Megatron's sends there are no-ops; review 82)
SENDS_PER_MICRO = 2


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
    micro_batch: int = 1  # sequences a micro-batch (Megatron's --micro-batch-size)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _splits(model: DecoderShape, gpu: GpuSpec, seq_len: int) -> Iterator[tuple[int, int]]:
    """Every (tp, pp) Megatron-LM accepts for `model` (module docstring) whose training state
    fits memory with the fewest activations a layout can hold (one micro-batch of one
    sequence in flight; `_fits` checks a layout's own): tp up to a node dividing the
    attention heads and the KV heads, pp dividing the layers."""
    usable, node = USABLE_MEMORY * gpu.memory_bytes, gpu.gpus_per_node
    for tp in range(1, node + 1):
        if model.n_heads % tp == 0 == model.n_kv_heads % tp:
            for pp in range(1, model.n_layers + 1):
                if model.n_layers % pp == 0 and train_bytes(
                    model, seq_len, tp, pp, in_flight=1
                ) <= usable:  # fmt: skip
                    yield tp, pp


def _bytes_at(
    model: DecoderShape, seq_len: int, split: tuple[int, int], micro: tuple[int, int]
) -> float:
    """`train_bytes` of `split` (tp, pp) running `micro` (micro-batch size b, micro-batches
    m a rank): min(pp, m) of them in flight on the first stage (module docstring)."""
    (tp, pp), (b, m) = split, micro
    return train_bytes(model, seq_len, tp, pp, micro_batch=b, in_flight=m)


def _tp_in_node(tp: int, num_gpus: int, node: int) -> bool:
    """Whether every tensor-parallel group (tp consecutive ranks) of `num_gpus` sits in one
    node: all on one node, or tp dividing the node."""
    return num_gpus <= node or node % tp == 0


def layouts(
    model: DecoderShape, gpu: GpuSpec, num_gpus: int, seq_len: int, batch: int
) -> Iterator[TrainLayout]:
    """Every layout of `num_gpus` that fits memory, keeps each tensor-parallel group in a
    node and whose dp x micro-batch size divides `batch` (Megatron's rule: module
    docstring): for each split, every micro-batch size b dividing batch / dp, ascending, up
    to the first that does not fit (memory is non-decreasing in b)."""
    usable = USABLE_MEMORY * gpu.memory_bytes
    for tp, pp in _splits(model, gpu, seq_len):
        dp, rest = divmod(num_gpus, tp * pp)
        if rest or batch % dp or not _tp_in_node(tp, num_gpus, gpu.gpus_per_node):
            continue
        for b in divisors(batch // dp):
            nbytes = _bytes_at(model, seq_len, (tp, pp), (b, batch // dp // b))
            if nbytes > usable:
                break
            yield TrainLayout(dp, tp, pp, nbytes, b)


def min_train_gpus(
    model: DecoderShape, gpu: GpuSpec, *, seq_len: int, batch: int | None = None
) -> int:  # fmt: skip
    """The fewest GPUs (a tp x pp Megatron-LM accepts: `_splits`) whose training state fits:
    of a global `batch`, the fewest of `train_counts` (any dp dividing it, its micro-batches
    in flight); without one, a replica with pp micro-batches in flight (the most)."""
    if batch is not None:
        counts = train_counts(model, gpu, seq_len=seq_len, batch=batch)
        if counts:
            return counts[0]
    node, usable = gpu.gpus_per_node, USABLE_MEMORY * gpu.memory_bytes
    best = [tp * pp for tp, pp in _splits(model, gpu, seq_len) if _tp_in_node(tp, tp * pp, node)
            and train_bytes(model, seq_len, tp, pp) <= usable]  # fmt: skip
    if not best:
        raise GpuMemoryError(f"no layout of {gpu.name} GPUs holds this model's training state")
    return min(best)


def train_counts(model: DecoderShape, gpu: GpuSpec, *, seq_len: int, batch: int) -> list[int]:
    """Every GPU count that has a layout (`layouts`), ascending: the products dp x tp x pp
    of the splits that fit (`_splits`) and the dp that divide `batch`, enumerated directly
    (at most the divisors of the batch x a node's tp x the layers' divisors; the batch's
    found in O(sqrt batch): hunt 78's review, every integer up to a batch of 2e10 was tried),
    where micro-batches of one sequence fit: the least memory, so a count is listed where
    some micro-batch size fits (`layouts` then runs the fastest size that fits, not 1)."""
    dps = divisors(batch)
    node, usable = gpu.gpus_per_node, USABLE_MEMORY * gpu.memory_bytes
    return sorted({dp * tp * pp for tp, pp in _splits(model, gpu, seq_len) for dp in dps
                   if _tp_in_node(tp, dp * tp * pp, node)
                   and _bytes_at(model, seq_len, (tp, pp), (1, batch // dp)) <= usable
                   })  # fmt: skip


def no_layout_error(
    model: DecoderShape, gpu: GpuSpec, num_gpus: int, *, seq_len: int, batch: int
) -> GpuMemoryError:  # fmt: skip
    """Why no layout of `num_gpus` runs: too few GPUs to hold the model (naming the fewest
    with a layout: below them, a split of `num_gpus` exists and overflows, or their memory
    all together holds less than the parameters' states); above them, splits that all
    overflow (`_overflow_error`: memory named, with the nearest counts that have a layout);
    or no data x tensor x pipeline split of that many (a `GpuLayoutError` naming the
    nearest counts that have one, below and above: `train_counts`). Review 79: below the
    fewest with a layout, memory was blamed where no split of the count exists at all
    (Llama 3 70B, batch 16, on 18 H100s: their 1,392 GB usable hold its 1,270 GB of states,
    but 3 divides 18 and none of the 64 heads, the 80 layers or the batch). Review 80: above
    them, splits that all overflow were told to mind the divisibility rules (Llama 3 70B,
    batch 48, on 24 H100s: every split is a replica of at most 8 GPUs, 159 GB of states a
    GPU)."""
    need = min_train_gpus(model, gpu, seq_len=seq_len, batch=batch)
    splits = _megatron_splits(model, gpu, num_gpus, batch)
    states = BYTES_PER_PARAM_TRAIN * num_params(model)
    if num_gpus < need and (splits or num_gpus * USABLE_MEMORY * gpu.memory_bytes < states):
        return GpuMemoryError(
            f"{num_gpus} x {gpu.name} cannot train this model "
            f"({num_params(model) / 1e9:.3g}B parameters x {BYTES_PER_PARAM_TRAIN} bytes (fp32 "
            f"main gradients, Megatron's bf16 default) + "
            f"activations, batch {batch}): use at least {need} GPUs, at most "
            f"{batch} data-parallel ranks x tensor x pipeline"
        )
    counts = train_counts(model, gpu, seq_len=seq_len, batch=batch)
    i = bisect.bisect_left(counts, num_gpus)
    near = [counts[j] for j in (i - 1, i + (i < len(counts) and counts[i] == num_gpus))
            if 0 <= j < len(counts)]  # fmt: skip
    use = f"use {' or '.join(map(str, near)) or 'another count of'} GPUs"
    if splits:  # memory alone refuses them: `layouts` keeps every split that fits
        return _overflow_error(model, gpu, (num_gpus, need), (seq_len, batch), splits, use)
    return GpuLayoutError(
        f"{num_gpus} x {gpu.name}: no data x tensor x pipeline split of {num_gpus} GPUs runs "
        f"the global batch of {batch} sequences: "
        f"Megatron-LM needs data-parallel ranks that divide it (tensor parallel up to "
        f"{gpu.gpus_per_node} in a node dividing the {model.n_heads} heads and "
        f"{model.n_kv_heads} KV heads, pipeline parallel dividing the {model.n_layers} "
        f"layers, the rest data parallel, within memory); {use}"
    )


def _overflow_error(
    model: DecoderShape, gpu: GpuSpec, counts: tuple[int, int], job: tuple[int, int],
    splits: list[tuple[int, int, int]], use: str,
) -> GpuMemoryError:  # fmt: skip
    """The refusal of `num_gpus` (`counts`: it and the fewest with a layout, fewer) whose
    Megatron-LM splits (`splits`: (tp, pp, dp)) all overflow memory: the largest replica
    among them, the least a GPU of any of them holds (one-sequence micro-batches, the least
    memory), the fewest GPUs with a layout and that layout, and the nearest counts."""
    (num_gpus, need), (seq_len, batch) = counts, job
    least = min(train_bytes(model, seq_len, tp, pp, in_flight=batch // dp)
                for tp, pp, dp in splits)  # fmt: skip
    fewest = next(layouts(model, gpu, need, seq_len, batch))
    return GpuMemoryError(
        f"{num_gpus} x {gpu.name} cannot train this model at a global batch of {batch}: "
        f"every data x tensor x pipeline split of {num_gpus} GPUs Megatron-LM runs is a "
        f"replica of at most {max(tp * pp for tp, pp, _ in splits)} GPUs (tp x pp), whose "
        f"busiest GPU holds at least {least / 1e9:.1f} GB "
        f"({num_params(model) / 1e9:.3g}B parameters x {BYTES_PER_PARAM_TRAIN} bytes + "
        f"activations), more than the {USABLE_MEMORY * gpu.memory_bytes / 1e9:.1f} GB of its "
        f"memory usable; "
        f"the fewest GPUs with a layout are {need} (dp {fewest.dp} x tp {fewest.tp} x pp "
        f"{fewest.pp}); {use}"
    )


def _megatron_splits(
    model: DecoderShape, gpu: GpuSpec, num_gpus: int, batch: int
) -> list[tuple[int, int, int]]:  # fmt: skip
    """The data x tensor x pipeline splits (tp, pp, dp) of `num_gpus` Megatron-LM accepts,
    memory aside: tp up to a node dividing the heads and KV heads (each group in a node), pp
    dividing the layers, dp = num_gpus / (tp pp) dividing `batch` (O(node x layers))."""
    node = gpu.gpus_per_node
    return [
        (tp, pp, num_gpus // (tp * pp))
        for tp in range(1, node + 1)
        if model.n_heads % tp == 0 == model.n_kv_heads % tp and _tp_in_node(tp, num_gpus, node)
        for pp in divisors(model.n_layers)
        if num_gpus % (tp * pp) == 0 and batch % (num_gpus // (tp * pp)) == 0
    ]


@functools.cache
def dp_ring_in_node(tp: int, dp: int, pp: int, node: int) -> bool:
    """Whether every data-parallel group sits in one node under Megatron's rank order (rank =
    t + tp (d + dp p): module docstring), its ring then on NVLink, else InfiniBand."""
    stage = tp * dp
    return all((p * stage + t) // node == (p * stage + t + tp * (dp - 1)) // node
               for p in range(pp) for t in range(tp))  # fmt: skip


@functools.cache
def embedding_pair_in_node(tp: int, dp: int, pp: int, node: int) -> bool:
    """Whether every first-stage rank and the last-stage rank of its embedding group (the
    same t and d, pipeline rank pp - 1: tp dp (pp - 1) ranks on) sit in one node under
    Megatron's rank order; else some pair crosses InfiniBand, which paces the all-reduce."""
    gap = tp * dp * (pp - 1)
    return all(r // node == (r + gap) // node for r in range(tp * dp))


def embedding_allreduce_s(model: DecoderShape, gpu: GpuSpec, layout: TrainLayout) -> float:
    """The tied word embeddings' gradient summed between the first and the last stage (hunt
    79): Megatron-LM's `_allreduce_word_embedding_grads` (megatron/core/distributed/
    finalize_model_grads.py: "Reduce grads across first and last stages to ensure that
    word_embeddings parameters stay in sync"), run by `finalize_model_grads` after the
    data-parallel gradient sync, so nothing hides it: each embedding group (the first and
    last stage's ranks of one t and d) all-reduces its V d / tp shard (vocab parallel) of
    main gradients, `GRAD_BYTES` (fp32: `TRAIN_CONFIG`), a ring of 2 (`ring_allreduce_s`:
    bytes / bw + 2 latencies), all groups at once, each on its GPUs' own links: NVLink where
    every pair sits in one node (`embedding_pair_in_node`), else InfiniBand. 0 untied (Llama
    3) or at pp 1 (one copy)."""
    if not model.tie_embeddings or layout.pp == 1:
        return 0.0
    nbytes = GRAD_BYTES * model.vocab_size * model.d_model / layout.tp
    in_node = embedding_pair_in_node(layout.tp, layout.dp, layout.pp, gpu.gpus_per_node)
    bw, lat = link(gpu, in_node)
    return ring_allreduce_s(nbytes, 2, bw, lat)


def stage_hop_s(model: DecoderShape, gpu: GpuSpec, layout: TrainLayout, seq_len: int) -> float:
    """One hop between pipeline stages: a micro-batch's micro_batch x seq_len x d_model bf16
    activations (or their gradients) split over the tp ranks, 1/tp over each GPU's own link,
    plus its latency: NVLink where the job is on one node, else InfiniBand (module docstring: some
    stage boundary then crosses a node). 0 at pp 1. The send is `gpu_links.stage_hop_s`, the
    serving step's too."""
    if layout.pp == 1:
        return 0.0
    in_node = layout.dp * layout.tp * layout.pp <= gpu.gpus_per_node
    act = WEIGHT_BYTES * layout.micro_batch * seq_len * model.d_model
    return gpu_links.stage_hop_s(gpu, act, tp=layout.tp, in_node=in_node)
