"""The wafer serving model: users in flight on a `PipelinePlan`, their speed, throughput,
time to first token and speculative decoding (Hot Chips 2024's pipeline, REFERENCES.md).

Contract. `WaferServing(config, spec, num_wafers=n, workload=w)` is a `ServingSystem`
(`wse_systems.serving.frontier`). For `users` in flight it plans the model with
`wse_systems.pipeline.plan_pipeline(..., context_len=w.held_tokens, slots=users)`: the
plan object the pipelined engine runs, where every region holds its layers' weights, each
user's KV cache for those layers and each user's activations, declared in the wafer's SRAM
ledger. The most users that fit (`max_users`) is where that plan stops fitting; `budget()`
states the per-PE budget of the fullest region; more users are refused with its numbers.

Each token is priced by `wse_systems.token.price_token` (`decode_phases` on that plan with
`wse_core.PerfModel`, the one calibration), so a change of either flows through here. Its
top-level parts are the pipeline's elements in order: regions (the layer stages and the
head) and what lies between them (the passes between wafers). The pipeline:

- one user's token takes T1 = the sum of every element's time (the batch-1 prediction);
- a region works on one token at a time (REFERENCES.md: "each region works on one token")
  for its whole time; a pass between wafers is occupied only while its bytes stream (its
  latency overlaps the next token); t_max = the longest occupancy;
- with U users each user waits max(T1, U t_max) per token: per-user speed 1 / that,
  aggregate U / that (= U x per-user while U t_max <= T1, the pipeline not yet full);
- a prompt of P tokens runs in blocks of k tokens ("multiple single-user prompt tokens in
  the same and in multiple pipe stages"): a block costs each element k times its
  streaming work (instructions, SRAM, link words, off-wafer bytes) plus its latency (hops,
  fixed cycles, system passes) once; the blocks pipeline through the elements, so the pass
  takes sum_j b_j(k) + (ceil(P / k) - 1) max_j occ_j(k), for the best k whose activations
  fit the regions' free SRAM. The prompt is priced at a KV read of P / 2 tokens (its mean);
- time to first token at load U: that pass over `prefill_share` of the bottleneck, which the
  U - 1 decoding users keep busy min(1, (U - 1) t_max / T1);
- speculation (`Speculation`): the draft gets the fewest PE rows of every wafer that hold it
  (its own `plan_pipeline` on those rows), the target the rest of each wafer; a round is
  gamma draft tokens one after another then the target's pass over gamma + 1 tokens (blocks
  as a prompt), emitting E = (1 - a^(g+1)) / (1 - a) tokens; with U users a round takes
  max(latency, U x the target's bottleneck occupancy per round, U x the draft's).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

from wse_core.cost.perf import PerfModel, Phase, Phases, Work
from wse_core.hw.spec import WaferSpec

from wse_systems.decoder import PER_TOKEN
from wse_systems.pipeline import PipelinePlan, PipelinePlanError, plan_pipeline
from wse_systems.serving.frontier import (
    OperatingPoint,
    ServingError,
    Speculation,
    Workload,
    prefill_share,
)
from wse_systems.token import price_token

__all__ = [
    "MAX_USERS",
    "SramBudget",
    "Pipeline",
    "WaferServing",
    "price_pipeline",
    "occupancy",
]

MAX_USERS = 1 << 20  # the search for what fits stops here (tiny models fit millions)
_LATENCY_FIELDS = ("latency_hops", "fixed_cycles", "system_hops")


@dataclasses.dataclass(frozen=True)
class _Priced:
    """A phase tree priced once: each leaf's streaming and latency seconds (per token)."""

    mode: str  # "leaf", "serial" or "overlap"
    repeat: float
    stream_s: float = 0.0
    latency_s: float = 0.0
    children: tuple[_Priced, ...] = ()

    def seconds(self, tokens: int, *, latency: bool = True) -> float:
        """A block of `tokens` tokens: streaming work `tokens` times, latency once."""
        if self.mode == "leaf":
            inner = tokens * self.stream_s + (self.latency_s if latency else 0.0)
        else:
            kids = [c.seconds(tokens, latency=latency) for c in self.children]
            inner = sum(kids) if self.mode == "serial" else max(kids, default=0.0)
        return self.repeat * inner


