"""Hunt 72, the wafer serving model against a run of its own policy
(`wse_systems.serving.request`, `wafer`, `speculative`). Broken before:

- hole 1: `RequestWork.times` took the capacity as users x the busiest element's work, that
  element never idle, and the block with the most output so priced was the largest: a
  discrete-event run of the policy (each element one item at a time, prompt blocks ahead of
  decode items, first come first served within each, users in a closed loop) served Llama 3
  8B at 64 users and 1,024-token blocks 8,135 output tokens/s against 21,609 priced (a
  prompt block that cannot be passed drags every decode token behind it through the
  pipeline, and the busiest element idles). Here: two toy models, priced up to 2.2x what the
  run serves. Now each other user's prompt freezes a user's output for its pass (a bound
  over the users' phases, attained by evenly spaced users), and blocks are chosen by it;
- hole 2: a speculative placement was the one user's (the shortest round) at every load;
  now each load's placement has the shortest round period at that load.

Oracles: `_policy_run`, the policy run event by event, written apart from the model, fed
only the seconds each item holds each element (the pipelines' `occupancy_s`, the one
pricer); the placements by `speculative_round` (the engine's round) over the grid.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import math
import random
from typing import NamedTuple

import pytest
from wse_core import preset
from wse_models import preset_config
from wse_systems.pipeline import Regions
from wse_systems.serving import Speculation, WaferServing, Workload
from wse_systems.serving.blocks import price_pipeline
from wse_systems.serving.placements import OUTPUT_TIE
from wse_systems.serving.request import Pipes, request_work
from wse_systems.serving.speculative import GRID_STEP, speculative_round
from wse_systems.token import head_rows_ladder, ladder_plans
from wse_systems.transformer import DecoderCounts

SMALL = preset("small")
TOY = DecoderCounts(
    name="toy", arch="llama", n_layers=4, d_model=256, n_heads=4, n_kv_heads=2, d_ff=512,
    vocab_size=1000, max_seq_len=128,
)  # fmt: skip
TOY_DRAFT = dataclasses.replace(TOY, name="toy-draft", n_layers=1)
# 32 prompt + 17 output tokens, the first the prompt's, 16 after it (hunt 75: 16 output
# tokens were 16 after it); speculation at alpha 1 keeps gamma + 1 = 4 tokens a round, so a
# request is a whole number of rounds in the run as in the model (4)
WORK = Workload(prompt_tokens=32, output_tokens=17, context_len=49)
SPEC = Speculation(draft=TOY_DRAFT, gamma=3, alpha=1.0)
TIE = 1.0 - OUTPUT_TIE  # output within this share of the most: a tie (the policy)
# The run counts whole rounds in its last two thirds (about 20 requests a user): its output
# rate is good to about 1% (one user: 0.2-1.3% off the exact figure); a capacity-bound
# point of the model is that close above a run that comes near its capacity
ABOVE = 0.03
PERIODS = 30  # the run's length, in request periods of the model


class _Case(NamedTuple):
    """One request as the run sees it: the prompt's paths (elements in order with the
    seconds a block holds each) and blocks a path, a round's draft path and drafts, its
    verify path and verify items, rounds a request, tokens a round."""

    prompt: tuple[tuple[tuple[str, float], ...], ...]
    blocks: int
    draft: tuple[tuple[str, float], ...]
    drafts: int
    verify: tuple[tuple[str, float], ...]
    verifies: int
    rounds: int
    tokens: float
    last: tuple[tuple[tuple[str, float], ...], ...] = ()  # each prompt path's last block


def _case(serve: WaferServing, users: int, block: int) -> _Case:
    w, spec = serve.workload, serve.speculation
    target, draft = serve.pipelines(users)
    t_prompt, d_prompt = serve.pipelines(users, prompt=True)
    k = min(block, w.prompt_tokens)
    # session 80: a prompt's head, argmax and token out run once, in its last block (as the
    # engine's prompt pass runs the head: on the prompt's last position alone)
    prompt, last = (_held(t_prompt, k),), (_held(t_prompt, k, last=True),)
    blocks = math.ceil(w.prompt_tokens / k)
    if spec is None or draft is None or d_prompt is None:
        # the prompt's pass emits the first token, O - 1 decode tokens follow (hunt 75)
        return _Case(prompt, blocks, (), 0, tuple(target.occupancy_s(1).items()), 1,
                     w.output_tokens - 1, 1.0, last)  # fmt: skip
    prompt += (tuple((f"draft {n}", s) for n, s in _held(d_prompt, k)),)
    last += (tuple((f"draft {n}", s) for n, s in _held(d_prompt, k, last=True)),)
    kv = target.pass_s(spec.gamma + 1)[1]
    rounds = (w.output_tokens - 1) / spec.tokens_per_round  # after the prompt's token
    assert rounds == int(rounds)
    return _Case(prompt, blocks, tuple((f"draft {n}", s) for n, s in draft.occupancy_s(1).items()),
                 spec.gamma, tuple(target.occupancy_s(kv).items()),
                 math.ceil((spec.gamma + 1) / kv), int(rounds), spec.tokens_per_round,
                 last)  # fmt: skip


def _held(pipe, k: int, last: bool = False) -> tuple[tuple[str, float], ...]:
    """A prompt block's holds of each element in order; the last block's with the
    prompt's logits (head, argmax, token out)."""
    once = pipe.logits_s() if last else {}
    return tuple((n, s + once.get(n, 0.0)) for n, s in pipe.prompt_occupancy_s(k).items())


