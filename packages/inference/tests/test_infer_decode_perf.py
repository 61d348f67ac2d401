"""Decode predictions: a cost counted by hand, the plan the engine and the predictor share,
the 8B calibration row and the published rows of `hotchips24-inference`."""

import dataclasses
import math

import pytest
from wse_core.cost.assumptions import assume, assumed_spec
from wse_core.cost.perf import PerfModel
from wse_core.hw.spec import preset, spec_from
from wse_inference.pipeline import perf as decode_perf
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.speculative.verify import AcceptanceStats
from wse_inference.testing import tiny_model
from wse_systems.pipeline import Regions, plan_pipeline
from wse_systems.transformer import DecoderCounts

# One layer: d 8, 2 heads of 4 (1 KV head), MLP 16, vocabulary 32.
HAND = DecoderCounts(
    name="hand", arch="llama", n_layers=1, d_model=8, n_heads=2, n_kv_heads=1, d_ff=16,
    vocab_size=32, max_seq_len=64,
)  # fmt: skip


def _hand_plan(**kw):
    # 4 x 4 PEs: the head (1184 B) and the one stage (1440 B) get 2 x 4 PEs each.
    return plan_pipeline(HAND, spec_from(preset("tiny"), pe_rows=4, pe_cols=4), context_len=8, **kw)


def test_decode_cost_counted_by_hand():
    plan = _hand_plan()
    assert (plan.stages[0].region.rows, plan.stages[0].region.cols) == (2, 4)
    report = decode_perf.predict_decode(HAND, plan)
    spec = plan.spec
    rates = PerfModel(spec, report.calibration).rates
    d, t, relay = rates.dsd_issue_cycles, rates.task_activation_cycles, 5.0  # 2 T_R + 1
    cycles = lambda name: report.predicted.leaf(name).seconds * spec.clock_hz
    # qkv: y (16 = (2 + 2 * 1) * 4) = W^T x (8) on 2 x 4 PEs, fp16 (2 values per wavelet).
    # x_in: each column's 2 inputs (1 word) flooded down 2 rows: 1 word + 1 hop + 1 relay.
    assert cycles("x_in") == pytest.approx(1 + 1 + relay)
    # axpy: 8 outputs x 2 inputs per PE: 2 FMAC DSDs of 8 (width 4: 2 cycles each), their
    # issue and one task; SRAM (64 B read at 16 B/cycle, 32 B written at 8) is faster; and
    # the product's control (session 86, `wse_systems.matvec`): 8 instructions the kernel's
    # call, 1 + 2 x 3 the reduce task's start into the middle of a row of 4, 1 cycle each
    c = rates.control_instruction_cycles
    assert c == 1.0  # the tiny preset is no system's: the assumed 1
    assert cycles("axpy") == pytest.approx(2 * 2 + 2 * d + t + (8 + 7) * c)
    # reduce: 8 outputs (4 words) to the middle of a row of 4: each half (2 PEs) in one
    # stage (4 words, 1 hop, 1 relay), then 4 more words, a hop and a relay to join the
    # halves (PE 3 -> 2 -> 1: 2 hops).
    assert cycles("reduce") == pytest.approx(8 + 2 + 2 * relay)
    # move: the 4 words leave the middle PE (ramp), 2 hops along the row + 1 up, 1 relay.
    assert cycles("move") == pytest.approx(4 + 3 + relay)
    # The residual (d = 8 on the top row: 2 values, 1 word per column) down the region's 2
    # rows, then back to the head's top row (the pipeline closes on one wafer): from below
    # the stage (row 4, column 2) to (row 0, column 2), 4 hops: 1 word, 2 + 4 hops, 1 relay.
    # One wafer: nothing between wafers.
    assert cycles("to_next") == pytest.approx(1 + 2 + 4 + relay)
    assert report.predicted.leaf("between_wafers").seconds == 0.0
    # At batch 1 the phases add up: the token is the sum of the leaves.
    leaves = [node for _, node in report.predicted.rows() if not node.children]
    assert report.predicted_s == pytest.approx(sum(n.seconds for n in leaves))
    assert report.extra["tokens_per_s"] == pytest.approx(1 / report.predicted_s)
    assert report.units == "token" and "between wafers" in report.assumptions
    # The named per-token costs: the final norm, the head's product, the argmax, the next
    # embedding (the final norm since session 86).
    assert {c.name for c in report.predicted.leaf("per_token").children} == {
        "norm_final",
        "lm_head",
        "argmax",
        "embed",
    }


