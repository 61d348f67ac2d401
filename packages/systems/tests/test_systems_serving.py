"""The serving models (`wse_systems.serving`) against cases computed by hand: the GPU roofline
at one user and at the compute knee, memory limits on both systems, the wafer pipeline's
fill, Leviathan's speculative speedup, and the selections."""

import dataclasses
import math

import pytest
from scipy.optimize import brentq
from wse_core import PerfModel, preset
from wse_systems import gpu as gpum
from wse_systems.decoder import decode_phases
from wse_systems.pipeline import PipelinePlanError, Regions, kv_bytes_per_token, plan_pipeline
from wse_systems.serving import (
    GpuServing,
    ServingError,
    Speculation,
    WaferServing,
    Workload,
    at_users,
    frontier,
    gpus_to_match,
    knee,
    loads,
    meeting,
    queued,
    speculative_speedup,
    tokens_per_round,
)
from wse_systems.serving import gpu_step as gs
from wse_systems.serving import gpus as sg
from wse_systems.serving.placements import OUTPUT_TIE
from wse_systems.testing import ROUND_DECODER
from wse_systems.transformer import (
    DecoderCounts,
    attn_dim,
    kv_values_per_token,
    matmul_params,
    num_params,
)

# A tied Llama whose matmul weights are exactly 1e8 (the head 376,289 x 256 and two layers of
# 4 x 256^2 + 3 x 256 x 2048): the roofline by hand. All its parameters: the one table, the
# layers with their two norms, the final norm. K and V: 2 layers x 2 x 4 heads x 64, bf16.
FLAT = ROUND_DECODER
N_ALL = 376_289 * 256 + 2 * (4 * 256**2 + 3 * 256 * 2048 + 2 * 256) + 256
KV_BYTES = 2 * (2 * 2 * 4 * 64)  # per token
# The draft: matmul weights exactly 1e7 (74,029 x 128 + 2 x (4 x 128^2 + 3 x 128 x 512)).
DRAFT = DecoderCounts(
    name="draft", arch="llama", vocab_size=74_029, d_model=128, n_layers=2, n_heads=2,
    n_kv_heads=2, d_ff=512, max_seq_len=128, tie_embeddings=True,
)  # fmt: skip
DRAFT_KV_BYTES = 2 * (2 * 2 * 2 * 64)
ROUND = dataclasses.replace(
    gpum.H100, name="round", peak_flops=1e15, hbm_bytes_per_s=1e12, memory_bytes=1e9,
    gpus_per_node=8,
)  # fmt: skip
ONE = gs.GpuLayout(1, 1)
HALF = gs.GpuFractions(hbm_fraction=0.5, mfu=0.5)
# A step's kernels (hunt 67): 8 a layer x 2 layers + 4 around them, KERNEL_S each; FLAT and
# DRAFT both have 2 layers
FLOOR = (8 * 2 + 4) * gs.KERNEL_S
TOY = DecoderCounts(
    name="toy",
    arch="llama",
    n_layers=4,
    d_model=256,
    n_heads=4,
    n_kv_heads=2,
    d_ff=512,
    vocab_size=1000,
    max_seq_len=128,
)  # fmt: skip  (4 layers, GQA 4/2 heads)
SHORT = Workload(prompt_tokens=16, output_tokens=16)


def test_the_hand_shapes_counts():
    assert matmul_params(FLAT) == 10**8 and num_params(FLAT) == N_ALL
    assert kv_values_per_token(FLAT) * 2 == KV_BYTES and attn_dim(FLAT) == 256
    assert matmul_params(DRAFT) == 10**7 and kv_values_per_token(DRAFT) * 2 == DRAFT_KV_BYTES


def _step(**kw):
    layout, precision = kw.pop("layout", ONE), kw.pop("precision", "bf16")
    return gs.step(FLAT, ROUND, layout, gs.StepBatch(**kw), precision=precision, fractions=HALF)


