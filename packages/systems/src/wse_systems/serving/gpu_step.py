"""One forward pass of a GPU replica priced: `step`, the one pricer of the GPU serving model
(`wse_systems.serving.gpus` schedules whole requests with it). The GPUs' figures are
`wse_systems.gpu`'s (datasheets); the achieved fractions of their peaks (`GpuFractions`) are
inputs, fitted on TensorRT-LLM's H100 rows (`wse_systems.serving.trtllm_h100`, experiment
`trtllm-h100`).

`step(model, gpu, layout, StepBatch(...))`: one forward pass through a replica over B users
each adding t tokens (1; gamma + 1 when verifying drafts) and c prompt tokens of prefill
chunks, in precision x (weights w_x and KV k_x bytes a value): pp stages of L / pp layers on
tp GPUs each inside a node, one after another, so the pass reads each weight once on one
stage's tp GPUs (pp x a stage's 1 / pp of the bytes and flops) plus the pp - 1 hops between
stages. `wse_systems.serving.gpus` keeps pp such passes (micro-batches) in flight, one on
each stage (assumed: stages of equal work; the sampled token's return to the first stage is
left out). Each kernel class is its own roofline and the classes add (hunt jobs17 A: one
max(memory, compute) over the whole pass hid the attention's KV read under the GEMMs'
products, 70B tp 8 FP8 at 128/4096 14.5 ms of KV read under 25.4 ms of GEMMs, where vLLM
and TensorRT-LLM launch the GEMMs and the attention kernel one after another on one stream):
the GEMMs (QKV, output, gate/up, down and the head: each reads its weights while it
multiplies, so within the class reads and products overlap) and the attention kernel
(FlashAttention / FlashInfer / XQA: reads every user's cached KV and writes the new tokens',
RoPE fused in, while it computes QK^T and PV). Overlapped: a kernel's own reads and
products; nothing across kernels (the norms, activation and residual adds, elementwise on
B x d activations, priced by their launches alone, `gpu_kernels`); the all-reduces and the
hops run between kernels, after them:

    gemm      = max(w_x N_matmul / tp / (hbm x HBM),
                    (B t 2 N_matmul + c 2 (N_matmul - V_h d) + r 2 V_h d) / tp / (mfu x peak_x))
    attention = max(k_x V (B kv_tokens + B t + c) / tp / (hbm x HBM),
                    (B t 4 L HQ kv_tokens + c 2 L HQ P) / tp / (mfu x peak_x))
    step      = gemm + attention + (K L + K0) kernel_s
                + 2 L tp_allreduce((B t + c) d 2 B over tp GPUs on NVLink)
                + (pp - 1) stage_hop((B t + c) d 2 B, 1/tp on each GPU's link)

The all-reduce is the one vLLM (v0.11.0 and current) runs for a tensor-parallel group
(`wse_systems.gpu_links.tp_allreduce_s`: on H100 its custom one-shot kernel below 256 KiB at
8 GPUs, one- or two-shot to 8 MiB at 2 and 4, then torch symmetric memory (multimem at 4
to 8 GPUs, two-shot at 2) to 64 MiB (32 at 4), NCCL's ring past it; review 82: vLLM <= 0.10's
rule, the custom kernel to 8 MiB then NCCL, was priced; hunt jobs17 B: the ring's 2 (p - 1)
latency steps were priced for every message, 14 us of the 8B's decode all-reduce where the
one-shot kernel takes one); the hop is training's (`gpu_links.stage_hop_s`: 1/tp of the
activations over each GPU's own link, InfiniBand between nodes; hunt jobs17 F: the whole
activation over one GPU's link was priced). Their latencies are assumptions
(`--assume gpu.nvlink_latency_s=S`, `gpu.ib_latency_s=S`: `gpu_links`), noted as moving a
step wherever it prices an all-reduce (tp > 1) or a hop (pp > 1).

(N_matmul the weights every token multiplies, V the KV values a token adds, L layers, HQ
heads x head dim, kv_tokens = `Workload.kv_tokens` cached tokens each decode token reads; a
prompt token attends to P / 2 earlier tokens on average; the chunks' reads of their own
prompt's earlier KV, under P / 2 tokens a step, are left out.) The head (V_h d, the
vocabulary projection, in N_matmul) runs on every decode token but on r rows of the prompt
chunks only: vLLM computes logits at `logits_indices`, each request's last scheduled token
(vllm-project/vllm, vllm/v1/worker/gpu_model_runner.py: `sample_hidden_states =
hidden_states[logits_indices]; logits = self.model.compute_logits(sample_hidden_states)`;
a partial prefill's sample is discarded), so one row a chunk, the last chunk's the first
token (`StepBatch.logit_rows`; left out, c / P: the prompts a spread of c prompt tokens ends
on average, a chunk that ends none adding one row more, a 1 / c share, left out; hunt 79:
every prompt token's logits were priced, 19% of a Llama 3.2 1B prompt's flops, 6.5% of
8B's). Every step computes some row's logits, so the head's weights are read in each. A decode
token is `step` with c = 0, a prompt alone is `step` with B = 0.

The kernel cost is an assumption: `--assume gpu.kernel_s=S` (`KERNEL_KEY`, registered with
`wse_core.cost.assumptions` by `wse_systems.gpu_kernels`, which holds the kernel counts and
cost this module re-exports) moves every GPU figure of the command. `kernel_s_in_force()`
reads it; a `GpuFractions` built without a `kernel_s` takes it, as do `floor_s`, `floor_note`
and `step` without one. The fitted fractions stay as fitted at `KERNEL_S` (experiment
`trtllm-h100` shows the fit at each value of the sweep).

Memory: w_x n_params weight bytes plus B x `held_tokens` of KV cache (k_x bytes a value; the
draft's too) within `USABLE_MEMORY` of each GPU's HBM (`max_batch`); `min_gpus` is the closed
form of the fewest GPUs that hold the model and one user, `gpu_counts` the counts whose
replicas vLLM's rule allows (`wse_systems.serving.gpu_replicas`, with `tp_ok`,
`replica_sizes` and `tp_note`, re-exported here), which a refusal names (`memory_error`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from wse_core.cost.reads import read

from wse_systems import gpu_links
from wse_systems.gpu import USABLE_MEMORY, GpuMemoryError, GpuSpec
from wse_systems.gpu_kernels import (
    KERNEL,
    KERNEL_KEY,
    KERNEL_S,
    KERNELS_PER_LAYER,
    KERNELS_PER_STEP,
    kernel_s_in_force,
)
from wse_systems.serving.frontier import ServingError
from wse_systems.serving.gpu_replicas import (
    gpu_counts,
    replica_sizes,
    tp_note,
    tp_ok,
    tp_rule,
)
from wse_systems.transformer import (
    DecoderShape,
    attn_dim,
    kv_values_per_token,
    matmul_params,
    num_params,
)

__all__ = [
    "FITTED_MFU",
    "FITTED_HBM_FRACTION",
    "ACT_BYTES",
    "KERNELS_PER_LAYER",
    "KERNELS_PER_STEP",
    "KERNEL_S",
    "KERNEL",
    "KERNEL_KEY",
    "kernel_s_in_force",
    "GpuPrecision",
    "PRECISIONS",
    "gpu_precision",
    "GpuLayout",
    "GpuFractions",
    "StepBatch",
    "GpuStep",
    "layout_for",
    "memory_error",
    "replica_sizes",
    "max_batch",
    "min_gpus",
    "tp_ok",
    "tp_note",
    "tp_rule",
    "gpu_counts",
    "floor_s",
    "floor_note",
    "step",
]

# Fitted on TensorRT-LLM v0.19.0's 46 H100 FP8 rows with input <= output length
# (`wse_systems.serving.trtllm_h100.fit()`, experiment `trtllm-h100`) at the assumed kernel
# cost `KERNEL_S` and NVLink latency (`gpu_links.NVLINK_LATENCY_S`). Review 82: the
# all-reduce is vLLM v0.11.0's and current (symmetric memory past the custom kernel's lowered caps,
# `gpu_links.tp_allreduce_algorithm`); the rows' decode messages of 256 KiB to 64 MiB at tp 4
# and 8, 8 to 64 MiB at tp 2, were NCCL's ring or the two-shot kernel: the fit moved from
# 0.3370 / 0.8385 (rms 0.1759, checks 0.2111) to 0.3304 / 0.8421 (rms 0.1838, checks 0.2218;
# 0.2223 at the kept 0.330 / 0.842). Hunt jobs17: the GEMMs and the attention priced as
# kernel classes that add (A), the decode all-reduce as the one-/two-shot kernel (B): the
# fit moved from 0.2712 / 0.7265 (kept 0.273 / 0.727; rms log ratio 0.2433 on the fitted
# rows, 0.3130 on the 17 checks at the kept values) to 0.3370 / 0.8385 (rms 0.1759, checks
# 0.2111; A alone 0.3390 / 0.8380, rms 0.1713 / 0.2082).
# Earlier: hunt 79 (the head once a prompt chunk) 0.2712 / 0.7265, kept 0.273 / 0.727;
# hunt 69 (the other users' prompts spread over a request's rounds) 0.2734 / 0.7269; hunt
# 67 (the step's kernels) 0.274 / 0.727 from 0.270 / 0.715; hunt 66: 0.269 / 0.713.
FITTED_MFU = 0.330  # share of the tensor peak a step's products reach
FITTED_HBM_FRACTION = 0.842  # share of HBM bandwidth a step's reads and writes reach
ACT_BYTES = 2  # activations between GPUs travel in 16 bits in either precision
# The step's kernels, their cost and `gpu.kernel_s` are `wse_systems.gpu_kernels`' (imported
# above, re-exported here), which the training step's floor reads too (hunt 76)


@dataclasses.dataclass(frozen=True)
class GpuPrecision:
    """Bytes a weight and a KV value take, and which tensor peak the products run at."""

    name: str
    weight_bytes: float
    kv_bytes: float

    def peak_flops(self, gpu: GpuSpec) -> float:
        """The GPU's dense tensor peak in this precision (datasheet; `wse_systems.gpu`)."""
        peak = gpu.peak_fp8_flops if self.name == "fp8" else gpu.peak_flops
        if not peak:
            raise ServingError(f"{gpu.name} has no {self.name} tensor cores; use bf16")
        return peak


