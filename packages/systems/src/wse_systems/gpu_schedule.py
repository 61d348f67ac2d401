"""One GPU training layout's step on Megatron-LM's non-interleaved 1F1B schedule: its flops,
its kernel floor, its pipeline bubble and sends, and its exposed gradient rings.

Contract: this module owns the price of one `gpu_layout.TrainLayout` at a given MFU and
kernel time (`priced_step`, `train_floor`, `TrainStep`, `TrainFloor`) and the training step's
pass counts (`TRAIN_PASSES`, `AROUND_PASSES`, `OPTIMIZER_KERNELS_PER_LAYER`,
`TP_ALLREDUCES_PER_LAYER`, `GRAD_OVERLAP_SHARE`); the fastest layout and the assumptions read
are `wse_systems.gpu_train`'s, the GPUs' figures `wse_systems.gpu`'s (which re-exports both).

Flops: per token 6 N_matmul plus PaLM's attention term 12 L H Q T (Chowdhery et al. 2022,
appendix B: N_matmul = the weights every token multiplies — the layers and the output head,
not the embedding lookup; L layers, H Q = heads x head dim, T the sequence length, causal
masking not discounted, which is how MFU figures are quoted; `train_flops_per_token`).
The last pipeline stage is the slowest (`stage_flops_per_token`): L / pp
layers and the output head, where Megatron places it (the first stage's embedding lookup is
a gather, no flops: not priced; hunt 78: the head was spread evenly over the stages, GPT-2
1.5B's last stage of pp 8 runs 1.33 x the even share); every other stage runs its L / pp
layers (`layers_flops_per_token`), over tp GPUs. At pp > 1 each micro-batch sends its
activations forward and its gradients back (`gpu_layout.stage_hop_s`: 1/tp a GPU on its own
link, InfiniBand past one node), 2 hops a stage a micro-batch, but the last stage sends no
activations (its forward ends in the loss) and the first no gradients (Megatron's
`send_forward` on the last stage and `send_backward` on the first are no-ops). Megatron's
non-interleaved 1F1B takes sum_i t_i + (m - 1) t_max, t_i stage i's forward and backward of
one micro-batch with its hops: the last stage's m micro-batches and their m gradient sends,
and the fill and drain (the bubble) at each other stage's own pace, (pp - 1) / m of their
busy time, the fill's pp - 1 activation sends and the drain's pp - 2 gradient sends between
the other stages (review 82: 2 m + 2 (pp - 1) hops were priced, m + 1 of them sends that do
not happen; Llama 3 8B on 4,096 H100s, pp 32 at m 1, 2 x 0.173 ms) (hunt 80:
(pp - 1) / m of the last stage's, (m + pp - 1) t_max, was priced: Llama 3 8B on 1,024 H100s
at 8 sequences, pp 16 at m 1, ran 16 x (2 layers + the head) where 1F1B runs 15 x 2 layers
+ (2 layers + the head), 1.8 x the time); tensor-parallel traffic inside the node is
taken to be inside the MFU (and in the floor below). Gradients (fp32 main gradients,
Megatron's bf16 default: `gpu_layout.TRAIN_CONFIG`, `GRAD_BYTES`; hunt 79: bf16 was priced,
half the bytes; over tp) are ring-all-reduced over the data-parallel group, each stage's
its own parameters (`gpu_layout.end_stage_params`: L / pp layers and the head on the last
stage, the embedding on the first; `TrainStep.allreduce_s` the largest, `stage_params`;
hunt 78's review: an even share of the parameters, num_params / pp, GPT-2 124M's at pp 12
22% of its end stages'), on NVLink where Megatron's
rank order (tp innermost, then dp, then pp) puts each group in one node
(`gpu_layout.dp_ring_in_node`; hunt 78: InfiniBand whenever the job spanned nodes, so 16
GPUs of GPT-2 1.5B chose dp 2 x pp 8 at 38.1 ms over dp 8 x pp 2), else InfiniBand. With
--overlap-grad-reduce (`TRAIN_CONFIG`) a ring runs from its stage's last micro-batch's
backward (`GRAD_OVERLAP_SHARE`, 3/4 of a micro-batch under full recompute; Megatron runs
every earlier one under no_sync) to the step's end: the first stage's backward is 1F1B's
last and ends the step (it sends nothing after it), the last stage's is followed by its
send and the other stages' backwards and sends (the cool-down); only the excess
of either end stage's ring is exposed (hunt 80: 2/3 of all m micro-batches' busy time hid
the largest ring, so the search kept b = 1 where a larger micro-batch's window hides it),
and at least its last gradient bucket's ring less what follows that backward: Megatron
Core all-reduces gradients in buckets of max(40M, 1M x dp) parameters filled in reverse
order, each once all its gradients are ready, so the bucket that holds the word embeddings
starts after the first stage's backward, and a later stage, one bucket, starts after its
own (`gpu_layout.last_bucket_params`, `GRAD_BUCKET_MIN_PARAMS`; review 81: GPT-2 124M on
16 H100s hid its whole 18.8 ms ring, 31.76 ms a step, where its 5.9 ms word-embedding
bucket follows the backward: 37.70 ms).
Tied embeddings at pp > 1 add the embedding group's all-reduce of the word embeddings'
gradient between the first and the last stage, after the backward
(`gpu_layout.embedding_allreduce_s`; hunt 79: unpriced).

The step's floor (`train_floor`; hunt 76: a 2-layer model's step was 36 ns on 8 H100s): the
busy time is at least the kernels a step launches, in the serving forward's units for every
caller (`wse_systems.gpu_kernels`: K = 8 a layer and K0 = 4 around them at `gpu.kernel_s`),
each micro-batch passing every layer `TRAIN_PASSES` = 4 times (forward, full recompute,
backward at twice the forward's: two gradient products a product) and the K0
`AROUND_PASSES` = 3 times (forward, backward), plus
`OPTIMIZER_KERNELS_PER_LAYER` a layer a step (fused multi-tensor AdamW, apex's FusedAdam or
torch's `fused=True`: a launch a list of a few dozen tensors, a layer's 9 to 12 taken as
one); at tp > 1, `TP_ALLREDUCES_PER_LAYER` NVLink ring all-reduces of a micro-batch's
activations a layer, latency included (Megatron's 2 forward and 2 backward, Shoeybi et al.
2019 fig. 4; 2 in the recompute). Busy = max(compute, floor), not the sum: a large model's
MFU is measured with its launches and tensor-parallel traffic inside, so a compute-bound
step does not move; the bubble and the gradient ring's window scale with the busy time (a
stage's floor taken as the last's: the K0 around the layers counted on every stage).

Ring all-reduce (`gpu_links.ring_allreduce_s`): 2 (p - 1) / p x bytes / bandwidth + 2 (p - 1)
x latency (Megatron-LM's all-reduces run through NCCL); the latencies in force (`gpu_links.link`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from wse_systems.gpu_kernels import KERNELS_PER_LAYER, KERNELS_PER_STEP
from wse_systems.gpu_layout import (
    GRAD_BYTES,
    SENDS_PER_MICRO,
    WEIGHT_BYTES,
    TrainLayout,
    dp_ring_in_node,
    embedding_allreduce_s,
    end_stage_params,
    last_bucket_params,
    link,
    ring_allreduce_s,
    stage_hop_s,
)
from wse_systems.transformer import (
    DecoderShape,
    attn_dim,
    attn_matmul_params,
    mlp_matmul_params,
)

if TYPE_CHECKING:
    from wse_systems.gpu import GpuSpec

__all__ = ["TRAIN_PASSES", "AROUND_PASSES", "OPTIMIZER_KERNELS_PER_LAYER",
           "TP_ALLREDUCES_PER_LAYER", "GRAD_OVERLAP_SHARE", "TrainFloor", "TrainStep",
           "train_flops_per_token", "stage_flops_per_token", "layers_flops_per_token",
           "train_floor", "priced_step"]  # fmt: skip

# The training step's kernels in the serving forward's units (module docstring, `train_floor`)
TRAIN_PASSES = 4  # a layer a micro-batch: forward 1 + full recompute 1 + backward 2
AROUND_PASSES = 3  # the embedding, final norm, head and loss: forward 1 + backward 2
OPTIMIZER_KERNELS_PER_LAYER = 1  # a step: a fused multi-tensor AdamW launch a layer
TP_ALLREDUCES_PER_LAYER = 6  # a micro-batch, tp > 1: Megatron's 2 fwd + 2 bwd + 2 recompute
# The share of a micro-batch's work its backward takes, recompute included: full recompute's
# forward again + the backward at twice it, 3 of the `TRAIN_PASSES` 4 (Narayanan et al.
# 2021's F counts 4 x 24 B s l h^2 a layer with recomputation; the head's 3 passes, 2
# backward, not told apart). Megatron-LM runs every micro-batch but the last under no_sync
# (megatron/core/pipeline_parallel/schedules.py, forward_backward_no_pipelining and
# _without_interleaving: "Disable async grad reductions", enable_grad_sync() before the last
# backward), so --overlap-grad-reduce (`TRAIN_CONFIG`) runs the data-parallel ring's
# buckets under this share of the LAST micro-batch only (hunt 80: 2/3, a bare literal, of
# all m micro-batches' busy time hid it), all but the last bucket, which starts once the
# backward has ended (`gpu_layout.last_bucket_params`, `GRAD_BUCKET_MIN_PARAMS`: Megatron
# Core's max(40M, 1M x dp) parameters a bucket; review 81)
GRAD_OVERLAP_SHARE = (TRAIN_PASSES - 1) / TRAIN_PASSES


def train_flops_per_token(model: DecoderShape, seq_len: int) -> float:
    """6 N_matmul + 12 L (H Q) T: forward and backward, PaLM's accounting (every stage's:
    `stage_flops_per_token` at pp 1)."""
    return stage_flops_per_token(model, seq_len, 1)


def stage_flops_per_token(model: DecoderShape, seq_len: int, pp: int) -> float:
    """The busiest pipeline stage's share of `train_flops_per_token` (module docstring): L /
    pp layers' 6 x weights + 12 (H Q) T each (`layers_flops_per_token`), and the output
    head's 6 d V on the last stage (with the layers' weights, N_matmul). At pp 1, all of it."""
    return layers_flops_per_token(model, seq_len, pp) + 6 * model.vocab_size * model.d_model


def layers_flops_per_token(model: DecoderShape, seq_len: int, pp: int) -> float:
    """A stage's L / pp layers' share of `train_flops_per_token`, 6 x weights + 12 (H Q) T a
    layer: every stage's but the last's whole work (the first stage's embedding lookup is a
    gather, no flops), the last's without its head."""
    layer = 6 * (attn_matmul_params(model) + mlp_matmul_params(model))
    layer += 12 * attn_dim(model) * seq_len
    return model.n_layers // pp * layer


