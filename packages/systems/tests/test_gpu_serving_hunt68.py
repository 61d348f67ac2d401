"""Hunt 68's GPU serving holes (`wse_systems.serving.gpus`). Broken before:

- hole 1: speculative decoding priced the draft's share of the steady prompt tokens as a draft
  pass of its own each round (another read of its weights), and the capacity was the rounds
  carrying every user's prompt, the user's own again after its first token had run it: one
  user on an idle replica "waited to be admitted" 31.9 ms (llama3-8b + 1b draft, alpha 0;
  TTFT 37.5 ms at alpha 0, 8.0 at alpha 1, 3.46 without a draft);
- hole 2: pipeline parallelism ran the whole batch through the stages in one pass, never pp
  micro-batches in flight: 70B on 16 H100s as tp8 x pp2 served 2356.8 tok/s at 64 users
  against 4273.7 for two tp8 replicas on the same GPUs (every 405B comparison carried it);
- hole 6: the prompts' share of the time (for $/M input) was a round's share with the user's
  own prompt in it, where at one user the prompt ran in the first token: 0.00005 of the time
  where the first token was 3.3% of the period;
- `GpuServing`'s default `fractions` was built at import, so an `assume(gpu.kernel_s=...)`
  block never reached a caller who left them out.

Oracles: `gpu_step.step` called by hand (the draft's and target's passes, a half-depth model
for a pipeline stage), two tp8 replicas for tp8 x pp2, the point's own first token and period,
and `GpuFractions` given explicitly."""

from __future__ import annotations

import dataclasses
import math

import pytest
from wse_core.cost.assumptions import assume
from wse_models import preset_config
from wse_systems import gpu as gpum
from wse_systems.serving import GpuServing, Speculation, Workload
from wse_systems.serving import gpu_step as gs
from wse_systems.serving.trtllm_h100 import SHAPES
from wse_systems.transformer import LLAMA31_8B, matmul_params

H100 = gpum.H100
FIT = gs.GpuFractions(gs.FITTED_HBM_FRACTION, gs.FITTED_MFU)
DRAFT = preset_config("llama3-1b")
SHORT = Workload(prompt_tokens=256, output_tokens=64, context_len=1024)
L70 = SHAPES["llama3.1-70b"]
LONG = Workload(prompt_tokens=1024, output_tokens=256)


def _spec(alpha: float, gamma: int = 4, draft=DRAFT) -> Speculation:
    return Speculation(draft=draft, gamma=gamma, alpha=alpha)


def _step(model, lay, users=0, tokens=1, prefill=0.0, work=SHORT) -> float:
    batch = gs.StepBatch(users, tokens, work.kv_tokens, prefill, work.prompt_tokens)
    return gs.step(model, H100, lay, batch, fractions=FIT).seconds


# ---- hole 1: speculative decoding -------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.8, 1.0])
def test_one_user_with_a_draft_waits_for_nothing_and_its_first_token_is_its_prompt(alpha):
    serve = GpuServing(LLAMA31_8B, H100, num_gpus=8, workload=SHORT, fractions=FIT,
                       speculation=_spec(alpha))  # fmt: skip
    p = serve.point(1)
    lay = gs.GpuLayout(p.layout["tp"], p.layout["pp"])
    assert p.layout["admission_wait_s"] == 0.0  # before: 31.9 ms at alpha 0
    # the prompt's own chunk (256 tokens, one chunk) through the target and the draft
    prompt = _step(LLAMA31_8B, lay, prefill=256) + _step(DRAFT, lay, prefill=256)
    assert p.ttft_s == pytest.approx(prompt, rel=1e-12)
    # its output: ceil((O - 1) / E) whole rounds of gamma draft steps and a verification of
    # gamma + 1 tokens, after the first token its prompt emits (hunt 75: O / E; hunt 75d:
    # (O - 1) / E counted a fraction of a round)
    rounds = math.ceil(63 / _spec(alpha).tokens_per_round)
    round_s = 4 * _step(DRAFT, lay, users=1) + _step(LLAMA31_8B, lay, users=1, tokens=5)
    assert p.layout["decode_s"] == pytest.approx(rounds * round_s, rel=1e-12)
    assert p.user_tokens_per_s == pytest.approx(63 / p.layout["decode_s"], rel=1e-12)
    assert p.layout["request_period_s"] == pytest.approx(p.ttft_s + p.layout["decode_s"])