# bf16: weights and KV in 16 bits; fp8: ModelOpt's FP8 weights and an FP8 KV cache
PRECISIONS: Mapping[str, GpuPrecision] = MappingProxyType(
    {"bf16": GpuPrecision("bf16", 2, 2), "fp8": GpuPrecision("fp8", 1, 1)}
)


def gpu_precision(name: str | GpuPrecision) -> GpuPrecision:
    """`PRECISIONS[name]` (a GpuPrecision passes through); unknown is a ServingError."""
    if isinstance(name, GpuPrecision):
        return name
    if name not in PRECISIONS:
        raise ServingError(f"unknown GPU precision {name!r}; use one of {list(PRECISIONS)}")
    return PRECISIONS[name]


@dataclasses.dataclass(frozen=True)
class GpuLayout:
    """One replica: tp GPUs per stage, pp stages."""

    tp: int
    pp: int

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


class _Fractions(NamedTuple):
    hbm_fraction: float
    mfu: float
    kernel_s: float


class GpuFractions(_Fractions):
    """What a step reaches of a GPU's datasheet: the shares of its peaks, of its HBM
    bandwidth (the reads) and of its dense tensor flops (MFU, the products; left out: the
    fitted values, `FITTED_*`; hunt 69: a bare 0.8 and 0.4, with no source, priced an API
    caller's GPUs 7% faster than the CLI's), and each kernel's fixed cost beyond them
    (`kernel_s`, `KERNEL`; left out: the value in force when built, `kernel_s_in_force()`)."""

    __slots__ = ()

    def __new__(
        cls, hbm_fraction: float = FITTED_HBM_FRACTION, mfu: float = FITTED_MFU,
        kernel_s: float | None = None,
    ) -> GpuFractions:  # fmt: skip
        kernel_s = kernel_s_in_force() if kernel_s is None else kernel_s
        return super().__new__(cls, hbm_fraction, mfu, kernel_s)


