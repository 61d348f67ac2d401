"""The wafer serving model: users in flight on a `PipelinePlan`, their speed, throughput,
time to first token and speculative decoding (Hot Chips 2024's pipeline, REFERENCES.md).

Contract. `WaferServing(config, spec, num_wafers=n, workload=w)` is a `ServingSystem`
(`wse_systems.serving.frontier`). For `users` in flight it plans the model with
`context_len=w.held_tokens, slots=users` in the placement that serves them best under the
policy below (`wse_systems.serving.placements.search`: each layout, banded or compact, unless
one is asked, `layout["layout"]`; each head size of the ladder, `layout["head_rows"]`, on
the whole wafer and on each footprint of fewer PE rows, `layout["pe_rows"]` of
`layout["wafer_pe_rows"]` (hunt jobs17: GPT-2 124M's token 70.4 us on the whole wafer, 52.4
on 64 rows; where the plans lie on each wafer, `layout["footprint"]` and, speculative,
`layout["draft_footprint"]`: `PipelinePlan.footprint`); the prompt block each allows; hunt
73: by one user's token, 70B on 4 wafers was held to 21 users where banded holds 44);
speculation: below): the plan the pipelined
engine runs, every region holding its layers' weights, each user's KV cache for those layers and
activations, declared in the wafer's SRAM ledger. The most users that fit (`max_users`) is where the
layout that holds the most stops fitting (the regions by bytes, as the search's);
`budget()` states the per-PE budget of the fullest region; more users are refused with its
numbers, users that are not a whole number as `GpuServing` refuses them.

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
  system passes) once (under meshgemv each product the cheaper of that and a MeshGEMM that
  fits: `blocks`), but the head's product and the argmax once a prompt, on one token in its
  last block, as the engine runs them (`Pipeline.logits_s`), and the blocks pipeline through
  the elements, so the prompt alone takes sum_j b_j(k) + (ceil(P / k) - 1) max_j b_j(k) and
  the head's once (`Pipeline.prompt_blocks_s`); k is at most
  what the regions' free SRAM holds (`Pipeline.block_sizes`: powers of two up to that);
- whole requests (`RequestWork`), the policy: each user sends a request of P prompt and O
  output tokens, then the next (sent as the last completes); each element serves one item
  at a time, prompt blocks ahead of decode items (no preemption), first come first served
  within each. A request holds element j for W_j = R h_j + ceil(P / k) b_j(k) (R = O - 1:
  the prompt's pass emits the first token); alone it takes its prompt's pass L plus R T1;
- its output window D (first token to last; hunt 72: the busiest element was taken never
  to idle, and runs of the policy served 38-62% of the priced output at 16-64 users with
  1,024-token blocks): a decode token entering the pipeline behind another user's prompt
  trails its last block element by element (a convoy), so each other user's prompt freezes
  the output for its pass less the token ahead, and the prompts past R catch a waiting token
  for Bp each: D = R tau + min(U - 1, R) (L - tau)+ + C Bp, tau = max(T1, U max_j h_j) a
  token in free flow (`RequestWork.window_s`): the least output over the users' phases
  (passes that overlap freeze less), a bound named in the point (`layout["output_bound"]`),
  a few percent below a discrete-event run of the policy at the blocks it chooses, far
  below at long blocks (`RequestWork`); per-user speed (O - 1) / D;
- the period (`wse_systems.serving.frontier.RequestTimes`, as the GPUs'): L + D (no wait
  behind the others' prompts added: D freezes for those passes), or U max_j W_j when the
  busiest element is full (a new request then waits to be admitted); the least first token
  (users evenly spaced, `layout["ttft_least_s"]`) and D fill it; output U O / period, input
  U P / period; the placement and block k: the most output, within 1% a tie, then the
  soonest first token (`placements.served`);
- its first token (`ttft_s`, `layout["ttft_bound"]`): a conservative bound on its mean over
  the users' phases (`RequestWork.first_s`: within the period less the decode alone), so
  U O / (TTFT + (O - 1) / speed) <= U O / period, equal at one user;
- the prompts' share (`input_time_share`, for $/M input tokens): 1 - (the same users'
  period without prompts) / period, the GPUs' definition (hunt 73);
- speculation (`Speculation`): the placement and round of `wse_systems.serving.speculative`
  (the draft on the PE rows of every wafer, the target on the rest; a round is gamma draft
  tokens one after another then the target's pass over gamma + 1 tokens in blocks as a
  prompt), emitting E = (1 - a^(g+1)) / (1 - a) tokens; R = ceil((O - 1) / E) whole rounds a
  request (`frontier.decode_steps`), D's units; the placement searched at each load and layout,
  the draft at its own bytes a value (`Speculation.draft_bytes_per_param`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from wse_core.cost.perf import PerfModel
from wse_core.errors import require_int
from wse_core.hw.spec import WaferSpec

from wse_systems import token
from wse_systems.pipeline import LAYOUTS, PipelinePlan, PipelinePlanError, Regions, plan_pipeline
from wse_systems.serving import blocks, placements, stage_counts
from wse_systems.serving import speculative as sp
from wse_systems.serving.blocks import Pipeline, block_caps, price_pipeline, priced_by
from wse_systems.serving.frontier import OperatingPoint, ServingError, Speculation, Workload
from wse_systems.serving.memo import Memo, frozen
from wse_systems.serving.request import Pipes, RequestWork, request_work
from wse_systems.serving.speculative import Round, speculative_round

__all__ = ["MAX_USERS", "SramBudget", "Pipeline", "WaferServing", "RequestWork", "price_pipeline",
           "occupancy"]  # fmt: skip

MAX_USERS = 1 << 20  # the search for what fits stops here (tiny models fit millions)

# Shared by the systems of one model, wafer and context (`memo`): each layout's search for a
# load, the most users held, each placement's pipeline and round (a large model's is big)
_SEARCHES, _MOST_USERS, _PIPELINES, _ROUNDS = Memo(64), Memo(64), Memo(256), Memo(32)


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
            f"a PE has {self.sram_bytes_per_pe:,} B of SRAM for data; in region {self.region} the "
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
        regions: Regions = Regions(layout=None),
        search_stages: bool = False,
    ) -> None:
        self.config, self.spec, self.workload = config, spec, workload
        self.speculation, self.bytes_per_param = speculation, bytes_per_param
        self.stages, self.search_stages = regions.stages, search_stages  # `stage_counts`
        self.head_rows = regions.head_rows  # the head's rows (None: each load's, `placements`)
        self._asked_layout = regions.layout  # banded or compact (None: each load's best)
        self.gemv = regions.gemv  # the program each GEMV is priced as (`GEMV_PROGRAMS`)
        self.units = num_wafers
        self.name = spec.system or spec.name  # the system built around the wafer
        self.model = PerfModel(spec)
        self._configs = {id(c): frozen(c) for c in (config, getattr(speculation, "draft", None))}
        # what the module's caches share by (the model's rates: the constants it prices with)
        self._shared = (frozen(config), frozen(speculation), frozen(spec), num_wafers,
                        workload.held_tokens, workload.kv_tokens, bytes_per_param,
                        frozen(self.model.rates), search_stages)  # fmt: skip
        self._plans: dict[int, tuple[PipelinePlan, PipelinePlan | None]] = {}
        self._blocks: dict[int, int] = {}  # the prompt block each load's search chose
        self._ladders: dict[tuple, list[PipelinePlan]] = {}  # each (layout, stages)'s, 1 user
        self._priced: dict[tuple[int, bool], tuple[Pipeline, Pipeline | None]] = {}
        self._points: dict[int, OperatingPoint] = {}
        self._by_layout: dict[tuple, Pipeline] = {}
        self._capped: dict[tuple, Pipeline] = {}
        self._requests: dict[tuple, RequestWork] = {}
        self._bounds: dict[tuple, RequestWork] = {}
        self._rounds: dict[int, Round] = {}
        # the model (and draft) must fit with one user: else the plan's error; `layout`:
        # one user's (each point names its own, `layout["layout"]`)
        self.layout: str = self.plans(1)[0].layout

    # ---- placement ------------------------------------------------------------------
    def _regions(self, layout: str | None = None) -> Regions:
        """The target's regions as asked, in `layout` (None: as asked, None when chosen)."""
        return Regions(stages=self.stages, layout=layout or self._asked_layout, gemv=self.gemv,
                       head_rows=self.head_rows)  # fmt: skip

    def _layouts(self) -> tuple[str, ...]:
        return LAYOUTS if self._asked_layout is None else (self._asked_layout,)

    def plans(self, users: int) -> tuple[PipelinePlan, PipelinePlan | None]:
        """(target plan, draft plan or None) with `users` in flight, the placement that serves
        them best (`placements.search`); PipelinePlanError if they do not fit."""
        if users not in self._plans:
            # the policy's price reads the whole workload (hunt 73), not only its KV tokens
            key = self._key("search", users, self._regions(), frozen(self.workload))
            self._plans[users], self._blocks[users] = _SEARCHES.get(
                key, lambda: placements.search(self, users)
            )
        return self._plans[users]

    def _key(self, *parts: Any) -> tuple:
        """A key of the module's caches: this system's model and wafer, `parts`, and the
        functions that compute an entry (`blocks.pricers`; a test swaps one for its oracle)."""
        own = (placements.search, type(self)._holds, placements.best, token.decode_phases,
               sp.decode_phases)  # fmt: skip
        return (self._shared, self.gemv, blocks.pricers(), own, *parts)

    def _asked(self, users: int, layout: str | None, stages: int | None) -> dict[str, Any]:
        """The plan's keywords for `users` in flight (the target's regions: `layout`, `stages`)."""
        return dict(num_wafers=self.units, context_len=self.workload.held_tokens, slots=users,
                    regions=dataclasses.replace(self._regions(layout), stages=stages))  # fmt: skip

    def _param_bytes(self) -> sp.ParamBytes:
        """The target's bytes a value and the draft's own (`Speculation.draft_bytes_per_param`;
        None: the target's)."""
        draft = None if self.speculation is None else self.speculation.draft_bytes_per_param
        return sp.ParamBytes(target=self.bytes_per_param, draft=draft)

    def _speculative(self, users: int, layout: str) -> tuple[PipelinePlan, PipelinePlan]:
        kv = self.workload.kv_tokens
        return sp.place_speculative(
            self.config, self.speculation.draft, self.spec, param_bytes=self._param_bytes(),
            round=sp.RoundSetup(self.speculation.gamma, kv,
                                lambda config, plan: self._price(config, plan, kv),
                                self._load(users)),
            **self._asked(users, layout, self.stages),
        )  # fmt: skip

    def _holds(self, users: int, layout: str, stages: int | None) -> bool:
        """Whether `users` fit in `layout` and `stages`: the regions by bytes hold them as the
        search's do (hunt 68: each probe of `max_users` searched the ladders)."""
        asked, bpp = self._asked(users, layout, stages), self.bytes_per_param
        try:
            if self.speculation is None:
                plan_pipeline(self.config, self.spec, bytes_per_param=bpp, **asked)
            else:
                sp.fewest_draft_rows(self.config, self.speculation.draft, self.spec,
                                     param_bytes=self._param_bytes(), **asked)  # fmt: skip
        except PipelinePlanError:
            return False
        return True

    @functools.cached_property
    def max_users(self) -> int:
        """The most users whose KV caches fit beside the weights in the layout that holds
        the most (MAX_USERS at most; hunt 73: the layout of one user's fastest token)."""
        counts = stage_counts.stage_counts(self)  # the stage counts searched (or the asked)
        return max(_MOST_USERS.get(self._key("most", self._regions(layout), s),
                                   functools.partial(self._most_users, layout, s))
                   for layout in self._layouts() for s in counts)  # fmt: skip

    def _most_users(self, layout: str, stages: int | None) -> int:
        if not self._holds(1, layout, stages):
            return 0
        lo = 1
        while lo < MAX_USERS and self._holds(min(2 * lo, MAX_USERS), layout, stages):
            lo = min(2 * lo, MAX_USERS)
        hi = min(2 * lo, MAX_USERS) - 1  # 2 lo failed (or lo is the cap)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self._holds(mid, layout, stages) else (lo, mid - 1)
        return lo

    def budget(self) -> SramBudget:
        """The per-PE budget of the fullest target region at `max_users`."""
        plan = self.plans(self.max_users)[0]
        r = max((plan.head, *plan.stages), key=lambda s: s.bytes_per_pe)
        pes, u = r.region.num_pes, plan.slots
        return SramBudget(
            sram_bytes_per_pe=self.spec.data_bytes_per_pe, region=r.name,
            weight_bytes_per_pe=r.weight_bytes / pes, kv_bytes_per_user_per_pe=r.kv_bytes / u / pes,
            act_bytes_per_user_per_pe=r.user_act_bytes / u / pes, max_users=self.max_users,
        )  # fmt: skip

    # ---- pricing --------------------------------------------------------------------
    def pipelines(self, users: int, prompt: bool = False) -> tuple[Pipeline, Pipeline | None]:
        """(target, draft or None) priced for a decode token, or for the prompt
        (`prompt=True`: a KV read of half the prompt)."""
        if (users, prompt) not in self._priced:
            self._priced[users, prompt] = self._pipes(self.plans(users), prompt)
        return self._priced[users, prompt]

    def _pipes(self, plans: tuple[PipelinePlan, PipelinePlan | None],
               prompt: bool) -> tuple[Pipeline, Pipeline | None]:  # fmt: skip
        w = self.workload
        kv = w.prompt_kv_tokens if prompt else w.kv_tokens
        target_plan, draft_plan = plans
        target = self._price(self.config, target_plan, kv)
        if draft_plan is None or self.speculation is None:
            return target, None
        return target, self._price(self.speculation.draft, draft_plan, kv)

    def _price(self, config: Any, plan: PipelinePlan, kv_tokens: int) -> Pipeline:
        """`price_pipeline`, once per layout: plans for different numbers of users that give
        every region the same rectangle, layers and per-user bytes price the same (a token's
        work does not depend on how many users are in flight), so only the blocks differ."""
        key = (self._configs[id(config)], kv_tokens, *priced_by(plan))
        if key not in self._by_layout:
            self._by_layout[key] = _PIPELINES.get(self._key("pipeline", *key), lambda: (
                price_pipeline(config, plan, kv_tokens=kv_tokens, model=self.model)))  # fmt: skip
        # this plan's block limits (activations; meshgemv: MeshGEMM buffers), not the first
        # plan's: they move with the users held (hunt 68: the buffers' cap was dropped); one
        # Pipeline a set of caps, so its blocks priced at one load serve the others (hunt 73)
        caps = block_caps(config, plan)
        capped = (key, caps["max_block_tokens"], frozen(caps["gemm_tokens"]))
        if capped not in self._capped:
            self._capped[capped] = dataclasses.replace(self._by_layout[key], **caps)
        return self._capped[capped]

    def _refuse(self, users: int) -> None:
        # GpuServing.point's check and words (hunt 68: 2.5 users were priced here)
        require_int("users", users, 1, error=ServingError)
        if users > self.max_users:
            raise ServingError(
                f"{users} users do not fit {self.units} x {self.name} with "
                f"{self.workload.held_tokens} tokens of context each: {self.budget().describe()}"
                f"; serve them as {-(-users // self.max_users)} replicas of {self.units} x "
                f"{self.name}, {-(-users // -(-users // self.max_users))} users each at most "
                f"(wse plan infer --users {-(-users // -(-users // self.max_users))}; "
                "--tokens-per-day sets the replicas: its tokens over a replica's output a day, "
                "rounded up), else more wafers a replica (compare its tokens/s with the "
                "replicas': more wafers lengthen a token's path) or a shorter context"
            )

    def round_s(self, users: int) -> tuple[float, dict[str, float], float]:
        """(latency of one user's round, seconds each element is held per user-round,
        tokens per round) at `users` in flight; the draft's elements are named "draft ..."."""
        target, draft = self.pipelines(users)
        if draft is None or self.speculation is None:
            return target.token_s, target.occupancy_s(1), 1.0
        if users not in self._rounds:
            self._rounds[users] = self._round(self.plans(users), target, draft)
        rnd = self._rounds[users]
        return rnd.seconds, rnd.held_s, self.speculation.tokens_per_round

    def _round(self, plans: tuple[PipelinePlan, PipelinePlan | None], target: Pipeline,
               draft: Pipeline) -> Round:  # fmt: skip
        """`speculative_round` once per placement and verify block: it reads the target's
        caps on a block only as its block, `k`, and whether each element's MeshGEMMs fit
        there (hunt 70: each load priced the two models and the round's whole tree again)."""
        (tp, dp), kv, spec = plans, self.workload.kv_tokens, self.speculation
        assert spec is not None and dp is not None
        k = target.pass_s(spec.gamma + 1)[1]
        fits = tuple(k <= target.gemm_tokens.get(n, 0) for n, _, _ in target.elements)
        key = self._key("round", kv, priced_by(tp), priced_by(dp), k, fits)
        return _ROUNDS.get(key, lambda: speculative_round(
            self.config, tp, spec.draft, dp, gamma=spec.gamma, kv_tokens=kv, model=self.model,
            pipelines=(target, draft)))  # fmt: skip

    def request(self, users: int, block: int) -> RequestWork:
        """One request at `users` in flight, its prompt in blocks of `block` tokens."""
        latency, held, _ = self.round_s(users)
        pipes = Pipes(*self.pipelines(users), *self.pipelines(users, prompt=True), latency, held)
        return request_work(self.workload, block, pipes, self.speculation)

    def _works(self, plans: tuple[PipelinePlan, PipelinePlan | None]) -> list[RequestWork]:
        """One request on placement `plans` in each prompt block its free SRAM allows; a
        block's request is kept by what it reads (the regions and each product's MeshGEMM
        caps; speculation: the verify pass's cap too), not the users (hunt 73: every load
        weighs every placement)."""
        (target, draft), (t_prompt, d_prompt) = self._pipes(plans, False), self._pipes(plans, True)
        pipes = (target, draft, t_prompt, d_prompt)
        key = (*(None if p is None else priced_by(p) for p in plans),
               *(None if p is None else frozen(p.gemm_tokens) for p in pipes),
               None if draft is None else target.max_block_tokens)  # fmt: skip
        sizes = sorted({min(k, self.workload.prompt_tokens) for k in t_prompt.block_sizes()})
        if any((key, k) not in self._requests for k in sizes):
            if draft is None:
                latency, held = target.token_s, target.occupancy_s(1)
            else:
                rnd = self._round(plans, target, draft)
                latency, held = rnd.seconds, rnd.held_s
            for k in sizes:
                if (key, k) not in self._requests:
                    self._requests[key, k] = request_work(
                        self.workload, k, Pipes(*pipes, latency, held), self.speculation
                    )
        return [self._requests[key, k] for k in sizes]

    def _load(self, users: int) -> sp.LoadFn:
        """(target plan, draft plan) -> (a user's request period at `users`, its first token
        there) in the block that serves most: a speculative placement priced by this model at
        its load (hunt 72: by one user's round, 8B served 8% less at 16-64 users; by the round
        period alone, a toy 16% less at 4 users), equal periods by the policy's next key, the
        sooner first token (session 80: two heads' equal periods, the slower head's users
        sent further apart, `RequestWork.release_s`)."""
        w, spec, half = self.workload, self.speculation, self.workload.prompt_kv_tokens
        assert spec is not None

        def period(target_plan: PipelinePlan, draft_plan: PipelinePlan) -> tuple[float, float]:
            t, d = (self._price(c, p, w.kv_tokens) for c, p in
                    ((self.config, target_plan), (spec.draft, draft_plan)))  # fmt: skip
            pipes = Pipes(t, d, self._price(self.config, target_plan, half),
                          self._price(spec.draft, draft_plan, half),
                          spec.gamma * d.token_s + t.pass_s(spec.gamma + 1)[0],
                          sp.round_held(t, d, spec.gamma))  # fmt: skip
            works = [request_work(w, k, pipes, spec) for k in pipes.target_prompt.block_sizes()]
            return min((t.period_s, r.first_s(users, t)) for r, t in
                       ((r, r.times(users)) for r in works))  # fmt: skip

        return period

    def point(self, users: int) -> OperatingPoint:
        self._refuse(users)  # before the cache, to which True is 1
        if users not in self._points:
            self._points[users] = self._point(users)
        return self._points[users]

    def _point(self, users: int) -> OperatingPoint:
        """The point of the placement and block the search chose (`placements.served`)."""
        plans, block = self.plans(users), self._blocks.get(users)  # the search sets the block
        if block is None:  # a placement set by hand: its own best block
            block = placements.served([(plans, w) for w in self._works(plans)], users,
                                      self.workload.output_tokens)[1].block  # fmt: skip
        best, token, (plan, draft) = self.request(users, block), self.pipelines(users)[0], plans
        return best.point(users, self.workload, regions=len(plan.stages) + 1, wafers=self.units,
                          layout=plan.layout, stages=len(plan.stages), token_s=token.token_s,
                          head_rows=plan.head.region.rows, pe_rows=plan.spec.pe_rows,
                          wafer_pe_rows=self.spec.pe_rows, not_held=self.not_held(users),
                          footprint=plan.footprint(),
                          draft_footprint=None if draft is None else draft.footprint(),
                          **token.token_parts_s())  # fmt: skip

    def not_held(self, users: int) -> str:
        """The layouts and stage counts searched that do not hold `users` in flight, each with
        the most it holds ("" when all do): why a load is served in another arrangement than
        a smaller load (hunt 82, jobs18 H3: 5,000 users of Llama 3 8B at 16 + 8 tokens were
        served on 8 stages at 36% of 3,000 users' output, and nothing said why)."""
        out = []
        for layout in self._layouts():
            for s in stage_counts.stage_counts(self):
                most = _MOST_USERS.get(self._key("most", self._regions(layout), s),
                                       functools.partial(self._most_users, layout, s))  # fmt: skip
                if most < users:
                    n = self.config.n_layers if s is None else s
                    out.append(f"{layout}, {n} stages: at most {most:,} users")
        return "; ".join(out)

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