def test_the_first_token_does_not_depend_on_the_acceptance_rate():
    def first_s(alpha: float) -> float:
        return GpuServing(LLAMA31_8B, H100, num_gpus=8, workload=SHORT, fractions=FIT,
                          speculation=_spec(alpha)).point(1).ttft_s  # fmt: skip

    firsts = {first_s(a) for a in (0.0, 0.5, 1.0)}
    assert len(firsts) == 1  # before: 37.5, 19.6 and 8.0 ms


def test_the_drafts_prompt_tokens_ride_in_a_draft_step_that_runs_anyway():
    spec = _spec(0.7, gamma=3)
    serve = GpuServing(LLAMA31_8B, H100, num_gpus=8, workload=SHORT, fractions=FIT,
                       speculation=spec)  # fmt: skip
    lay, users, c = gs.GpuLayout(4, 1), 6, 5.0 * spec.tokens_per_round * 256 / 64
    by_hand = (_step(DRAFT, lay, users, prefill=c) + 2 * _step(DRAFT, lay, users)
               + _step(LLAMA31_8B, lay, users, tokens=4, prefill=c))  # fmt: skip
    assert serve.round_s(lay, users, c)[0] == pytest.approx(by_hand, rel=1e-12)
    for u in (1, 4, 32):  # per-user speed is the output over the point's own decode time
        p = serve.layout_point(lay, u)
        assert p.user_tokens_per_s == pytest.approx(63 / p.layout["decode_s"], rel=1e-12)
        assert p.layout["admission_wait_s"] == 0.0


def test_the_model_as_its_own_draft_accepting_everything_is_never_faster_than_plain():
    plain = GpuServing(LLAMA31_8B, H100, num_gpus=8, workload=SHORT, fractions=FIT)
    same = GpuServing(LLAMA31_8B, H100, num_gpus=8, workload=SHORT, fractions=FIT,
                      speculation=_spec(1.0, draft=LLAMA31_8B))  # fmt: skip
    for u in (1, 8, 64, 512, 1024):  # every layout admits them at once
        a, b = plain.point(u), same.point(u)
        assert b.user_tokens_per_s <= a.user_tokens_per_s and b.ttft_s >= a.ttft_s
    # hunt 69: past the budget's capacity prompts queue (no longer refused); a queued user
    # decodes in rounds carrying fewer prompt tokens, so compare its whole request
    a, b = plain.point(same.max_users), same.point(same.max_users)
    assert b.layout["admission_wait_s"] > 0 == a.layout["admission_wait_s"]
    assert b.ttft_s + 64 / b.user_tokens_per_s > a.ttft_s + 64 / a.user_tokens_per_s
    assert b.aggregate_tokens_per_s < a.aggregate_tokens_per_s
    for lay in same.layouts:
        a, b = plain.layout_point(lay, 16), same.layout_point(lay, 16)
        assert b.aggregate_tokens_per_s <= a.aggregate_tokens_per_s


# ---- hole 2: pipeline parallelism keeps pp micro-batches in flight ----------------------------


def _serving70(num_gpus: int) -> GpuServing:
    return GpuServing(L70, H100, num_gpus=num_gpus, workload=LONG, fractions=FIT)


def _hop_s(tokens: int) -> float:
    """A hop between nodes: 1/tp of the activations on each of the 8 GPUs' NICs (hunt jobs17
    F: the whole on one NIC was priced), and its latency."""
    return gs.ACT_BYTES * L70.d_model * tokens / 8 / H100.ib_bytes_per_s + H100.ib_latency_s


