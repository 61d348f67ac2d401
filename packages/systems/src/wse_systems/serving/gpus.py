"""The GPU serving model: whole requests (P prompt + O output tokens) on tp x pp GPUs under
chunked prefill, per-user speed against aggregate throughput, time to first token,
speculative decoding, in bf16 or fp8. Each forward pass is priced by the one pricer,
`wse_systems.serving.gpu_step.step` (its formula, the GPUs' figures, the achieved
fractions of their peaks, `GpuFractions`, and a step's fixed cost of kernels, `KERNEL_S`, are
there).

The scheduling policy (vLLM's chunked prefill, TensorRT-LLM's in-flight batching): each step
has a token budget T (`TOKEN_BUDGET`, TensorRT-LLM's default `max_num_tokens`); the decoding
users' tokens go first, prompt chunks fill what is left, first come first served.

- Pipeline parallelism: a replica of pp stages, each holding L / pp layers on tp GPUs, keeps
  pp micro-batches in flight (vLLM's "virtual engines", one scheduler and one budget T per
  micro-batch; TensorRT-LLM's pipeline micro-batches): its B users ride in pp micro-batches of
  m = ceil(B / pp) or floor (B mod pp of the first). A micro-batch's round is `step` over its
  m users (its pass through the stages one after another and the hops between them) while the
  other micro-batches hold the other stages, so every user gets a token per round and the
  replica serves B a round (hunt 68: the whole batch rode in one pass, and tp8 x pp2 served
  half of two tp8 replicas); micro-batches of two sizes share a round, the mean of their
  passes (each stage passes each once a round; `replica_point`). Assumed: stages of equal work
  (vLLM puts the head on the last stage, longer by the head's share of the weights, ~1.5% for
  Llama 70B at pp 2: left out).
- Steady state with m users in a micro-batch: a request is its first token (the round under
  way when it is admitted, none at one user, then its prompt in chunks, whose last emits the
  first token) and ceil((O - 1) / E) whole rounds (E tokens a round, the last maybe fewer; 1
  without; hunt 75: O / E priced a decode step past the last token,
  `wse_systems.serving.frontier.decode_steps`). The other m - 1 users'
  prompts, (m - 1) P tokens a period, ride in the rounds of the request that are not its own
  prompt's: the round under way and its R = ceil((O - 1) / E) decode rounds, (m - 1) P / (R + 1)
  tokens each (hunt 69: each of those rounds carried (m - 1) E P / O, so a period carried every
  other prompt 1 + E / O times: twice at one output token, where a second user cut the
  aggregate 29% and a longer output shortened the request), at most what the budget T leaves
  beside the m users' decode tokens. m is at most what fits memory (`max_batch`, over the
  replica's B) and what the budget carries of the decode tokens alone, m t <= T: prompts the
  budget cannot carry are not a limit on users but a queue (hunt 69: m (t + E P / O) <= T
  refused a second user of a 4,096-token prompt and one output token on an H100 whose
  memory holds 557). A period is then at least the rounds of T tokens that carry every
  user's prompt and decode tokens, m (P + R t) / T full rounds (`RequestTimes`'
  capacity): the request waits to be admitted for the excess (vLLM's waiting queue).
- Time to first token at m users: the prompt waits for the round under way (none at one
  user), then runs in chunks of T - (m - 1) t tokens riding in the other m - 1 users' rounds
  (the target's chunk in its step or verification, the draft's in the first draft step):
  ceil(P / chunk) rounds priced by `step`, each chunk with one row's logits (vLLM's
  `logits_indices`: `gpu_step`; hunt 79: every prompt token's). Each user sends its next
  request as the last ends. The point's bound is the step's that takes most of the request,
  its decode rounds' or, where its first token takes longer, its prompt chunks'.
- A request (`wse_systems.serving.frontier.RequestTimes`, the wafers' arithmetic too): its
  first token, then R rounds that carry the other m - 1 users' prompt tokens (its own
  prompt ran in its first token: hunt 66). Every user in flight rides in each of the
  replica's steps and a request is admitted at the next step, so below the budget's capacity
  the replica's period is the request's own path and a GPU request waits for no more than
  the round under way (hunt 68: one user with a draft "waited to be admitted" 35 ms). Output
  B O / period per replica, input P / O of that; per-user speed O - 1 over the period less
  the first token (none at O = 1).
- The prompts' share of the system's time (`input_time_share`, for $/M input tokens): the
  period less its bare decode rounds (the rounds without prompt tokens), over the period:
  the request's first token and the others' prompt tokens in its rounds (at one user, its
  first token over the period; hunt 68: a round's share with the user's own prompt in it,
  0.00005 at one user whose first token took 3.3% of the period). None below none
  (`prompt_share`): a bare round can take longer than one that carries prompt tokens, where
  those tokens take the tensor-parallel all-reduce's message past the engines' one-shot
  limit (`gpu_links.tp_allreduce_algorithm`: 256 KiB at 8 GPUs) to the two-shot kernel, which
  the links price lower (2 (p - 1) / p bytes / bw + 2 latencies against (p - 1) bytes / bw + 1):
  the prompts then cost the system no time (hunt decode41: llama3-8b on 8 H100 at 20 users,
  160 KiB bare against 312 KiB with 19 prompt tokens, 1.330 ms against 1.310 ms a round; the
  share was -0.0077 and `wse plan infer` refused the load).

`GpuServing(shape, gpu, num_gpus=M, workload=w, precision=, fractions=)` is a `ServingSystem`
over M GPUs in replicas of every layout that can hold the model (every tp up to a node that
the heads allow, `gpu_step.tp_ok`, past a node those that divide M; or whole nodes at tp = a
node and pp <= layers: `wse_systems.serving.gpu_replicas`; within a node, R = floor(M / size)
with the rest idle; none: a refusal of the M GPUs naming the counts that hold it). At U users on R
replicas, U mod R replicas serve ceil(U / R) users and the rest floor(U / R), each priced
alone and summed (`layout_point`; per-user speed and first token their means over the
requests, the slowest replica's beside them), and it takes the layout that serves them the
most output tokens a second, the shortest request, admitted at once (`_layout_rank`).
Layouts are enumerated, never GPU counts, so any M (1e18 included) is priced at once.
`gpus_to_match` is the fewest GPUs that reach a per-user speed (one replica), and that speed
together with an aggregate throughput.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from wse_core.cost.assumptions import assume, constant_of
from wse_core.cost.reads import Reads, merged, read, reading, recording
from wse_core.errors import require_int

from wse_systems import gpu_links
from wse_systems.gpu import USABLE_MEMORY, GpuMemoryError, GpuSpec
from wse_systems.serving.frontier import (
    OperatingPoint,
    RequestTimes,
    ServingError,
    Speculation,
    Workload,
    check_workload,
    decode_steps,
    user_speed,
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
    memory_error,
    replica_sizes,
    step,
    tp_ok,
)
from wse_systems.transformer import DecoderShape

__all__ = ["TOKEN_BUDGET", "GpuServing", "gpus_to_match", "prompt_share"]

TOKEN_BUDGET = 8192  # tokens a step: TensorRT-LLM's default max_num_tokens (trtllm-serve)


def prompt_share(bare_s: float, period_s: float) -> float:
    """The prompts' share of a request's period: 1 - its bare decode rounds over the period,
    none where the bare rounds take longer (module docstring: rounds that carry prompt tokens
    can all-reduce with a cheaper kernel than bare ones)."""
    return max(0.0, 1.0 - bare_s / period_s)


class GpuServing:
    """Users on `num_gpus` GPUs in replicas of the best layout (a `ServingSystem`)."""

    def __init__(
        self, model: DecoderShape, gpu: GpuSpec, *, num_gpus: int, workload: Workload,
        fractions: GpuFractions | None = None, speculation: Speculation | None = None,
        precision: str | GpuPrecision = "bf16", token_budget: int = TOKEN_BUDGET,
    ) -> None:  # fmt: skip
        # built here, not as a default, so an active `--assume gpu.kernel_s` block reaches it
        fractions = GpuFractions() if fractions is None else fractions
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
        held = workload.held_tokens
        for r in replica_sizes(num_gpus, gpu, model):
            lay = layout_for(r, gpu)
            try:
                mem = max_batch(model, gpu, lay, held_tokens=held, draft=self.draft,
                                precision=self.precision)  # fmt: skip
            except GpuMemoryError:
                continue
            self.layouts[lay] = min(mem, lay.pp * self.budget_users)  # a budget a micro-batch
        if not self.layouts:  # named as asked (hunt 78: as its first replica, "1 x H100")
            raise memory_error(model, gpu, num_gpus, held_tokens=held, draft=self.draft,
                               precision=self.precision)  # fmt: skip
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
        """Users of a micro-batch whose decode tokens fit the budget (at least one)."""
        return max(1, self.token_budget // self.step_tokens)

    @property
    def decode_rounds(self) -> float:
        """Rounds of a request's output after its first token: ceil((O - 1) / E)."""
        return decode_steps(self.workload, self.tokens_per_round)

    def others_prefill(self, batch: int) -> float:
        """Prompt tokens of the other `batch` - 1 users a round of the request carries in
        steady state (the module docstring): (batch - 1) P over the round under way and the
        (O - 1) / E decode rounds, at most what the budget leaves beside the decode tokens."""
        if batch <= 1:
            return 0.0
        spread = (batch - 1) * self.workload.prompt_tokens / (self.decode_rounds + 1)
        return min(spread, float(max(0, self.token_budget - batch * self.step_tokens)))

    @property
    def unqueued_users(self) -> int:
        """Users of a micro-batch whose decode tokens and the others' prompts, spread as
        `others_prefill` spreads them, fit the budget: m t + (m - 1) q <= T, q = P / ((O - 1)
        / E + 1) (at least one). Past it the prompts queue: the users decoding at once in a full
        system, the steady batch of a benchmark fed "at an infinite rate"."""
        q = self.workload.prompt_tokens / (self.decode_rounds + 1)
        return max(1, int((self.token_budget + q) // (self.step_tokens + q)))

    def capacity_s(self, layout: GpuLayout, batch: int) -> float:
        """The fewest seconds a period of `batch` users can take: their prompt and decode
        tokens, batch (P + (O - 1) t / E), in rounds of the budget's T tokens, each priced as a
        full round of the batch's decode and T - batch t prompt tokens."""
        w, t = self.workload, self.step_tokens
        tokens = batch * (w.prompt_tokens + self.decode_rounds * t)
        room = max(1, self.token_budget - batch * t)
        return tokens / self.token_budget * self.round_s(layout, batch, room)[0]

    def step(self, layout: GpuLayout, users: int, *, tokens: int = 1, prefill: float = 0.0,
             draft: bool = False, rows: float | None = None) -> GpuStep:  # fmt: skip
        """`gpu_step.step` of `users` decoding and `prefill` prompt tokens (`rows`: the prompt
        rows whose logits it computes, `StepBatch.logit_rows`)."""
        m = self.draft if draft and self.draft is not None else self.model
        w = self.workload
        batch = StepBatch(users, tokens, w.kv_tokens, prefill, w.prompt_tokens, rows)
        return step(m, self.gpu, layout, batch, precision=self.precision,
                    fractions=self.fractions)  # fmt: skip

    def round_s(self, layout: GpuLayout, batch: int, prefill: float = 0.0,
                rows: float | None = None) -> tuple[float, str]:  # fmt: skip
        """(seconds of one round of `batch` users carrying `prefill` prompt tokens, bound): a
        step; with a draft, gamma draft steps and the verification, the prompt tokens riding
        in the first draft step and in the verification (hunt 68: the draft's share was a
        pass of its own, another read of its weights each round). No users: the prompt's
        passes alone. `rows`: the prompt rows whose logits each model computes (default:
        the prompts the tokens end on average, `gpu_step.StepBatch.logit_rows`)."""
        if self.speculation is None:
            s = self.step(layout, batch, prefill=prefill, rows=rows)
            return s.seconds, s.bound
        g = self.speculation.gamma
        drafts = self.step(layout, batch, prefill=prefill, draft=True, rows=rows).seconds
        if batch:
            drafts += (g - 1) * self.step(layout, batch, draft=True).seconds
        verify = self.step(layout, batch, tokens=g + 1, prefill=prefill, rows=rows)
        return drafts + verify.seconds, verify.bound

    def ttft_s(self, layout: GpuLayout, batch: int) -> float:
        """The round under way, then the prompt in chunks riding in the other `batch` - 1
        users' rounds (`batch`: the users of a micro-batch)."""
        return self._first_token(layout, batch)[0]

    def _first_token(self, layout: GpuLayout, batch: int) -> tuple[float, str]:
        """(`ttft_s`, the bound of the prompt's chunks: their longest part's, the full
        chunks' or the last one's). Each chunk computes one row's logits (vLLM's
        `logits_indices`, `gpu_step`'s docstring; hunt 79: every prompt token's were priced)."""
        others, p = batch - 1, self.workload.prompt_tokens
        chunk = max(1, self.token_budget - others * self.step_tokens)
        wait = self.round_s(layout, others, self.others_prefill(batch))[0] if others else 0.0
        full, rest = divmod(p, chunk)
        parts = [(full * s, b) for s, b in [self.round_s(layout, others, chunk, 1.0)] if full]
        parts += [self.round_s(layout, others, rest, 1.0)] if rest else []
        return wait + sum(s for s, _ in parts), max(parts)[1]

    # ---- points -----------------------------------------------------------------------
    def micro_times(self, layout: GpuLayout, micro: int) -> tuple[RequestTimes, float, str]:
        """(a request's times, its bare decode rounds' seconds, the bound) where each of the
        replica's micro-batches holds `micro` users (the module docstring). The bound is the
        step's that takes most of the request: its decode rounds', or its prompt chunks'
        where its first token takes longer (hunt 79: a one-output-token request, all prompt,
        was "hbm" from a decode round it never runs)."""
        rounds = self.decode_rounds
        own_s, bound = self.round_s(layout, micro, self.others_prefill(micro))
        first_s, first_bound = self._first_token(layout, micro)
        # below the budget's capacity the request's own path binds (no wait); past it the
        # prompts queue and the period is the full rounds that carry them
        times = RequestTimes(ttft_s=first_s, decode_s=rounds * own_s,
                             capacity_s=self.capacity_s(layout, micro))  # fmt: skip
        bound = first_bound if first_s > times.decode_s else bound
        return times, rounds * self.round_s(layout, micro)[0], bound

    def replica_point(self, layout: GpuLayout, batch: int, replicas: int = 1) -> OperatingPoint:
        """`replicas` replicas of `layout`, each serving `batch` users alone: the one pricing
        of a replica, which `layout_point` sums over replicas of their own batches. Its pp
        micro-batches hold batch % pp of ceil(batch / pp) users and the rest floor (none
        empty: fewer users than stages ride one a micro-batch). A stage passes each
        micro-batch once a round, so a round, shared by them all, is the mean of their
        passes (hunt 73: each was priced at the larger, and a 47th user cut 405B's output on
        tp 8 x pp 2, 881 -> 875 tokens/s): the request's times the mean of their times."""
        q, k = divmod(batch, layout.pp)
        sizes = [[m, n] for m, n in ((q + 1, k), (q, layout.pp - k)) if m and n]
        each = [(n / layout.pp, *self.micro_times(layout, m)) for m, n in sizes]
        _, times, bare_s, bound = each[0]
        if len(each) > 1:
            times = RequestTimes(**{f: sum(w * getattr(t, f) for w, t, _, _ in each)
                                    for f in ("ttft_s", "decode_s", "capacity_s")})  # fmt: skip
            bare_s = sum(w * b for w, _, b, _ in each)
        return times.point(
            batch * replicas, self.workload, input_time_share=prompt_share(bare_s, times.period_s),
            bound=bound,
            layout={"tp": layout.tp, "pp": layout.pp, "replicas": replicas, "batch": batch,
                    "micro_batch": sizes[0][0], "micro_batches": sizes,
                    "precision": self.precision.name, "token_budget": self.token_budget,
                    "kernel_s": self.kernel_s, "step_floor_s": floor_s(self.model, self.kernel_s)},
        )  # fmt: skip

    def layout_point(self, layout: GpuLayout, users: int) -> OperatingPoint:
        """`users` over the GPUs' replicas of `layout`: users % R replicas of
        ceil(users / R) users and the rest of floor(users / R), each priced alone
        (`replica_point`) and summed (`_replicas_point`). Hunt 73: every replica was priced
        at the larger batch, so 49 users on two tp 4 replicas were 25 + 25 and one user more
        cut the aggregate (2,600 -> 2,577 tokens/s, 70B bf16 on 8 x H100)."""
        replicas = self.units // layout.gpus
        q, r = divmod(users, replicas)
        parts = [(n, self.replica_point(layout, b, n))
                 for b, n in ((q + 1, r), (q, replicas - r)) if b and n]  # fmt: skip
        return _replicas_point(parts, replicas)

    def point(self, users: int) -> OperatingPoint:
        """The layout that serves `users` the most output tokens a second without a queue
        (`_layout_rank`); when every layout queues the prompts, the one that serves most."""
        require_int("users", users, 1, error=ServingError)  # hunt 67: 2.5 users were priced
        if users > self.max_users:
            raise ServingError(
                f"{users} users do not fit {self.units} x {self.name} with "
                f"{self.workload.held_tokens} tokens of context each: at most {self.max_users}"
                f" ({self.precision.name} weights and every user's KV cache within "
                f"{USABLE_MEMORY:g} of HBM, each user's {self.step_tokens} decode token(s) within "
                f"the step budget of {self.token_budget}); use more GPUs or a shorter context"
            )
        fits = [lay for lay, b in self.layouts.items() if b * (self.units // lay.gpus) >= users]
        return self._best(fits, users)

    def _best(self, fits: list[GpuLayout], users: int) -> OperatingPoint:
        """The best of `fits` at `users` (`_layout_rank`), each layout's reads recorded apart:
        a link latency read only by layouts not taken is noted as moving the point where an
        end of its sweep changes it (`_note`; hunt jobs17 B: 16 GPUs of an 8B, served as two
        tp 8 replicas, listed the InfiniBand latency of the tp 8 x pp 2 layout not taken)."""
        priced = []
        for lay in fits:
            with recording(isolated=True) as got:
                priced.append((self.layout_point(lay, users), got))
        best, own = max(priced, key=lambda x: _layout_rank(x[0]))

        def again() -> OperatingPoint:
            return max((self.layout_point(x, users) for x in fits), key=_layout_rank)

        _note(merged(*(got for _, got in priced)), own, again, best)
        return best


# the request's times averaged over the requests, where replicas of two batches serve them
_MEAN_KEYS = ("request_period_s", "decode_s", "admission_wait_s")


def _replicas_point(parts: list[tuple[int, OperatingPoint]], replicas: int) -> OperatingPoint:
    """The point of replicas priced alone, `parts` as (replicas, their point), the largest
    batch first: output and prompt tokens/s summed; the first token and the request's times
    (`_MEAN_KEYS`) the means over the requests served (a load test's means: a user of the
    smaller batch completes more of them), per-user speed 1 / their mean time per output
    token (vLLM's mean TPOT; None at one output token), so that users x output over the
    mean period stays the aggregate (the module docstring of `wse_systems.serving.frontier`);
    the prompts' share of the time the mean over the busy replicas (idle ones, fewer users
    than replicas, serve neither); the bound, the batch and the slowest user's speed and first token
    (`slowest_user_tokens_per_s`, `slowest_ttft_s`) the largest batch's replica's."""
    slow = parts[0][1]
    rates = [p.users / p.layout["request_period_s"] for _, p in parts]  # requests a second

    def mean(value) -> float:  # one batch: its own figure, unrounded
        if len(parts) == 1:
            return value(slow)
        return sum(r * value(p) for r, (_, p) in zip(rates, parts, strict=True)) / sum(rates)

    busy = sum(n for n, _ in parts)
    layout = {
        **slow.layout,
        "replicas": replicas,
        **{k: mean(lambda p, k=k: p.layout[k]) for k in _MEAN_KEYS},
        "replica_batches": [[p.layout["batch"], n] for n, p in parts],
        "slowest_user_tokens_per_s": slow.user_tokens_per_s,
        "slowest_ttft_s": slow.ttft_s,
    }
    return OperatingPoint(
        users=sum(p.users for _, p in parts),
        # one batch, or no per-user speed (one output token): its own figure, unrounded
        user_tokens_per_s=slow.user_tokens_per_s if len(parts) == 1 or
        slow.user_tokens_per_s is None else 1.0 / mean(lambda p: 1.0 / p.user_tokens_per_s),
        aggregate_tokens_per_s=sum(p.aggregate_tokens_per_s for _, p in parts),
        ttft_s=mean(lambda p: p.ttft_s), bound=slow.bound, layout=layout,
        input_tokens_per_s=sum(p.input_tokens_per_s for _, p in parts),
        input_time_share=sum(n * p.input_time_share for n, p in parts) / busy,
    )  # fmt: skip


def _layout_rank(p: OperatingPoint) -> tuple[bool, float, float]:
    """A layout's rank: no admission wait before one (hunt 69: a queued point's speed leaves
    out its wait, and a saturated tp 8 replica outranked eight tp 1 that served the same users
    at once), then output tokens/s in all, which at a fixed number of users is the shortest
    request, first token and output (queued ones too: their period), then per-user speed.
    Hunt 73: per-user speed alone took 2 x tp 4 over tp 8 at 40 users (70B bf16, 8 x H100)
    for 0.7% more speed with 0.7% less output and 63 ms more to the first token."""
    return p.layout["admission_wait_s"] == 0.0, p.aggregate_tokens_per_s, user_speed(p)


def gpus_to_match(
    model: DecoderShape, gpu: GpuSpec, *, user_tokens_per_s: float,
    aggregate_tokens_per_s: float, **serving: Any,
) -> tuple[int | None, int | None]:  # fmt: skip
    """(the fewest GPUs, as one replica, whose single user reaches `user_tokens_per_s`; the
    fewest GPUs, in replicas of one layout, that serve `aggregate_tokens_per_s` with every
    user at least that fast and admitted at once), None where no layout can. Layouts are
    enumerated (tp <= a node, then whole nodes up to one stage per layer), never GPU counts.
    `serving`: the `GpuServing` keywords (workload, fractions with the kernel cost,
    speculation, precision). The link latencies its layouts read are noted as moving it only
    where an end of their sweep changes the counts (hunt jobs17 B: a plan on one node, whose
    counts never took a pipeline across nodes, listed the InfiniBand latency as moving it)."""
    args = (model, gpu, user_tokens_per_s, aggregate_tokens_per_s, serving)
    with recording(isolated=True) as got:
        counts = _gpus_to_match(*args)
    _note(got, None, lambda: _gpus_to_match(*args), counts)
    return counts


def _note(got: Reads, sure: Reads | None, again: Callable[[], Any], now: Any) -> None:
    """Note `got`, reads recorded apart, in the recorders around: each as read and as moving
    as recorded, but a link latency (`gpu_links.LATENCY_KEYS`) that `sure` (the reads of what
    gave `now`; None: none) did not read as moving, only where `again()` with it at an end of
    its sweep differs from `now` (a latency moves every step that reads it, not always the
    choice among them)."""
    for key, values in got.values.items():
        moves = key in got.moving
        if moves and key in gpu_links.LATENCY_KEYS and reading():
            if sure is None or key not in sure.moving:
                ends = (min(constant_of(key).sweep), max(constant_of(key).sweep))
                moves = any(_again_at(key, v, again) != now for v in ends)
        for v in values:
            read(key, v, moves)


def _again_at(key: str, value: float, again: Callable[[], Any]) -> Any:
    """`again()` with the link latency `key` at `value`, its reads unrecorded."""
    with assume(**{key: value}), recording(isolated=True):
        return again()


def _gpus_to_match(
    model: DecoderShape, gpu: GpuSpec, user_tokens_per_s: float,
    aggregate_tokens_per_s: float, serving: dict[str, Any],
) -> tuple[int | None, int | None]:  # fmt: skip
    """`gpus_to_match`'s search (its docstring)."""
    node = gpu.gpus_per_node
    sizes = [r for r in range(1, node) if tp_ok(model, r)]  # every tp vLLM runs (hunt 75)
    sizes += [node * k for k in range(1, model.n_layers + 1) if tp_ok(model, node)]
    speed, both = None, None
    for r in sizes:
        lay = layout_for(r, gpu)
        try:
            one = GpuServing(model, gpu, num_gpus=r, **serving)
        except GpuMemoryError:
            continue
        if lay not in one.layouts or user_speed(one.layout_point(lay, 1)) < user_tokens_per_s:
            continue
        speed = r if speed is None else speed
        lo, hi = 1, one.layouts[lay]  # the largest batch still fast enough
        while lo < hi:
            mid = (lo + hi + 1) // 2
            at = one.layout_point(lay, mid)  # a user queued for its first token is not served
            ok = user_speed(at) >= user_tokens_per_s and at.layout["admission_wait_s"] == 0
            lo, hi = (mid, hi) if ok else (lo, mid - 1)
        per_replica = one.layout_point(lay, lo).aggregate_tokens_per_s
        total = r * math.ceil(aggregate_tokens_per_s / per_replica)
        both = total if both is None else min(both, total)
    return speed, both