def _fingerprint(work: Work) -> tuple:
    values = (getattr(work, f.name) for f in dataclasses.fields(work))
    return tuple(tuple(sorted(v.items())) if isinstance(v, Mapping) else v for v in values)


def _price(model: PerfModel, part: Phase | Phases, cache: dict) -> _Priced:
    if isinstance(part, Phases):
        kids = tuple(_price(model, p, cache) for p in part.parts)
        return _Priced(part.mode, part.repeat, children=kids)
    key = _fingerprint(part.work)
    if key not in cache:
        w = part.work
        stream = dataclasses.replace(w, latency_hops=0.0, fixed_cycles=0.0, system_hops=0.0)
        latency = Work(**{f: getattr(w, f) for f in _LATENCY_FIELDS})
        cache[key] = (model.cost(stream).seconds, model.cost(latency).seconds)
    stream_s, latency_s = cache[key]
    return _Priced("leaf", part.repeat, stream_s, latency_s)


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """One plan's elements in order: (name, is a region, priced tree); see the module."""

    elements: tuple[tuple[str, bool, _Priced], ...]
    max_block_tokens: int  # the largest prompt block whose activations fit every region

    @property
    def token_s(self) -> float:
        """T1: one token through every element (the batch-1 seconds per token)."""
        return sum(p.seconds(1) for _, _, p in self.elements)

    def occupancy_s(self, tokens: int = 1) -> dict[str, float]:
        """Seconds each element is held by a block of `tokens` tokens."""
        return {
            name: p.seconds(tokens, latency=region) for name, region, p in self.elements
        }  # fmt: skip

    def bottleneck(self, tokens: int = 1) -> tuple[str, float]:
        occ = self.occupancy_s(tokens)
        name = max(occ, key=occ.__getitem__)
        return name, occ[name]

    def pass_s(self, n_tokens: int) -> tuple[float, int, float]:
        """(seconds, block size, bottleneck seconds) of `n_tokens` of one user in blocks."""
        best = None
        sizes = {min(n_tokens, self.max_block_tokens)}
        sizes |= {k for k in (1 << i for i in range(n_tokens.bit_length())) if k <= max(sizes)}
        for k in sorted(sizes):
            blocks = math.ceil(n_tokens / k)
            fill = sum(p.seconds(k) for _, _, p in self.elements)
            occ = self.bottleneck(k)[1]
            total = fill + (blocks - 1) * occ
            if best is None or total < best[0]:
                best = (total, k, blocks * occ)
        assert best is not None
        return best


def price_pipeline(config: Any, plan: PipelinePlan, *, kv_tokens: int, model=None) -> Pipeline:
    """The elements of one decode token of `config` on `plan`, priced: the phases of
    `wse_systems.token.price_token` (the one pricer of a token), each element's streaming
    and latency seconds apart (their sum is that report's seconds)."""
    model = model or PerfModel(plan.spec)
    step = price_token(config, plan, kv_tokens=kv_tokens, model=model).phases
    # the per-token group (head product, argmax, next embedding) holds the head region
    regions = {s.name for s in plan.stages} | {plan.head.name, PER_TOKEN}
    cache: dict = {}
    elements = tuple((p.name, p.name in regions, _price(model, p, cache)) for p in step.parts)
    return Pipeline(elements, _max_block(plan))


