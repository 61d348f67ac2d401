"""Hunt 75: a request of O output tokens has O - 1 decode steps after its first token.

The first token comes out of the prompt's pass, so vLLM's TPOT and genai-perf's ITL are
(e2e - TTFT) / (O - 1), and at O = 1 there is no window and no per-user speed. Both systems
priced O decode steps after the prompt (Llama 3 8B, 1,024 + 1 tokens, one user: "first token
to last" 323 us on a CS-3, 1.94 ms on 8 x H100). Oracles: hand arithmetic from each plan's own
first token and one decode step (a GPU step priced here by `gpu_step.step`, the wafer's token
alone as its point reports it), and the speculative engine's round count at full acceptance
(gamma + 1 tokens a round after the prefill's one: 33 tokens in 8 rounds of 4 at gamma 3).
Also the bound's name where the head region binds (hunt 75: "region per_token")."""

import dataclasses
import math

import pytest
from wse_core import preset
from wse_systems import gpu as gpum
from wse_systems.serving import (
    GpuServing,
    RequestTimes,
    RequestWork,
    Speculation,
    WaferServing,
    Workload,
    decode_steps,
    frontier,
    knee,
    meeting,
)
from wse_systems.serving import gpu_step as gs
from wse_systems.transformer import DecoderCounts

SMALL = preset("small")
TOY = DecoderCounts(name="toy", arch="llama", n_layers=4, d_model=256, n_heads=4, n_kv_heads=2,
                    d_ff=512, vocab_size=1000, max_seq_len=128)  # fmt: skip
MID = DecoderCounts(name="mid", arch="llama", vocab_size=32000, d_model=1024, n_layers=8,
                    n_heads=8, n_kv_heads=2, d_ff=4096, max_seq_len=32768)  # fmt: skip
FRACTIONS = gs.GpuFractions(hbm_fraction=0.7, mfu=0.5)
REL = 1e-12  # the same arithmetic in another order: rounding only


def _check(point, o: int, ttft_s: float, step_s: float) -> None:
    """`point` at one user is the first token and O - 1 steps of `step_s` each."""
    window = (o - 1) * step_s
    assert math.isclose(point.layout["decode_s"], window, rel_tol=REL, abs_tol=0.0)
    assert math.isclose(point.ttft_s, ttft_s, rel_tol=REL)
    assert math.isclose(point.layout["request_period_s"], ttft_s + window, rel_tol=REL)
    assert math.isclose(point.aggregate_tokens_per_s, o / (ttft_s + window), rel_tol=REL)
    if o == 1:  # no tokens after the first: no per-user speed (vLLM's TPOT n/a)
        assert point.user_tokens_per_s is None and point.to_dict()["user_tokens_per_s"] is None
    else:
        assert math.isclose(point.user_tokens_per_s, 1.0 / step_s, rel_tol=REL)


@pytest.mark.parametrize("o", [1, 2, 64])
def test_gpu_one_user_is_its_first_token_and_o_minus_1_steps(o):
    w = Workload(prompt_tokens=1000, output_tokens=o)
    serve = GpuServing(MID, gpum.H100, num_gpus=1, workload=w, fractions=FRACTIONS)
    p = serve.point(1)
    lay = gs.GpuLayout(p.layout["tp"], p.layout["pp"])
    # one user's decode step, priced here: one token reading the KV the workload says
    step_s = gs.step(MID, gpum.H100, lay, gs.StepBatch(users=1, kv_tokens=w.kv_tokens,
                     prompt_tokens=1000), fractions=FRACTIONS).seconds  # fmt: skip
    # its prompt in one chunk (1,000 tokens within the 8,192-token budget), nobody decoding
    prompt_s = gs.step(
        MID,
        gpum.H100,
        lay,
        gs.StepBatch(prefill_tokens=1000, kv_tokens=w.kv_tokens, prompt_tokens=1000),
        fractions=FRACTIONS,
    ).seconds
    _check(p, o, prompt_s, step_s)
    assert p.input_time_share == pytest.approx(prompt_s / (prompt_s + (o - 1) * step_s))


