"""The one speculative round: the engine's report and the serving model agree, and the round
is its parts counted by hand (`wse_systems.serving.speculative`)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from wse_core import preset
from wse_inference.pipeline.perf import plan_speculative, predict_speculative
from wse_systems.decoder import PER_TOKEN
from wse_systems.serving import Speculation, WaferServing, Workload
from wse_systems.serving.blocks import price_pipeline
from wse_systems.serving.speculative import RoundSetup, place_speculative, speculative_round
from wse_systems.transformer import DecoderCounts

TARGET = DecoderCounts(
    name="toy", arch="llama", n_layers=4, d_model=256, n_heads=4, n_kv_heads=2, d_ff=512,
    vocab_size=1000, max_seq_len=128,
)  # fmt: skip
DRAFT = dataclasses.replace(TARGET, name="toy-draft", n_layers=1)
SPEC = preset("small")
W = Workload(prompt_tokens=16, output_tokens=16)


def test_engine_report_and_serving_at_one_user_give_the_same_round():
    serve = WaferServing(TARGET, SPEC, num_wafers=1, workload=W,
                         speculation=Speculation(draft=DRAFT, gamma=3, alpha=0.7))  # fmt: skip
    target_plan, draft_plan = serve.plans(1)
    engine_plans = plan_speculative(
        TARGET, DRAFT, spec=SPEC, gamma=3, context_len=W.held_tokens, kv_tokens=W.kv_tokens
    )
    assert [p.summary() for p in engine_plans] == [target_plan.summary(), draft_plan.summary()]
    report = predict_speculative(TARGET, DRAFT, (target_plan, draft_plan), gamma=3,
                                 rounds_per_token=1.0, kv_tokens=W.kv_tokens)  # fmt: skip
    latency, _, _ = serve.round_s(1)
    assert report.predicted_s == pytest.approx(latency, rel=1e-12)
    two = predict_speculative(TARGET, DRAFT, (target_plan, draft_plan), gamma=3,
                              rounds_per_token=0.5, kv_tokens=W.kv_tokens)  # fmt: skip
    assert two.predicted_s == pytest.approx(latency / 2, rel=1e-12)


def test_round_is_gamma_drafts_then_the_verify_pass():
    # hunt 68: the placement prices the round it is for (gamma, the KV read)
    tp, dp = place_speculative(TARGET, DRAFT, SPEC, num_wafers=1, context_len=64,
                               round=RoundSetup(3, 32))  # fmt: skip
    assert tp.spec.pe_rows + dp.spec.pe_rows == SPEC.pe_rows  # the draft's rows on the wafer
    target = price_pipeline(TARGET, tp, kv_tokens=32)
    draft = price_pipeline(DRAFT, dp, kv_tokens=32)
    rnd = speculative_round(TARGET, tp, DRAFT, dp, gamma=3, kv_tokens=32)
    verify, k, _ = target.pass_s(4)
    fill = sum(p.seconds(k) for _, _, p in target.elements)  # first block through all
    assert verify == pytest.approx(fill + (math.ceil(4 / k) - 1) * target.bottleneck(k)[1])
    assert rnd.verify_block == k
    assert rnd.seconds == pytest.approx(3 * draft.token_s + verify, rel=1e-12)
    held = rnd.held_s
    assert held["draft " + PER_TOKEN] == pytest.approx(3 * draft.occupancy_s(1)[PER_TOKEN])
    assert held[tp.stages[0].name] == pytest.approx(
        math.ceil(4 / k) * target.occupancy_s(k)[tp.stages[0].name]
    )