class StepBatch(NamedTuple):
    """What one forward pass carries: `users` decoding users adding `tokens_per_user` tokens
    each (reading `kv_tokens` cached tokens) and `prefill_tokens` tokens of prompts of
    `prompt_tokens` tokens, of which `logit_rows` get the head (the module docstring: one a
    prompt chunk; None: `prefill_tokens` / `prompt_tokens`, the prompts a spread of prompt
    tokens ends on average)."""

    users: int = 0
    tokens_per_user: int = 1
    kv_tokens: int = 0
    prefill_tokens: float = 0.0
    prompt_tokens: int = 0
    logit_rows: float | None = None

    @property
    def prompt_logit_rows(self) -> float:
        """The prompt rows whose logits the step computes (`logit_rows`, or its default)."""
        if self.logit_rows is not None:
            return self.logit_rows
        return self.prefill_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclasses.dataclass(frozen=True)
class GpuStep:
    """One forward pass of a replica (seconds) and what sets it: each kernel class's roofline
    (`gemm_s`, `attention_s`: the module docstring), with the step's bytes and flops at their
    rates over both (`memory_s`, `compute_s`), and what follows them."""

    seconds: float
    memory_s: float  # every read and write of the step at the HBM share
    compute_s: float  # every product of the step at the MFU
    allreduce_s: float
    stage_hops_s: float
    kernels_s: float = 0.0  # the kernels' fixed cost (`floor_s`)
    gemm_s: float = 0.0  # the GEMMs: max(their weights' reads, their products)
    attention_s: float = 0.0  # the attention kernel: max(its KV reads and writes, products)
    hbm_bound_s: float = 0.0  # of gemm_s + attention_s, the classes their reads bound

    @property
    def bound(self) -> str:
        """The largest share of the step: "hbm" (the kernel classes bound by their reads),
        "compute" (those bound by their products), or "kernels" where the kernels' fixed
        cost exceeds both (a small model's step)."""
        hbm, compute = self.hbm_bound_s, self.gemm_s + self.attention_s - self.hbm_bound_s
        if self.kernels_s > max(hbm, compute):
            return "kernels"
        return "hbm" if hbm >= compute else "compute"