@pytest.mark.parametrize("o", [1, 2, 64])
def test_wafer_one_user_is_its_first_token_and_o_minus_1_tokens(o):
    w = Workload(prompt_tokens=16, output_tokens=o, context_len=100)
    p = WaferServing(TOY, SMALL, num_wafers=1, workload=w).point(1)
    # the plan's own first token (its prompt's pass) and its token alone
    _check(p, o, p.layout["prompt_pass_s"], p.layout["token_s"])


def test_one_output_token_meets_any_speed_and_has_a_knee():
    w = Workload(prompt_tokens=1000, output_tokens=1)
    serve = GpuServing(MID, gpum.H100, num_gpus=1, workload=w, fractions=FRACTIONS)
    front = frontier(serve)
    # without a per-user speed, the knee is the most output (within 1%, then the soonest
    # first token, which holds any admission wait; hunt 75d: a float tie took a plateau
    # load) and meets any speed limit
    k = knee(serve, front)
    most = max(p.aggregate_tokens_per_s for p in front.points)
    assert k.aggregate_tokens_per_s >= 0.99 * most
    tied = [p for p in front.points if p.aggregate_tokens_per_s >= 0.99 * most]
    assert k.ttft_s <= min(p.ttft_s for p in tied)
    met = meeting(serve, 1e9)
    assert met is not None and met.user_tokens_per_s is None
    assert front.pareto()  # sorts without a speed


def test_request_times_hand_arithmetic():
    w1, w5 = Workload(prompt_tokens=10, output_tokens=1), Workload(prompt_tokens=10,
                                                                   output_tokens=5)  # fmt: skip
    one = RequestTimes(ttft_s=0.5, decode_s=0.0, capacity_s=0.0).point(
        3, w1, input_time_share=1.0, bound="b", layout={}
    )
    assert one.user_tokens_per_s is None and one.aggregate_tokens_per_s == 3 / 0.5
    five = RequestTimes(ttft_s=0.5, decode_s=2.0, capacity_s=0.0).point(
        3, w5, input_time_share=0.2, bound="b", layout={}
    )
    assert five.user_tokens_per_s == 4 / 2.0 and five.aggregate_tokens_per_s == 3 * 5 / 2.5


# (32, 3): 31 tokens in whole rounds of 4, the last emitting 3 (hunt 75d: 31 / 4 priced 7.75)
@pytest.mark.parametrize(("o", "gamma", "rounds"), [(33, 3, 8), (32, 3, 8), (1, 4, 0)])
def test_speculative_rounds_follow_the_prefills_token(o, gamma, rounds):
    # at alpha = 1 every draft is accepted: the prefill emits one token, each round gamma + 1
    spec = Speculation(draft=dataclasses.replace(MID, name="d", n_layers=1), gamma=gamma,
                       alpha=1.0)  # fmt: skip
    w = Workload(prompt_tokens=100, output_tokens=o)
    serve = GpuServing(MID, gpum.H100, num_gpus=1, workload=w, speculation=spec,
                       fractions=FRACTIONS)  # fmt: skip
    assert serve.decode_rounds == rounds == decode_steps(w, gamma + 1)


def _work(**held) -> RequestWork:
    prompt = {n: 0.1 * s for n, s in held.items()}
    return RequestWork(block=1, held_s=held, prompt_held_s=prompt, prompt_s=1e-4,
                       decode_s=1e-4, units=10.0)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "rows", "bound"),
    [("per_token", 23, "region head: the layer regions' weights and the users' KV cache leave "
                       "it 23 PE rows"),
     ("draft per_token", 23, "region draft head"),
     ("stage 3", 23, "region stage 3")],
)  # fmt: skip
def test_the_head_bound_is_named_with_its_rows(name, rows, bound):
    # 1,000 users through an element held 1 s a request: capacity binds, at that element
    work = _work(**{name: 1.0, "other": 0.01})
    p = work.point(1000, Workload(prompt_tokens=4, output_tokens=11), head_rows=rows)
    assert p.bound == bound
