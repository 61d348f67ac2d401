"""The GPU serving model: a batch of users on tp x pp GPUs, per-user speed against aggregate
throughput as the batch grows, time to first token, speculative decoding. Nothing fitted:
the GPUs' figures are `wse_systems.gpu`'s (datasheets), MFU and the HBM fraction are inputs.

One decode step of a replica (tp GPUs per stage inside a node, pp stages over nodes, run one
after another) with B users, each adding t tokens (1; gamma + 1 when verifying drafts):

    memory  = (2 N_matmul + B kv_bytes_per_token kv_tokens) / tp  /  (hbm_fraction x HBM)
    compute = B t (2 N_matmul + 4 L H Q kv_tokens) / tp  /  (mfu x peak)
    step    = max(memory, compute)                          (weights read once per step)
              + 2 L ring_allreduce(B t d_model 2 bytes over tp on NVLink)   (Megatron: after
                attention and after the MLP)
              + (pp - 1) (B t d_model 2 bytes / InfiniBand + its latency)   (stage hops)

N_matmul the weights every token multiplies, L layers, H Q heads x head dim, kv_tokens the
cached tokens each user's attention reads (`Workload.kv_tokens`). Per-user speed 1 / step,
aggregate B / step: the memory term is the same for every B until the KV reads grow, so
aggregate rises with B until compute binds (the knee, B = mfu peak / (hbm_fraction HBM) x
2 N_matmul / (2 N_matmul + 4 L H Q kv) when the KV reads are small) or memory runs out.
Memory: 2 n_params bytes of bf16 weights plus B x `held_tokens` of KV cache (the draft's too)
within `USABLE_MEMORY` of each GPU's HBM (`max_batch`). Prefill of P prompt tokens (one
user): the prompt's flops P 2 N_matmul + 2 L H Q P^2 at mfu x the tp GPUs' peak (or one
weight read, if longer), plus the same all-reduces and hops of P activations; under load its
share is `frontier.prefill_share` of the compute that the other B - 1 users' steps leave.

`GpuServing(shape, gpu, num_gpus=M, workload=w)` is a `ServingSystem` over M GPUs split into
replicas of every layout that holds the model (r = tp x pp GPUs, tp <= a node, whole nodes
beyond one): at a load of U users it takes the layout with the best per-user speed that
holds them (U / replicas users per replica). `gpus_to_match` counts the GPUs that reach a
per-user speed (one user), and that speed together with an aggregate throughput.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_systems.gpu import (
    USABLE_MEMORY,
    WEIGHT_BYTES,
    GpuMemoryError,
    GpuSpec,
    ring_allreduce_s,
)
from wse_systems.serving.frontier import (
    OperatingPoint,
    ServingError,
    Speculation,
    Workload,
    prefill_share,
)
from wse_systems.transformer import (
    DecoderShape,
    attn_dim,
    kv_values_per_token,
    matmul_params,
    num_params,
)

__all__ = [
    "MAX_GPUS",
    "GpuLayout",
    "GpuStep",
    "layout_for",
    "max_batch",
    "decode_step",
    "prefill_s",
    "GpuServing",
    "gpus_to_match",
]

MAX_GPUS = 1024  # the GPU-count searches stop here


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
    """One decode step of a replica (seconds) and what sets it."""

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


def _weights_bytes(model: DecoderShape, draft: DecoderShape | None) -> float:
    return WEIGHT_BYTES * (num_params(model) + (num_params(draft) if draft else 0))


def _kv_per_user(model: DecoderShape, draft: DecoderShape | None, held_tokens: int) -> float:
    values = kv_values_per_token(model) + (kv_values_per_token(draft) if draft else 0)
    return WEIGHT_BYTES * values * held_tokens  # bf16 K and V


def max_batch(
    model: DecoderShape, gpu: GpuSpec, layout: GpuLayout, *, held_tokens: int,
    draft: DecoderShape | None = None,
) -> int:  # fmt: skip
    """The most users whose KV caches fit beside the weights; GpuMemoryError (naming the
    GPU count that holds one user) when not even one does."""
    usable = USABLE_MEMORY * gpu.memory_bytes * layout.gpus
    weights = _weights_bytes(model, draft)
    per_user = _kv_per_user(model, draft, held_tokens)
    if weights + per_user > usable:
        fit = math.ceil((weights + per_user) / (USABLE_MEMORY * gpu.memory_bytes))
        node = gpu.gpus_per_node
        at_least = fit if fit <= node else node * math.ceil(fit / node)
        raise GpuMemoryError(
            f"{layout.gpus} x {gpu.name} cannot hold this model for serving "
            f"({(weights + per_user) / 1e9:.1f} GB of bf16 weights and one user's KV cache of "
            f"{held_tokens} tokens): use at least {at_least} GPUs (up to {node} per node, "
            "then whole nodes)"
        )
    return int((usable - weights) // per_user) if per_user else 1 << 30


def decode_step(
    model: DecoderShape, gpu: GpuSpec, layout: GpuLayout, *, batch: int, kv_tokens: int,
    tokens: int = 1, hbm_fraction: float = 0.8, mfu: float = 0.4,
) -> GpuStep:  # fmt: skip
    """One step of `batch` users adding `tokens` tokens each (module docstring)."""
    tp, pp = layout.tp, layout.pp
    n, kv_bytes = matmul_params(model), WEIGHT_BYTES * kv_values_per_token(model)
    read = WEIGHT_BYTES * n + batch * kv_bytes * kv_tokens
    memory = read / tp / (hbm_fraction * gpu.hbm_bytes_per_s)
    per_token = 2 * n + 4 * model.n_layers * attn_dim(model) * kv_tokens
    compute = batch * tokens * per_token / tp / (mfu * gpu.peak_flops)
    act = WEIGHT_BYTES * model.d_model * batch * tokens
    reduces = (
        2 * model.n_layers * ring_allreduce_s(act, tp, gpu.nvlink_bytes_per_s, gpu.nvlink_latency_s)
    )
    hops = (pp - 1) * (act / gpu.ib_bytes_per_s + gpu.ib_latency_s)
    return GpuStep(max(memory, compute) + reduces + hops, memory, compute, reduces, hops)


def prefill_s(
    model: DecoderShape, gpu: GpuSpec, layout: GpuLayout, *, prompt_tokens: int,
    hbm_fraction: float = 0.8, mfu: float = 0.4,
) -> float:  # fmt: skip
    """One user's prompt at the compute roofline (or one weight read), plus its
    all-reduces and stage hops."""
    tp, pp, p = layout.tp, layout.pp, prompt_tokens
    n = matmul_params(model)
    flops = p * 2 * n + 2 * model.n_layers * attn_dim(model) * p * p
    weights_s = WEIGHT_BYTES * n / tp / (hbm_fraction * gpu.hbm_bytes_per_s)
    act = WEIGHT_BYTES * model.d_model * p
    reduces = (
        2 * model.n_layers * ring_allreduce_s(act, tp, gpu.nvlink_bytes_per_s, gpu.nvlink_latency_s)
    )
    hops = (pp - 1) * (act / gpu.ib_bytes_per_s + gpu.ib_latency_s)
    return max(flops / (tp * mfu * gpu.peak_flops), weights_s) + reduces + hops


def _replica_sizes(num_gpus: int, gpu: GpuSpec) -> list[int]:
    node = gpu.gpus_per_node
    small = [r for r in (1, 2, 4, 8, 16, 32) if r <= node and num_gpus % r == 0]
    whole = [r for r in range(2 * node, num_gpus + 1, node) if num_gpus % r == 0]
    return small + whole + ([num_gpus] if num_gpus <= node and num_gpus not in small else [])


class GpuServing:
    """Users on `num_gpus` GPUs in replicas of the best layout (a `ServingSystem`)."""

    def __init__(
        self, model: DecoderShape, gpu: GpuSpec, *, num_gpus: int, workload: Workload,
        hbm_fraction: float = 0.8, mfu: float = 0.4, speculation: Speculation | None = None,
    ) -> None:  # fmt: skip
        if not (0 < hbm_fraction <= 1 and 0 < mfu <= 1):
            raise ServingError(f"hbm_fraction and mfu must be in (0, 1], got {hbm_fraction}, {mfu}")
        self.model, self.gpu, self.workload = model, gpu, workload
        self.hbm_fraction, self.mfu, self.speculation = hbm_fraction, mfu, speculation
        self.draft = None if speculation is None else speculation.draft
        self.units, self.name = num_gpus, gpu.name
        self.layouts: dict[GpuLayout, int] = {}  # layout -> users per replica that fit
        error: GpuMemoryError | None = None
        for r in _replica_sizes(num_gpus, gpu):
            lay = layout_for(r, gpu)
            try:
                self.layouts[lay] = max_batch(
                    model, gpu, lay, held_tokens=workload.held_tokens, draft=self.draft
                )
            except GpuMemoryError as e:
                error = error or e
        if not self.layouts:
            assert error is not None
            raise error
        self.max_users = max(b * (num_gpus // lay.gpus) for lay, b in self.layouts.items())

    def step(self, layout: GpuLayout, batch: int, tokens: int = 1, draft: bool = False) -> GpuStep:
        m = self.draft if draft and self.draft is not None else self.model
        return decode_step(
            m, self.gpu, layout, batch=batch, kv_tokens=self.workload.kv_tokens, tokens=tokens,
            hbm_fraction=self.hbm_fraction, mfu=self.mfu,
        )  # fmt: skip

    def round_s(self, layout: GpuLayout, batch: int) -> tuple[float, float, str]:
        """(seconds of one round for the batch, tokens per user per round, bound)."""
        if self.speculation is None:
            s = self.step(layout, batch)
            return s.seconds, 1.0, s.bound
        g = self.speculation.gamma
        verify = self.step(layout, batch, tokens=g + 1)
        draft = self.step(layout, batch, draft=True)
        return g * draft.seconds + verify.seconds, self.speculation.tokens_per_round, verify.bound

    def ttft_s(self, layout: GpuLayout, batch: int) -> float:
        kw = dict(prompt_tokens=self.workload.prompt_tokens, hbm_fraction=self.hbm_fraction,
                  mfu=self.mfu)  # fmt: skip
        alone = prefill_s(self.model, self.gpu, layout, **kw)  # type: ignore[arg-type]
        if self.draft is not None:
            alone += prefill_s(self.draft, self.gpu, layout, **kw)  # type: ignore[arg-type]
        busy = 0.0
        if batch > 1:
            s = self.step(layout, batch - 1)
            busy = s.compute_s / s.seconds
        return alone / prefill_share(busy, batch)

    def layout_point(self, layout: GpuLayout, users: int) -> OperatingPoint:
        replicas = self.units // layout.gpus
        batch = math.ceil(users / replicas)
        round_s, per_round, bound = self.round_s(layout, batch)
        return OperatingPoint(
            users=users, user_tokens_per_s=per_round / round_s,
            aggregate_tokens_per_s=users * per_round / round_s,
            ttft_s=self.ttft_s(layout, batch), bound=bound,
            layout={"tp": layout.tp, "pp": layout.pp, "replicas": replicas, "batch": batch},
        )  # fmt: skip

    def point(self, users: int) -> OperatingPoint:
        """The layout with the best per-user speed that holds `users`."""
        if users < 1 or users > self.max_users:
            raise ServingError(
                f"{users} users do not fit {self.units} x {self.name} with "
                f"{self.workload.held_tokens} tokens of context each: at most {self.max_users}"
                " (bf16 weights and every user's KV cache within "
                f"{USABLE_MEMORY:g} of HBM); use more GPUs or a shorter context"
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
    user at least that fast), None where no count up to MAX_GPUS can. `serving`: the
    `GpuServing` keywords (workload, hbm_fraction, mfu, speculation)."""
    node = gpu.gpus_per_node
    counts = [*range(1, node), *range(node, MAX_GPUS + 1, node)]
    speed, both = None, None
    for m in counts:
        try:
            one = GpuServing(model, gpu, num_gpus=m, **serving)
        except GpuMemoryError:
            continue
        lay = layout_for(m, gpu)
        if lay not in one.layouts or one.layout_point(lay, 1).user_tokens_per_s < user_tokens_per_s:
            continue
        speed = m if speed is None else speed
        lo, hi = 1, one.layouts[lay]  # the largest batch still fast enough
        while lo < hi:
            mid = (lo + hi + 1) // 2
            ok = one.layout_point(lay, mid).user_tokens_per_s >= user_tokens_per_s
            lo, hi = (mid, hi) if ok else (lo, mid - 1)
        per_replica = one.layout_point(lay, lo).aggregate_tokens_per_s
        total = m * math.ceil(aggregate_tokens_per_s / per_replica)
        both = total if both is None else min(both, total)
    return speed, both