def test_wafers_pass_activations_at_system_io_with_stated_latency():
    two = dataclasses.replace(HAND, name="hand2", n_layers=2)
    spec = spec_from(preset("tiny"), pe_rows=4, pe_cols=4)
    plan = plan_pipeline(two, spec, num_wafers=2, context_len=8, regions=Regions(stages=2))
    report = decode_perf.predict_decode(two, plan)
    # 2 passes (wafer 0 -> 1 and back) of d_model = 8 fp16 values, plus the latency each.
    between = report.predicted.leaf("between_wafers")
    assert between.seconds == pytest.approx(2 * 8 * 2 / spec.host_io_bytes_per_s + 2 * 2e-6)
    assert "system_latency_s" in report.assumptions
    with assume(system_latency_s=5e-6):  # the assumed spec, resolved at the edge: plan again
        spec5 = spec_from(assumed_spec("tiny"), pe_rows=4, pe_cols=4)
        slower = decode_perf.predict_decode(
            two, plan_pipeline(two, spec5, num_wafers=2, context_len=8, regions=Regions(stages=2))
        )
    assert slower.predicted.leaf("between_wafers").seconds == pytest.approx(
        2 * 8 * 2 / spec.host_io_bytes_per_s + 2 * 5e-6
    )


def _layout(engine):
    """What the emulation holds: layers per stage, cache shape, bytes per emulated row."""
    ledger = engine.wafer.sram.summary()
    k = engine.init_decode_state().device.k
    return [s.layers for s in engine.plan.stages], k.shape, ledger


@pytest.mark.parametrize(
    "change",
    [dict(stages=1), dict(num_wafers=2), dict(max_context=64)],
    ids=["stages", "wafers", "context"],
)
def test_engine_and_prediction_share_the_plan(change):
    model = tiny_model("llama", n_layers=2)
    base = dict(stages=2, max_context=32, num_wafers=1)
    a = PipelineEngine(model, spec=preset("wse3"), **base)
    b = PipelineEngine(model, spec=preset("wse3"), **{**base, **change})
    # The engine's report prices the engine's own plan object.
    for eng in (a, b):
        direct = decode_perf.predict_decode(model.config, eng.plan)
        assert eng.report().predicted_s == direct.predicted_s
        # Its emulated ledger holds the plan's bytes, row i for stage i (the head with 0).
        used = sum(x["bytes_per_pe"] for x in eng.wafer.sram.summary()["allocations"])
        assert used == eng.plan.total_bytes
    assert a.plan != b.plan
    if "max_context" in change:  # read through b's plan: half its context, never faster; the
        # same time where the read fits the regions' rows (hunt 68: compact, 381 rows)
        read = b.report().assumptions["kv_tokens"]
        assert "reads 32 cached tokens, the filled ones (context 64;" in read
        assert b.report().predicted_s >= a.report().predicted_s
    else:
        assert a.report().predicted_s != b.report().predicted_s
    if "num_wafers" in change:  # the same rows on the emulator, regions on two wafers
        assert [s.wafer for s in b.plan.stages] == [0, 1]
        assert b.report().predicted.leaf("between_wafers").seconds > 0
    else:
        assert _layout(a) != _layout(b)


def test_engine_takes_a_given_plan():
    model = tiny_model("llama", n_layers=3)
    plan = plan_pipeline(
        model.config, spec_from(preset("wse3")), context_len=24, slots=3, regions=Regions(stages=3)
    )
    eng = PipelineEngine(model, spec=preset("wse3"), plan=plan)
    assert eng.plan is plan and eng.stages == 3 and eng.max_context == 24
    assert eng._groups() == [(0, 1), (1, 2), (2, 3)]
    rep = eng.report(measured_wall_s=2.0, tokens=4)
    assert rep.measured_wall_s == 0.5 and rep.extra["plan"] == plan.summary()


