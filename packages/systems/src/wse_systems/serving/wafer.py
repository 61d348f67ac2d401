"""The wafer serving model: users in flight on a `PipelinePlan`, their speed, throughput,
time to first token and speculative decoding (Hot Chips 2024's pipeline, REFERENCES.md).

Contract. `WaferServing(config, spec, num_wafers=n, workload=w)` is a `ServingSystem`
(`wse_systems.serving.frontier`). For `users` in flight it plans the model with
`wse_systems.token.fastest_plan(..., context_len=w.held_tokens, slots=users)` (the head's rows,
`layout["head_rows"]`, and by default (`layout=None`) banded or compact regions,
`layout["layout"]`, that price one user's token shortest): the plan object the pipelined engine
runs, where every region holds its layers' weights, each user's KV cache for those layers and each
user's activations, declared in the wafer's SRAM ledger. The most users that fit (`max_users`) is
where that plan stops fitting; `budget()` states the per-PE budget of the fullest region; more
users are refused with its numbers.

A decode token and a prompt block are priced by `wse_systems.serving.blocks` (one
`Pipeline`: `wse_systems.token.price_token`'s phases on that plan with `wse_core.PerfModel`, the
one calibration), so a change of either flows through here. Its parts are the pipeline's
elements in order: regions (the layer stages and the head) and what lies between them (the
passes between wafers). The pipeline:

- one user's token takes T1 = the sum of every element's time (the batch-1 prediction);
- a region works on one item at a time (REFERENCES.md: "each region works on one token"):
  a decode token holds element j for h_j (its whole time; a pass between wafers only while
  its bytes stream, its latency overlapping the next item);
- a prompt of P tokens runs in blocks of k tokens ("multiple single-user prompt tokens in
  the same and in multiple pipe stages"), priced by the same `Pipeline` at a KV read of
  P / 2 tokens (the prompt's mean): a block holds each element k times its streaming work
  (instructions, SRAM, link words, off-wafer bytes) plus its latency (hops, fixed cycles,
  system passes) once, and the blocks pipeline through the elements, so the prompt alone
  takes sum_j b_j(k) + (ceil(P / k) - 1) max_j b_j(k) (`Pipeline.blocks_s`); k is at most
  what the regions' free SRAM holds (`Pipeline.block_sizes`: powers of two up to that);
- whole requests (`RequestWork`), the policy: each user sends a request of P prompt and O
  output tokens, then the next (sent as the last completes); prompt blocks go ahead of
  decode tokens at every element, first come first served. A request holds element j for
  W_j = O h_j + ceil(P / k) b_j(k); alone it takes its first token's time (the prompt's
  pass) plus O T1. Its first token at load U, admitted at once: the prompt's pass plus the
  item under way at the busiest element (nothing at one user);
- its output as the user sees it, from the first token to the last (hunt 66: the other users'
  prompts never slowed it, so per-user speed rose with the load): the user's tokens follow
  one another through the pipeline, and a prompt block of another user (it goes first)
  holds an element for b_j(k), during which the token cannot cross it. Each of the
  (U - 1) ceil(P / k) blocks per period T that falls in the user's output window D stalls
  the token for the block's longest hold, B = max_j ceil(P / k) b_j(k) per prompt (the
  stalls at the other elements overlap the token's own path: a lower bound on the
  interference), so D = O T1 T / (T - a), a = (U - 1) B (`RequestWork.times`);
- the period (`wse_systems.serving.frontier.RequestTimes`, the GPUs' arithmetic too): the
  request's own path, first token + D (T^2 - (first token + O T1 + a) T + first token a = 0),
  or U max_j W_j when the busiest element, serving one item at a time, is full; then a new
  request waits to be admitted until it has room, and that wait is part of its first token.
  Aggregate output U O / period, input U P / period, per-user speed O / D, and the block size
  k is the one with the most output at that load (then the first token soonest). The
  prompts' share of the time (`input_time_share`, for $/M input tokens) is their share of
  the busiest element's W at every load (hunt 66: the latency-bound side used the pass
  times, and the price split jumped 3-4.5x where the bound changed);
- speculation (`Speculation`): the one placement and round of
  `wse_systems.serving.speculative` (the draft on the fewest PE rows of every wafer that
  hold it, the target on the rest; a round is gamma draft tokens one after another then the
  target's pass over gamma + 1 tokens in blocks as a prompt), emitting
  E = (1 - a^(g+1)) / (1 - a) tokens; with U users a request takes O / E rounds, each
  holding the draft's elements and the target's.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

from wse_core.cost.perf import PerfModel
from wse_core.hw.spec import WaferSpec

from wse_systems.pipeline import LAYOUTS, PipelinePlan, PipelinePlanError, Regions
from wse_systems.serving.blocks import Pipeline, max_block_tokens, price_pipeline
from wse_systems.serving.frontier import (
    OperatingPoint,
    RequestTimes,
    ServingError,
    Speculation,
    Workload,
)
from wse_systems.serving.speculative import ParamBytes, Round, place_speculative, speculative_round
from wse_systems.token import fastest_plan

__all__ = [
    "MAX_USERS",
    "SramBudget",
    "Pipeline",
    "WaferServing",
    "RequestWork",
    "price_pipeline",
    "occupancy",
]

MAX_USERS = 1 << 20  # the search for what fits stops here (tiny models fit millions)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SramBudget:
    """The per-PE budget of the fullest region at `max_users` users (bytes per PE)."""

    sram_bytes_per_pe: int
    region: str
    weight_bytes_per_pe: float
    kv_bytes_per_user_per_pe: float
    act_bytes_per_user_per_pe: float
    max_users: int

    def describe(self) -> str:
        return (
            f"a PE has {self.sram_bytes_per_pe:,} B of SRAM; in region {self.region} the "
            f"weights take {self.weight_bytes_per_pe:,.0f} B and each user "
            f"{self.kv_bytes_per_user_per_pe:,.1f} B of KV cache + "
            f"{self.act_bytes_per_user_per_pe:,.1f} B of activations per PE: at most "
            f"{self.max_users:,} users"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequestWork:
    """One request on the pipeline (seconds): what it holds each element for, prompt and
    output together (`held_s`) and its prompt's part, its prompt pass and its decode alone,
    and the wait for the item under way at the bottleneck (none at one user)."""

    block: int
    held_s: Mapping[str, float]
    prompt_held_s: Mapping[str, float]
    prompt_s: float
    decode_s: float
    wait_s: float

    @property
    def ttft_s(self) -> float:
        return self.wait_s + self.prompt_s

    def bottleneck(self) -> tuple[str, float]:
        name = max(self.held_s, key=self.held_s.__getitem__)
        return name, self.held_s[name]

    def stall_s(self, users: int) -> float:
        """a: the other users' prompts' longest hold of one element, per period (module)."""
        return (users - 1) * max(self.prompt_held_s.values(), default=0.0)

    def times(self, users: int) -> RequestTimes:
        """First token admitted at once, the output window with the others' prompt stalls
        at the period, and the capacity (module docstring)."""
        a, first, capacity = self.stall_s(users), self.ttft_s, users * self.bottleneck()[1]
        s = first + self.decode_s + a  # the own path: T^2 - s T + first a = 0, larger root
        period = max(0.5 * (s + math.sqrt(s * s - 4.0 * first * a)), capacity)
        stalls = self.decode_s * a / (period - a)  # = D - O T1: never below 0, 0 alone
        return RequestTimes(ttft_s=first, decode_s=self.decode_s + stalls, capacity_s=capacity)

    def period_s(self, users: int) -> float:
        """A user's request period (`RequestTimes.period_s`)."""
        return self.times(users).period_s

    def output_per_s(self, users: int, output_tokens: int) -> float:
        return users * output_tokens / self.period_s(users)

    def point(self, users: int, workload: Workload, **layout: Any) -> OperatingPoint:
        name, work = self.bottleneck()
        times = self.times(users)
        return times.point(
            users, workload, input_time_share=self.prompt_held_s.get(name, 0.0) / work,
            bound="pipeline latency" if times.latency_bound else f"region {name}",
            layout={**layout, "bottleneck_s_per_request": work, "prompt_block_tokens": self.block,
                    "decode_alone_s": self.decode_s,
                    "decode_stalls_s": times.decode_s - self.decode_s},
        )  # fmt: skip


