"""A training job's layouts on GPUs (data x tensor x pipeline parallel): the bytes each GPU
holds (`train_bytes`: the busiest stage's, `stage_bytes`), the layouts Megatron-LM runs
(`layouts`), the fewest GPUs that hold the training state (`min_train_gpus`), the refusal
where no layout runs (`no_layout_error`), the sends between pipeline stages (`stage_hop_s`),
the ring all-reduce (`ring_allreduce_s`), the tied embeddings' all-reduce between the first
and the last stage (`embedding_allreduce_s`), the parameters of the stage whose gradient
ring is largest (`stage_params`) and of each end stage's last gradient bucket, whose ring
no backward hides (`last_bucket_params`, Megatron Core's buckets: `grad_bucket_params`).
`wse_systems.gpu` prices a step on them (`train_step`) and re-exports their public names;
split out of it at hunt 77, when it reached 400 lines.

Memory (`stage_bytes`), priced per pipeline stage, the busiest one what must fit (hunt 79:
an even share, num_params / (tp pp) + L layer inputs, was priced for every GPU, so a layout
whose last stage holds the output head and the logits passed where that stage overflows).
Megatron-LM's accounting (megatron/training/theoretical_memory_usage.py,
`compute_weight_and_optimizer_memory` and `compute_activation_memory`, behind
`report_theoretical_memory`), each stage's GPU over tp:
- states: `BYTES_PER_PARAM_TRAIN` = 18 bytes per parameter, the configuration this plan
  models (`TRAIN_CONFIG`, its flags `TRAIN_FLAGS`): Megatron-LM's `--bf16` defaults (with
  full recompute and the gradient reduce overlapped, named there), bf16 weights with fp32 main
  gradients (its arguments.py sets `accumulate_allreduce_grads_in_fp32` under --bf16 unless
  --grad-reduce-in-bf16: "bfloat16 requires gradient accumulation and all-reduce to be done
  in fp32") and no `--use-distributed-optimizer` (off by default): 2 + 4 + fp32 master and
  two Adam moments 12 = 18, Megatron's distrib_optimizer doc ("bf16 parameters, fp32
  gradients: 18 non-distributed, 6 + 12/d distributed") and theoretical_memory_usage.py's
  `num_bytes_per_parameter`. Hunt 79: 16 (ZeRO's textbook bf16 gradients) was priced, so
  Llama 3 70B's default 16 H100s (tp 8 x pp 2, 81.0 GB at 18) passed; the distributed
  optimizer would not save it (6 + 12/dp is 18 at dp 1). Of the stage's own
  parameters: L / pp layers, plus the word (and GPT-2's position) embeddings on the first
  stage, the final norm and the output head on the last; tied embeddings keep a copy of
  the word embeddings on the last stage as its head (Megatron's "most loaded model shard
  has (1/pp_size transformer layers + 1 embedding layer)"; its gradient is summed with the
  first stage's: `gpu.embedding_allreduce_s`); at pp 1 every parameter once;
- activations under 1F1B (Narayanan et al. 2021: stage i of pp holds pp - i micro-batches
  in flight, the first stage min(pp, m) of its m micro-batches, Megatron's warmup count
  `num_warmup_microbatches = min(pp - rank - 1, m)` + the one in its steady state; the last
  one), each micro-batch `micro_batch` sequences (Megatron's --micro-batch-size: `layouts`
  chooses it), each of its L / pp layers' bf16 input kept
  under full recompute (2 s d bytes a sequence a layer: Korthikanti et al. 2022, "Reducing
  Activation Recomputation in Large Transformer Models", section 4's full recomputation,
  2 s b h L over the whole pipeline, as Megatron's first stage counts pp x L / pp layers)
  and one layer's working set while it is recomputed and run backward (34 s d bytes,
  Korthikanti's table 2 with flash attention's scores not kept); the first stage's input
  ids, 8 bytes a token, its micro-batches in flight (Megatron's; its embedding dropout mask
  not counted: these models have no dropout); the last stage's output layer and loss, 4 s
  (d + V) bytes (Megatron's "inputs to output layer and CE loss", fp32 logits, vocab
  parallel over tp). Megatron counts the first stage (pp micro-batches in flight); the last
  is priced beside it (GPT-2 and Llama 3 8B: the head's logits make it the busier), and a
  middle stage holds less than the first. With fewer micro-batches than stages (m = batch /
  (dp micro_batch) < pp) the first stage holds m (hunt 79: pp was counted, so a layout
  Megatron runs could be refused); memory is then non-decreasing in the micro-batch size
  (min(pp, m) x micro_batch = min(pp micro_batch, batch / dp)), so `layouts` tries sizes
  upward and stops at the first that does not fit.
All of it over tp (tensor and sequence parallel), within `USABLE_MEMORY` of HBM.

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
from typing import TYPE_CHECKING, Any, NamedTuple

from wse_core.divisors import divisors
from wse_core.errors import WseError

from wse_systems import gpu_links
from wse_systems.gpu_links import link, ring_allreduce_s
from wse_systems.transformer import (
    DecoderShape,
    embed_params,
    final_params,
    layer_params,
    num_params,
)

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

FP32_BYTES = 4  # an fp32 word (IEEE 754 binary32): the master weight's, Adam m's and v's
WEIGHT_BYTES = 2  # bf16 weights, activations and their gradients
# fp32 main gradients (Megatron's --bf16 default; 2 under --grad-reduce-in-bf16): the dp
# ring's and the tied all-reduce's bytes a value (review 80: the fp32 word was spelled with it)
GRAD_BYTES = FP32_BYTES
# bf16 weight 2 + main gradient 4 + fp32 master, Adam m, v 12 = 18 (Megatron's distrib_optimizer
# doc: 18 for bf16 parameters with fp32 gradients, 16 with bf16 gradients)
BYTES_PER_PARAM_TRAIN = WEIGHT_BYTES + GRAD_BYTES + 3 * FP32_BYTES
# The Megatron-LM configuration priced (module docstring), with its sources; its byte
# counts read the constants (review 79: a note said 16 where 18 was priced)
# Hunt 80: two non-defaults were priced and named nowhere ("--bf16 defaults"); named as
# flags, the configuration is reproducible (`gpu.train_step` prices the gradient ring's
# overlap and the recompute pass, `stage_bytes` the activations the recompute keeps)
TRAIN_FLAGS = (
    "--bf16 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
    "--overlap-grad-reduce"
)
TRAIN_CONFIG = (
    f"Megatron-LM {TRAIN_FLAGS}, the rest its defaults: fp32 main gradients accumulated and "
    "all-reduced (accumulate_allreduce_grads_in_fp32, unless --grad-reduce-in-bf16), no "
    f"--use-distributed-optimizer: {BYTES_PER_PARAM_TRAIN} bytes a parameter "
    "(megatron/training/arguments.py; Megatron Core's distrib_optimizer doc, bf16 parameters "
    f"with fp32 gradients: {BYTES_PER_PARAM_TRAIN}, "
    f"{BYTES_PER_PARAM_TRAIN - 3 * FP32_BYTES} + {3 * FP32_BYTES}/dp distributed; "
    "theoretical_memory_usage.py); every layer recomputed from its kept input (Megatron's "
    "default is none: the activations priced need it); the data-parallel gradient "
    "all-reduce overlapped with the last micro-batch's backward (default False: without "
    "it the whole ring is exposed)"
)
# Megatron Core's data-parallel gradient buckets under --overlap-grad-reduce (`TRAIN_CONFIG`):
# its default bucket is max(40,000,000, 1,000,000 x dp) parameters, a rank's
# (DistributedDataParallelConfig.bucket_size: "If unspecified, MCore uses a default value of
# max(40000000, 1000000 * dp_size) parameters", megatron/core/distributed/
# distributed_data_parallel_config.py; applied in distributed_data_parallel.py, Megatron-LM
# core_v0.15.0, as since core_v0.7.0; docs/references/megatron-grad-buckets.md)
GRAD_BUCKET_MIN_PARAMS = 40_000_000  # parameters a bucket, at least (Megatron Core default)
GRAD_BUCKET_PARAMS_PER_RANK = 1_000_000  # parameters a bucket a data-parallel rank (the same)
USABLE_MEMORY = 0.9  # of HBM left to the model by the framework and allocator (assumption)
ACT_WORKING = 34  # one layer's activations, bytes per token per d_model (Korthikanti 2022)
# A middle stage's hops a micro-batch: activations forward, gradients back (the last stage
# sends no activations, the first no gradients: Megatron's sends there are no-ops; review 82)
SENDS_PER_MICRO = 2
TOKEN_ID_BYTES = 8  # the first stage's int64 input ids, a token (Megatron's accounting)
LOGIT_BYTES = 4  # the output layer's input and fp32 logits for the loss, a value (Megatron's)


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


class StageBytes(NamedTuple):
    """Bytes a GPU of the first and of the last pipeline stage holds (`stage_bytes`; at pp 1
    the one stage, both the same)."""

    first: float
    last: float


def _stage_param_counts(model: DecoderShape, pp: int) -> tuple[int, int]:
    """(first stage's, last stage's) parameters (module docstring): L / pp layers each, the
    embeddings on the first, the final norm and the head (tied: a copy of the word
    embeddings) on the last; at pp 1 every parameter, once."""
    if pp == 1:
        return num_params(model), num_params(model)
    layers = model.n_layers // pp * layer_params(model)
    head = model.vocab_size * model.d_model if model.tie_embeddings else 0  # untied: in final
    return layers + embed_params(model), layers + final_params(model) + head


def stage_bytes(
    model: DecoderShape, seq_len: int, tp: int, pp: int, *, micro_batch: int = 1,
    in_flight: int | None = None,
) -> StageBytes:  # fmt: skip
    """Bytes a GPU of the first and of the last stage of a tp x pp replica holds (module
    docstring: Megatron's theoretical_memory_usage accounting, 1F1B's in-flight micro-batches,
    full recompute): states, layer inputs, one layer's working set, the first stage's input
    ids and the last stage's logits, over tp; micro-batches of `micro_batch` sequences,
    `in_flight` of them on the first stage (None: pp, the most; Megatron's min(pp, m))."""
    first_p, last_p = _stage_param_counts(model, pp)
    tokens = seq_len * micro_batch  # a micro-batch's
    sd = tokens * model.d_model
    per_layer = model.n_layers // pp * WEIGHT_BYTES * sd  # one micro-batch's layer inputs
    working = ACT_WORKING * sd
    flight = pp if in_flight is None else min(pp, in_flight)
    ids = TOKEN_ID_BYTES * tokens * flight  # the first stage's micro-batches in flight
    logits = LOGIT_BYTES * tokens * (model.d_model + model.vocab_size)
    if pp == 1:
        one = BYTES_PER_PARAM_TRAIN * first_p + per_layer + working + TOKEN_ID_BYTES * tokens
        return StageBytes((one + logits) / tp, (one + logits) / tp)
    first = BYTES_PER_PARAM_TRAIN * first_p + flight * per_layer + working + ids
    last = BYTES_PER_PARAM_TRAIN * last_p + per_layer + working + logits
    return StageBytes(first / tp, last / tp)


def train_bytes(
    model: DecoderShape, seq_len: int, tp: int, pp: int, *, micro_batch: int = 1,
    in_flight: int | None = None,
) -> float:  # fmt: skip
    """Bytes the busiest GPU of a tp x pp replica holds: the larger stage's (`stage_bytes`),
    what must fit."""
    return max(stage_bytes(model, seq_len, tp, pp, micro_batch=micro_batch,
                           in_flight=in_flight))  # fmt: skip


def end_stage_params(model: DecoderShape, pp: int) -> tuple[int, int]:
    """(first stage's, last stage's) parameters, each its own data-parallel ring's (module
    docstring; `stage_params` is the larger): at pp 1 every parameter, both."""
    return _stage_param_counts(model, pp)


def grad_bucket_params(dp: int) -> int:
    """Megatron Core's default gradient bucket under --overlap-grad-reduce, parameters a rank:
    max(`GRAD_BUCKET_MIN_PARAMS`, `GRAD_BUCKET_PARAMS_PER_RANK` x dp) (its
    DistributedDataParallel: "larger DP sizes need larger buckets to ensure collectives do
    not become latency-bound")."""
    return max(GRAD_BUCKET_MIN_PARAMS, GRAD_BUCKET_PARAMS_PER_RANK * dp)


def last_bucket_params(model: DecoderShape, tp: int, dp: int, pp: int) -> tuple[float, float]:
    """(first stage's, last stage's) last gradient bucket, parameters a GPU (over tp as
    `end_stage_params`, the word embeddings vocab parallel): the bucket whose all-reduce
    starts only after the stage's last backward has ended (Megatron Core's DDP,
    megatron/core/distributed/: param_and_grad_buffer.py fills buckets in reverse parameter
    order ("to roughly follow backprop order"), closing one once it holds
    `grad_bucket_params(dp)`, and a bucket's all-reduce starts once every gradient in it is
    ready (`register_grad_ready`); distributed_data_parallel.py turns bucketing off on every
    pipeline stage but the first, "since data-parallel communication on these stages is
    not on the critical path"). So the last stage at pp > 1 is one bucket, the whole stage;
    the first stage's (at pp 1 the one stage's) last bucket holds its first parameter, the
    word embeddings (Megatron's GPTModel builds the embedding first; tied, the head's
    gradient is final only after the lookup's backward), and the stage's other parameters
    with it where they are fewer than a bucket (none closes before it). A floor: what else
    the last bucket holds, fewer parameters than a bucket (GPT-2's position embeddings and
    part of its first layer), is not priced, as where the bucket before it closes depends
    on each tensor's size."""
    first_p, last_p = (p / tp for p in end_stage_params(model, pp))
    word = model.vocab_size * model.d_model / tp
    first = first_p if first_p - word < grad_bucket_params(dp) else word
    return first, (last_p if pp > 1 else first)


def stage_params(model: DecoderShape, pp: int) -> int:
    """The parameters of the pipeline stage that holds the most, whose data-parallel ring
    carries the most gradients (`gpu.train_step` prices that ring): all of them at pp 1;
    past it L / pp layers and, on the last stage, the final norm and the output head
    (where the compute puts it), or on the first the embedding (GPT-2's positions too).
    Megatron keeps the word embeddings on the first stage and the head on the last tied or
    not (tied, a copy whose gradients its embedding group sums across the two stages:
    `gpu.embedding_allreduce_s`). Hunt 78's review: the ring was priced at an even
    share, num_params / pp, GPT-2 124M's at pp 12 22% of its end stages'."""
    return max(_stage_param_counts(model, pp))


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