def _policy_run(case: _Case, starts: list[float], horizon: float) -> tuple[float, float, float]:
    """Users send their first requests at `starts` (s), each the next as its last round
    ends; each element serves one item at a time, prompt blocks (class 0) before decode
    items (class 1), first come first served within a class, never preempting; a round is
    `drafts` draft items one after another, then its verify items together. -> (output
    tokens/s, mean first token s, mean output window s) over the last two thirds."""
    clock, warm, tick, events = 0.0, horizon / 3, itertools.count(), []
    queues: dict[str, tuple[collections.deque, collections.deque]] = collections.defaultdict(
        lambda: (collections.deque(), collections.deque())
    )
    busy: set[str] = set()
    user = [dict(sent=0.0, first=0.0, left=0, drafted=0, verifying=0, rounds=0) for _ in starts]
    tally = dict(tokens=0.0, firsts=[], windows=[])

    def enter(u: int, path, kind: str) -> None:
        arrive([u, path, 0, kind])

    def arrive(item: list) -> None:
        name = item[1][item[2]][0]
        queues[name][item[3] != "prompt"].append(item)
        serve(name)

    def serve(name: str) -> None:
        waiting = next((q for q in queues[name] if q), None)
        if name not in busy and waiting is not None:
            item = waiting.popleft()
            busy.add(name)
            heapq.heappush(events, (clock + item[1][item[2]][1], next(tick), name, item))

    def send(u: int) -> None:
        user[u].update(sent=clock, left=case.blocks * len(case.prompt), rounds=0)
        for i, path in enumerate(case.prompt):
            for b in range(case.blocks):
                enter(u, case.last[i] if case.last and b == case.blocks - 1 else path, "prompt")

    def start_round(u: int) -> None:
        user[u]["drafted"] = 0
        if case.drafts:
            enter(u, case.draft, "draft")
            return
        user[u]["verifying"] = case.verifies
        for _ in range(case.verifies):
            enter(u, case.verify, "verify")

    def finished(u: int, kind: str) -> None:
        s = user[u]
        if kind == "prompt":
            s["left"] -= 1
            if s["left"] == 0:
                s["first"] = clock
                tally["tokens"] += 1.0 if clock >= warm else 0.0  # the prompt's pass emits it
                if s["sent"] >= warm:
                    tally["firsts"].append(clock - s["sent"])
                if case.rounds:
                    start_round(u)
                    return
                if s["first"] >= warm:
                    tally["windows"].append(0.0)
                send(u)
        elif kind == "draft":
            s["drafted"] += 1
            if s["drafted"] < case.drafts:
                enter(u, case.draft, "draft")
            else:
                s["verifying"] = case.verifies
                for _ in range(case.verifies):
                    enter(u, case.verify, "verify")
        else:
            s["verifying"] -= 1
            if s["verifying"] == 0:
                s["rounds"] += 1
                tally["tokens"] += case.tokens if clock >= warm else 0.0
                if s["rounds"] < case.rounds:
                    start_round(u)
                    return
                if s["first"] >= warm:
                    tally["windows"].append(clock - s["first"])
                send(u)

    for u, at in enumerate(starts):
        heapq.heappush(events, (at, next(tick), None, u))
    while events and events[0][0] <= horizon:
        clock, _, name, item = heapq.heappop(events)
        if name is None:
            send(item)
            continue
        busy.discard(name)
        item[2] += 1
        if item[2] < len(item[1]):
            arrive(item)
        else:
            finished(item[0], item[3])
        serve(name)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return tally["tokens"] / (horizon - warm), mean(tally["firsts"]), mean(tally["windows"])