@dataclasses.dataclass(frozen=True)
class TrainFloor:
    """A step's floor on one GPU (`train_floor`): `kernels` launches at `kernel_s` each and
    `tp_allreduce_s` of tensor-parallel all-reduces, over the micro-batches, no bubble."""

    kernels: int
    kernel_s: float
    tp_allreduce_s: float

    @property
    def floor_s(self) -> float:
        return self.kernels * self.kernel_s + self.tp_allreduce_s


@dataclasses.dataclass(frozen=True)
class TrainStep:
    step_s: float
    compute_s: float  # at mfu, no bubble
    bubble_s: float
    allreduce_s: float  # whole ring time; the part beyond its window is exposed (>= 1 bucket)
    exposed_allreduce_s: float
    layout: TrainLayout
    floor: TrainFloor  # the kernels' and tp all-reduces' floor (`train_floor`)
    stage_sends_s: float = 0.0  # pp > 1: a rank's sends between stages, no bubble (hunt 77)
    embedding_allreduce_s: float = 0.0  # tied, pp > 1: first + last stage's sum (hunt 79)
    # the first stage's last gradient bucket's ring, which starts after its backward: at pp
    # 1 at least this is exposed whatever the micro-batch (`_exposed_ring_s`; review 81)
    last_bucket_allreduce_s: float = 0.0

    @property
    def bound(self) -> str:  # what sets the busy time
        return "kernels" if self.floor.floor_s > self.compute_s else "compute"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def train_floor(
    model: DecoderShape, gpu: GpuSpec, layout: TrainLayout, *, seq_len: int, batch: int,
    kernel_s: float,
) -> TrainFloor:  # fmt: skip
    """The floor of one GPU's step in `layout` (module docstring): m = ceil(batch / (dp b))
    micro-batches of b = `layout.micro_batch` sequences, each `TRAIN_PASSES` K ceil(L / pp)
    + `AROUND_PASSES` K0 kernels (K, K0: `gpu_kernels.KERNELS_PER_LAYER`,
    `KERNELS_PER_STEP`: a kernel runs a whole micro-batch) and, where tp > 1,
    `TP_ALLREDUCES_PER_LAYER` ceil(L / pp) ring all-reduces of b x seq_len x d_model bf16
    values over tp GPUs on NVLink; plus
    `OPTIMIZER_KERNELS_PER_LAYER` ceil(L / pp) kernels a step. Seconds: kernels x `kernel_s`
    + the all-reduces."""
    micro = math.ceil(batch / (layout.dp * layout.micro_batch))
    layers = math.ceil(model.n_layers / layout.pp)
    per_micro = TRAIN_PASSES * KERNELS_PER_LAYER * layers + AROUND_PASSES * KERNELS_PER_STEP
    count = micro * per_micro + OPTIMIZER_KERNELS_PER_LAYER * layers
    act = WEIGHT_BYTES * layout.micro_batch * seq_len * model.d_model
    one = ring_allreduce_s(act, layout.tp, *link(gpu, True))
    return TrainFloor(count, kernel_s, micro * TP_ALLREDUCES_PER_LAYER * layers * one)