def test_gpu_step_at_one_user_is_the_weight_read():
    s = _step(users=1)
    # 2 bytes x 1e8 weights and the new token's K and V over 0.5 x 1e12 B/s; flops 2e8 at
    # 0.5e15 are far less
    assert s.memory_s == pytest.approx((2e8 + KV_BYTES) / 5e11)
    assert s.compute_s == pytest.approx(2e8 / 5e14)
    assert s.seconds == pytest.approx(s.memory_s + FLOOR) and s.bound == "hbm"
    s8 = _step(users=1, layout=gs.GpuLayout(8, 1))
    # the one-shot all-reduce of 512 bytes (vLLM's custom kernel below 256 KiB at 8 GPUs):
    # each GPU reads the other 7's, one latency step (hunt jobs17 B: the ring's 14 were priced)
    reduce = 7 * (2 * 256) / ROUND.nvlink_bytes_per_s + ROUND.nvlink_latency_s
    assert s8.allreduce_s == pytest.approx(2 * 2 * reduce)  # 2 per layer, 2 layers
    assert s8.seconds == pytest.approx((2e8 + KV_BYTES) / 8 / 5e11 + 4 * reduce + FLOOR)
    fp8 = _step(users=1, precision="fp8")  # a byte a weight and a KV value, twice the peak
    assert fp8.memory_s == pytest.approx((1e8 + KV_BYTES / 2) / 5e11)
    assert fp8.compute_s == pytest.approx(2e8 / (0.5 * ROUND.peak_fp8_flops))
    with pytest.raises(ServingError, match="no fp8"):
        gs.step(FLAT, gpum.A100, ONE, gs.StepBatch(users=1), precision="fp8")


def test_gpu_compute_knee_and_aggregate_plateau():
    # the GEMMs' weight read 2e8 / 5e11 against their products B 2e8 / 5e14: equal at B* =
    # 1000; the attention kernel (no cached tokens) writes B KV_BYTES after them, its own
    # roofline (hunt jobs17 A: one max over the step hid it under the products past B*)
    knee_b = (2e8 / 5e11) / (2e8 / 5e14)
    assert knee_b == pytest.approx(1000)
    below, past = _step(users=999), _step(users=1001)
    assert below.bound == "hbm" and past.bound == "compute"
    assert below.seconds == pytest.approx((2e8 + 999 * KV_BYTES) / 5e11 + FLOOR)
    far = _step(users=4000)
    assert far.gemm_s == pytest.approx(4000 * 2e8 / 5e14)
    assert far.attention_s == pytest.approx(4000 * KV_BYTES / 5e11)
    assert far.seconds == pytest.approx(4000 * 2e8 / 5e14 + 4000 * KV_BYTES / 5e11 + FLOOR)
    # aggregate B / step past the knee: mfu x peak / 2 N, less the kernels' fixed cost
    assert 4000 / far.compute_s == pytest.approx(2.5e6)


