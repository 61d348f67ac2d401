"""The GPU training step (`train_step`): the fastest Megatron-LM layout of a job on a
number of GPUs, at an MFU and the kernel time and link latencies in force.

Contract: this module owns the layout search and the assumptions it reads (`TRAIN_MFU`, the
assumption `gpu.train_mfu`; `gpu.kernel_s`, `gpu.nvlink_latency_s`, `gpu.ib_latency_s`, each
noted as moving the step only where an end of its sweep moves it); one layout's step is
`wse_systems.gpu_schedule`'s (`priced_step`), the layouts that fit `wse_systems.gpu_layout`'s.

The step runs at `mfu` of peak (an input; default `TRAIN_MFU` 0.39, the assumption
`gpu.train_mfu`): model flops utilisation, the full recompute's extra forward (`TRAIN_CONFIG`)
inside it, not in the flops (hunt 80: the cited 52% of Narayanan et al. 2021 counts the
recompute, hardware flops, so 52% x 72/96 as MFU; 0.4 was priced). The layout (data x
tensor x pipeline parallel, tensor parallel inside a node) is the fastest of those that fit
memory and whose data-parallel ranks divide the global batch, as Megatron-LM requires
(`wse_systems.gpu_layout`: the memory accounting, the layouts, the rank order, hunt 77's
rule), 1F1B: each rank runs m = batch / (dp b) micro-batches of b sequences, b Megatron's
--micro-batch-size, the fastest that fits (`_fastest`; hunt 79: b was 1, so one-token
sequences paid a kernel floor each).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from wse_core.cost.assumptions import (
    assume,
    constant_of,
    register_system_constant,
    system_constant,
)
from wse_core.cost.mechanisms import Constant
from wse_core.cost.reads import read, reading, recording
from wse_core.errors import WseError

from wse_systems.gpu_kernels import KERNEL, KERNEL_KEY
from wse_systems.gpu_layout import TrainLayout, layouts, no_layout_error
from wse_systems.gpu_links import LATENCY_KEYS
from wse_systems.gpu_schedule import (
    TrainStep,
    layers_flops_per_token,
    priced_step,
    stage_flops_per_token,
)
from wse_systems.transformer import DecoderShape

if TYPE_CHECKING:
    from wse_systems.gpu import GpuSpec

__all__ = ["TRAIN_MFU", "TRAIN_MFU_CONSTANT", "TRAIN_MFU_KEY", "train_step"]

TRAIN_MFU = 0.39  # share of the tensor peak a step's model flops reach: `TRAIN_MFU_CONSTANT`
TRAIN_MFU_CONSTANT = Constant(
    units="of peak",
    mechanism="the share of the GPU's dense tensor peak a training step's model flops (6 N + "
    "PaLM's attention term: MFU, the full recompute's extra forward not counted) run at, the "
    "layout's own traffic and the recompute pass (`TRAIN_CONFIG`) inside it (`train_step`)",
    basis="inferred",
    source="Megatron-LM on A100 reached 52% of peak at 175B-1T (Narayanan et al. 2021) counting "
    "F = 96 B s l h^2 (1 + s/6h + V/16lh) flops, 4 passes a layer with its activation "
    "recomputation: hardware flops (HFU); the model flops priced here are 3 passes, 72 (1 + "
    "s/6h + V/12lh), so their MFU is 52% x 72/96 = 0.39 (hunt 80: 0.4 with 0.55 at the top "
    "was priced on the 6N basis, an HFU of 0.53 to 0.73 under full recompute). 0.3: a "
    "smaller model or a less tuned stack (assumed); 0.43: the best of the cited runs as MFU "
    "under full recompute, PaLM 540B's 57.8% HFU x 3/4 (Chowdhery et al. 2022) and "
    "Llama 3 405B's best 43% MFU on H100 (Llama 3 paper, table 4; 38-43%)",
    sweep=(0.3, 0.39, 0.43),
    limits=(0.01, 1.0),
)
# `--assume gpu.train_mfu=F` (hunt 70: the 0.4 set every GPU row of `weight-streaming` and was
# listed beside none; the serving fraction `FITTED_MFU` is fitted on decode rows, not this)
TRAIN_MFU_KEY = "gpu.train_mfu"
register_system_constant(TRAIN_MFU_KEY, TRAIN_MFU_CONSTANT, value=TRAIN_MFU)


def train_step(
    model: DecoderShape,
    gpu: GpuSpec,
    *,
    num_gpus: int,
    batch: int,
    seq_len: int,
    mfu: float | None = None,
) -> TrainStep:
    """One step of `batch` sequences of `seq_len` tokens on `num_gpus` GPUs, fastest layout
    (`gpu_layout.layouts`: dp divides `batch`), with its sends between stages, at `mfu` of
    peak (None: `TRAIN_MFU`, or the value `--assume gpu.train_mfu=F` gives, read
    as an assumption: `wse_core.cost.reads`), and at least its kernels and tensor-parallel
    all-reduces (`train_floor`, at the `gpu.kernel_s` in force: `gpu_kernels.KERNEL_KEY`;
    hunt 76: the floor was a caller's option, and `weight-streaming` priced none), its links
    at the latencies in force (`gpu.nvlink_latency_s`, `gpu.ib_latency_s`: `gpu_links.link`).
    Each assumption read is noted as moving the step only where an end of its sweep moves it.

    Raises GpuMemoryError (naming the smallest count that holds the model) when no layout of
    `num_gpus` fits, GpuLayoutError (a GpuMemoryError naming the nearest counts that have
    one) when none that fits has data-parallel ranks dividing `batch` (`no_layout_error`).
    """
    asked = mfu
    with recording(isolated=True):  # noted below: as moving where they move the step
        mfu = system_constant(TRAIN_MFU_KEY) if mfu is None else mfu
        kernel_s = system_constant(KERNEL_KEY)
    if num_gpus < 1 or batch < 1 or seq_len < 1 or not 0 < mfu <= 1:
        raise WseError(
            f"num_gpus, batch and seq_len must be >= 1 and 0 < mfu <= 1, got "
            f"{num_gpus}, {batch}, {seq_len}, {mfu}"
        )
    runs, job = list(layouts(model, gpu, num_gpus, seq_len, batch)), (seq_len, batch)

    def fastest(m: float, k: float) -> TrainStep | None:  # at MFU m and kernel_s k
        return _fastest(model, gpu, runs, job, (m, k))

    with recording() as links:  # the link latencies the layouts read (`gpu_links.link`)
        best = fastest(mfu, kernel_s)
    # hunt 76: each read as moving the step only where an end of its sweep moves the fastest
    # (the floor leaves a kernel-bound step to kernel_s, a compute-bound one to the MFU)
    if asked is None:
        sweep = TRAIN_MFU_CONSTANT.sweep
        read(TRAIN_MFU_KEY, mfu, _moves(lambda v: fastest(v, kernel_s), sweep, best))
    read(KERNEL_KEY, kernel_s, _moves(lambda v: fastest(mfu, v), KERNEL.sweep, best))
    for key in (k for k in LATENCY_KEYS if k in links.values and reading()):  # hunt jobs17 B
        at = functools.partial(_latency_at, key, lambda: fastest(mfu, kernel_s))
        read(key, max(links.values[key]), _moves(at, constant_of(key).sweep, best))
    if best is None:
        raise no_layout_error(model, gpu, num_gpus, seq_len=seq_len, batch=batch)
    return best


def _fastest(model, gpu, runs: list[TrainLayout], job: tuple[int, int], at: tuple):
    """The fastest of `runs` (`layouts`' order: each split's micro-batch sizes ascending),
    the first of equals (the smaller micro-batch). A split's larger sizes are skipped once
    the kernel floor no longer binds and a bound on them is no faster than the best: the
    floor only falls as b grows (fewer micro-batches of the same work), so past it the busy
    time is the compute, and with m' < m micro-batches a step is at least compute + the
    other stages' compute (pp - 1) / m + the tied all-reduce + the first stage's last
    gradient bucket's ring, which starts when 1F1B's last backward ends and nothing hides
    whatever b (sends and the rest of the exposed ring >= 0: the ring's window, the last
    micro-batch's backward, grows with b; review 82: at pp > 1 too, no send follows that
    backward); at pp 1 that is the compute + the last bucket, so a compute-bound split whose
    ring beyond its last bucket is hidden prices b = 1 alone."""
    best: TrainStep | None = None
    skip: tuple[int, int, int] | None = None
    seq_len = job[0]
    for x in runs:
        split = (x.dp, x.tp, x.pp)
        if split == skip:
            continue
        s = priced_step(model, gpu, x, job, at)
        if best is None or s.step_s < best.step_s:
            best = s
        if s.floor.floor_s <= s.compute_s:
            m = job[1] / (x.dp * x.micro_batch)
            others = layers_flops_per_token(model, seq_len, x.pp)
            others /= stage_flops_per_token(model, seq_len, x.pp)  # their compute per the last's
            bound = s.compute_s * (1 + others * (x.pp - 1) / m) + s.embedding_allreduce_s
            if bound + s.last_bucket_allreduce_s >= best.step_s:
                skip = split
    return best


def _latency_at(key: str, fastest: Callable[[], TrainStep | None], value: float):
    """`fastest()` with the link latency `key` at `value` (its reads left unrecorded)."""
    with assume(**{key: value}), recording(isolated=True):
        return fastest()


def _moves(fastest: Callable[[float], TrainStep | None], sweep, now: TrainStep | None) -> bool:
    """Whether an end of `sweep` moves the fastest step (`fastest(value)`) from `now`."""
    ends = (min(sweep), max(sweep))
    return now is not None and any(fastest(v).step_s != now.step_s for v in ends)
