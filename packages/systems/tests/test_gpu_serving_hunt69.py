"""Hunt 69's GPU serving holes (`wse_systems.serving.gpus`). Broken before:

- hole 1: the other users' prompts were priced at E P / O each in every round of a request,
  the round under way when it is admitted too, so a period carried each other prompt 1 + E / O
  times (twice at one output token): llama3-1b on one H100, 2,048-token prompts and one output
  token, served 47.62 tok/s to one user and 33.60 to two, and at two users a two-token request
  (49.82 ms) ended before a one-token one (59.52 ms);
- hole 2: the step budget capped users at T / (t + E P / O), so a second user of a 4,096-token
  prompt and one output token was refused on an H100 whose memory holds 557 ("use more GPUs or
  a shorter context"): past the budget, prompts queue (vLLM's waiting queue), they are not a
  limit on users.

Oracles: token conservation (the prompt tokens a period's rounds carry are every user's
prompt once), one user's point, `gpu_step.step` by hand, and the point's own period."""

from __future__ import annotations

import pytest
from wse_models import preset_config
from wse_systems import gpu as gpum
from wse_systems.serving import GpuServing, Workload
from wse_systems.serving import gpu_step as gs

H100 = gpum.H100
FIT = gs.GpuFractions(gs.FITTED_HBM_FRACTION, gs.FITTED_MFU)
ONE_B = preset_config("llama3-1b")
ONE = gs.GpuLayout(1, 1)


def _serve(prompt: int, output: int, **kw) -> GpuServing:
    work = Workload(prompt_tokens=prompt, output_tokens=output)
    return GpuServing(ONE_B, H100, num_gpus=1, workload=work, fractions=FIT, **kw)


@pytest.mark.parametrize(("users", "prompt", "output"), [(2, 2048, 1), (10, 60, 20), (64, 512, 7)])
def test_a_period_carries_every_prompt_once(users, prompt, output):
    serve = _serve(prompt, output)
    # the round under way and the request's O - 1 rounds after its first token carry the
    # others' prompts; its own runs in its first token (hunt 75: O rounds, O + 1 in all)
    carried = output * serve.others_prefill(users) + prompt
    assert carried == pytest.approx(users * prompt)


def test_a_second_user_never_lowers_the_aggregate_and_a_longer_output_is_a_longer_request():
    # one decode round after the prompt's token: 2,048 + 2 (hunt 75: + 1 priced one)
    one, two = _serve(2048, 2).point(1), _serve(2048, 2).point(2)
    assert two.aggregate_tokens_per_s >= one.aggregate_tokens_per_s  # was 33.60 < 47.62
    short, long = _serve(2048, 2).point(2), _serve(2048, 3).point(2)
    assert long.layout["request_period_s"] > short.layout["request_period_s"]
    # by hand at two users: the round under way with the other's half prompt, the own prompt
    # beside the other's decode token, one round of both users with the other's half prompt
    kv = Workload(prompt_tokens=2048, output_tokens=2).kv_tokens

    def step(users: int, prefill: float) -> float:
        batch = gs.StepBatch(users=users, kv_tokens=kv, prefill_tokens=prefill, prompt_tokens=2048)
        return gs.step(ONE_B, H100, ONE, batch, fractions=FIT).seconds

    period = step(1, 1024) + step(1, 2048) + step(2, 1024)
    assert two.layout["request_period_s"] == pytest.approx(period, rel=1e-12)
    assert two.aggregate_tokens_per_s == pytest.approx(2 * 2 / period, rel=1e-12)


def test_prompts_past_the_budget_queue_and_are_not_refused():
    serve = _serve(4096, 2)  # one decode round after the prompt's token (hunt 75: 4,096 + 1)
    # m decode tokens and the others' prompts over 2 rounds: 4 + 3 x 2048 <= 8192 < 5 + 4 x 2048
    assert serve.unqueued_users == 4
    assert serve.max_users > 500  # the memory, no longer the budget (was 1)
    two, four, eight, many = (serve.point(u) for u in (2, 4, 8, 64))
    assert two.layout["admission_wait_s"] == four.layout["admission_wait_s"] == 0.0
    assert eight.layout["admission_wait_s"] > 0
    # full: the period is the rounds of 8192 tokens that carry every user's prompt and token
    full = serve.capacity_s(ONE, 64)
    assert many.layout["request_period_s"] == pytest.approx(full, rel=1e-12)
    assert many.ttft_s == pytest.approx(full - many.layout["decode_s"], rel=1e-12)
    # so the aggregate saturates: 64 users make no more output than 8 and no less than 2
    assert many.aggregate_tokens_per_s == pytest.approx(eight.aggregate_tokens_per_s, rel=0.01)
    assert many.aggregate_tokens_per_s > two.aggregate_tokens_per_s


def test_a_layout_that_serves_at_once_outranks_one_that_queues():
    work = Workload(prompt_tokens=4096, output_tokens=1)
    serve = GpuServing(ONE_B, H100, num_gpus=8, workload=work, fractions=FIT)
    p = serve.point(16)  # eight tp 1 replicas of 2 serve them at once; one tp 8 of 16 queues
    assert p.layout["admission_wait_s"] == 0.0 and p.layout["tp"] == 1
    queued = serve.layout_point(gs.GpuLayout(8, 1), 16)
    assert queued.layout["admission_wait_s"] > 0