def _serving(speculation: Speculation | None = None) -> WaferServing:
    return WaferServing(TOY, SMALL, num_wafers=1, workload=WORK, speculation=speculation,
                        regions=Regions(layout="compact"))  # fmt: skip


def _run(serve: WaferServing, users: int, block: int, phases: str) -> tuple[float, float, float]:
    """The policy at `users` and `block`: the users' first requests spread at random over one
    request alone (seed 1), or evenly over the model's period (the bound's phases)."""
    period = serve.request(users, block).period_s(users)
    if phases == "even":
        starts = [u * period / users for u in range(users)]
    else:
        alone, rng = serve.request(1, block).period_s(1), random.Random(1)
        starts = [rng.uniform(0.0, alone) for _ in range(users)]
    return _policy_run(_case(serve, users, block), starts, PERIODS * period)


@pytest.mark.parametrize("speculative", [False, True])
def test_one_user_is_served_as_priced(speculative):
    serve = _serving(SPEC if speculative else None)
    for block in (1, 4, 32):
        got, first, window = _run(serve, 1, block, "random")
        p = serve.request(1, block).point(1, WORK)
        assert p.aggregate_tokens_per_s == pytest.approx(got, rel=0.015)
        assert p.ttft_s == pytest.approx(first, rel=1e-9)
        assert p.user_tokens_per_s == pytest.approx((WORK.output_tokens - 1) / window, rel=1e-9)


@pytest.mark.parametrize("speculative", [False, True])
@pytest.mark.parametrize("users", [4, 8])
def test_no_block_is_priced_above_what_the_policy_serves(speculative, users):
    # before: at 4 users and 32-token blocks 64,932 output tokens/s priced, 42,206 served
    # with the users evenly spaced (1.54x; speculation 2.18x); at 8 users 1.67x and 1.87x
    serve = _serving(SPEC if speculative else None)
    for block in (1, 4, 32):
        priced = serve.request(users, block).point(users, WORK).aggregate_tokens_per_s
        for phases in ("random", "even"):
            served = _run(serve, users, block, phases)[0]
            assert priced <= served * (1 + ABOVE), (block, phases, priced, served)


def test_evenly_spaced_users_attain_the_bound():
    """Four users a period apart, each one's 32-token prompt (one block, a long pass) alone in
    the pipeline: every other prompt freezes a user's output for its pass, as priced (with
    speculation the bound credits a round's shortest item ahead of each prompt: lower)."""
    serve = _serving()
    priced = serve.request(4, 32).point(4, WORK)
    served, _, window = _run(serve, 4, 32, "even")
    assert priced.aggregate_tokens_per_s == pytest.approx(served, rel=0.03)
    assert priced.user_tokens_per_s == pytest.approx((WORK.output_tokens - 1) / window, rel=0.03)


@pytest.mark.parametrize("speculative", [False, True])
@pytest.mark.parametrize("users", [4, 8, 16])
def test_the_chosen_block_serves_what_is_priced(speculative, users):
    # before: 8 users chose 32-token blocks, 80,470 output tokens/s priced, 64,627 served
    # (speculation: 63,917 and 34,256)
    serve = _serving(SPEC if speculative else None)
    p = serve.point(users)
    served = _run(serve, users, p.layout["prompt_block_tokens"], "random")[0]
    assert served * 0.90 <= p.aggregate_tokens_per_s <= served * (1 + ABOVE)
    assert p.layout["output_bound"].startswith("conservative")