def _step(model, gpu, layout, *, seq_len, batch, mfu, floor) -> TrainStep:
    """The step of `layout` (module docstring): 1F1B over pp stages of m = batch / (dp b)
    micro-batches each (b its micro-batch size; `layouts` keeps dp b | batch), the last
    stage (layers + head) the slowest, its m micro-batches and their m gradient sends (it
    sends no activations: its forward ends in the loss) the busy part,
    the fill and drain at each other stage's own pace (`_bubble_s`); the data-parallel
    gradient rings' excess over what follows each end stage's last backward, at least its
    last bucket's, which starts when that backward ends
    (`_exposed_ring_s`: the first's layers + embedding, the last's layers + head, `GRAD_BYTES`
    fp32 main gradients over tp, on NVLink where Megatron's rank order (tp innermost, then
    dp, then pp) keeps each dp group in a node, else InfiniBand); and, tied embeddings at pp
    > 1, the embedding group's all-reduce after them (`embedding_allreduce_s`)."""
    tp, dp, pp = layout.tp, layout.dp, layout.pp
    micro = math.ceil(batch / (dp * layout.micro_batch))
    tokens, speed = micro * layout.micro_batch * seq_len, tp * gpu.peak_flops * mfu
    compute = tokens * stage_flops_per_token(model, seq_len, pp) / speed  # the last stage's
    busy = max(compute, floor.floor_s)
    hop = stage_hop_s(model, gpu, layout, seq_len)
    sends = micro * hop  # the last stage's: its gradients back, no activations forward
    other = max(tokens * layers_flops_per_token(model, seq_len, pp) / speed, floor.floor_s)
    other = other if pp > 1 else busy  # a stage without the head (at pp 1, the one stage)
    bubble = _bubble_s(pp, micro, other, hop)
    ring, exposed, bucket = _exposed_ring_s(model, gpu, layout, (micro, hop), (busy, other))
    tied = embedding_allreduce_s(model, gpu, layout)
    step_s = busy + sends + bubble + exposed + tied
    return TrainStep(step_s, compute, bubble, ring, exposed, layout, floor, sends, tied,
                     last_bucket_allreduce_s=bucket)  # fmt: skip


