"""The GPU side of `wse plan train`: the GPUs priced (`gpu_count`: the count asked, else the
default, moved to a count that has a layout), their side (`gpu_side`), the GPUs that match
the wafers' time (`match_gpus`) and the notes that state the GPU model (`floor_note`,
`layout_note`). `wse_systems.planning.train` builds the plan on them (`price_gpus`); split
out of it at hunt 78, when it reached 400 lines.

Hunt 78: the default count (8 GPUs a wafer system, at least the whole nodes that hold the
model) was priced whether or not it has a layout Megatron-LM runs (`gpu_layout.layouts`),
so `--systems 3` of Llama 3 70B (24 GPUs, 80 layers) lost the whole plan, wafers included;
and the match searched node counts by doubling and bisection, treating a count with no
layout as a miss (a 45-layer model matched at none from `--gpus 10`, at 24 from `--gpus
30`). Both now walk the counts that have a layout (`gpu_layout.train_counts`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from wse_core.cost.reads import recording

from wse_systems import economics as eco
from wse_systems import gpu as gpum
from wse_systems import gpu_kernels as gk
from wse_systems.gpu_layout import train_counts
from wse_systems.planning.sides import SideResult, gpu_rates
from wse_systems.transformer import DecoderShape

__all__ = ["GPU_PRECISION", "gpu_at", "GpuJob", "GpuPlan", "gpu_count", "match_gpus",
           "gpu_side", "price_gpus", "floor_note", "layout_note"]  # fmt: skip

# The wafer's precision -> the GPU precision that runs the same arithmetic
GPU_PRECISION = {"fp32": "fp32", "mixed": "bf16", "bf16": "bf16"}
NEAR = 2  # a default count with no layout moves to a whole-node count up to NEAR x it


def gpu_at(g: gpum.GpuSpec, precision: str) -> tuple[gpum.GpuSpec, str]:
    """(`g` with `peak_flops` the peak that runs the wafer's `precision`, that GPU
    precision's name): the GPU step model (`wse_systems.gpu.train_step`) runs at mfu of
    `peak_flops`. Hunt 68: an fp32 wafer job was compared with a bf16 GPU job."""
    name = GPU_PRECISION[precision]
    peak = g.peak_fp32_flops if name == "fp32" else g.peak_flops
    return dataclasses.replace(g, peak_flops=peak), name


class GpuJob(NamedTuple):
    """The job both sides run: `steps` of `global_batch` sequences of `seq` tokens, on
    `systems` wafer systems, the GPUs at `mfu` (None: `gpu.train_mfu`, read where priced)."""

    steps: int
    global_batch: int
    seq: int
    systems: int
    mfu: float | None = None


class GpuPlan(NamedTuple):
    """The GPU side priced (`side` None: none, `notes` say why), its count and the match."""

    gpus: int | None
    side: SideResult | None
    match: int | None
    notes: list[str]


def gpu_count(
    shape: DecoderShape, g: gpum.GpuSpec, job: GpuJob, *, asked: int | None, start: int,
    counts: list[int],
) -> tuple[int | None, str | None]:  # fmt: skip
    """(GPUs priced, a note where the default moved or has no count near it). `asked` is
    priced as given (a count with no layout is refused by the step, naming the nearest);
    the default, max(8 a wafer system, the whole nodes that hold `start` GPUs), moves to the
    nearest whole-node count at or above it among `counts` (those with a layout:
    `gpu_layout.train_counts`), up to `NEAR` x it, else None."""
    if asked:
        return asked, None
    node = g.gpus_per_node
    default = max(8 * job.systems, node * math.ceil(start / node))
    if default in counts:
        return default, None
    up = next((c for c in counts if c >= default and c % node == 0 and c <= NEAR * default),
              None)  # fmt: skip
    why = (f"{default} GPUs (the default: 8 a wafer system, whole nodes that hold the model) "
           f"have no Megatron layout for {shape.n_layers} layers/{shape.n_heads} heads at a "
           f"global batch of {job.global_batch}")  # fmt: skip
    if up is None:
        return None, (f"GPUs: {why}, nor does any whole-node count up to {NEAR * default}: no "
                      "GPU side; give --gpus (a count with a layout) to price one")  # fmt: skip
    return up, f"GPUs: {why}: {up} priced, the nearest whole-node count above with one"


def match_gpus(
    fn: Callable[[int], float | None], target_s: float, *, counts: Iterable[int], node: int
) -> int | None:  # fmt: skip
    """Smallest GPU count with fn(count) <= target_s among `counts` (those with a layout,
    ascending: `gpu_layout.train_counts`) that are at most a node or whole nodes (the house
    rule: a job past one node rents whole nodes); None where none is. Every such count is
    tried in turn (time is not monotone in the count: layouts change with it), so the match
    does not depend on the count a plan priced."""
    for m in counts:
        if m <= node or m % node == 0:
            t = fn(m)
            if t is not None and t <= target_s:
                return m
    return None


def _unless_oom(fn: Callable[[int], float]) -> Callable[[int], float | None]:
    """`fn(gpus)`, or None where that many GPUs cannot run the job (`GpuMemoryError`)."""

    def time_on(k: int) -> float | None:
        try:
            return fn(k)
        except gpum.GpuMemoryError:
            return None

    return time_on


def gpu_side(
    shape: DecoderShape, g: gpum.GpuSpec, m: int, job: GpuJob, rates: dict[str, Any],
    precision: str,
) -> SideResult:  # fmt: skip
    """`m` GPUs training the same `job`, in `precision` (`g` as `gpu_at` gives it: its
    peak_flops that precision's), at least their kernels (`gpum.train_floor`)."""
    steps, global_batch, seq = job.steps, job.global_batch, job.seq
    s = gpum.train_step(shape, g, num_gpus=m, batch=global_batch, seq_len=seq, mfu=job.mfu)
    g_time, (gpeak, _) = steps * s.step_s, g.power_w_per_gpu()
    g_energy = eco.energy_j(g_time, m * gpeak)
    return SideResult(
        g.name, m, g_time, g_energy,
        eco.bill(system_hours=m * g_time / 3600, energy_j=g_energy, rates=gpu_rates(g, rates)),
        {"steps": steps, "tokens_trained": steps * global_batch * seq,
         "step_s": s.step_s, "precision": precision,
         "peak_flops": g.peak_flops, "layout": s.layout.to_dict(),
         "exposed_allreduce_s": s.exposed_allreduce_s, "bubble_s": s.bubble_s,
         "stage_sends_s": s.stage_sends_s, "embedding_allreduce_s": s.embedding_allreduce_s,
         "compute_s": s.compute_s, "step_bound": s.bound,
         "floor": {**dataclasses.asdict(s.floor), "floor_s": s.floor.floor_s},
         "energy_j_per_step": eco.per(g_energy, steps),
         "energy_j_per_token": eco.per(g_energy, steps * global_batch * seq)},
    )  # fmt: skip


def price_gpus(
    shape: DecoderShape, g: tuple[gpum.GpuSpec, str], job: GpuJob, *, asked: int | None,
    rates: dict[str, Any], target_s: float,
) -> GpuPlan:  # fmt: skip
    """The GPU side of `job` on `asked` GPUs (None: `gpu_count`'s default), `g` the GPU in
    the wafer's numerics and that precision's name (`gpu_at`'s), and the GPUs that match
    `target_s` (the wafers' time). No side, with a note saying why, where no layout holds
    the model or none is near the default (the wafers' side stands alone)."""
    g_run, precision = g
    try:
        start = gpum.min_train_gpus(shape, g_run, seq_len=job.seq, batch=job.global_batch)
    except gpum.GpuMemoryError as e:  # the wafers alone
        why = "tensor parallel <= a node, pipeline dividing the layers"
        return GpuPlan(None, None, None, [f"GPUs: {e} ({why}): no GPU side"])
    counts = train_counts(shape, g_run, seq_len=job.seq, batch=job.global_batch)
    m, moved = gpu_count(shape, g_run, job, asked=asked, start=start, counts=counts)
    if m is None:
        return GpuPlan(None, None, None, [moved])
    with recording() as g_reads:  # `job.mfu` None: gpu.train_mfu is read where it prices
        side = gpu_side(shape, g_run, m, job, rates, precision)
    side = dataclasses.replace(side, reads=g_reads)

    def time_on(k: int) -> float:
        s = gpum.train_step(shape, g_run, num_gpus=k, batch=job.global_batch, seq_len=job.seq,
                            mfu=job.mfu)  # fmt: skip
        return job.steps * s.step_s

    match = match_gpus(_unless_oom(time_on), target_s, counts=counts, node=g_run.gpus_per_node)
    notes = [floor_note(side.figures), layout_note(side.figures)]
    return GpuPlan(m, side, match, [moved, *notes] if moved else notes)


def floor_note(fig: dict[str, Any]) -> str:
    """The GPU step's floor (`wse_systems.gpu.train_floor`) in words: its kernel counts and
    their sources, the assumed kernel cost's range and the key that moves it."""
    f, lay = fig["floor"], fig["layout"]
    tp = f" + {f['tp_allreduce_s'] * 1e6:.4g} us of tp all-reduces" if lay["tp"] > 1 else ""
    return (
        f"GPU step floor: a step is at least its kernels, {gk.KERNELS_PER_LAYER} a layer "
        f"(wse_systems.gpu_kernels.KERNELS_PER_LAYER, the serving forward's) x "
        f"{gpum.TRAIN_PASSES} passes a micro-batch of {fig['layout']['micro_batch']} "
        "sequence(s) (forward, full recompute, "
        f"backward at twice the forward's) + {gk.KERNELS_PER_STEP} x {gpum.AROUND_PASSES} "
        "(embedding, final norm, head and loss: forward and backward) + "
        f"{gpum.OPTIMIZER_KERNELS_PER_LAYER} fused AdamW kernel a layer a step (assumed: one "
        f"multi-tensor launch a layer), and where tp > 1 {gpum.TP_ALLREDUCES_PER_LAYER} NVLink "
        "ring all-reduces a layer a micro-batch (Megatron: 2 forward, 2 backward, 2 "
        "recompute; latency included); the busy time is the larger of compute at MFU and the "
        "floor (a large model's MFU holds its launches); "
        f"here {f['kernels']:,} kernels x {f['kernel_s'] * 1e6:g} us{tp} = "
        f"{f['floor_s'] * 1e6:.4g} us a step against compute {fig['compute_s'] * 1e6:.4g} us "
        f"({fig['step_bound']} bound; dp {lay['dp']}, tp {lay['tp']}, pp {lay['pp']}); "
        f"kernel_s assumed in {min(gk.KERNEL.sweep) * 1e6:g}..{max(gk.KERNEL.sweep) * 1e6:g} "
        f"us: --assume {gk.KERNEL_KEY}=S (wse_systems.gpu_kernels.KERNEL)"
    )


def layout_note(fig: dict[str, Any]) -> str:
    """The GPU layout's rule, rank order, pipeline pace and sends between stages
    (`wse_systems.gpu_layout`, hunts 77 and 78) in words, with this plan's figures."""
    lay = fig["layout"]
    return (
        "GPU layout: the fastest data x tensor x pipeline split and micro-batch size whose "
        "data-parallel ranks x micro-batch size divide the global batch (Megatron-LM refuses "
        "a global batch not divisible by micro-batch x data-parallel size), so every rank runs "
        "the same micro-batches, of the size (Megatron's --micro-batch-size) that is fastest "
        "and fits, here "
        f"{lay['micro_batch']} sequence(s); tensor parallel up to a node dividing the heads and "
        "KV heads, "
        "pipeline parallel dividing the layers; Megatron's rank order (tensor innermost, then "
        "data, then pipeline): each stage's gradient ring (the last's layers + head, the "
        "first's + embedding), on NVLink where each data-parallel group "
        "sits in a node, else InfiniBand, hidden (--overlap-grad-reduce; every earlier "
        "micro-batch runs under no_sync) under its last micro-batch's backward "
        f"({gpum.GRAD_OVERLAP_SHARE:g} of one, full recompute) and the stages' backwards "
        "after it, the rest exposed, and at least its last bucket (Megatron Core's buckets "
        f"of max({gpum.GRAD_BUCKET_MIN_PARAMS / 1e6:g}M, "
        f"{gpum.GRAD_BUCKET_PARAMS_PER_RANK / 1e6:g}M x dp) parameters, filled from the "
        "last parameter back: the first stage's word embeddings, a later stage whole), "
        "which starts when the backward ends, less what follows it; the busiest stage is the "
        "last (layers / pp + the output head, where Megatron places it; the first stage's "
        "embedding lookup, a gather, not priced); at pp > 1 each micro-batch sends its "
        "activations to the next stage and its gradients back (micro-batch x seq_len x "
        "d_model bf16 each way, 1/tp a GPU on its own link: InfiniBand past one node, "
        "NVLink inside, + latency; none of activations from the last stage, nor of "
        "gradients from the first, whose last backward ends the step), 1F1B's fill and "
        "drain at each other stage's own pace (the bubble (pp - 1) / m of their compute and "
        "2 pp - 3 sends); tied "
        "embeddings at pp > 1: the word embeddings' gradient summed between the first and "
        "last stage after the "
        "backward (Megatron's embedding group; InfiniBand where a pair crosses nodes); memory: "
        "the busiest stage's (its layers' states, the embedding on the first, the head and "
        "logits on the last; 1F1B: min(pp, micro-batches) micro-batches' layer inputs on the "
        f"first, one on the last; {gpum.BYTES_PER_PARAM_TRAIN} bytes a parameter and fp32 "
        f"gradient all-reduces, the configuration priced: {gpum.TRAIN_CONFIG}) within "
        f"{gpum.USABLE_MEMORY:g} of HBM, here {lay['bytes_per_gpu'] / 1e9:.4g} "
        f"GB; here dp {lay['dp']}, tp {lay['tp']}, pp {lay['pp']}: sends "
        f"{fig['stage_sends_s'] * 1e3:.4g} ms, bubble {fig['bubble_s'] * 1e3:.4g} ms, exposed "
        f"gradient all-reduce {fig['exposed_allreduce_s'] * 1e3:.4g} ms, embedding all-reduce "
        f"{fig['embedding_allreduce_s'] * 1e3:.4g} ms a step (wse_systems.gpu_layout)"
    )
