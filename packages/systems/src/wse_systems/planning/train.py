"""`wse plan train`'s model: wafers against a GPU cluster — time, energy and cost of training
a model to a token budget — and what `wse plan infer` (`wse_systems.planning.infer`) shares
with it.

Contract. The CLI resolves `--model` (`wse_cli.model_choice.resolve_model`: a `wse_models`
preset, a shipped trainer config, a params.yaml, an HF directory or its config.json) into a
`ModelChoice` (`wse_systems.planning.choice`).
`plan_train(...)` returns a `Plan`: one `SideResult` for the wafers and one for the GPUs
(time, energy, cost, the figures per step), the GPU count that would match the wafers'
time (`match_gpus`: never above a count the plan priced that is already as fast), and the
assumptions in words. Both sides run the same numerics: the wafer's precision
(`wse_systems.training.placement.precision_of`, "precision" in the wafer's figures) sets the
GPU peak the GPU side runs at (`gpu_at`: fp32 on the CUDA cores, mixed at bf16). Nothing
here compiles anything. Shared with serving (`wse_systems.planning.sides`, imported from
there by both): `SideResult`, the input checks (`check_positive`, `check_rates`), the rates and
`power_notes`. The job is a whole number of steps: `--tokens` rounded up to whole global
batches (`steps`, `tokens_trained` in the inputs; each side's time, energy and cost are for
those steps, its energy per token per trained token).

Wafer time comes from the training predictor through ONE adapter
(`wse_systems.planning.train_step.wafer_train_step`, with the default batch it chooses), so a
rewrite of it is repointed there only. GPU time, energy and cost come from `wse_systems.gpu`
and `wse_systems.economics`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

from wse_core import WaferSpec
from wse_core.cost.assumptions import system_constant
from wse_core.cost.reads import recording

from wse_systems import economics as eco
from wse_systems import gpu as gpum
from wse_systems import gpu_kernels as gk
from wse_systems.planning.choice import ModelChoice, PlanError, check_context
from wse_systems.planning.sides import (
    Plan,
    SideResult,
    check_positive,
    check_rates,
    gpu_rates,
    grid_note,
    power_notes,
    wafer_rates,
)
from wse_systems.planning.train_step import check_micro_fits, default_batch, wafer_train_step
from wse_systems.training.placement import PRECISION_WORDS
from wse_systems.transformer import DecoderShape, num_params

__all__ = [
    "PlanError",
    "ModelChoice",
    "SideResult",
    "Plan",
    "wafer_train_step",
    "default_batch",
    "TrainBatch",
    "TrainGpus",
    "GPU_PRECISION",
    "gpu_at",
    "plan_train",
    "match_gpus",
    "UNPRICED",
]  # fmt: skip (the plans' shared parts live in `planning.sides`)

# hunt 71: left out of a job's price, said nowhere; nothing sourced prices a save
UNPRICED = ("not priced: checkpoint saves (MemoryX's masters and optimizer state written out; "
            "no sourced write rate) and evaluations (a params file's eval passes; `wse train` "
            "prices one); --tokens is priced as training steps only")  # fmt: skip

# The wafer's precision -> the GPU precision that runs the same arithmetic; its peak's source
GPU_PRECISION = {"fp32": "fp32", "mixed": "bf16", "bf16": "bf16"}
_PEAK_SOURCE = {
    "fp32": 'fp32 on the CUDA cores (NVIDIA datasheet "FP32"; wse_models multiplies fp32 '
    "at Precision.HIGHEST, so not on TF32 tensor cores, which round the operands); the "
    "memory and gradient all-reduce as bf16's (16 bytes/param holds in fp32 too: 4 + 4 + "
    "8; fp32's 2x activation and all-reduce bytes are not priced)",
    "bf16": "dense bf16 tensor cores (NVIDIA datasheet), fp32 masters",
}


def gpu_at(g: gpum.GpuSpec, precision: str) -> tuple[gpum.GpuSpec, str]:
    """(`g` with `peak_flops` the peak that runs the wafer's `precision`, that GPU
    precision's name): the GPU step model (`wse_systems.gpu.train_step`) runs at mfu of
    `peak_flops`. Hunt 68: an fp32 wafer job was compared with a bf16 GPU job."""
    name = GPU_PRECISION[precision]
    peak = g.peak_fp32_flops if name == "fp32" else g.peak_flops
    return dataclasses.replace(g, peak_flops=peak), name


def _numerics(cfg: Any, precision: str, gpu_precision: str) -> str:
    """The note that names both sides' numerics and where the wafer's come from."""
    pd = str(cfg.param_dtype)
    masters = "" if pd == "float32" else (
        f"; param_dtype {pd} changes no arithmetic: MemoryX keeps fp32 masters")  # fmt: skip
    return (f"numerics: wafer {precision} ({PRECISION_WORDS[precision]}; model.dtype "
            f"{cfg.dtype}{masters}); GPU {gpu_precision}, the same arithmetic")  # fmt: skip


def _gpu_train_time(shape, g, *, gpus, batch, seq, steps, mfu) -> tuple[float, gpum.TrainStep]:
    """`steps` GPU steps (`mfu` None: `gpu.train_mfu`, read by `gpum.train_step`), at least
    their kernels (`gpum.train_floor`, at `gpu.kernel_s`)."""
    s = gpum.train_step(shape, g, num_gpus=gpus, batch=batch, seq_len=seq, mfu=mfu)
    return steps * s.step_s, s


def _unless_oom(fn: Callable[[int], float]) -> Callable[[int], float | None]:
    """`fn(gpus)`, or None where that many GPUs cannot hold the model (`GpuMemoryError`)."""

    def time_on(k: int) -> float | None:
        try:
            return fn(k)
        except gpum.GpuMemoryError:
            return None

    return time_on


def match_gpus(
    fn: Callable[[int], float | None], target_s: float, *, start: int, limit: int, node: int,
    priced: int | None = None,
) -> int | None:  # fmt: skip
    """Smallest GPU count with fn(count) <= target_s (None where none up to `limit`): every
    count from `start` (the fewest that hold the model) up to a node, then whole nodes
    (doubling, then bisection between the last miss and the first hit). A count already
    priced and fast enough (`priced`) bounds the search, so the match is never above it
    (time is not monotone in the count: layouts change with it)."""

    def ok(m: int) -> bool:
        t = fn(m)
        return t is not None and t <= target_s

    if priced is not None and ok(priced):
        limit = min(limit, priced)
    for m in range(start, min(node, limit + 1)):
        if ok(m):
            return m
    miss, n, top = 0, max(1, math.ceil(start / node)), limit // node
    while n <= top and not ok(n * node):
        miss, n = n, (2 * n if 2 * n <= top or n == top else top)
    if n > top:
        return priced if priced is not None and priced <= limit and ok(priced) else None
    while n - miss > 1:  # ok(n nodes), not ok(miss nodes)
        mid = (miss + n) // 2
        miss, n = (miss, mid) if ok(mid * node) else (mid, n)
    return n * node


def _wafer_train_side(
    spec: WaferSpec, n: int, step_s: float, steps: int, global_batch: int, seq: int,
    rates: dict[str, Any], scale: dict[str, Any],
) -> SideResult:  # fmt: skip
    """`n` wafer systems training for `steps` steps of `step_s` seconds (`scale`: tokens/s,
    efficiency against one system and what bounds it)."""
    peak, _ = eco.system_power_w(spec)
    w_time = steps * step_s
    w_energy = eco.energy_j(w_time, n * peak)
    return SideResult(
        eco.system_of(spec).system, n, w_time, w_energy,
        eco.bill(system_hours=n * w_time / 3600, energy_j=w_energy,
                 rates=wafer_rates(spec, rates)),
        {"steps": steps, "tokens_trained": steps * global_batch * seq, "step_s": step_s,
         "energy_j_per_step": eco.per(w_energy, steps),
         "energy_j_per_token": eco.per(w_energy, steps * global_batch * seq), **scale},
    )  # fmt: skip


def _gpu_train_side(
    shape: DecoderShape, g: gpum.GpuSpec, m: int, job: tuple[int, int, int], mfu: float | None,
    rates: dict[str, Any], precision: str,
) -> SideResult:  # fmt: skip
    """`m` GPUs training the same `job` (steps, global batch, sequence), in `precision`
    (`g` as `gpu_at` gives it: its peak_flops that precision's)."""
    steps, global_batch, seq = job
    g_time, g_step = _gpu_train_time(
        shape, g, gpus=m, batch=global_batch, seq=seq, steps=steps, mfu=mfu
    )
    gpeak, _ = g.power_w_per_gpu()
    g_energy = eco.energy_j(g_time, m * gpeak)
    return SideResult(
        g.name, m, g_time, g_energy,
        eco.bill(system_hours=m * g_time / 3600, energy_j=g_energy, rates=gpu_rates(g, rates)),
        {"steps": steps, "tokens_trained": steps * global_batch * seq,
         "step_s": g_step.step_s, "precision": precision,
         "peak_flops": g.peak_flops, "layout": g_step.layout.to_dict(),
         "exposed_allreduce_s": g_step.exposed_allreduce_s, "bubble_s": g_step.bubble_s,
         "stage_sends_s": g_step.stage_sends_s,
         "compute_s": g_step.compute_s, "step_bound": g_step.bound,
         "floor": {**dataclasses.asdict(g_step.floor), "floor_s": g_step.floor.floor_s},
         "energy_j_per_step": eco.per(g_energy, steps),
         "energy_j_per_token": eco.per(g_energy, steps * global_batch * seq)},
    )  # fmt: skip


def _floor_note(fig: dict[str, Any]) -> str:
    """The GPU step's floor (`wse_systems.gpu.train_floor`) in words: its kernel counts and
    their sources, the assumed kernel cost's range and the key that moves it."""
    f, lay = fig["floor"], fig["layout"]
    tp = f" + {f['tp_allreduce_s'] * 1e6:.4g} us of tp all-reduces" if lay["tp"] > 1 else ""
    return (
        f"GPU step floor: a step is at least its kernels, {gk.KERNELS_PER_LAYER} a layer "
        f"(wse_systems.gpu_kernels.KERNELS_PER_LAYER, the serving forward's) x "
        f"{gpum.TRAIN_PASSES} passes a micro-batch of one sequence (forward, full recompute, "
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


def _layout_note(fig: dict[str, Any]) -> str:
    """The GPU layout's rule and its sends between pipeline stages (`wse_systems.gpu_layout`,
    hunt 77) in words, with this plan's figures."""
    lay = fig["layout"]
    return (
        "GPU layout: the fastest data x tensor x pipeline split whose data-parallel ranks "
        "divide the global batch (Megatron-LM refuses a global batch not divisible by "
        "micro-batch x data-parallel size; micro-batches of one sequence), so every rank runs "
        "the same micro-batches; at pp > 1 each micro-batch sends its activations to the next "
        "stage and its gradients back (seq_len x d_model bf16 each way, the serving model's "
        "hop: over one GPU's InfiniBand link past one node, NVLink inside, + latency), the "
        "bubble (pp - 1) / m of compute and sends; here dp "
        f"{lay['dp']}, tp {lay['tp']}, pp {lay['pp']}: sends {fig['stage_sends_s'] * 1e3:.4g} "
        f"ms, bubble {fig['bubble_s'] * 1e3:.4g} ms, exposed gradient all-reduce "
        f"{fig['exposed_allreduce_s'] * 1e3:.4g} ms a step (wse_systems.gpu_layout)"
    )


def _split(choice: ModelChoice, systems: int) -> int | None:
    """A params file's global batch (`batch_size`) over the planned systems (per system)."""
    if choice.global_batch is None:
        return choice.batch_per_system
    if choice.global_batch % systems:
        raise PlanError(
            f"the params file's batch_size of {choice.global_batch} is global and does not "
            f"split over {systems} systems; give --batch (sequences per system)"
        )
    return choice.global_batch // systems


def _micro_batch(choice: ModelChoice, asked: int | str | None, per_system: int | None,
                 why: str) -> int | str:  # fmt: skip
    """The micro-batch priced: `asked` (--micro-batch), else the params file's, else "auto";
    an integer that does not divide `per_system` (`why`: where that batch comes from) is
    refused naming its source and the divisors nearest it (hunt 76: the file's was named
    "micro-batch 4", as if asked)."""
    micro = asked or choice.micro_batch or "auto"  # unset: auto, as `wse train` runs
    if not isinstance(micro, int) or per_system is None or per_system % micro == 0:
        return micro
    source = _source(choice, asked, micro)
    small = [d for d in range(1, math.isqrt(per_system) + 1) if per_system % d == 0]
    divisors = {*small, *(per_system // d for d in small)}
    near = sorted(sorted(divisors, key=lambda d: abs(math.log(d / micro)))[:3], reverse=True)
    raise PlanError(
        f"{source} does not divide the per-system batch of {per_system} ({why}); give "
        f"--micro-batch {', '.join(map(str, near))} or auto"
    )


def _source(choice: ModelChoice, asked: int | str | None, micro: int | str) -> str:
    """Where the micro-batch priced comes from, in the words an error names it by."""
    return (f"--micro-batch {micro}" if asked else
            f"train_input.micro_batch_size={micro} in the params file {choice.name}")  # fmt: skip


class TrainGpus(NamedTuple):
    """The GPU cluster the wafers are compared with: `gpus` GPUs of kind `gpu` (None: the
    fewest whole nodes that hold the model, at least 8 a wafer system) at `mfu` of their
    peak in the wafer's numerics (`gpu_at`; None: the assumption `gpu.train_mfu`, read as
    priced; hunt 71: a literal 0.4 here was not, and `--assume` could not move it)."""

    gpu: str = "h100"
    gpus: int | None = None
    mfu: float | None = None


class TrainBatch(NamedTuple):
    """Each system's batch: `batch_per_system` sequences of `seq_len` tokens as micro-batches
    of `micro_batch` (an int, "auto", "explore" or "none"); None: the model choice's (a
    params file's), else `default_batch`'s, "auto" (`wse train`'s unset micro_batch_size;
    hunt 72: "explore" was priced, 11.7% faster than the run) and min(the model's context,
    8192)."""

    batch_per_system: int | None = None
    micro_batch: int | str | None = None
    seq_len: int | None = None


def plan_train(
    choice: ModelChoice,
    *,
    tokens: float,
    spec: WaferSpec,
    systems: int | None = None,
    gpus: TrainGpus = TrainGpus(),
    batch: TrainBatch = TrainBatch(),
    rates: dict[str, Any] | None = None,
) -> Plan:
    """Train `choice` on `tokens` tokens: N wafer systems against M GPUs, same global batch."""
    gpu, m_asked, mfu = gpus
    batch_per_system, micro_batch, seq_len = batch
    check_positive(tokens=tokens, systems=systems, gpus=m_asked, mfu=mfu, batch=batch_per_system)
    rates = rates or {}
    check_rates(rates)
    cfg, g, wafer = choice.config, gpum.gpu_spec(gpu), spec.name
    eco.system_power_w(spec)  # a wafer of no system fails before any work
    grid = grid_note(spec)  # and one that does not repair
    n = systems or choice.num_csx or 1
    seq = seq_len or choice.seq_len or min(cfg.max_seq_len, 8192)
    check_context(cfg, f"--seq-len {seq}" if seq_len else f"a sequence of {seq} tokens", seq)
    per_system = batch_per_system or _split(choice, n)
    over = f"--systems {n}" if systems else f"runconfig.num_csx={n}"
    why = (f"--batch {per_system}" if batch_per_system else
           f"train_input.batch_size={choice.global_batch} over {over}")  # fmt: skip
    micro = _micro_batch(choice, micro_batch, per_system, why)
    plan = choice.plan_settings()
    check_micro_fits(cfg, spec, micro=micro, batch=per_system, seq_len=seq, stride=plan["stride"],
                     chunks=plan["chunks"], source=_source(choice, micro_batch, micro))  # fmt: skip
    with recording() as w_reads:  # per_system None: the smallest batch that keeps it fed
        step_s, per_system, scale = wafer_train_step(cfg, spec, num_csx=n, batch=per_system,
            seq_len=seq, micro_batch=micro, **plan)  # fmt: skip
    global_batch = n * per_system
    steps = math.ceil(tokens / (global_batch * seq))  # whole steps: --tokens rounded up
    w_side = _wafer_train_side(spec, n, step_s, steps, global_batch, seq, rates, scale)
    w_side = dataclasses.replace(w_side, reads=w_reads)
    asked, mfu = mfu, system_constant(gpum.TRAIN_MFU_KEY) if mfu is None else mfu
    shape, precision = cfg, scale["precision"]
    g_run, g_precision = gpu_at(g, precision)  # the same arithmetic on the GPUs
    inputs = {"tokens": tokens, "systems": n, "wafer": wafer, "gpu": gpu, "mfu": mfu,
              "batch_per_system": per_system, "global_batch": global_batch, "seq_len": seq,
              "micro_batch_size": micro, "steps": steps,
              "tokens_trained": steps * global_batch * seq,
              "wafer_rates": wafer_rates(spec, rates).to_dict(),
              "gpu_rates": gpu_rates(g, rates).to_dict()}  # fmt: skip
    notes = power_notes(g, spec) + [
        grid,
        *choice.file_notes(spec.name),
        _numerics(cfg, precision, g_precision),
        f"GPU training at MFU {mfu:g} ({'--mfu' if asked else 'gpu.train_mfu'}) of "
        f"{g_run.peak_flops / 1e12:g} TFLOP/s {g_precision}: {_PEAK_SOURCE[g_precision]}; "
        "PaLM flop accounting 6N + 12LHQT; 16 bytes/param + activations with full recompute",
        "wafer time: wse_trainer's weight-streaming prediction (each layer's products priced "
        "by mechanism on the wafer, weights streamed in and gradients out, overlapped); "
        "same global batch and sequence on both systems",
        "batches: --batch and batch_per_system are per system; params.yaml's batch_size is "
        "global (split over num_csx); each system runs micro-batches of micro_batch "
        "(micro_batch_size: auto = the largest the SRAM ledger fits, wse train's when unset, "
        "a stated rule where ModelZoo's auto seeks a reasonable size; explore = the fastest "
        "predicted divisor; the activation stride, unless the file sets one, the fastest that "
        "fits: wse_systems.training.stride) and MemoryX accumulates their gradients; "
        "with no batch given, the smallest whose streams add <= 1% of the step, unless a power "
        "of two within a factor 2 of it runs > 1% more tokens/s (then the fastest of those: "
        "default_batch)",
        "wafer scaling against one system: weak = the same batch per system (the global "
        "batch grows with N), strong = the same global batch on one system; speedup = "
        "tokens/s(N) / tokens/s(1), one system at its fastest micro-batch; every system "
        "receives every weight and sends every gradient each micro-batch (these do not "
        "shrink with N), SwarmX's tree adds system_latency_s per level to every streamed "
        "item (wse_systems.training.scaling)",
        f"steps: {steps:,} of {global_batch:,} x {seq:,} tokens = "
        f"{steps * global_batch * seq:,} tokens trained (--tokens {tokens:,.0f} rounded up to "
        "whole steps); time, energy and cost are for those steps, energy per token per "
        "trained token",
        UNPRICED,
    ]
    try:
        start = gpum.min_train_gpus(shape, g, seq_len=seq)
    except gpum.GpuMemoryError as e:  # the wafers alone
        why = "tensor parallel <= a node, pipeline dividing the layers"
        notes.append(f"GPUs: {e} ({why}): no GPU side")
        return Plan("train", choice.name, num_params(shape), inputs, w_side, None, None, notes)
    m = m_asked or max(8 * n, g.gpus_per_node * math.ceil(start / g.gpus_per_node))
    inputs["gpus"] = m
    with recording() as g_reads:  # `asked` None: gpu.train_mfu is read where it prices
        g_side = _gpu_train_side(shape, g_run, m, (steps, global_batch, seq), asked, rates,
                                 g_precision)  # fmt: skip
    g_side = dataclasses.replace(g_side, reads=g_reads)
    notes[-1:-1] = [_floor_note(g_side.figures), _layout_note(g_side.figures)]
    time_on = _unless_oom(lambda k: _gpu_train_time(
        shape, g_run, gpus=k, batch=global_batch, seq=seq, steps=steps, mfu=asked)[0])  # fmt: skip
    limit = global_batch * g.gpus_per_node * cfg.n_layers
    match = match_gpus(time_on, w_side.time_s, start=start, limit=limit, node=g.gpus_per_node,
                       priced=m)  # fmt: skip
    return Plan("train", choice.name, num_params(shape), inputs, w_side, g_side, match, notes)