def test_speculative_report_is_draft_steps_and_a_pipelined_verification():
    from wse_inference.speculative.decoder import SpeculativeDecoder
    from wse_systems.serving.blocks import price_pipeline

    target, draft = tiny_model("llama", n_layers=2), tiny_model("llama", n_layers=1, seed=3)
    dec = SpeculativeDecoder(target, draft, gamma=3, max_context=32)
    stats = AcceptanceStats(3, rounds=4, accepted=6)  # 10 tokens in 4 rounds
    spec = preset("wse3")
    rep = dec.report(stats=stats, measured_wall_s=1.0, tokens=10, spec=spec)
    t_plan, d_plan = decode_perf.plan_speculative(
        target.config, draft.config, spec=spec, gamma=3, context_len=32, bytes_per_param=4
    )
    assert t_plan.spec.pe_rows + d_plan.spec.pe_rows == spec.pe_rows  # the draft's rows
    t_pipe = price_pipeline(target.config, t_plan, kv_tokens=16)
    d_pipe = price_pipeline(draft.config, d_plan, kv_tokens=16)
    # the target's pass over 4 tokens: its first block through every element, the rest one
    # bottleneck apart (`Pipeline.pass_s`)
    verify, k, _ = t_pipe.pass_s(4)
    fill = sum(p.seconds(k) for _, _, p in t_pipe.elements)
    assert verify == pytest.approx(fill + (math.ceil(4 / k) - 1) * t_pipe.bottleneck(k)[1])
    round_s = 3 * d_pipe.token_s + verify
    assert rep.predicted_s == pytest.approx(round_s * 4 / 10, rel=1e-12)
    assert rep.measured_wall_s == pytest.approx(0.1)


def test_the_speculative_engines_report_is_priced_at_its_own_acceptance():
    """A serving engine's report after it ran: `SpeculativeEngine.report(measured_wall_s=,
    tokens=)` prices the plans of its own two models at the rounds per token its slots
    measured (`engine.stats`), as the decoder does given those statistics."""
    from wse_inference.engine import SamplingParams
    from wse_inference.speculative.decoder import SpeculativeDecoder
    from wse_inference.speculative.engine import SpeculativeEngine

    target, draft = tiny_model("llama", n_layers=2), tiny_model("llama", n_layers=1, seed=3)
    eng = SpeculativeEngine(
        target, draft, spec=preset("wse3"), gamma=3, max_slots=1, max_context=32
    )
    sampling = SamplingParams(max_tokens=9, temperature=1.0, seed=2)
    state = eng.insert(
        prefix=eng.prefill(prompt_ids=[5, 6, 7], sampling=sampling),
        state=eng.init_decode_state(),
        slot=0,
    )
    while state.slots[0].tracker.finish_reason is None:
        state, _ = eng.generate(state=state)
    n = len(state.slots[0].tracker.tokens) - 1  # decode tokens after the prefill's first
    stats = eng.stats
    assert stats.rounds > 0 and stats.mean_tokens_per_pass == pytest.approx(n / stats.rounds)
    rep = eng.report(measured_wall_s=2.0, tokens=n)
    assert rep.extra["rounds_per_token"] == pytest.approx(stats.rounds / n)
    assert rep.measured_wall_s == pytest.approx(2.0 / n)
    dec = SpeculativeDecoder(target, draft, gamma=3, max_context=32)
    assert rep.predicted_s == dec.report(stats=stats, spec=preset("wse3")).predicted_s
    # drafts were accepted (8 tokens in 2 rounds here): fewer rounds per token than the
    # decoder's one round per token before any round ran, so a shorter predicted token
    assert (
        stats.mean_tokens_per_pass > 1
        and rep.predicted_s < dec.report(spec=preset("wse3")).predicted_s
    )