def test_tp8_pp2_at_one_user_is_two_half_depth_stages_and_a_hop():
    p = _serving70(16).layout_point(gs.GpuLayout(8, 2), 1)
    # one user, no prompt in its rounds: a token a round, 255 after the prompt's (hunt 75: 256)
    token_s = p.layout["decode_s"] / 255
    half = dataclasses.replace(L70, n_layers=L70.n_layers // 2)
    stage = gs.step(half, H100, gs.GpuLayout(8, 1), gs.StepBatch(1, 1, LONG.kv_tokens),
                    fractions=FIT)  # fmt: skip
    assert stage.bound == "hbm"  # so the stage's seconds add by the bytes it reads
    # a half-depth model holds the whole head and its K0 kernels: two of them count them twice
    head_s = 2 * L70.vocab_size * L70.d_model / 8 / (FIT.hbm_fraction * H100.hbm_bytes_per_s)
    twice = head_s + gs.KERNELS_PER_STEP * FIT.kernel_s
    assert token_s == pytest.approx(2 * stage.seconds + _hop_s(1) - twice, rel=1e-9)


def test_tp8_pp2_serves_what_two_tp8_replicas_serve_less_the_hops():
    pp2 = _serving70(16).layout_point(gs.GpuLayout(8, 2), 64)
    two = _serving70(16).layout_point(gs.GpuLayout(8, 1), 64)  # two replicas of 32 users
    one = _serving70(8).layout_point(gs.GpuLayout(8, 1), 32)
    assert pp2.layout["micro_batch"] == two.layout["batch"] == 32
    assert two.aggregate_tokens_per_s == pytest.approx(2 * one.aggregate_tokens_per_s)
    # each round of pp2's path is a tp8 round plus a hop of its tokens; a round of t tokens
    # takes at least the kernels' floor and t x 2 N / tp flops at the MFU, so a hop adds at
    # most its latency over the floor plus its bytes over those flops
    flops_s = 2 * matmul_params(L70) / 8 / (FIT.mfu * H100.peak_flops)
    hop_share = (H100.ib_latency_s / gs.floor_s(L70, FIT.kernel_s)
                 + gs.ACT_BYTES * L70.d_model / H100.ib_bytes_per_s / flops_s)  # fmt: skip
    assert hop_share < 0.02
    low = two.aggregate_tokens_per_s / (1 + hop_share)
    assert low <= pp2.aggregate_tokens_per_s <= two.aggregate_tokens_per_s  # before: 2356.8
    assert pp2.user_tokens_per_s >= two.user_tokens_per_s / (1 + hop_share)


def test_each_micro_batch_has_its_own_step_budget():
    serve = _serving70(16)
    mem = gs.max_batch(L70, H100, gs.GpuLayout(8, 2), held_tokens=LONG.held_tokens)
    assert serve.layouts[gs.GpuLayout(8, 2)] == min(mem, 2 * serve.budget_users)


# ---- hole 6: the prompts' share of the time, where the prompt runs ----------------------------


@pytest.mark.parametrize("spec", [None, _spec(0.8)])
def test_at_one_user_the_prompts_share_is_its_first_token_over_the_period(spec):
    serve = GpuServing(DRAFT, H100, num_gpus=1, workload=SHORT, fractions=FIT, speculation=spec)
    p = serve.point(1)
    period = p.layout["request_period_s"]
    assert p.input_time_share == pytest.approx(p.ttft_s / period, rel=1e-12)  # before: 0.00005
    assert p.input_time_share > 0.02


def test_the_prompts_share_is_the_period_less_its_bare_rounds_at_every_load():
    serve = GpuServing(DRAFT, H100, num_gpus=1, workload=SHORT, fractions=FIT)
    lay = gs.GpuLayout(1, 1)
    for u in (2, 8, 100):
        p = serve.layout_point(lay, u)
        bare = 63 * _step(DRAFT, lay, users=u)  # O - 1 rounds after the first (hunt 75: O)
        assert p.input_time_share == pytest.approx(1 - bare / p.layout["request_period_s"])


@pytest.mark.parametrize("num_gpus", [1, 16])
def test_the_prompts_seconds_never_fall_as_users_grow(num_gpus):
    # the share itself may fall a little (more users' KV reads lengthen the rounds around a
    # chunk of fixed size); the prompt's seconds a period (first token and the others' chunks)
    # never do, and one user's share continues into two users' (before: 0.00005 then 0.00009)
    model = DRAFT if num_gpus == 1 else L70
    work = SHORT if num_gpus == 1 else LONG
    serve = GpuServing(model, H100, num_gpus=num_gpus, workload=work, fractions=FIT)
    lay = max(serve.layouts, key=lambda lay: lay.gpus)
    top = serve.layouts[lay] * (num_gpus // lay.gpus)
    points = [serve.layout_point(lay, u) for u in sorted({1, 2, 3, 8, 64, top // 2, top})]
    seconds = [p.input_time_share * p.layout["request_period_s"] for p in points]
    assert seconds == sorted(seconds)
    assert points[1].input_time_share >= points[0].input_time_share


# ---- GpuServing's default fractions are built when called -------------------------------------


def test_an_assume_block_reaches_a_serving_built_without_fractions():
    tiny = preset_config("tiny-llama")
    work = Workload(prompt_tokens=64, output_tokens=32)
    given = GpuServing(tiny, H100, num_gpus=8, workload=work,
                       fractions=gs.GpuFractions(kernel_s=2e-6))  # fmt: skip
    with assume(**{gs.KERNEL_KEY: 2e-6}):
        left_out = GpuServing(tiny, H100, num_gpus=8, workload=work)
    assert left_out.kernel_s == 2e-6  # before: 1e-6, the default built at import
    assert left_out.point(4) == given.point(4)
    assert GpuServing(tiny, H100, num_gpus=8, workload=work).kernel_s == gs.KERNEL_S