def _bubble_s(pp: int, micro: int, other_s: float, hop_s: float) -> float:
    """1F1B's fill and drain beyond the last stage's busy time and sends: Megatron's
    non-interleaved schedule (warm-up min(pp - i - 1, m) forwards, 1F1B, cool-down) takes
    sum_i t_i + (m - 1) t_max a step, t_i stage i's forward and backward of one micro-batch
    with its sends, where the last stage (its head) is the slowest: the other pp - 1 stages'
    one micro-batch each, `other_s` / m of compute (m micro-batches' `other_s`), with the
    fill's pp - 1 activation sends (stages 0 to pp - 2) and the drain's pp - 2 gradient sends
    (stages pp - 2 to 1; the first sends none, the last's is among its m), `hop_s` each.
    Hunt 80: (pp - 1) t_max was priced, the fill and drain at the last stage's pace (Llama 3
    8B on pp 16 at m 1: 16 x 6.57 GFLOP a token, a stage's 2 layers and the head, for 15 x
    3.42 (2 layers) + 6.57; review 81: "layers' time" was written); review 82: 2 hops each
    other stage, the first stage's send after its last backward among them."""
    if pp == 1:
        return 0.0
    return other_s * (pp - 1) / micro + (SENDS_PER_MICRO * (pp - 1) - 1) * hop_s