def test_8b_calibration_row_is_a_check_not_a_fit():
    """Llama 3.1 8B, 16-bit, one WSE-3: 1,800 tokens/s (Hot Chips 2024; the calibration
    set) is priced from mechanisms alone: no constant is fitted on it. The case is the
    published setup (`wse_systems.published.PUBLISHED_SETUP`): Artificial Analysis' 1k
    workload (a step reads 1,500 cached tokens on average, not half the 8k context) and the
    token's trip to the host per token (the August 2024 release's wafer I/O waited on
    compute), on the plan `wse plan infer` serves it on (hunt decode41: compact, 16 stages of
    two layers; one region a layer was priced, 3,010.58 tokens/s; session 84: on 661 of the
    762 rows, jobs18 L4's footprints): about 2,643 tokens/s at CS-3's hop and relay
    latencies, DSD issue and control instruction fitted on WaferLLM's MeshGEMV measured on a
    CS-3, with the SDK gemv's own control counted and the norms' statistic, the final norm,
    the argmax's local pass, the softmax's reductions and RoPE priced (session 86; 2,749 in
    session 85, issue 41;
    2,417 with the latencies alone, session 84; 3,452 at the sourced 1 and 5), so the check
    misses by more than its 10% (+47%; reported, never fitted). Banded regions one a layer,
    sized by their bytes, give about 1,230 (-32%; 1,278 in session 85; 1,265 in session 84;
    about 1,900, +5%, at the sourced latencies)."""
    from wse_models import preset_config
    from wse_systems.published import PUBLISHED_SETUP, decode_check_row, served_token

    kv, out = int(PUBLISHED_SETUP["kv_tokens"]), bool(PUBLISHED_SETUP["token_out"])
    spec = preset("wse3")
    config = preset_config("llama3-8b")
    report, plan = served_token(config, spec, num_wafers=1, kv_tokens=kv, token_out=out)
    assert plan.num_wafers == 1 and plan.num_stages == 16 and plan.layout == "compact"
    assert "Llama" not in report.calibration.describe()
    assert decode_check_row()["model"] == pytest.approx(report.predicted_s, rel=1e-9)
    bands = decode_perf.plan_for(config, spec=spec, num_wafers=1, layout="banded")
    banded = decode_perf.tokens_per_s(
        decode_perf.predict_decode(config, bands, kv_tokens=kv, token_out=out)
    )
    # 1,265 in session 84; 1,278 in session 85; the SDK gemv's control and the decode's
    # norms, argmax, softmax reductions and RoPE, session 86
    assert banded == pytest.approx(1230, rel=0.02)
    assert decode_perf.tokens_per_s(report) > 1.1 * 1800 > banded  # the check's miss


@pytest.mark.xfail(
    strict=True,
    reason="issue 41's done-criterion: the 8B check within 10% of 1,800 tokens/s. As published "
    "(Artificial Analysis' 1k workload: 1,500 cached tokens; the token's trip to the host per "
    "token), on the plan `wse plan infer` serves it on (compact, 16 stages on 474 rows, 661 "
    "in session 84; hunt decode41: one region a layer was priced, ~3,011), at CS-3's hop and "
    "relay latencies "
    "fitted on WaferLLM's MeshGEMV measured on a CS-3 (session 84; ~3,452, +92%, at the "
    "sourced ones), with CS-3's DSD issue and control instruction fitted on the same rows "
    "(issue 41; ~2,417, +34%, before), and the SDK gemv's control counted from its source "
    "and the norms' statistic, the final norm, the argmax's local pass, the softmax's "
    "reductions and RoPE priced (session 86; ~2,749, +53%, before), the model gives ~2,643 "
    "tokens/s (+47%). Swept beside "
    "it in session 84 (wse_systems.published.check_sweeps, at ~2,417): the clock 0.85 / 0.976 "
    "/ 1.1 GHz gives ~1,870 / 2,147 / 2,417; the whole 8,192-token buffer read ~2,168; the "
    "trip's latency at 50 us ~2,166; 8 and 16 users in flight (the serving model) ~1,915 and "
    "1,629 per user. No priced mechanism missing from compact was found; WaferLLM's MeshGEMV "
    "(gemv='meshgemv', its route resets at an assumed 10 cycles a colour) is faster still "
    "(~3,340). Left honest, not fitted.",
)
def test_8b_check_within_ten_percent():
    from wse_systems.published import decode_check_row

    row = decode_check_row()
    assert row["model"] == pytest.approx(row["published"], rel=0.10)


