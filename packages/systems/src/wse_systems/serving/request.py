"""One request on a wafer pipeline: what it holds each element for, and its times.

Contract. `RequestWork` is one request of `wse_systems.serving.wafer.WaferServing` (built by
its `request(users, block)`; the policy is that module's docstring): the seconds it holds
each pipeline element for (prompt and output, and the prompt's part), its prompt's pass, its
decode alone and the decode units (tokens, or speculative rounds) it takes. `times(users)` is
its least first token, output window and period at `users` in flight (`wse_systems.serving.
frontier.RequestTimes`, the GPUs' arithmetic too), `first_s(users)` its first token's bound
and `point(users, workload, **layout)` the operating point they give.

The times under the policy (each element serves one item at a time; prompt blocks go ahead
of decode items, first come first served within each class; U users in a closed loop):

- the output window D (hunt 72: the busiest element was taken never to idle; a
  discrete-event run of the policy served Llama 3 8B at 64 users with 1,024-token blocks
  38% of the output priced, at 16 users with the 32-token blocks chosen 80%). A decode unit
  alone takes tau1 = decode_s / R (R = ceil((O - 1) / E) units a request: the prompt emits
  the first token, hunt 75); U users' units cross the busiest
  element one at a time, so in free flow a unit takes tau = max(tau1, U h*), h* that
  element's hold per unit. A prompt block holds an element far longer than a decode item
  and cannot be passed (prompts first, no preemption): a decode item that enters the
  pipeline while another user's prompt is in it trails the prompt's last block element
  after element and leaves when it leaves (a convoy). Each other user's prompt therefore
  freezes this user's output for its pass L (`prompt_s`) less the work already ahead of
  it: D = R tau + N (L - e tau)+, e tau that credit: the unit under way (1), or, with a
  draft, the verify pass less its hold at the last element (the drafts run on their own
  rows past the target's prompt and the verify trails it; hunt 73: crediting a draft token
  priced Llama 3 70B + 1B at 64 users 13% under a run), at most the draft's prompt's lag
  behind the target's; N = min(U - 1, R n) for n items a unit (one freeze begins with each
  other prompt, or with each item). Past R n other prompts (short outputs, many users) the
  rest arrive while an item waits in a convoy and catch it (prompts pass decode items at
  every element), and its freeze ends Bp after the last (Bp the prompt's hold at the
  element it holds longest, the convoy's pace): C = min(U - 1 - N, (U - 1) D / T) of
  them, the other prompts arriving in the window (one each a period T), so
  D = R tau + N (L - e tau)+ + C Bp, solved with T (hunt 73: N alone priced Llama 3 8B on a
  CS-3 with 128 + 20 tokens at 128 users 132 tokens/s a user, evenly spaced users ran 81.4;
  now 116.5 and 122.9 at the 8-token blocks chosen; a one-token output after 8,192 tokens
  is priced half what runs serve). The freezes end where L falls to e tau, the catches do
  not: an item still waits its turn at the busiest element (tau = U h*) and a prompt that
  arrives then goes ahead of it, so C Bp stays and D is continuous in the load (session 85:
  without it Llama 3 8B's 128 + 20 tokens in 8-token blocks on a wse3 had a 248 ms window
  at 176 users, 59 ms at 183, and a 222 ms first token, every other prompt before it; runs
  with the users evenly spaced 252 and 267 ms, first tokens 17 and 14 ms). A bound, the
  least output over the users' phases (a run with the users evenly spaced attains it while
  the passes fit apart): passes that overlap freeze less (the later prompt's blocks
  pipeline behind the earlier's), and the closed loop overlaps them (the users a convoy
  releases finish together and send their prompts together) by an amount the users'
  starting phases set (a run settles in a cycle that keeps it). At the blocks the bound
  chooses (short passes, prompts bound by the busiest element) it is a few percent below a
  run; at long blocks far below (tests/test_serving_queueing_hunt72.py);
- the period T = max(L + D, U max_j W_j): the own path, or the busiest element full (every
  user's whole request through it once; then a new request waits to be admitted). A
  user's period is its first token and its window, so the least first token is T - D (L,
  and when full that wait): D the longest window over the users' phases, T - D is the
  shortest first token, and the bound on its mean (below) lies between it and T less the
  decode alone (session 85: the window without C Bp left every prompt's hold at the busiest
  element before the first token when full, 222 ms, above that bound's 112 ms and the
  runs' 14-56 ms). A wait of the prompt behind the others' prompts is not
  added to the own path: those passes are the ones D already freezes (hunt 73: charged
  twice, Llama 3 8B with 4,096 + 16 tokens served 7% less at two users than at one);
- the first token, a bound on its mean over the users' phases (`first_s`, the point's
  `ttft_s`, named in `layout["ttft_bound"]`): the phases set it, from the prompt's pass
  alone (users evenly spaced: `layout["ttft_least_s"]`) to the pass behind every other
  prompt in one burst (all users in step, which a convoy keeps: the users it releases
  together send together, one after another: a request ends with its last item leaving the
  path's last element, which serves one item at a time, so two users send g apart at least,
  g that item's hold there, `release_s`); a prompt waits behind each other prompt once a
  period at most, B at the element it holds longest, less the g by which it was sent after
  each, so the mean wait is (U - 1) (B - g)+ / 2 at most, with the decode unit under way
  there; nor can it exceed the period less the decode alone (session 80: without g, Llama
  3.2 1B's 64 users of 128 + 2 tokens, whose placement's head of 10 rows holds each decode
  token 29 us, were priced 6% above a run, its users sent 29 us apart). Cobham's
  (1954) priority queue at random arrivals was 5-16x below runs from random phases (Llama 3
  70B on 8 wafers, 64 users: 20 ms priced, 319-471 ms run), which bunch;
- the prompts' share of the time (`input_time_share`, for $/M input tokens): the share of
  the period the prompts add, 1 - R tau / period (the same users without prompts take R tau
  a request), the GPUs' definition (`wse_systems.serving.gpus`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from wse_systems.decoder import PER_TOKEN
from wse_systems.serving.frontier import (
    OperatingPoint,
    RequestTimes,
    Speculation,
    Workload,
    decode_steps,
)

__all__ = ["Pipes", "RequestWork", "request_work"]

# the decode token's elements on the head region: its own, and the per-token group's (head
# product, argmax, next embedding) that `wse_systems.serving.blocks` names by its phase
_HEAD = ("head", PER_TOKEN)


class Pipes(NamedTuple):
    """A placement's priced pipelines (`wse_systems.serving.blocks.Pipeline`): the target's
    and the draft's (None without one) for a decode token and for the prompt (a KV read of
    half the prompt), and its decode unit alone (seconds; a token, or a round) with the
    seconds it holds each element (the draft's named "draft ...")."""

    target: Any
    draft: Any
    target_prompt: Any
    draft_prompt: Any
    unit_s: float
    unit_held_s: Mapping[str, float]


def request_work(
    workload: Workload, block: int, pipes: Pipes, speculation: Speculation | None = None
) -> RequestWork:
    """One request on `pipes`, its prompt in blocks of `block` tokens (at most the prompt):
    ceil(P / k) blocks on each model's prompt pipeline, the draft's alongside (the prompt's
    pass: the longer, which emits the first token), then ceil((O - 1) / E) units, none at O = 1
    (`wse_systems.serving.frontier.decode_steps`; `wse_systems.serving.wafer`'s policy)."""
    rounds = decode_steps(workload, speculation.tokens_per_round if speculation else 1.0)
    p, k = workload.prompt_tokens, min(block, workload.prompt_tokens)
    blocks = math.ceil(p / k)
    prompt = _prompt_held(pipes.target_prompt, blocks, k)
    prompt_s = pipes.target_prompt.prompt_blocks_s(p, k)
    if pipes.draft_prompt is not None:  # the draft reads the prompt on its own rows
        prompt |= {f"draft {n}": s for n, s in _prompt_held(pipes.draft_prompt, blocks, k).items()}
        prompt_s = max(prompt_s, pipes.draft_prompt.prompt_blocks_s(p, k))
    held = pipes.unit_held_s
    total = {n: rounds * held.get(n, 0.0) + prompt.get(n, 0.0) for n in dict(held) | prompt}
    items: dict[str, Any] = {}
    if speculation is not None and pipes.draft is not None:  # drafts, then the verify pass
        # the drafts run on their own rows past the target's prompt: a round trails it at
        # its verify, which leaves its hold at the last element after the prompt's last
        # block (its pass less that credited), or behind the draft's prompt, shorter by
        # at least as much
        verify_s = pipes.target.pass_s(speculation.gamma + 1)[0]
        tail_s = max(held.get(n, 0.0) for n in pipes.target_prompt.occupancy_s(k))
        lag_s = prompt_s - pipes.draft_prompt.prompt_blocks_s(p, k) if pipes.draft_prompt else 0.0
        credit_s = max(0.0, min(verify_s - tail_s, lag_s))
        items = dict(entries=speculation.gamma + 1, entry_s=credit_s)
    return RequestWork(block=k, held_s=total, prompt_held_s=prompt, prompt_s=prompt_s,
                       decode_s=rounds * pipes.unit_s, units=rounds,
                       release_s=_release_s(pipes, rounds, k, speculation), **items)  # fmt: skip


def _release_s(pipes: Pipes, rounds: float, k: int, speculation: Speculation | None) -> float:
    """g: the least time between two users' requests' ends, the hold of the item that ends a
    request at the last element of its path that holds one (an element that holds none, a
    pass between wafers on one, keeps the items' spacing): a decode token, a verify block of
    the last round, or with no decode the prompt's last block; 0 where the prompt's pass ends
    on either of two paths (the target's and the draft's, at one output token)."""
    if rounds and speculation is not None:
        held = pipes.target.occupancy_s(pipes.target.pass_s(speculation.gamma + 1)[1])
    elif rounds:
        held = pipes.target.occupancy_s(1)
    elif pipes.draft_prompt is None:
        prompt, once = pipes.target_prompt, pipes.target_prompt.logits_s()
        held = {n: s + once.get(n, 0.0) for n, s in prompt.prompt_occupancy_s(k).items()}
    else:
        return 0.0
    return next((s for s in reversed(held.values()) if s > 0.0), 0.0)


def _prompt_held(pipe: Any, blocks: int, k: int) -> dict[str, float]:
    """Seconds a prompt of `blocks` blocks of `k` holds each element of `pipe`: each block's
    hold, and its logits once (`wse_systems.serving.blocks.Pipeline.logits_s`; session 80:
    the head was held for every prompt token)."""
    once = pipe.logits_s()
    return {n: blocks * s + once.get(n, 0.0) for n, s in pipe.prompt_occupancy_s(k).items()}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequestWork:
    """One request on the pipeline (seconds): what it holds each element for, prompt and
    output together (`held_s`) and its prompt's part, its prompt pass and its decode alone,
    in `units` decode units (the output tokens after the first, or speculative rounds; none
    at one output token: then it holds the elements for its prompt alone)."""

    block: int
    held_s: Mapping[str, float]
    prompt_held_s: Mapping[str, float]
    prompt_s: float
    decode_s: float
    units: float
    entries: int = 1  # a unit's items entering the pipelines one after another
    entry_s: float | None = None  # the work credited ahead of a prompt (None: the unit)
    release_s: float = 0.0  # g: two users' requests end this far apart at least

    def bottleneck(self) -> tuple[str, float]:
        name = max(self.held_s, key=self.held_s.__getitem__)
        return name, self.held_s[name]

    def unit_s(self, users: int) -> float:
        """tau: a decode unit in free flow, alone or one at a time through the busiest
        element with `users` in flight (0 without decode units)."""
        if not self.units:
            return 0.0
        per_unit = max(w - self.prompt_held_s.get(n, 0.0) for n, w in self.held_s.items())
        return max(self.decode_s, users * per_unit) / self.units

    def window_s(self, users: int) -> float:
        """D: the output window with every other user's prompt convoy in it, a freeze
        lengthened by the prompts that catch the item while it waits (the module): the root
        of D = R tau + N (L - e tau)+ + min(U - 1 - N, (U - 1) D / T) Bp, T the period at D,
        by bisection (the right side rises with D, at a slope under one); the catches kept
        where L <= e tau freezes nothing (the item waits at the busiest element: continuous)."""
        if not self.units:  # one output token: the prompt's pass emits it, no window
            return 0.0
        tau, alone = self.unit_s(users), self.decode_s / self.units
        share = 1.0 if self.entry_s is None else self.entry_s / alone  # e
        frozen = min(users - 1, self.units * self.entries)
        base = self.units * tau  # R tau + N (L - e tau)+, the freezes none where L <= e tau
        if self.prompt_s > share * tau:  # as (R - N e) tau + N L: R L where every item waits
            base = (self.units - frozen * share) * tau + frozen * self.prompt_s
        spare = users - 1 - frozen  # the other prompts, past the N a freeze begins with
        if spare <= 0:
            return base
        big, capacity = self._prompt_element()[0], users * self.bottleneck()[1]

        def excess(window: float) -> float:  # rises with the window: its root is D
            rate = (users - 1) / max(self.prompt_s + window, capacity)
            caught = min(spare, rate * window)
            return window - base - caught * big

        low, high = base, base + spare * big  # excess(low) <= 0 <= excess(high)
        for _ in range(64):
            mid = 0.5 * (low + high)
            low, high = (mid, high) if excess(mid) < 0 else (low, mid)
        return high

    def first_s(self, users: int, times: RequestTimes | None = None) -> float:
        """The first token, a bound on its mean over the users' phases (the module): the
        period less the decode alone, or the prompt's pass behind half the others' prompts
        and the longest decode item under way, whichever is less; `times`: `times(users)`
        where the caller has them (the window is a root found by bisection)."""
        times = times or self.times(users)
        big, item = self._prompt_element()
        wait = max(0.0, big - self.release_s)  # behind each earlier sender, sent g later
        burst = self.prompt_s + 0.5 * (users - 1) * wait + item if users > 1 else self.prompt_s
        return max(times.first_token_s, min(times.period_s - self.decode_s, burst))

    def _prompt_element(self) -> tuple[float, float]:
        """(B, a decode unit's hold: its longest item at most) at the element the prompt
        holds longest."""
        name = max(self.prompt_held_s, key=self.prompt_held_s.__getitem__)
        big = self.prompt_held_s[name]
        return big, (self.held_s[name] - big) / self.units if self.units else 0.0

    def times(self, users: int) -> RequestTimes:
        """The least first token (the prompt's pass, or the admission wait when full), the
        output window and the capacity: the period (the module)."""
        capacity = users * self.bottleneck()[1]
        return RequestTimes(ttft_s=self.prompt_s, decode_s=self.window_s(users),
                            capacity_s=capacity)  # fmt: skip

    def period_s(self, users: int) -> float:
        """A user's request period (`RequestTimes.period_s`)."""
        return self.times(users).period_s

    def output_per_s(self, users: int, output_tokens: int) -> float:
        return users * output_tokens / self.period_s(users)

    def point(self, users: int, workload: Workload, **layout: Any) -> OperatingPoint:
        name, work = self.bottleneck()
        times = self.times(users)
        bare = self.units * self.unit_s(users)  # the same users' period without prompts
        point = times.point(
            users, workload, input_time_share=1.0 - bare / times.period_s,
            bound="pipeline latency" if times.latency_bound else _region(name, layout),
            layout={**layout, "bottleneck_s_per_request": work, "prompt_block_tokens": self.block,
                    "prompt_pass_s": self.prompt_s, "decode_alone_s": self.decode_s,
                    "decode_stalls_s": times.decode_s - self.decode_s,
                    "output_bound": "conservative: each other user's prompt convoy falls in "
                    "the output window, and the prompts that catch a frozen item lengthen "
                    "its freeze (wse_systems.serving.request)",
                    "ttft_least_s": times.first_token_s,
                    "ttft_bound": "conservative: the mean over the users' phases at most "
                    "(wse_systems.serving.request)"},
        )  # fmt: skip
        return dataclasses.replace(point, ttft_s=self.first_s(users, times))


def _region(name: str, layout: Mapping[str, Any]) -> str:
    """The bound of a request that fills element `name`: its region, the head by that name
    (hunt 75: "region per_token", a phase's name, was the bound where Llama 3.2 1B's output
    fell 3,515 -> 1,173 tokens/s from 241 to 291 users, its head cut from 304 PE rows to 23)
    with its rows, which the layer regions' weights and the users' KV cache leave it."""
    draft, own = name.startswith("draft "), name.removeprefix("draft ")
    if own not in _HEAD:
        return f"region {name}"
    if draft or layout.get("head_rows") is None:
        return f"region {'draft ' if draft else ''}head"
    return (f"region head: the layer regions' weights and the users' KV cache leave it "
            f"{layout['head_rows']:,} PE rows")  # fmt: skip