def _grid_requests(users: int) -> dict[tuple, list[tuple[float, float]]]:
    """Every placement of the grid that holds both toys at `users`, by (draft rows, the
    draft's head rows, the target's): (a user's request period, its first token) at that
    load in each block, its round priced by the engine's (`speculative_round`), its
    pipelines by `price_pipeline`, the request by `request_work` (its arithmetic the runs
    above check)."""
    kw = dict(num_wafers=1, context_len=WORK.held_tokens, slots=users, step=GRID_STEP,
              regions=Regions(layout="compact"))  # fmt: skip
    kv, half, requests = WORK.kv_tokens, WORK.prompt_tokens // 2, {}
    for rows in head_rows_ladder(SMALL, step=GRID_STEP)[:-1]:
        rest = SMALL.replace(pe_rows=SMALL.pe_rows - rows)
        for d in ladder_plans(TOY_DRAFT, SMALL.replace(pe_rows=rows), **kw):
            for t in ladder_plans(TOY, rest, **kw):
                r = speculative_round(TOY, t, TOY_DRAFT, d, gamma=SPEC.gamma, kv_tokens=kv)
                priced = [price_pipeline(c, p, kv_tokens=n) for n in (kv, half)
                          for c, p in ((TOY, t), (TOY_DRAFT, d))]  # fmt: skip
                pipes = Pipes(*priced, r.seconds, r.held_s)
                key = (rows, d.head.region.rows, t.head.region.rows)
                works = [request_work(WORK, k, pipes, SPEC)
                         for k in pipes.target_prompt.block_sizes()]  # fmt: skip
                requests[key] = [(w.period_s(users), w.first_s(users)) for w in works]
    return requests


@pytest.mark.parametrize("users", [1, 4, 16])
def test_a_speculative_placement_serves_its_load_best(users):
    # before: every load kept one user's placement (the draft's head on 8 of its 8 rows);
    # at 4 users its request period is 0.5% longer than the draft's head on 2 rows. Hunt 73:
    # the block is the policy's, over every placement and block of the grid: the most output,
    # any within OUTPUT_TIE of it a tie, then the first token soonest (16 users: 2-token
    # blocks, 0.87% less output than 4-token blocks, the first token 0.8% sooner)
    serve = _serving(SPEC)
    target, draft = serve.plans(users)
    grid = _grid_requests(users)
    periods = {key: min(period for period, _ in held) for key, held in grid.items()}
    chosen = periods[(draft.spec.pe_rows, draft.head.region.rows, target.head.region.rows)]
    assert chosen == pytest.approx(min(periods.values()), rel=1e-9)
    pairs = [pair for held in grid.values() for pair in held]
    shortest = min(period for period, _ in pairs)
    tied = [(period, first) for period, first in pairs if period * TIE <= shortest]
    want_period, want_first = min(tied, key=lambda pair: (pair[1], pair[0]))
    point = serve.point(users)
    assert point.layout["request_period_s"] == pytest.approx(want_period, rel=1e-9)
    assert point.ttft_s == pytest.approx(want_first, rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("users", [4, 16])
def test_llama3_8b_chosen_block_serves_what_is_priced(users):
    """The hunt's case: Llama 3 8B on one WSE-3, 1,024 prompt + 256 output tokens (before:
    16 users chose 32-token blocks, 18,624 tokens/s priced, 14,888 served)."""
    serve = WaferServing(preset_config("llama3-8b"), preset("wse3"), num_wafers=1,
                         workload=Workload(prompt_tokens=1024, output_tokens=256))  # fmt: skip
    p = serve.point(users)
    block = p.layout["prompt_block_tokens"]
    served = _run(serve, users, block, "random")[0]
    assert served * 0.90 <= p.aggregate_tokens_per_s <= served * (1 + ABOVE)
