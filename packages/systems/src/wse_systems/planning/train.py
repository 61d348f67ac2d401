"""`wse plan train`'s model: wafers against a GPU cluster — time, energy and cost of training
a model to a token budget — and what `wse plan infer` (`wse_systems.planning.infer`) shares
with it.

Contract. The CLI resolves `--model` (`wse_cli.model_choice.resolve_model`: a `wse_models`
preset, a shipped trainer config, a params.yaml, an HF directory or its config.json) into a
`ModelChoice` (`wse_systems.planning.choice`).
`plan_train(...)` returns a `Plan`: one `SideResult` for the wafers and one for the GPUs
(time, energy, cost, the figures per step), the GPU count that would match the wafers'
time (`match_gpus`: the smallest count with a layout, up to a node or whole nodes, that is
as fast, whatever count was priced), and the assumptions in words. The GPU side lives in
`wse_systems.planning.train_gpus` (the count priced: the one asked, else a default that has a
layout). Both sides run the same numerics: the wafer's precision
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
from typing import Any, NamedTuple

from wse_core import WaferSpec
from wse_core.cost.assumptions import system_constant
from wse_core.cost.reads import recording
from wse_core.divisors import divisors

from wse_systems import economics as eco
from wse_systems import gpu as gpum
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
from wse_systems.planning.train_gpus import GPU_PRECISION, GpuJob, gpu_at, match_gpus, price_gpus
from wse_systems.planning.train_step import check_micro_fits, default_batch, wafer_train_step
from wse_systems.training.placement import PRECISION_WORDS
from wse_systems.transformer import num_params

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

# fp32 training's state a parameter: fp32 weight, gradient, Adam m and v (no separate master),
# four fp32 words (review 80: spelled 4 x GRAD_BYTES, the all-reduce's bytes a value)
_FP32_STATE_BYTES = 4 * gpum.FP32_BYTES


def _peak_source(gpu_precision: str) -> str:
    """Where the GPU precision that runs the wafer's arithmetic (`GPU_PRECISION`) takes its
    peak, and (fp32) what of its memory and all-reduce is priced: every byte count read
    from `gpu_layout`'s constants (review 79: "16 bytes/param" stood beside a priced 18)."""
    if gpu_precision == "bf16":
        return "dense bf16 tensor cores (NVIDIA datasheet), fp32 masters"
    bpp, grad, word = gpum.BYTES_PER_PARAM_TRAIN, gpum.GRAD_BYTES, gpum.FP32_BYTES
    own = "fp32's own" if grad == word else f"fp32's is {word}"
    return (
        'fp32 on the CUDA cores (NVIDIA datasheet "FP32"; wse_models multiplies fp32 at '
        "Precision.HIGHEST, so not on TF32 tensor cores, which round the operands); memory "
        f"and gradient all-reduce as bf16's: {bpp} bytes a parameter priced where fp32 "
        f"training needs {_FP32_STATE_BYTES} (weight, gradient, Adam m and v, "
        f"{word} each), so {bpp - _FP32_STATE_BYTES} more than it holds; gradients "
        f"all-reduced at {grad} bytes a value, {own}; fp32's activations and "
        f"stage sends priced at bf16's {gpum.WEIGHT_BYTES} bytes a value, half theirs"
    )


def _numerics(cfg: Any, precision: str, gpu_precision: str) -> str:
    """The note that names both sides' numerics and where the wafer's come from."""
    pd = str(cfg.param_dtype)
    masters = "" if pd == "float32" else (
        f"; param_dtype {pd} changes no arithmetic: MemoryX keeps fp32 masters")  # fmt: skip
    return (f"numerics: wafer {precision} ({PRECISION_WORDS[precision]}; model.dtype "
            f"{cfg.dtype}{masters}); GPU {gpu_precision}, the same arithmetic")  # fmt: skip


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
    by_distance = sorted(divisors(per_system), key=lambda d: abs(math.log(d / micro)))
    near = sorted(by_distance[:3], reverse=True)
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
        f"{g_run.peak_flops / 1e12:g} TFLOP/s {g_precision}: {_peak_source(g_precision)}; "
        f"PaLM flop accounting 6N + 12LHQT (model flops: full recompute's extra forward is "
        f"inside the MFU); {gpum.BYTES_PER_PARAM_TRAIN} bytes a parameter "
        "+ activations with full recompute",
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
        "default_batch), each at its fastest micro-batch's tokens/s (what the micro-batch "
        "hint offers), kept at a --micro-batch that runs it",
        "wafer scaling against one system: weak = the same batch per system (the global "
        "batch grows with N), strong = the same global batch on one system; speedup = "
        "tokens/s(N) / tokens/s(1), one system at the same micro-batch setting (weak: the "
        "scale-out alone, 1 at one system) or at its fastest micro-batch (strong, at every N: "
        "below 1 at one system where the micro-batch priced is slower, the saving the "
        "micro-batch hint gives); every system "
        "receives every weight and sends every gradient each micro-batch (these do not "
        "shrink with N), SwarmX's tree adds system_latency_s per level to every streamed "
        "item (wse_systems.training.scaling)",
        f"steps: {steps:,} of {global_batch:,} x {seq:,} tokens = "
        f"{steps * global_batch * seq:,} tokens trained (--tokens {tokens:,.0f} rounded up to "
        "whole steps); time, energy and cost are for those steps, energy per token per "
        "trained token",
        UNPRICED,
    ]
    gp = price_gpus(shape, (g_run, g_precision), GpuJob(steps, global_batch, seq, n, asked),
                    asked=m_asked, rates=rates, target_s=w_side.time_s)  # fmt: skip
    notes[-1:-1] = gp.notes
    if gp.side is not None:
        inputs["gpus"] = gp.gpus
    return Plan("train", choice.name, num_params(shape), inputs, w_side, gp.side, gp.match, notes)