def _max_block(plan: PipelinePlan) -> int:
    """1 + the extra tokens' activations that fit the free SRAM of every region."""
    extra = []
    for s in (plan.head, *plan.stages):
        per_token = s.act_bytes / plan.slots / s.region.num_pes
        free = plan.spec.sram_bytes_per_pe - s.bytes_per_pe
        extra.append(math.inf if per_token == 0 else max(0, free) // per_token)
    return int(min(1 + min(extra), MAX_USERS))


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
        stages: int | None = None,
    ) -> None:
        self.config, self.spec, self.workload = config, spec, workload
        self.speculation, self.bytes_per_param = speculation, bytes_per_param
        self.stages = stages  # layer regions of the target (default: one per layer)
        self.units = num_wafers
        self.name = spec.system or spec.name  # the system built around the wafer
        self.model = PerfModel(spec)
        self._plans: dict[int, tuple[PipelinePlan, PipelinePlan | None]] = {}
        self._priced: dict[tuple[int, bool], tuple[Pipeline, Pipeline | None]] = {}
        self._points: dict[int, OperatingPoint] = {}
        self._by_layout: dict[tuple, Pipeline] = {}
        self.plans(1)  # the model (and draft) must fit with one user: else the plan's error

    # ---- layout ---------------------------------------------------------------------
    def _plan(self, config: Any, spec: WaferSpec, users: int) -> PipelinePlan:
        return plan_pipeline(
            config, spec, num_wafers=self.units, context_len=self.workload.held_tokens,
            slots=users, bytes_per_param=self.bytes_per_param,
            stages=self.stages if config is self.config else None,
        )  # fmt: skip

    def _fits(self, config: Any, rows: int, users: int) -> bool:
        try:
            self._plan(config, self.spec.replace(pe_rows=rows), users)
            return True
        except PipelinePlanError:
            return False

    def plans(self, users: int) -> tuple[PipelinePlan, PipelinePlan | None]:
        """(target plan, draft plan or None) with `users` in flight; PipelinePlanError if
        they do not fit."""
        if users not in self._plans:
            self._plans[users] = self._layout(users)
        return self._plans[users]

    def _layout(self, users: int) -> tuple[PipelinePlan, PipelinePlan | None]:
        if self.speculation is None:
            return self._plan(self.config, self.spec, users), None
        draft, rows = self.speculation.draft, self.spec.pe_rows
        if not self._fits(draft, rows - 1, users):
            raise PipelinePlanError(
                f"the draft model does not fit {self.units} x {self.name} with {users} users"
            )
        lo, hi = 1, rows - 1  # the fewest PE rows of each wafer that hold the draft
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self._fits(draft, mid, users) else (mid + 1, hi)
        draft_plan = self._plan(draft, self.spec.replace(pe_rows=lo), users)
        try:
            target_plan = self._plan(self.config, self.spec.replace(pe_rows=rows - lo), users)
        except PipelinePlanError as e:
            raise PipelinePlanError(
                f"the target and its draft do not fit {self.units} x {self.name} together "
                f"(the draft takes {lo} of the {rows} PE rows of each wafer): {e}"
            ) from None
        return target_plan, draft_plan

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
        return dataclasses.replace(self._by_layout[key], max_block_tokens=_max_block(plan))

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
        g = self.speculation.gamma
        verify_s, k, _ = target.pass_s(g + 1)
        blocks = math.ceil((g + 1) / k)
        held = {n: blocks * s for n, s in target.occupancy_s(k).items()}
        held |= {f"draft {n}": g * s for n, s in draft.occupancy_s(1).items()}
        return g * draft.token_s + verify_s, held, self.speculation.tokens_per_round

    def prefill_s(self, users: int) -> tuple[float, int]:
        """(seconds, block size) of one user's prompt alone (the draft's alongside)."""
        target, draft = self.pipelines(users, prompt=True)
        p = self.workload.prompt_tokens
        t, k, _ = target.pass_s(p)
        return (max(t, draft.pass_s(p)[0]) if draft is not None else t), k

    def point(self, users: int) -> OperatingPoint:
        if users not in self._points:
            self._refuse(users)
            self._points[users] = self._point(users)
        return self._points[users]

    def _point(self, users: int) -> OperatingPoint:
        latency, held, per_round = self.round_s(users)
        name = max(held, key=held.__getitem__)
        occ = held[name]
        round_s = max(latency, users * occ)
        prefill, block = self.prefill_s(users)
        busy = min(1.0, (users - 1) * occ / latency)
        return OperatingPoint(
            users=users, user_tokens_per_s=per_round / round_s,
            aggregate_tokens_per_s=users * per_round / round_s,
            ttft_s=prefill / prefill_share(busy, users),
            bound="pipeline latency" if latency >= users * occ else f"region {name}",
            layout={"wafers": self.units, "regions": len(self.plans(users)[0].stages) + 1,
                    "round_latency_s": latency, "bottleneck_s_per_round": occ,
                    "prompt_block_tokens": block},
        )  # fmt: skip

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
