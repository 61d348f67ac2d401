"""The norm's statistic, the final norm and the argmax's local pass (session 86: unpriced
until then), counted by hand on a one-layer model."""

import pytest
from wse_core.cost.perf import PerfModel
from wse_core.hw.spec import preset, spec_from
from wse_inference.pipeline import perf as decode_perf
from wse_systems.decoder import DECODER_ASSUMPTIONS
from wse_systems.pipeline import plan_pipeline
from wse_systems.transformer import DecoderCounts

# One layer: d 8, 2 heads of 4 (1 KV head), MLP 16, vocabulary 32 (`test_infer_decode_perf`'s).
HAND = DecoderCounts(
    name="hand", arch="llama", n_layers=1, d_model=8, n_heads=2, n_kv_heads=1, d_ff=16,
    vocab_size=32, max_seq_len=64,
)  # fmt: skip


def _hand_plan():
    return plan_pipeline(HAND, spec_from(preset("tiny"), pe_rows=4, pe_cols=4), context_len=8)


def _priced():
    plan = _hand_plan()
    report = decode_perf.predict_decode(HAND, plan)
    rates = PerfModel(plan.spec, report.calibration).rates
    return plan, report, rates


def test_norm_counted_by_hand():
    """d = 8 on a stage's top row of 4 columns: 2 fp16 values a PE. Its square-and-sum is
    one FMAC into one accumulator (1 element a cycle, not the 8-wide SIMD); once the row's
    sum is back, one fp32 square root and one fp32 divide (1 / sqrt(mean + eps)), then the
    2 values scaled (one 8-wide multiply: 1 cycle); each DSD pays its issue."""
    plan, report, rates = _priced()
    assert (plan.stages[0].region.rows, plan.stages[0].region.cols) == (2, 4)
    d = rates.dsd_issue_cycles
    cycles = lambda name: report.predicted.leaf(name).seconds * plan.spec.clock_hz
    assert cycles("norm_local") == pytest.approx(2 + d)
    assert cycles("norm_scale") == pytest.approx(rates.sqrt_cycles + rates.div_cycles + 1 + 3 * d)
    # both layer norms and the final one have the three steps
    norms = [n for _, n in report.predicted.rows() if n.name.startswith("norm_") and n.children]
    assert [n.name for n in norms] == ["norm_attn", "norm_mlp", "norm_final"]
    for n in norms:
        assert [c.name for c in n.children] == ["norm_local", "norm_sum", "norm_scale"]


def test_final_norm_and_argmax_by_hand():
    """The head (2 x 4 PEs) normalises the residual before its product; after it each row's
    middle PE holds ceil(32 / 2) = 16 logits: the max into one accumulator (16 cycles) and
    the pass that finds its position (16 more, assumed: listed), then the (max, index) pairs
    over the head region."""
    plan, report, rates = _priced()
    assert (plan.head.region.rows, plan.head.region.cols) == (2, 4)
    per = report.predicted.leaf("per_token")
    assert [c.name for c in per.children] == ["norm_final", "lm_head", "argmax", "embed"]
    local = report.predicted.leaf("argmax_local").seconds * plan.spec.clock_hz
    assert local == pytest.approx(2 * 16 + 2 * rates.dsd_issue_cycles)
    argmax = report.predicted.leaf("argmax")
    assert [c.name for c in argmax.children] == ["argmax_local", "argmax_reduce"]
    assert argmax.seconds == pytest.approx(sum(c.seconds for c in argmax.children))
    assert "argmax" in DECODER_ASSUMPTIONS and "argmax" in report.assumptions