def _exposed_ring_s(model, gpu, layout, micro_hop: tuple, busy: tuple) -> tuple[float, ...]:
    """(the largest stage's data-parallel gradient ring, the part of the rings that no
    computation hides, the first stage's last bucket's ring), `micro_hop` (m, one hop between
    stages), `busy` (the last stage's m micro-batches, another stage's). Each end stage's
    ring (`end_stage_params` / tp fp32 main gradients) runs under --overlap-grad-reduce in
    Megatron Core's buckets from its last micro-batch's backward (`GRAD_OVERLAP_SHARE` of its
    one micro-batch) to the step's end, the window: the first stage's backward is 1F1B's
    last and ends the step (it sends nothing after it: a tail of 0), the last stage's is
    followed by pp - 1 sends and the other pp - 1 stages' last backwards (the cool-down),
    the tail (review 82: a send after the first stage's backward was priced, so its last
    bucket was hidden a hop's worth, and the last stage's tail counted it too). Its last
    bucket (`last_bucket_params`: the first stage's word embeddings; the whole last stage at
    pp > 1, one bucket) starts only when that backward has ended, after the buckets before
    it: with those started at the window's start (a floor), a stage's rings end
    max(ring - window, last bucket - tail) past the step's end (review 81: ring - window
    alone was priced, so GPT-2 124M's 18.8 ms ring hid whole under 23.8 ms of backward where
    its 5.9 ms word-embedding bucket cannot start before the backward ends). A middle
    stage's ring, one bucket, is no larger than the first's and its tail is at least the
    first stage's window. At pp 1 the window is
    GRAD_OVERLAP_SHARE x busy / m and the tail 0."""
    tp, dp, pp, node = layout.tp, layout.dp, layout.pp, gpu.gpus_per_node
    (micro, hop), (last, other) = micro_hop, busy
    in_node = dp_ring_in_node(tp, dp, pp, node)
    bw, lat = link(gpu, in_node)
    first_p, last_p = end_stage_params(model, pp)
    rings = [ring_allreduce_s(GRAD_BYTES * p / tp, dp, bw, lat) for p in (first_p, last_p)]
    buckets = [ring_allreduce_s(GRAD_BYTES * p, dp, bw, lat)
               for p in last_bucket_params(model, tp, dp, pp)]  # fmt: skip
    back = GRAD_OVERLAP_SHARE * other / micro  # a non-last stage's last backward
    tails = (0.0, (pp - 1) * (hop + back))  # after each end stage's last backward (0 at pp 1)
    windows = (back + tails[0], GRAD_OVERLAP_SHARE * last / micro + tails[1])
    exposed = max(0.0, *(r - w for r, w in zip(rings, windows, strict=True)),
                  *(b - t for b, t in zip(buckets, tails, strict=True)))  # fmt: skip
    return max(rings), exposed, buckets[0]


def priced_step(model, gpu, layout, job: tuple[int, int], at: tuple) -> TrainStep:
    """`_step` of `job` (seq_len, batch) `at` (mfu, kernel_s)."""
    (seq_len, batch), (mfu, kernel_s) = job, at
    floor = train_floor(model, gpu, layout, seq_len=seq_len, batch=batch, kernel_s=kernel_s)
    return _step(model, gpu, layout, seq_len=seq_len, batch=batch, mfu=mfu, floor=floor)