class WaferServing:
    """Users in flight on `num_wafers` wafers of `spec` (a `ServingSystem`; module docstring)."""

    def __init__(
        self,
        config: Any,
        spec: WaferSpec,
        *,
        num_wafers: int,
        workload: Workload,
        speculation: Speculation | None = None,
        bytes_per_param: int = 2,
        regions: Regions = Regions(layout=None),
    ) -> None:
        self.config, self.spec, self.workload = config, spec, workload
        self.speculation, self.bytes_per_param = speculation, bytes_per_param
        self.stages = regions.stages  # layer regions of the target (default: one per layer)
        self.head_rows = regions.head_rows  # the head's rows (None: the fastest, `fastest_plan`)
        self.layout = regions.layout or LAYOUTS[0]  # banded or compact (None: the faster)
        self.gemv = regions.gemv  # the program each GEMV is priced as (`GEMV_PROGRAMS`)
        self.units = num_wafers
        self.name = spec.system or spec.name  # the system built around the wafer
        self.model = PerfModel(spec)
        self._plans: dict[int, tuple[PipelinePlan, PipelinePlan | None]] = {}
        self._priced: dict[tuple[int, bool], tuple[Pipeline, Pipeline | None]] = {}
        self._points: dict[int, OperatingPoint] = {}
        self._by_layout: dict[tuple, Pipeline] = {}
        self._rounds: dict[int, Round] = {}
        if regions.layout is None:
            self.layout = self._faster_layout()
        self.plans(1)  # the model (and draft) must fit with one user: else the plan's error

    # ---- layout ---------------------------------------------------------------------
    def _regions(self) -> Regions:
        """The target's regions as asked, in the layout now in use."""
        return Regions(stages=self.stages, layout=self.layout, gemv=self.gemv,
                       head_rows=self.head_rows)  # fmt: skip

    def _plan(self, config: Any, spec: WaferSpec, users: int) -> PipelinePlan:
        return fastest_plan(
            config, spec, lambda p: self._price(config, p, self.workload.kv_tokens).token_s,
            num_wafers=self.units, context_len=self.workload.held_tokens, slots=users,
            bytes_per_param=self.bytes_per_param, regions=self._regions(),
        )  # fmt: skip

    def plans(self, users: int) -> tuple[PipelinePlan, PipelinePlan | None]:
        """(target plan, draft plan or None) with `users` in flight; PipelinePlanError if
        they do not fit."""
        if users not in self._plans:
            self._plans[users] = self._layout(users)
        return self._plans[users]

    def _layout(self, users: int) -> tuple[PipelinePlan, PipelinePlan | None]:
        if self.speculation is None:
            return self._plan(self.config, self.spec, users), None
        return place_speculative(
            self.config, self.speculation.draft, self.spec, num_wafers=self.units,
            context_len=self.workload.held_tokens, slots=users,
            param_bytes=ParamBytes(target=self.bytes_per_param), regions=self._regions(),
        )  # fmt: skip

    def _forget(self) -> None:
        for cache in (self._plans, self._priced, self._rounds):
            cache.clear()

    def _faster_layout(self) -> str:
        """The layout whose one user gets the shorter token (a tie keeps bands)."""
        per_token: dict[str, float] = {}
        kept: dict[str, tuple[dict, ...]] = {}
        for layout in LAYOUTS:
            self.layout = layout
            self._forget()
            try:
                latency, _, per_round = self.round_s(1)
            except PipelinePlanError:
                continue
            per_token[layout] = latency / per_round
            kept[layout] = tuple(dict(c) for c in (self._plans, self._priced, self._rounds))
        self._forget()
        if not per_token:
            return LAYOUTS[0]  # neither fits: the banded plan's error follows
        faster = min(per_token, key=lambda k: (per_token[k], LAYOUTS.index(k)))
        # hunt 63: the faster layout's plans and round are kept, not planned and priced
        # again (a round prices the whole draft and target: seconds for 4,096 layers)
        caches = (self._plans, self._priced, self._rounds)
        for cache, held in zip(caches, kept[faster], strict=True):
            cache.update(held)
        return faster

    def _holds(self, users: int) -> bool:
        try:
            self.plans(users)
            return True
        except PipelinePlanError:
            return False

    @functools.cached_property
    def max_users(self) -> int:
        """The most users whose KV caches fit beside the weights (MAX_USERS at most)."""
        lo = 1
        while lo < MAX_USERS and self._holds(min(2 * lo, MAX_USERS)):
            lo = min(2 * lo, MAX_USERS)
        hi = min(2 * lo, MAX_USERS) - 1  # 2 lo failed (or lo is the cap)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self._holds(mid) else (lo, mid - 1)
        return lo

    def budget(self) -> SramBudget:
        """The per-PE budget of the fullest target region at `max_users`."""
        plan = self.plans(self.max_users)[0]
        r = max((plan.head, *plan.stages), key=lambda s: s.bytes_per_pe)
        pes, u = r.region.num_pes, plan.slots
        return SramBudget(
            sram_bytes_per_pe=self.spec.sram_bytes_per_pe, region=r.name,
            weight_bytes_per_pe=r.weight_bytes / pes, kv_bytes_per_user_per_pe=r.kv_bytes / u / pes,
            act_bytes_per_user_per_pe=r.act_bytes / u / pes, max_users=self.max_users,
        )  # fmt: skip

    # ---- pricing --------------------------------------------------------------------
    def pipelines(self, users: int, prompt: bool = False) -> tuple[Pipeline, Pipeline | None]:
        """(target, draft or None) priced for a decode token, or for the prompt
        (`prompt=True`: a KV read of half the prompt)."""
        key = (users, prompt)
        if key not in self._priced:
            w = self.workload
            kv = max(1, w.prompt_tokens // 2) if prompt else w.kv_tokens
            target_plan, draft_plan = self.plans(users)
            target = self._price(self.config, target_plan, kv)
            draft = None
            if draft_plan is not None and self.speculation is not None:
                draft = self._price(self.speculation.draft, draft_plan, kv)
            self._priced[key] = (target, draft)
        return self._priced[key]

    def _price(self, config: Any, plan: PipelinePlan, kv_tokens: int) -> Pipeline:
        """`price_pipeline`, once per layout: plans for different numbers of users that give
        every region the same rectangle, layers and per-user bytes price the same (a token's
        work does not depend on how many users are in flight), so only the blocks differ."""
        regions = (plan.head, *plan.stages)
        per_user = tuple(
            (s.name, s.wafer, s.layers, s.region, s.weight_bytes, s.kv_bytes / plan.slots,
             s.act_bytes / plan.slots) for s in regions
        )  # fmt: skip
        key = (id(config), kv_tokens, plan.num_wafers, plan.bytes_per_param, per_user)
        if key not in self._by_layout:
            priced = price_pipeline(config, plan, kv_tokens=kv_tokens, model=self.model)
            self._by_layout[key] = priced
        return dataclasses.replace(self._by_layout[key], max_block_tokens=max_block_tokens(plan))

    def _refuse(self, users: int) -> None:
        if users < 1:
            raise ServingError(f"users must be >= 1, got {users}")
        if users > self.max_users:
            raise ServingError(
                f"{users} users do not fit {self.units} x {self.name} with "
                f"{self.workload.held_tokens} tokens of context each: {self.budget().describe()}"
                "; use more wafers or a shorter context"
            )

    def round_s(self, users: int) -> tuple[float, dict[str, float], float]:
        """(latency of one user's round, seconds each element is held per user-round,
        tokens per round) at `users` in flight; the draft's elements are named "draft ..."."""
        target, draft = self.pipelines(users)
        if draft is None or self.speculation is None:
            return target.token_s, target.occupancy_s(1), 1.0
        if users not in self._rounds:
            (tp, dp), w = self.plans(users), self.workload
            self._rounds[users] = speculative_round(
                self.config, tp, self.speculation.draft, dp, gamma=self.speculation.gamma,
                kv_tokens=w.kv_tokens, model=self.model,
            )  # fmt: skip
        rnd = self._rounds[users]
        return rnd.seconds, rnd.held_s, self.speculation.tokens_per_round

    def request(self, users: int, block: int) -> RequestWork:
        """One request at `users` in flight, its prompt in blocks of `block` tokens."""
        w = self.workload
        latency, held, per_round = self.round_s(users)
        rounds = w.output_tokens / per_round
        target, draft = self.pipelines(users, prompt=True)
        p, k = w.prompt_tokens, min(block, w.prompt_tokens)
        blocks = math.ceil(p / k)
        prompt = {n: blocks * s for n, s in target.occupancy_s(k).items()}
        prompt_s = target.blocks_s(p, k)
        if draft is not None:  # the draft reads the prompt on its own rows, alongside
            prompt |= {f"draft {n}": blocks * s for n, s in draft.occupancy_s(k).items()}
            prompt_s = max(prompt_s, draft.blocks_s(p, k))
        total = {n: rounds * held.get(n, 0.0) + prompt.get(n, 0.0) for n in held | prompt}
        return RequestWork(block=k, held_s=total, prompt_held_s=prompt, prompt_s=prompt_s,
                           decode_s=rounds * latency, wait_s=max(held.values()) if users > 1
                           else 0.0)  # fmt: skip

    def point(self, users: int) -> OperatingPoint:
        if users not in self._points:
            self._refuse(users)
            self._points[users] = self._point(users)
        return self._points[users]

    def _point(self, users: int) -> OperatingPoint:
        """The block size that serves `users` best (most output, then the first token
        soonest); the module docstring's policy."""
        target, _ = self.pipelines(users, prompt=True)
        sizes = {min(k, self.workload.prompt_tokens) for k in target.block_sizes()}
        works = [self.request(users, k) for k in sorted(sizes)]
        best = max(works, key=lambda r: (r.output_per_s(users, self.workload.output_tokens),
                                         -r.ttft_s))  # fmt: skip
        token = self.pipelines(users)[0]
        plan = self.plans(users)[0]
        return best.point(users, self.workload, regions=len(plan.stages) + 1, wafers=self.units,
                          layout=self.layout, token_s=token.token_s,
                          head_rows=plan.head.region.rows, **token.token_parts_s())  # fmt: skip

    def occupancy(self, users: int) -> dict[str, float]:
        """Fraction of the time each element (the draft's too) is busy at `users` in flight."""
        self._refuse(users)
        latency, held, _ = self.round_s(users)
        return occupancy(held, latency, users)


def occupancy(held_s: Mapping[str, float], latency_s: float, users: int) -> dict[str, float]:
    """The busy fraction of each pipeline element with `users` in flight, element j held
    held_s[j] per user-round and a round at least `latency_s` long: U h_j / max(latency,
    U max h). With S equal stages (h = 1 tick, latency S ticks) every stage is busy U / S,
    the occupancy of the pipelined engine's schedule (`wse_inference.pipeline.schedule`)."""
    round_s = max(latency_s, users * max(held_s.values()))
    return {name: users * h / round_s for name, h in held_s.items()}
