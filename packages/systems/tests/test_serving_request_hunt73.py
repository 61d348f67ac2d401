"""Hunt 73, one request's times on the wafer (`wse_systems.serving.request`) against a run of
the serving policy (`_policy_run` of tests/test_serving_queueing_hunt72.py, event by event,
fed only the seconds each item holds each element). Broken before:

- hole 1: the first token was Cobham's priority queue at random arrivals, and the period's
  rest went to the (conservative) output window: Llama 3 70B on 8 CS-3, 64 users, 20 ms
  priced where a run from random phases waits 319 ms (the closed loop bunches prompts); a
  `--max-ttft-s` constraint trusted it. Now a bound on the mean over the users' phases;
- hole 2: a request was charged its prompt's wait behind the others' prompts and, in its
  output window, the same passes again: Llama 3 8B, 4,096 + 16 tokens, 340.7 output tokens/s
  at one user and 316.4 at two;
- hole 3: with a draft, a prompt's freeze credited a draft token ahead of it, where the
  drafts run on their own rows past the prompt and only the verify trails it: Llama 3 70B
  + 1B, 64 users, 13% under a run;
- hole 4: the prompts' share of the time was their share of the busiest element's (0.776 at
  70B, one user), the GPUs' the share of the period they add.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest
from wse_core import preset
from wse_models import preset_config
from wse_systems.pipeline import Regions
from wse_systems.serving import WaferServing, Workload

_spec = importlib.util.spec_from_file_location(
    "hunt72_oracle", Path(__file__).with_name("test_serving_queueing_hunt72.py")
)
H72 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(H72)

SEEDS = (1, 2, 3)


def _serving(workload: Workload = H72.WORK, speculative: bool = False) -> WaferServing:
    return WaferServing(H72.TOY, H72.SMALL, num_wafers=1, workload=workload,
                        speculation=H72.SPEC if speculative else None,
                        regions=Regions(layout="compact"))  # fmt: skip


def _served(serve: WaferServing, users: int, block: int, starts: list[float], case=None):
    """(output tokens/s, mean first token s, mean window s) of the policy run from `starts`."""
    period = serve.request(users, block).period_s(users)
    case = case or H72._case(serve, users, block)
    return H72._policy_run(case, starts, H72.PERIODS * period)


def _random_starts(serve: WaferServing, users: int, block: int, seed: int) -> list[float]:
    alone, rng = serve.request(1, block).period_s(1), random.Random(seed)
    return [rng.uniform(0.0, alone) for _ in range(users)]


@pytest.mark.parametrize("speculative", [False, True])
@pytest.mark.parametrize("users", [2, 4, 8, 16])
def test_the_first_token_bounds_the_runs_from_any_phases(speculative, users):
    serve = _serving(speculative=speculative)
    p = serve.point(users)
    k = p.layout["prompt_block_tokens"]
    assert p.layout["ttft_bound"].startswith("conservative")
    assert p.layout["prompt_pass_s"] <= p.layout["ttft_least_s"] <= p.ttft_s
    period = p.layout["request_period_s"]
    phases = [_random_starts(serve, users, k, s) for s in SEEDS]
    phases.append([u * period / users for u in range(users)])
    for starts in phases:
        first = _served(serve, users, k, starts)[1]
        assert first <= p.ttft_s * (1 + 1e-6), (starts, first, p.ttft_s)


def test_users_in_step_attain_the_first_tokens_bound():
    """Four users send at once: each prompt waits behind the ones ahead in one burst, and a
    convoy keeps them in step (the bound is the mean of that cycle). Not at every load: on
    the toy at 8-16 users, and with a draft (its tokens run past the prompts), the users
    drift apart and wait less than the bound (Llama 3 70B on 8 CS-3, 64 users: 3% less)."""
    users, serve = 4, _serving()
    p = serve.point(users)
    first = _served(serve, users, p.layout["prompt_block_tokens"], [0.0] * users)[1]
    assert p.ttft_s * 0.8 <= first <= p.ttft_s * (1 + 1e-6)


@pytest.mark.parametrize("output_tokens", [1, 2, 4])
def test_a_second_user_never_serves_less_than_one(output_tokens):
    # before (toy, 96 + 1 tokens): the second user's pass charged twice, aggregate 7% down
    w = Workload(prompt_tokens=96, output_tokens=output_tokens, context_len=128)
    serve = _serving(w)
    one, two = serve.point(1), serve.point(2)
    assert two.aggregate_tokens_per_s >= one.aggregate_tokens_per_s
    # the run agrees, and serves the second user's point at least as priced
    k = two.layout["prompt_block_tokens"]
    served = [_served(serve, u, k, _random_starts(serve, u, k, 1))[0] for u in (1, 2)]
    assert served[1] >= served[0]
    assert two.aggregate_tokens_per_s <= served[1] * (1 + H72.ABOVE)


@pytest.mark.parametrize("users", [2, 4, 8, 16])
def test_speculation_is_priced_within_five_percent_of_the_run(users):
    serve = _serving(speculative=True)
    p = serve.point(users)
    k = p.layout["prompt_block_tokens"]
    for seed in SEEDS:
        served = _served(serve, users, k, _random_starts(serve, users, k, seed))[0]
        assert served * 0.95 <= p.aggregate_tokens_per_s <= served * (1 + H72.ABOVE)


@pytest.mark.parametrize("speculative", [False, True])
@pytest.mark.parametrize("users", [1, 4, 16])
def test_the_prompts_share_is_the_time_they_add(speculative, users):
    """1 - (the same users' period with prompts that take no time) / the period, both runs."""
    serve = _serving(speculative=speculative)
    p = serve.point(users)
    k = p.layout["prompt_block_tokens"]
    case = H72._case(serve, users, k)
    zero = lambda paths: tuple(tuple((n, 0.0) for n, _ in path) for path in paths)  # noqa: E731
    bare = case._replace(prompt=zero(case.prompt), last=zero(case.last), blocks=1)
    starts = [u * p.layout["request_period_s"] / users for u in range(users)]
    full, empty = (_served(serve, users, k, starts, c)[0] for c in (case, bare))
    assert p.input_time_share == pytest.approx(1.0 - full / empty, abs=0.03)
    if users == 1:
        assert p.input_time_share == pytest.approx(p.layout["prompt_pass_s"] / (
            p.layout["prompt_pass_s"] + p.layout["decode_alone_s"]))  # fmt: skip


@pytest.mark.slow
def test_llama3_70b_first_token_bounds_the_run():
    """The hunt's case, 1,024 + 256 tokens on 4 CS-3 at 16 users (before: 26.8 ms priced,
    50.1 ms run)."""
    serve = WaferServing(preset_config("llama3-70b"), preset("wse3"), num_wafers=4,
                         workload=Workload(prompt_tokens=1024, output_tokens=256))  # fmt: skip
    p = serve.point(16)
    k = p.layout["prompt_block_tokens"]
    first = _served(serve, 16, k, _random_starts(serve, 16, k, 1))[1]
    assert first <= p.ttft_s
