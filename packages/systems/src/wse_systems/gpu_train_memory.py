"""What each GPU of a Megatron-LM training layout holds: the bytes of each pipeline stage
(`stage_bytes`, the busiest `train_bytes`) and the parameters behind them (`stage_params`,
`end_stage_params`, each end stage's last gradient bucket `last_bucket_params`, Megatron
Core's buckets `grad_bucket_params`).

Contract: this module owns the training state's bytes and the configuration priced
(`BYTES_PER_PARAM_TRAIN`, `GRAD_BYTES`, `WEIGHT_BYTES`, `FP32_BYTES`, `TRAIN_CONFIG`,
`TRAIN_FLAGS`, `USABLE_MEMORY`, the activation constants); pure functions of a
`DecoderShape` and a split, no GPU. Which layouts run is `wse_systems.gpu_layout`'s (which
re-exports these names, as `wse_systems.gpu` does).

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
"""

from __future__ import annotations

from typing import NamedTuple

from wse_systems.transformer import (
    DecoderShape,
    embed_params,
    final_params,
    layer_params,
    num_params,
)

__all__ = ["ACT_WORKING", "BYTES_PER_PARAM_TRAIN", "FP32_BYTES", "GRAD_BUCKET_MIN_PARAMS",
           "GRAD_BUCKET_PARAMS_PER_RANK", "GRAD_BYTES", "LOGIT_BYTES", "TOKEN_ID_BYTES",
           "TRAIN_CONFIG", "TRAIN_FLAGS", "USABLE_MEMORY", "WEIGHT_BYTES", "StageBytes",
           "end_stage_params", "grad_bucket_params", "last_bucket_params", "stage_bytes",
           "stage_params", "train_bytes"]  # fmt: skip

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
TOKEN_ID_BYTES = 8  # the first stage's int64 input ids, a token (Megatron's accounting)
LOGIT_BYTES = 4  # the output layer's input and fp32 logits for the loss, a value (Megatron's)


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