def layout_for(num_gpus: int, gpu: GpuSpec) -> GpuLayout:
    """tp fills a node, pp spans nodes; a count beyond one node must be whole nodes."""
    tp = min(num_gpus, gpu.gpus_per_node)
    if num_gpus < 1 or num_gpus % tp:
        raise ServingError(
            f"{num_gpus} GPUs: use up to {gpu.gpus_per_node} (one node) or whole nodes"
        )
    return GpuLayout(tp, num_gpus // tp)


def _bytes(model, draft, precision: GpuPrecision, held_tokens: int) -> tuple[float, float]:
    """(weight bytes, KV bytes of one user) of the model and its draft."""
    params = num_params(model) + (num_params(draft) if draft else 0)
    values = kv_values_per_token(model) + (kv_values_per_token(draft) if draft else 0)
    return precision.weight_bytes * params, precision.kv_bytes * values * held_tokens


def _fit(total_bytes: float, gpu: GpuSpec) -> int:
    """The fewest GPUs whose usable HBM holds `total_bytes` (memory alone)."""
    return math.ceil(total_bytes / (USABLE_MEMORY * gpu.memory_bytes))


def min_gpus(
    model: DecoderShape, gpu: GpuSpec, *, held_tokens: int, precision: str | GpuPrecision = "bf16",
    draft: DecoderShape | None = None,
) -> int:  # fmt: skip
    """The fewest GPUs (up to a node, then whole nodes) whose usable HBM holds the weights
    and one user's KV cache: ceil(bytes / usable per GPU), rounded up to whole nodes past one
    (memory alone: the counts whose tp groups vLLM's rule allows are `gpu_counts`')."""
    weights, per_user = _bytes(model, draft, gpu_precision(precision), held_tokens)
    fit, node = _fit(weights + per_user, gpu), gpu.gpus_per_node
    return fit if fit <= node else node * math.ceil(fit / node)


def max_batch(
    model: DecoderShape, gpu: GpuSpec, layout: GpuLayout, *, held_tokens: int,
    draft: DecoderShape | None = None, precision: str | GpuPrecision = "bf16",
) -> int:  # fmt: skip
    """The most users whose KV caches fit beside the weights; GpuMemoryError (naming
    the counts that serve it) when not even one does."""
    prec = gpu_precision(precision)
    usable = USABLE_MEMORY * gpu.memory_bytes * layout.gpus
    weights, per_user = _bytes(model, draft, prec, held_tokens)
    if weights + per_user > usable:
        raise memory_error(
            model, gpu, layout.gpus, held_tokens=held_tokens, draft=draft, precision=prec
        )
    return int((usable - weights) // per_user) if per_user else 1 << 62


def memory_error(
    model: DecoderShape, gpu: GpuSpec, num_gpus: int, *, held_tokens: int,
    draft: DecoderShape | None = None, precision: str | GpuPrecision = "bf16",
) -> GpuMemoryError:  # fmt: skip
    """The refusal of `num_gpus` GPUs that serve the model with no replica, naming why and
    the counts that do (`gpu_counts`; hunt 63: `--gpus 12` was refused as "1 x H100", its
    smallest replica; hunt 78: 16 GPUs of a model whose 6 KV heads forbid tp 8 were told to
    use "at least 3 ... then whole nodes", and 3 GPUs of one whose 4 heads forbid tp 3 "at
    least 3")."""
    prec, node = gpu_precision(precision), gpu.gpus_per_node
    weights, per_user = _bytes(model, draft, prec, held_tokens)
    counts = gpu_counts(model, gpu, _fit(weights + per_user, gpu))
    why, whole = "", tp_ok(model, node)
    if num_gpus > node and (num_gpus % node or not whole):
        at = "whole nodes" if whole else (
            f"whole nodes at tp {node}, which the model's {model.n_heads} attention heads and "
            f"{model.n_kv_heads} KV heads forbid (vLLM's rule),"
        )  # fmt: skip
        why = (
            f"; past one node a replica is {at} or a tp group within a node that divides the "
            f"count, so {num_gpus} GPUs make replicas of at most "
            f"{max(replica_sizes(num_gpus, gpu, model))}"
        )
    elif counts.fit <= num_gpus <= node:
        why = f"; {counts.fit} GPUs' memory holds it, but {tp_rule(model)}: no tp of {counts.fit}"
        why += f" to {num_gpus} runs" if num_gpus > counts.fit else " runs"
    unpriced = "" if whole or (num_gpus <= node and counts.least is not None) else (
        f" (pipeline stages of fewer than {node} GPUs across nodes, which vLLM also runs, are "
        "not priced)"
    )  # fmt: skip
    return GpuMemoryError(
        f"{num_gpus} x {gpu.name} cannot hold this model for serving "
        f"({(weights + per_user) / 1e9:.1f} GB of {prec.name} weights and one user's KV "
        f"cache of {held_tokens} tokens{why}): {counts.words()}{unpriced}"
    )


def floor_s(model: DecoderShape, kernel_s: float | None = None) -> float:
    """The fixed cost of one forward pass of `model`, seconds: (K L + K0) kernels at
    `kernel_s` each (default: in force) (module docstring), whatever the batch."""
    kernel_s = kernel_s_in_force() if kernel_s is None else kernel_s
    return (KERNELS_PER_LAYER * model.n_layers + KERNELS_PER_STEP) * kernel_s


def floor_note(model: DecoderShape, kernel_s: float | None = None) -> str:
    """The floor in words beside the predictions it moves, with the assumed range and the
    key that moves it (`kernel_s` default: in force)."""
    kernel_s = kernel_s_in_force() if kernel_s is None else kernel_s
    lo, hi = min(KERNEL.sweep), max(KERNEL.sweep)
    kernels = KERNELS_PER_LAYER * model.n_layers + KERNELS_PER_STEP
    moved = "" if kernel_s == KERNEL_S else (
        f"; the fitted MFU and HBM share are fitted at {KERNEL_S * 1e6:g} us: experiment "
        "trtllm-h100 shows the fit at each value"
    )  # fmt: skip
    return (
        f"GPU step floor {floor_s(model, kernel_s) * 1e6:.4g} us a forward pass of "
        f"{getattr(model, 'name', None) or 'the model'}: {KERNELS_PER_LAYER} kernels x "
        f"{model.n_layers} layers + {KERNELS_PER_STEP} = {kernels} kernels at kernel_s = "
        f"{kernel_s * 1e6:g} us (assumed, in {lo * 1e6:g}..{hi * 1e6:g} us: --assume "
        f"{KERNEL_KEY}=S, wse_systems.serving.gpu_step.KERNEL{moved})"
    )


def step(
    model: DecoderShape, gpu: GpuSpec, layout: GpuLayout, batch: StepBatch, *,
    precision: str | GpuPrecision = "bf16", fractions: GpuFractions | None = None,
) -> GpuStep:  # fmt: skip
    """One forward pass of `batch` (module docstring) at `fractions` of the GPU's peaks and
    its kernels' fixed cost (default: `GpuFractions()` when called): the one pricer of a
    decode token, a verification, a prompt chunk and any mix of them."""
    users, tokens_per_user, kv_tokens, prefill_tokens, prompt_tokens, _ = batch
    hbm_fraction, mfu, kernel_s = GpuFractions() if fractions is None else fractions
    prec = gpu_precision(precision)
    tp, pp, layers = layout.tp, layout.pp, model.n_layers
    n, v, hq = matmul_params(model), kv_values_per_token(model), attn_dim(model)
    head = model.vocab_size * model.d_model  # the head's product, in n (module docstring)
    new = users * tokens_per_user + prefill_tokens
    bytes_per_s = tp * hbm_fraction * gpu.hbm_bytes_per_s
    flops_per_s = tp * mfu * prec.peak_flops(gpu)
    # the GEMMs (weights read, their products) and the attention (KV read and written)
    gemm_bytes = prec.weight_bytes * n
    gemm_flops = (users * tokens_per_user * 2 * n + prefill_tokens * 2 * (n - head)
                  + batch.prompt_logit_rows * 2 * head)  # fmt: skip
    attn_bytes = prec.kv_bytes * v * (users * kv_tokens + new)
    attn_flops = (users * tokens_per_user * 4 * layers * hq * kv_tokens
                  + prefill_tokens * 2 * layers * hq * prompt_tokens)  # fmt: skip
    classes = [(b / bytes_per_s, f / flops_per_s)
               for b, f in ((gemm_bytes, gemm_flops), (attn_bytes, attn_flops))]  # fmt: skip
    gemm, attention = (max(m, c) for m, c in classes)
    hbm_bound = sum(m for m, c in classes if m >= c)
    act = ACT_BYTES * model.d_model * new
    reduces = hops = 0.0
    if tp > 1:
        reduces = 2 * layers * gpu_links.tp_allreduce_s(gpu, act, tp)
        read(gpu_links.NVLINK_LATENCY_KEY, gpu_links.latency_s(gpu, True))  # each adds it
    if pp > 1:
        in_node = layout.gpus <= gpu.gpus_per_node
        hops = (pp - 1) * gpu_links.stage_hop_s(gpu, act, tp=tp, in_node=in_node)
        read(gpu_links.LATENCY_KEYS[not in_node], gpu_links.latency_s(gpu, in_node))
    fixed = floor_s(model, kernel_s)
    seconds = gemm + attention + fixed + reduces + hops
    memory = (gemm_bytes + attn_bytes) / bytes_per_s  # the step's bytes and flops at their rates
    compute = (gemm_flops + attn_flops) / flops_per_s
    return GpuStep(seconds, memory, compute, reduces, hops, fixed, gemm, attention, hbm_bound)
