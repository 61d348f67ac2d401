"""The GPU serving model: whole requests (P prompt + O output tokens) on tp x pp GPUs under
chunked prefill, per-user speed against aggregate throughput, time to first token,
speculative decoding, in bf16 or fp8. The GPUs' figures are `wse_systems.gpu`'s (datasheets);
the achieved fractions of their peaks (`GpuFractions`) are inputs, fitted on TensorRT-LLM's
H100 rows (`wse_systems.serving.trtllm_h100`, experiment `trtllm-h100`).

One pricer, `step`: one forward pass of a replica (tp GPUs per stage inside a node, pp stages
run one after another) over B users each adding t tokens (1; gamma + 1 when verifying drafts)
and c prompt tokens of prefill chunks, in precision x (weights w_x and KV k_x bytes a value):

    memory  = (w_x N_matmul + k_x V (B kv_tokens + B t + c)) / tp  /  (hbm x HBM)
    compute = (B t (2 N_matmul + 4 L HQ kv_tokens) + c (2 N_matmul + 2 L HQ P)) / tp
              /  (mfu x peak_x)
    step    = max(memory, compute) + 2 L ring_allreduce((B t + c) d 2 B over tp on NVLink)
              + (pp - 1) ((B t + c) d 2 B / InfiniBand + its latency)

(N_matmul the weights every token multiplies, V the KV values a token adds, L layers, HQ
heads x head dim, kv_tokens = `Workload.kv_tokens` cached tokens each decode token reads; a
prompt token attends to P / 2 earlier tokens on average; the chunks' reads of their own
prompt's earlier KV, under P / 2 tokens a step, are left out.) A decode token is `step` with
c = 0, a prompt alone is `step` with B = 0.

The scheduling policy (vLLM's chunked prefill, TensorRT-LLM's in-flight batching): each step
has a token budget T (`TOKEN_BUDGET`, TensorRT-LLM's default `max_num_tokens`); the decoding
users' tokens go first, prompt chunks fill what is left, first come first served.

- Steady state with B users in flight: each request ends after O / E rounds (E tokens a round,
  `Speculation.tokens_per_round`; 1 without), so prompts arrive at B E / O a round and every
  round carries c = B E P / O prompt tokens. Per-user speed E / round; aggregate output
  B E / round per replica; aggregate input P / O of that. B is at most what fits memory
  (`max_batch`) and what the budget carries, B (t + E P / O) <= T (at least one user).
- Time to first token at B users: the prompt waits for the step under way (none at one user),
  then runs in chunks of T - (B - 1) t tokens beside the other B - 1 users' decode tokens:
  ceil(P / chunk) steps priced by `step`. Requests arrive paced by completions (no queue).
- The prompt's share of the system's time (`input_time_share`, for $/M input tokens): the
  round with its prompt tokens minus the round without, over the round with them.

Memory: w_x n_params weight bytes plus B x `held_tokens` of KV cache (k_x bytes a value; the
draft's too) within `USABLE_MEMORY` of each GPU's HBM (`max_batch`).

`GpuServing(shape, gpu, num_gpus=M, workload=w, precision=, fractions=)` is a
`ServingSystem` over M GPUs in replicas of every layout that can hold the model (tp in 1, 2,
4, 8 within a node; beyond a node tp = a node and pp <= layers whole nodes): at U users it
takes the layout with the best per-user speed that holds them. Layouts are enumerated, never
GPU counts, so any M (1e18 included) is priced at once. `min_gpus` is the closed form of the
fewest GPUs that hold the model and one user; `gpus_to_match` the fewest that reach a per-user
speed (one replica), and that speed together with an aggregate throughput.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from wse_systems.gpu import USABLE_MEMORY, GpuMemoryError, GpuSpec, ring_allreduce_s
from wse_systems.serving.frontier import OperatingPoint, ServingError, Speculation, Workload
from wse_systems.transformer import (
    DecoderShape,
    attn_dim,
    kv_values_per_token,
    matmul_params,
    num_params,
)

__all__ = [
    "TOKEN_BUDGET",
    "FITTED_MFU",
    "FITTED_HBM_FRACTION",
    "ACT_BYTES",
    "GpuPrecision",
    "PRECISIONS",
    "gpu_precision",
    "GpuLayout",
    "GpuStep",
    "layout_for",
    "replica_sizes",
    "max_batch",
    "min_gpus",
    "step",
    "GpuServing",
    "gpus_to_match",
]

TOKEN_BUDGET = 8192  # tokens a step: TensorRT-LLM's default max_num_tokens (trtllm-serve)
# Fitted on TensorRT-LLM v0.19.0's 46 H100 FP8 rows with input <= output length
# (`wse_systems.serving.trtllm_h100.fit()`, experiment `trtllm-h100`; rms log ratio 0.247):
FITTED_MFU = 0.269  # share of the tensor peak a step's products reach
FITTED_HBM_FRACTION = 0.713  # share of HBM bandwidth a step's reads reach
ACT_BYTES = 2  # activations between GPUs travel in 16 bits in either precision


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


@dataclasses.dataclass(frozen=True)
class GpuStep:
    """One forward pass of a replica (seconds) and what sets it."""

    seconds: float
    memory_s: float
    compute_s: float
    allreduce_s: float
    stage_hops_s: float

    @property
    def bound(self) -> str:
        return "hbm" if self.memory_s >= self.compute_s else "compute"


def layout_for(num_gpus: int, gpu: GpuSpec) -> GpuLayout:
    """tp fills a node, pp spans nodes; a count beyond one node must be whole nodes."""
    tp = min(num_gpus, gpu.gpus_per_node)
    if num_gpus < 1 or num_gpus % tp:
        raise ServingError(
            f"{num_gpus} GPUs: use up to {gpu.gpus_per_node} (one node) or whole nodes"
        )
    return GpuLayout(tp, num_gpus // tp)


def replica_sizes(num_gpus: int, gpu: GpuSpec, model: DecoderShape) -> list[int]:
    """Replica sizes that divide `num_gpus`: 1, 2, 4, 8, ... within a node (and the count
    itself if it is one node or less), and whole nodes up to one stage per layer. At most
    n_layers + 6 sizes whatever `num_gpus` is (the closed form of the layouts)."""
    node = gpu.gpus_per_node
    small = {r for r in (1, 2, 4, 8, 16, 32) if r <= node and num_gpus % r == 0}
    if num_gpus <= node:
        small.add(num_gpus)
    whole = {node * k for k in range(1, model.n_layers + 1) if num_gpus % (node * k) == 0}
    return sorted(small | whole)


def _bytes(model, draft, precision: GpuPrecision, held_tokens: int) -> tuple[float, float]:
    """(weight bytes, KV bytes of one user) of the model and its draft."""
    params = num_params(model) + (num_params(draft) if draft else 0)
    values = kv_values_per_token(model) + (kv_values_per_token(draft) if draft else 0)
    return precision.weight_bytes * params, precision.kv_bytes * values * held_tokens


def min_gpus(
    model: DecoderShape, gpu: GpuSpec, *, held_tokens: int, precision: str | GpuPrecision = "bf16",
    draft: DecoderShape | None = None,
) -> int:  # fmt: skip
    """The fewest GPUs (up to a node, then whole nodes) whose usable HBM holds the weights
    and one user's KV cache: ceil(bytes / usable per GPU), rounded up to whole nodes past one."""
    weights, per_user = _bytes(model, draft, gpu_precision(precision), held_tokens)
    fit = math.ceil((weights + per_user) / (USABLE_MEMORY * gpu.memory_bytes))
    node = gpu.gpus_per_node
    return fit if fit <= node else node * math.ceil(fit / node)


