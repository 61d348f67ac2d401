"""The GPU serving model: whole requests (P prompt + O output tokens) on tp x pp GPUs under
chunked prefill, per-user speed against aggregate throughput, time to first token,
speculative decoding, in bf16 or fp8. Each forward pass is priced by the one pricer,
`wse_systems.serving.gpu_step.step` (its formula, the GPUs' figures, the achieved
fractions of their peaks, `GpuFractions`, and a step's fixed cost of kernels, `KERNEL_S`, are
there).

The scheduling policy (vLLM's chunked prefill, TensorRT-LLM's in-flight batching): each step
has a token budget T (`TOKEN_BUDGET`, TensorRT-LLM's default `max_num_tokens`); the decoding
users' tokens go first, prompt chunks fill what is left, first come first served.

- Steady state with B users in flight: each request ends after O / E rounds (E tokens a round,
  `Speculation.tokens_per_round`; 1 without), so prompts arrive at B E / O a round and the
  replica's rounds carry c = B E P / O prompt tokens. B is at most what fits memory
  (`max_batch`) and what the budget carries, B (t + E P / O) <= T (at least one user).
- Time to first token at B users: the prompt waits for the step under way (none at one user),
  then runs in chunks of T - (B - 1) t tokens beside the other B - 1 users' decode tokens:
  ceil(P / chunk) steps priced by `step`. Each user sends its next request as the last ends.
- A request (`wse_systems.serving.frontier.RequestTimes`, the wafers' arithmetic too): its
  first token, then O / E rounds that carry the other B - 1 users' prompt tokens,
  (B - 1) E P / O a round (its own prompt ran in its first token: hunt 66, it was counted in
  the rounds and again in the first token, and the first token was left out of the period);
  the period the replica allows is O / E rounds carrying every user's prompt. A period is the
  longer of the two; output B O / period per replica, input P / O of that; per-user speed O
  over the period less the first token.
- The prompt's share of the system's time (`input_time_share`, for $/M input tokens): the
  round with its prompt tokens minus the round without, over the round with them.

`GpuServing(shape, gpu, num_gpus=M, workload=w, precision=, fractions=)` is a
`ServingSystem` over M GPUs in replicas of every layout that can hold the model (tp in 1, 2,
4, 8 within a node; beyond a node tp = a node and pp <= layers whole nodes): at U users it
takes the layout with the best per-user speed that holds them. Layouts are enumerated, never
GPU counts, so any M (1e18 included) is priced at once. `gpus_to_match` is the fewest GPUs
that reach a per-user speed (one replica), and that speed together with an aggregate
throughput.
"""

from __future__ import annotations

import math
from typing import Any

from wse_core.errors import require_int

from wse_systems.gpu import USABLE_MEMORY, GpuMemoryError, GpuSpec
from wse_systems.serving.frontier import (
    OperatingPoint,
    RequestTimes,
    ServingError,
    Speculation,
    Workload,
    check_workload,
)
from wse_systems.serving.gpu_step import (
    KERNEL,
    GpuFractions,
    GpuLayout,
    GpuPrecision,
    GpuStep,
    StepBatch,
    floor_s,
    gpu_precision,
    layout_for,
    max_batch,
    replica_sizes,
    step,
)
from wse_systems.transformer import DecoderShape

__all__ = ["TOKEN_BUDGET", "GpuServing", "gpus_to_match"]

TOKEN_BUDGET = 8192  # tokens a step: TensorRT-LLM's default max_num_tokens (trtllm-serve)


class GpuServing:
    """Users on `num_gpus` GPUs in replicas of the best layout (a `ServingSystem`)."""

    def __init__(
        self, model: DecoderShape, gpu: GpuSpec, *, num_gpus: int, workload: Workload,
        fractions: GpuFractions = GpuFractions(), speculation: Speculation | None = None,
        precision: str | GpuPrecision = "bf16", token_budget: int = TOKEN_BUDGET,
    ) -> None:  # fmt: skip
        hbm_fraction, mfu, kernel_s = fractions
        if not (0 < hbm_fraction <= 1 and 0 < mfu <= 1):
            raise ServingError(f"hbm_fraction and mfu must be in (0, 1], got {hbm_fraction}, {mfu}")
        if why := KERNEL.outside(kernel_s):
            raise ServingError(f"kernel_s {why}, got {kernel_s!r}")
        self.kernel_s = kernel_s
        if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 1:
            raise ServingError(f"num_gpus must be an integer >= 1, got {num_gpus!r}")
        check_workload(model, workload)
        if speculation is not None:
            check_workload(speculation.draft, workload, "the draft")
        self.model, self.gpu, self.workload = model, gpu, workload
        self.fractions, self.speculation = fractions, speculation
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
        batch = StepBatch(users, tokens, w.kv_tokens, prefill, w.prompt_tokens)
        return step(m, self.gpu, layout, batch, precision=self.precision,
                    fractions=self.fractions)  # fmt: skip

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
        rounds = self.workload.output_tokens / self.tokens_per_round
        full_s, bound = self.round_s(layout, batch, self.prefill_tokens(batch))
        own_s = self.round_s(layout, batch, self.prefill_tokens(batch - 1))[0]  # the others'
        bare_s = self.round_s(layout, batch)[0]
        times = RequestTimes(ttft_s=self.ttft_s(layout, batch), decode_s=rounds * own_s,
                             capacity_s=rounds * full_s)  # fmt: skip
        return times.point(
            users, self.workload, input_time_share=(full_s - bare_s) / full_s, bound=bound,
            layout={"tp": layout.tp, "pp": layout.pp, "replicas": replicas, "batch": batch,
                    "precision": self.precision.name, "token_budget": self.token_budget,
                    "kernel_s": self.kernel_s, "step_floor_s": floor_s(self.model, self.kernel_s)},
        )  # fmt: skip

    def point(self, users: int) -> OperatingPoint:
        """The layout with the best per-user speed that holds `users`."""
        require_int("users", users, 1, error=ServingError)  # hunt 67: 2.5 users were priced
        if users > self.max_users:
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
    `GpuServing` keywords (workload, fractions with the kernel cost, speculation, precision)."""
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