def test_gpu_kv_bytes_per_user_and_the_largest_batch():
    # usable 0.9 x 1e9 = 9e8; weights 2 N_ALL; a user of 100 tokens holds 100 KV_BYTES
    users = int((9e8 - 2 * N_ALL) // (100 * KV_BYTES))
    assert users == 3417 and gs.max_batch(FLAT, ROUND, ONE, held_tokens=100) == users
    serve = GpuServing(FLAT, ROUND, num_gpus=1, workload=Workload(prompt_tokens=60,
                       output_tokens=40), fractions=HALF)  # fmt: skip
    # the step budget caps users by their decode tokens alone (hunt 69: prompts past it
    # queue); 3,277 users carry their prompts without a queue, m + (m - 1) 60 / 40 <= 8192
    # (the round under way and 39 decode rounds after the first token; hunt 75: 40, 3,326)
    assert serve.budget_users == sg.TOKEN_BUDGET
    assert serve.unqueued_users == int((8192 + 60 / 40) // (1 + 60 / 40)) == 3277
    assert serve.max_users == users
    with pytest.raises(ServingError, match="at most 3417"):
        at_users(serve, 3418)
    big = dataclasses.replace(FLAT, vocab_size=3_900_000)  # 3 by memory, 4 by tp
    with pytest.raises(gpum.GpuMemoryError, match="use 4 to 8 GPUs"):
        GpuServing(big, ROUND, num_gpus=2, workload=SHORT)
    assert gs.min_gpus(big, ROUND, held_tokens=32) == 3
    assert gs.min_gpus(big, ROUND, held_tokens=32, precision="fp8") == 2


def test_gpu_a_request_is_its_first_token_then_rounds_with_the_others_prompts():
    # hunt 66: the round carried every user's prompt, the first token priced the user's own
    # again, and the first token was never in the period (one definition with the wafers)
    w = Workload(prompt_tokens=60, output_tokens=20)
    serve = GpuServing(FLAT, ROUND, num_gpus=1, workload=w, fractions=HALF)
    kv = w.kv_tokens
    # 10 users: the 9 others' 9 x 60 prompt tokens over the round under way and the request's
    # 19 rounds after its first token (hunt 69: 9 x 60 / 20 = 27 a round of 20 rounds, the
    # round under way too: 1.05 x each; hunt 75: 20 rounds after the first token, 9 x 60 / 21)
    p, c = serve.point(10), 9 * 60 / 20
    own = _step(users=10, kv_tokens=kv, prefill_tokens=c, prompt_tokens=60)
    full = _step(users=10, kv_tokens=kv, prefill_tokens=30, prompt_tokens=60)
    assert full.memory_s == pytest.approx((2e8 + KV_BYTES * (10 * kv + 40)) / 5e11)
    wait = _step(users=9, kv_tokens=kv, prefill_tokens=c, prompt_tokens=60)  # under way
    chunk = _step(users=9, kv_tokens=kv, prefill_tokens=60, prompt_tokens=60)  # one chunk
    first = wait.seconds + chunk.seconds
    period = first + 19 * own.seconds  # hunt 68: was max(.., 20 full), the own prompt twice
    assert p.user_tokens_per_s == pytest.approx(1 / own.seconds)
    assert p.ttft_s == pytest.approx(period - 19 * own.seconds)
    assert p.aggregate_tokens_per_s == pytest.approx(10 * 20 / period)
    assert p.input_tokens_per_s == pytest.approx(10 * 60 / period)
    bare = _step(users=10, kv_tokens=kv)
    # hunt 68: the period less its bare rounds (was 1 - bare / full, the own prompt in them)
    assert p.input_time_share == pytest.approx(1 - 19 * bare.seconds / period)
    alone = serve.point(1)  # one user: its prompt, then 19 bare decode steps
    one_first = _step(users=0, kv_tokens=kv, prefill_tokens=60, prompt_tokens=60)
    assert alone.ttft_s == pytest.approx(one_first.seconds)
    assert alone.user_tokens_per_s == pytest.approx(1 / _step(users=1, kv_tokens=kv).seconds)
    points = frontier(serve).points
    assert [q.users for q in points] == loads(serve.max_users)
    speeds = [q.user_tokens_per_s for q in points]
    assert speeds == sorted(speeds, reverse=True)
    for q in points:  # a period is the first token and then the output, on both systems
        period = q.ttft_s + 19 / q.user_tokens_per_s  # the 19 after the first (hunt 75: 20)
        assert q.aggregate_tokens_per_s == pytest.approx(q.users * 20 / period)


def test_gpu_prefill_is_the_roofline_of_its_tokens():
    t = _step(prefill_tokens=10_000, prompt_tokens=10_000)
    # 2 N_matmul per token but the head's 2 V d once, on the last token's row (hunt 79: every
    # token's; vLLM's `logits_indices`), and the attention's 2 L (H Q) p per token (p / 2
    # earlier tokens)
    head = 376_289 * 256
    flops = 10_000 * 2 * (1e8 - head) + 2 * head + 2 * 2 * 256 * 10_000**2
    assert t.compute_s == pytest.approx(flops / 5e14)
    # the head once: 10,000 tokens' products no longer outweigh one read of FLAT's weights,
    # almost all head (96.3M of 1e8); the attention kernel, its own roofline after them,
    # writes the 10,000 tokens' K and V while it computes its 2 L (H Q) p a token
    gemm = max(2e8 / 5e11, (10_000 * 2 * (1e8 - head) + 2 * head) / 5e14)
    attention = max(10_000 * KV_BYTES / 5e11, 2 * 2 * 256 * 10_000**2 / 5e14)
    assert (t.gemm_s, t.attention_s) == pytest.approx((gemm, attention))
    assert t.seconds == pytest.approx(gemm + attention + FLOOR)
    short = _step(prefill_tokens=1, prompt_tokens=1)
    assert short.seconds == pytest.approx((2e8 + KV_BYTES) / 5e11 + FLOOR)  # one weight read


def test_speculation_on_a_gpu_is_leviathans_formula():
    # at one user the verification of gamma + 1 tokens reads the weights once, like a step
    w = Workload(prompt_tokens=8, output_tokens=8)
    plain = GpuServing(FLAT, ROUND, num_gpus=1, workload=w, fractions=HALF)
    spec = Speculation(draft=DRAFT, gamma=4, alpha=0.8)
    fast = GpuServing(FLAT, ROUND, num_gpus=1, workload=w, fractions=HALF,
                      speculation=spec)  # fmt: skip
    kv = 8 + 8 // 2  # the cached tokens a step reads (Workload.kv_tokens)
    target = (2e8 + KV_BYTES * (kv + 1)) / 5e11 + FLOOR  # a step's bytes, its new token's KV too
    draft = (2e7 + DRAFT_KV_BYTES * (kv + 1)) / 5e11 + FLOOR
    verify = (2e8 + KV_BYTES * (kv + 5)) / 5e11 + FLOOR
    leviathan = speculative_speedup(0.8, 4, draft_s=draft, target_s=target, verify_s=verify)
    ratio = plain.round_s(ONE, 1)[0] / fast.round_s(ONE, 1)[0] * spec.tokens_per_round
    assert ratio == pytest.approx(leviathan)
    c = draft / target
    assert leviathan == pytest.approx((1 - 0.8**5) / ((1 - 0.8) * (4 * c + verify / target)))
    assert tokens_per_round(0.8, 4) == pytest.approx(3.3616) and tokens_per_round(1.0, 4) == 5


def test_gpus_to_match():
    w = Workload(prompt_tokens=8, output_tokens=8)
    kw = dict(workload=w, fractions=HALF)
    one = GpuServing(FLAT, ROUND, num_gpus=1, **kw).point(1).user_tokens_per_s  # 2500 tokens/s
    speed, both = gpus_to_match(FLAT, ROUND, user_tokens_per_s=one * 1.5,
                                aggregate_tokens_per_s=1e9, **kw)  # fmt: skip
    assert speed == 2  # tp 2 halves the read; the all-reduces cost a little
    assert both is not None and both >= speed
    assert gpus_to_match(FLAT, ROUND, user_tokens_per_s=1e9, aggregate_tokens_per_s=1, **kw) == (
        None, None)  # fmt: skip


def _toy_serving(**kw):
    return WaferServing(TOY, preset("small"), num_wafers=1, workload=SHORT, **kw)


def test_wafer_one_user_is_the_batch_one_prediction():
    serve = _toy_serving()
    lay = serve.point(1).layout  # the fastest placement (`fastest_plan`, hunt 67)
    plan = plan_pipeline(TOY, preset("small"), context_len=32, slots=1,
                         regions=Regions(layout=lay["layout"],
                                         head_rows=lay["head_rows"]))  # fmt: skip
    t1 = PerfModel(plan.spec).evaluate(decode_phases(TOY, plan, kv_tokens=24)).seconds
    assert serve.plans(1)[0] == plan
    assert serve.point(1).user_tokens_per_s == pytest.approx(1 / t1)


def test_wafer_users_are_limited_by_sram_on_a_small_wafer():
    serve = _toy_serving()
    n = serve.max_users

    def fits(u):
        try:
            plan_pipeline(TOY, preset("small"), context_len=32, slots=u)
            return True
        except PipelinePlanError:
            return False

    assert fits(n) and not fits(n + 1) and not any(fits(u) for u in (n + 2, 2 * n))
    b = serve.budget()
    region = next(s for s in serve.plans(n)[0].stages if s.name == b.region)
    pes = region.region.num_pes
    # by hand: one layer's K and V, 2 x 2 KV heads x 64 x 2 bytes, for 32 tokens per user
    assert b.kv_bytes_per_user_per_pe == pytest.approx(region.num_layers * 512 * 32 / pes)
    assert kv_bytes_per_token(TOY, 2) == 512
    # hunt 82: a layer region holds the activations of the one token it works on, whatever
    # the users (the pipelined engine's one activation a stage row), none per user
    assert b.region != "head" and b.act_bytes_per_user_per_pe == 0.0
    assert region.act_bytes == region.item_act_bytes == (4 * 256 + 2 * 512) * 2
    per_user = b.kv_bytes_per_user_per_pe + b.act_bytes_per_user_per_pe
    assert b.weight_bytes_per_pe + n * per_user <= 49152
    with pytest.raises(ServingError, match=f"at most {n:,} users"):
        at_users(serve, n + 1)


AFTER = 15  # the toy's decode tokens after the prompt's first (hunt 75: 16 were priced)


def test_wafer_a_request_is_its_prompt_blocks_and_its_output_tokens():
    # hunt 72: the output window holds every other user's prompt pass (a convoy: the
    # policy's decode tokens cannot pass a prompt block); before, the others' prompts stalled
    # a token by their longest hold of one region. Hunt 73: the first token is a bound on its
    # mean over the users' phases (no Cobham wait, nor one added to the period), the prompts'
    # share the share of the period they add, and the block is the most output within 1%
    # (`OUTPUT_TIE`), then the sooner first token
    serve = _toy_serving()  # 16 prompt + 16 output tokens a request (AFTER)
    for u in loads(serve.max_users):
        p = serve.point(u)
        latency, held, _ = serve.round_s(u)
        prompt, _ = serve.pipelines(u, prompt=True)
        k = p.layout["prompt_block_tokens"]
        blocks = math.ceil(16 / k)
        # the prompt's head, argmax and token out once, in its last block (hunt 79)
        once = prompt.logits_s()
        own = {n: blocks * prompt.prompt_occupancy_s(k)[n] + once.get(n, 0.0) for n in held}
        work = {n: AFTER * held[n] + own[n] for n in held}
        passing = prompt.prompt_blocks_s(16, k)
        tau = max(latency, u * max(held.values()))  # a token in free flow
        window = AFTER * tau + min(u - 1, AFTER) * max(0.0, passing - tau)
        # hunt 73: the prompts past those items catch one; session 85: so too where the pass
        # freezes none (passing <= tau), the items waiting their turn at the busiest element
        if u - 1 > AFTER:
            big, cap = max(own.values()), u * max(work.values())
            base = window
            window = brentq(  # w = base + C Bp, C the others' prompts in w (one a period)
                lambda w, u=u, base=base, passing=passing, cap=cap, big=big: (
                    w - base - min(u - 1 - AFTER, (u - 1) * w / max(passing + w, cap)) * big),
                base, base + u * big,
            )  # fmt: skip
        path, full = passing + window, u * max(work.values())
        period = max(path, full)  # by hand
        least = period - window  # the prompt's pass, or with the admission wait when full
        slow = max(own, key=own.__getitem__)  # where the prompt is held longest
        # the users send a decode token's hold at the path's last element apart at least
        # (session 80: `release_s`; the elements in order, a pass that holds none skipped)
        apart = [s for s in held.values() if s > 0][-1]
        # half the others' prompts there ahead of it, each sent that much sooner, and the
        # token under way there, at most the period less the output alone
        wait = max(0.0, own[slow] - apart)
        burst = passing + 0.5 * (u - 1) * wait + held[slow] if u > 1 else passing
        first = max(least, min(period - AFTER * latency, burst))
        assert p.layout["ttft_least_s"] == pytest.approx(least)
        assert p.ttft_s == pytest.approx(first)
        assert p.layout["request_period_s"] == pytest.approx(period)
        assert p.aggregate_tokens_per_s == pytest.approx(u * 16 / period)
        assert p.input_tokens_per_s == pytest.approx(p.aggregate_tokens_per_s)  # P = O
        assert p.user_tokens_per_s == pytest.approx(AFTER / window)
        # the same users without prompts: each request AFTER tokens in free flow
        assert p.input_time_share == pytest.approx(1 - AFTER * tau / period)
        busiest = max(work, key=work.__getitem__)
        if path >= full:
            assert p.bound == "pipeline latency"
        else:  # full: the busiest element, one item at a time
            # the head by that name, with its rows (hunt 75: "region per_token")
            head = busiest in ("head", "per_token")
            assert p.bound.startswith("region head: ") if head else p.bound == f"region {busiest}"
        # no other block size serves this load with more than 1% more output, and those
        # within 1% of the most give the first token no sooner
        others = [serve.request(u, b) for b in prompt.block_sizes()]
        most = max(p.aggregate_tokens_per_s, *(r.output_per_s(u, 16) for r in others))
        assert p.aggregate_tokens_per_s >= (1 - OUTPUT_TIE) * most * (1 - 1e-12)
        for r in others:
            if r.output_per_s(u, 16) >= (1 - OUTPUT_TIE) * most:
                assert r.first_s(u) >= p.ttft_s * (1 - 1e-12)
    assert serve.point(1).user_tokens_per_s == pytest.approx(1 / serve.round_s(1)[0])
    occ = serve.occupancy(1)
    assert max(occ.values()) < 1 and sum(occ.values()) == pytest.approx(1, rel=0.01)


def test_wafer_prompt_blocks_and_time_to_first_token():
    serve = _toy_serving()
    target, _ = serve.pipelines(1, prompt=True)
    alone, block, _ = target.pass_s(16)
    fill = sum(p.seconds(block) for _, _, p in target.elements)
    occ = target.bottleneck(block)[1]
    assert alone == pytest.approx(fill + (math.ceil(16 / block) - 1) * occ)
    one_token_blocks = target.blocks_s(16, 1)
    assert alone <= one_token_blocks <= target.token_s + 15 * target.bottleneck(1)[1] + 1e-15
    assert serve.point(1).ttft_s >= alone
    assert serve.point(4).ttft_s > serve.pipelines(4, prompt=True)[0].pass_s(16)[0] * (1 - 1e-12)


def test_wafer_speculation_prices_draft_and_verification_on_one_layout():
    draft = dataclasses.replace(TOY, name="toy-draft", n_layers=1)
    spec = Speculation(draft=draft, gamma=3, alpha=0.7)
    serve = _toy_serving(speculation=spec)
    target_plan, draft_plan = serve.plans(1)
    assert target_plan.spec.pe_rows + draft_plan.spec.pe_rows == 32  # one wafer, shared rows
    target, d = serve.pipelines(1)
    verify_s, _, _ = target.pass_s(4)
    assert target.token_s < verify_s <= 4 * target.token_s
    latency, _, per_round = serve.round_s(1)
    got = per_round / latency * target.token_s  # speedup over this target
    assert got == pytest.approx(
        speculative_speedup(0.7, 3, draft_s=d.token_s, target_s=target.token_s, verify_s=verify_s)
    )
    assert serve.max_users < _toy_serving().max_users  # the draft's SRAM costs users


def test_selections():
    serve = _toy_serving()
    front = frontier(serve)
    slow = front.points[-1].user_tokens_per_s
    p = meeting(serve, slow * 1.01)
    assert p.user_tokens_per_s >= slow * 1.01
    # hunt 75: the most output of the unqueued loads that fast (it was the largest load)
    fast = [serve.point(u) for u in range(1, serve.max_users + 1)]
    fast = [q for q in fast if q.user_tokens_per_s >= slow * 1.01 and not queued(q)]
    assert p.aggregate_tokens_per_s >= (1 - 1e-9) * max(q.aggregate_tokens_per_s for q in fast)
    assert meeting(serve, 1e12) is None
    k = knee(serve, front)
    score = lambda q: q.user_tokens_per_s * q.aggregate_tokens_per_s  # noqa: E731
    assert all(score(k) >= score(q) for q in front.points)
    best = front.pareto()

    def beats(a, b):
        sa, ga, sb, gb = (a.user_tokens_per_s, a.aggregate_tokens_per_s,
                          b.user_tokens_per_s, b.aggregate_tokens_per_s)  # fmt: skip
        return sa >= sb and ga >= gb and (sa > sb or ga > gb)

    for q in front.points:  # on the Pareto set exactly when nothing beats it
        assert any(q is b for b in best) == (not any(beats(o, q) for o in front.points))
    quick = meeting(serve, max_ttft_s=serve.point(1).ttft_s * 1.5)
    assert quick is not None and quick.ttft_s <= serve.point(1).ttft_s * 1.5
    both = meeting(serve, slow * 1.01, max_ttft_s=quick.ttft_s)
    assert both.users <= min(p.users, quick.users)
    assert meeting(serve, max_ttft_s=1e-12) is None


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Workload(prompt_tokens=0, output_tokens=1), "prompt_tokens"),
        (lambda: Workload(prompt_tokens=8, output_tokens=8, context_len=10), "shorter than"),
        (lambda: Speculation(draft=TOY, gamma=2, alpha=float("nan")), "alpha"),
        (lambda: Speculation(draft=TOY, gamma=0, alpha=0.5), "gamma"),
        (lambda: meeting(_toy_serving(), -1.0), "positive"),
        (lambda: meeting(_toy_serving(), max_ttft_s=float("inf")), "positive"),
        (lambda: meeting(_toy_serving()), "needs"),
        (lambda: at_users(_toy_serving(), 0), "users"),
    ],
)
def test_bad_input_is_a_serving_error(make, message):
    with pytest.raises(ServingError, match=message):
        make()