def max_batch(
    model: DecoderShape, gpu: GpuSpec, layout: GpuLayout, *, held_tokens: int,
    draft: DecoderShape | None = None, precision: str | GpuPrecision = "bf16",
) -> int:  # fmt: skip
    """The most users whose KV caches fit beside the weights; GpuMemoryError (naming
    `min_gpus`) when not even one does."""
    prec = gpu_precision(precision)
    usable = USABLE_MEMORY * gpu.memory_bytes * layout.gpus
    weights, per_user = _bytes(model, draft, prec, held_tokens)
    if weights + per_user > usable:
        at_least = min_gpus(model, gpu, held_tokens=held_tokens, precision=prec, draft=draft)
        raise GpuMemoryError(
            f"{layout.gpus} x {gpu.name} cannot hold this model for serving "
            f"({(weights + per_user) / 1e9:.1f} GB of {prec.name} weights and one user's KV "
            f"cache of {held_tokens} tokens): use at least {at_least} GPUs (up to "
            f"{gpu.gpus_per_node} per node, then whole nodes)"
        )
    return int((usable - weights) // per_user) if per_user else 1 << 62


def step(
    model: DecoderShape, gpu: GpuSpec, layout: GpuLayout, *, users: int = 0,
    tokens_per_user: int = 1, kv_tokens: int = 0, prefill_tokens: float = 0.0,
    prompt_tokens: int = 0, precision: str | GpuPrecision = "bf16", hbm_fraction: float = 0.8,
    mfu: float = 0.4,
) -> GpuStep:  # fmt: skip
    """One forward pass of `users` decoding users adding `tokens_per_user` tokens each
    (reading `kv_tokens` cached tokens) and `prefill_tokens` tokens of prompts of
    `prompt_tokens` tokens (module docstring): the one pricer of a decode token, a
    verification, a prompt chunk and any mix of them."""
    prec = gpu_precision(precision)
    tp, pp, layers = layout.tp, layout.pp, model.n_layers
    n, v, hq = matmul_params(model), kv_values_per_token(model), attn_dim(model)
    new = users * tokens_per_user + prefill_tokens
    read = prec.weight_bytes * n + prec.kv_bytes * v * (users * kv_tokens + new)
    memory = read / tp / (hbm_fraction * gpu.hbm_bytes_per_s)
    flops = users * tokens_per_user * (2 * n + 4 * layers * hq * kv_tokens) + prefill_tokens * (
        2 * n + 2 * layers * hq * prompt_tokens
    )
    compute = flops / tp / (mfu * prec.peak_flops(gpu))
    act = ACT_BYTES * model.d_model * new
    reduces = 2 * layers * ring_allreduce_s(act, tp, gpu.nvlink_bytes_per_s, gpu.nvlink_latency_s)
    hops = (pp - 1) * (act / gpu.ib_bytes_per_s + gpu.ib_latency_s)
    return GpuStep(max(memory, compute) + reduces + hops, memory, compute, reduces, hops)


class GpuServing:
    """Users on `num_gpus` GPUs in replicas of the best layout (a `ServingSystem`)."""

    def __init__(
        self, model: DecoderShape, gpu: GpuSpec, *, num_gpus: int, workload: Workload,
        hbm_fraction: float = 0.8, mfu: float = 0.4, speculation: Speculation | None = None,
        precision: str | GpuPrecision = "bf16", token_budget: int = TOKEN_BUDGET,
    ) -> None:  # fmt: skip
        if not (0 < hbm_fraction <= 1 and 0 < mfu <= 1):
            raise ServingError(f"hbm_fraction and mfu must be in (0, 1], got {hbm_fraction}, {mfu}")
        if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 1:
            raise ServingError(f"num_gpus must be an integer >= 1, got {num_gpus!r}")
        self.model, self.gpu, self.workload = model, gpu, workload
        self.hbm_fraction, self.mfu, self.speculation = hbm_fraction, mfu, speculation
        self.precision = gpu_precision(precision)
        self.precision.peak_flops(gpu)  # fp8 on a GPU without it: refused here
        self.token_budget = token_budget
        self.draft = None if speculation is None else speculation.draft
        self.units, self.name = num_gpus, gpu.name
        self.layouts: dict[GpuLayout, int] = {}  # layout -> users per replica it serves
        error: GpuMemoryError | None = None
        for r in replica_sizes(num_gpus, gpu, model):
            lay = layout_for(r, gpu)
            try:
                held = workload.held_tokens
                mem = max_batch(model, gpu, lay, held_tokens=held, draft=self.draft,
                                precision=self.precision)  # fmt: skip
            except GpuMemoryError as e:
                error = error or e
                continue
            self.layouts[lay] = min(mem, self.budget_users)
        if not self.layouts:
            assert error is not None
            raise error
        self.max_users = max(b * (num_gpus // lay.gpus) for lay, b in self.layouts.items())

    # ---- the policy's arithmetic ------------------------------------------------------
    @property
    def tokens_per_round(self) -> float:
        return 1.0 if self.speculation is None else self.speculation.tokens_per_round

    @property
    def step_tokens(self) -> int:
        """Tokens a decoding user adds to a step (1; gamma + 1 when verifying)."""
        return 1 if self.speculation is None else self.speculation.gamma + 1

    @property
    def budget_users(self) -> int:
        """Users whose decode and steady prompt tokens fit the budget (at least one)."""
        w = self.workload
        per_user = self.step_tokens + self.tokens_per_round * w.prompt_tokens / w.output_tokens
        return max(1, int(self.token_budget // per_user))

    def prefill_tokens(self, batch: int) -> float:
        """Prompt tokens a round carries in steady state: batch x E x P / O."""
        w = self.workload
        return batch * self.tokens_per_round * w.prompt_tokens / w.output_tokens

    def step(self, layout: GpuLayout, users: int, *, tokens: int = 1, prefill: float = 0.0,
             draft: bool = False) -> GpuStep:  # fmt: skip
        m = self.draft if draft and self.draft is not None else self.model
        w = self.workload
        return step(
            m, self.gpu, layout, users=users, tokens_per_user=tokens, kv_tokens=w.kv_tokens,
            prefill_tokens=prefill, prompt_tokens=w.prompt_tokens, precision=self.precision,
            hbm_fraction=self.hbm_fraction, mfu=self.mfu,
        )  # fmt: skip

    def round_s(self, layout: GpuLayout, batch: int, prefill: float = 0.0) -> tuple[float, str]:
        """(seconds of one round of `batch` users carrying `prefill` prompt tokens, bound)."""
        if self.speculation is None:
            s = self.step(layout, batch, prefill=prefill)
            return s.seconds, s.bound
        g = self.speculation.gamma
        drafts = g * self.step(layout, batch, draft=True).seconds
        if prefill:  # the draft reads the prompt too
            drafts += self.step(layout, 0, prefill=prefill, draft=True).seconds
        verify = self.step(layout, batch, tokens=g + 1, prefill=prefill)
        return drafts + verify.seconds, verify.bound

    def ttft_s(self, layout: GpuLayout, batch: int) -> float:
        """The step under way, then the prompt in chunks beside the others' decode tokens."""
        others, p = batch - 1, self.workload.prompt_tokens
        chunk = max(1, self.token_budget - others * self.step_tokens)
        wait = self.round_s(layout, others, self.prefill_tokens(others))[0] if others else 0.0
        full, rest = divmod(p, chunk)

        def chunk_s(tokens: int) -> float:
            s = self.step(layout, others, tokens=self.step_tokens, prefill=tokens).seconds
            if self.draft is not None:
                s += self.step(layout, 0, prefill=tokens, draft=True).seconds
            return s

        return wait + full * chunk_s(chunk) + (chunk_s(rest) if rest else 0.0)

    # ---- points -----------------------------------------------------------------------
    def layout_point(self, layout: GpuLayout, users: int) -> OperatingPoint:
        replicas = self.units // layout.gpus
        batch = math.ceil(users / replicas)
        e, w = self.tokens_per_round, self.workload
        full_s, bound = self.round_s(layout, batch, self.prefill_tokens(batch))
        bare_s = self.round_s(layout, batch)[0]
        out = users * e / full_s
        return OperatingPoint(
            users=users, user_tokens_per_s=e / full_s, aggregate_tokens_per_s=out,
            input_tokens_per_s=out * w.prompt_tokens / w.output_tokens,
            input_time_share=(full_s - bare_s) / full_s, ttft_s=self.ttft_s(layout, batch),
            bound=bound,
            layout={"tp": layout.tp, "pp": layout.pp, "replicas": replicas, "batch": batch,
                    "precision": self.precision.name, "token_budget": self.token_budget},
        )  # fmt: skip

    def point(self, users: int) -> OperatingPoint:
        """The layout with the best per-user speed that holds `users`."""
        if users < 1 or users > self.max_users:
            raise ServingError(
                f"{users} users do not fit {self.units} x {self.name} with "
                f"{self.workload.held_tokens} tokens of context each: at most {self.max_users}"
                f" ({self.precision.name} weights and every user's KV cache within "
                f"{USABLE_MEMORY:g} of HBM, decode and prompt tokens within the step budget of "
                f"{self.token_budget}); use more GPUs or a shorter context"
            )
        fits = [lay for lay, b in self.layouts.items() if b * (self.units // lay.gpus) >= users]
        points = [self.layout_point(lay, users) for lay in fits]
        return max(points, key=lambda p: p.user_tokens_per_s)


def gpus_to_match(
    model: DecoderShape, gpu: GpuSpec, *, user_tokens_per_s: float,
    aggregate_tokens_per_s: float, **serving: Any,
) -> tuple[int | None, int | None]:  # fmt: skip
    """(the fewest GPUs, as one replica, whose single user reaches `user_tokens_per_s`; the
    fewest GPUs, in replicas of one layout, that serve `aggregate_tokens_per_s` with every
    user at least that fast), None where no layout can. Layouts are enumerated (tp <= a node,
    then whole nodes up to one stage per layer), never GPU counts. `serving`: the
    `GpuServing` keywords (workload, hbm_fraction, mfu, speculation, precision)."""
    node = gpu.gpus_per_node
    sizes = [r for r in (1, 2, 4, 8, 16, 32) if r < node]
    sizes += [node * k for k in range(1, model.n_layers + 1)]
    speed, both = None, None
    for r in sizes:
        lay = layout_for(r, gpu)
        try:
            one = GpuServing(model, gpu, num_gpus=r, **serving)
        except GpuMemoryError:
            continue
        if lay not in one.layouts or one.layout_point(lay, 1).user_tokens_per_s < user_tokens_per_s:
            continue
        speed = r if speed is None else speed
        lo, hi = 1, one.layouts[lay]  # the largest batch still fast enough
        while lo < hi:
            mid = (lo + hi + 1) // 2
            ok = one.layout_point(lay, mid).user_tokens_per_s >= user_tokens_per_s
            lo, hi = (mid, hi) if ok else (lo, mid - 1)
        per_replica = one.layout_point(lay, lo).aggregate_tokens_per_s
        total = r * math.ceil(aggregate_tokens_per_s / per_replica)
        both = total if both is None else min(both, total)
    return speed, both