def test_8b_check_under_meshgemv_is_shown_beside_never_chosen():
    """WaferLLM's MeshGEMV (MeshInfra/WaferLLM at 2cd13b5c; `wse_systems.meshgemv`) priced on
    the 8B check's setup, on the plan `wse plan infer --gemv meshgemv` serves it on: a
    stated, switchable assumption (`gemv=`), shown in the report's assumptions, never the
    check row's program (Cerebras' software is not WaferLLM). It moves compact regions
    further from 1,800 (about 3,210 tokens/s, its 6 route resets a layer at an assumed 10
    cycles a colour, against the check's 2,643, session 86; 2,749 in session 85, issue 41;
    2,939 against 2,417 in session 84; 4,013 against 3,454 at the sourced hop and relay
    latencies) and one-a-layer bands below it
    (about 1,322: half the products reduce along the band's 21 rows, Kt = 196 FMACs of 4 or
    fewer outputs each, the DSD issue's)."""
    from wse_models import preset_config
    from wse_systems.published import PUBLISHED_SETUP, decode_check_row, served_token

    kv, out = int(PUBLISHED_SETUP["kv_tokens"]), bool(PUBLISHED_SETUP["token_out"])
    assert PUBLISHED_SETUP["gemv"] == "sdk"
    spec = preset("wse3")
    config = preset_config("llama3-8b")
    sdk, _ = served_token(config, spec, num_wafers=1, kv_tokens=kv, token_out=out)
    mesh, plan = served_token(config, spec, num_wafers=1, kv_tokens=kv, token_out=out,
                              gemv="meshgemv")  # fmt: skip
    assert plan.gemv == "meshgemv" and plan.layout == "compact"
    assert "WaferLLM" in mesh.assumptions["gemv program"]
    assert mesh.assumptions["gemv program"].startswith("meshgemv")
    assert sdk.assumptions["gemv program"].startswith("sdk")
    assert decode_check_row()["model"] == pytest.approx(sdk.predicted_s, rel=1e-9)
    # 2,939 in session 84; 3,340 since issue 41 (CS-3's DSD issue and control instruction);
    # 3,210 since session 86 (the norms' statistic, the final norm, the argmax's local pass,
    # the softmax's reductions, RoPE)
    assert decode_perf.tokens_per_s(mesh) == pytest.approx(3210, rel=0.02)
    assert decode_perf.tokens_per_s(mesh) > decode_perf.tokens_per_s(sdk) > 1.1 * 1800
    bands = decode_perf.plan_for(config, spec=spec, num_wafers=1, layout="banded", gemv="meshgemv")
    banded = decode_perf.predict_decode(config, bands, kv_tokens=kv, token_out=out)
    assert decode_perf.tokens_per_s(banded) < 0.9 * 1800


def test_experiment_reports_the_published_rows():
    from wse_inference.studies.hotchips24_inference import _predictions

    rows, plans = _predictions()
    got = {r.params["model"]: r for r in rows}
    assert list(got) == ["llama3.1-8b", "llama3.1-70b", "llama3.1-405b"]
    for r in rows:
        assert {"model", "wafer", "wafers", "precision"} <= set(r.params)
        assert r.unit == "tokens/s" and r.value > 0 and math.isfinite(r.value)
    assert got["llama3.1-8b"].params["calibration"] and got["llama3.1-8b"].published == 1800
    assert got["llama3.1-70b"].params["wafers"] == 4 and got["llama3.1-70b"].published is None
    assert got["llama3.1-405b"].params["wafers"] > 4 and got["llama3.1-405b"].published is None
    assert got["llama3.1-405b"].value < got["llama3.1-70b"].value < got["llama3.1-8b"].value
    # each row's value prices the SDK gemv dataflow; WaferLLM's MeshGEMV is shown beside it
    assert all(r.params["gemv"] == "sdk" for r in rows)
    assert all(p["meshgemv_tokens_per_s"] > 0 for p in plans)
