"""Planner (SRAM ledger sizing, refusal with numbers) and the decode performance model."""

import math

import pytest
from wse_core import preset
from wse_inference.decode_perf import (
    CALIBRATION_TOKENS_PER_S,
    INTER_WAFER_LATENCY_S,
    predict_decode,
    predict_model,
)
from wse_core.pipeline_plan import PipelinePlanError, min_wafers, plan_pipeline
from wse_models import preset_config


@pytest.mark.parametrize("stages, wafers", [(2, 1), (3, 1), (4, 2)])
def test_plan_partitions_layers_rows_and_bytes(stages, wafers):
    config = preset_config("tiny-llama", n_layers=4)
    spec = preset("tiny")
    plan = plan_pipeline(config, spec, num_wafers=wafers, stages=stages, context_len=64, slots=2)
    layers = [s.layers for s in plan.stages]
    assert layers[0][0] == 0 and layers[-1][1] == 4
    assert all(a[1] == b[0] for a, b in zip(layers, layers[1:], strict=False))
    assert max(s.num_layers for s in plan.stages) - min(s.num_layers for s in plan.stages) <= 1
    # Rows of each wafer are all used, regions do not overlap, bytes fit per PE.
    for w in range(wafers):
        regions = [s for s in (plan.head, *plan.stages) if s.wafer == w]
        assert sum(s.region.rows for s in regions) == spec.pe_rows
        assert all(s.bytes_per_pe <= spec.sram_bytes_per_pe for s in regions)
    # Bytes: weights of every layer counted once; KV = layers * 2 * kv * hd * 2 B * ctx * slots.
    assert sum(s.weight_bytes for s in plan.stages) == 4 * config.layer_params() * 2
    kv = 4 * 2 * config.n_kv_heads * config.hd * 2 * 64 * 2
    assert sum(s.kv_bytes for s in plan.stages) == kv
    assert plan.head.weight_bytes == (config.num_params() - 4 * config.layer_params()) * 2


def test_plan_refuses_with_numbers():
    config = preset_config("llama3-70b")
    with pytest.raises(PipelinePlanError, match=r"needs 1\d\d GB .* 44 GB .*at least 4 wafers"):
        plan_pipeline(config, preset("wse3"), num_wafers=1, context_len=8192)
    assert 4 <= min_wafers(config, preset("wse3"), context_len=8192) <= 5
    with pytest.raises(PipelinePlanError, match="stages must be"):
        plan_pipeline(preset_config("tiny-llama"), preset("tiny"), stages=3)


def test_longer_context_needs_more_wafers():
    config = preset_config("llama3-8b")
    short = min_wafers(config, preset("wse3"), context_len=8192)
    long = min_wafers(config, preset("wse3"), context_len=131072, slots=4)
    assert short == 1 and long > short


def test_perf_calibration_and_predictions():
    pred, plan = predict_model("llama3-8b", num_wafers=1)
    assert pred.tokens_per_s == pytest.approx(CALIBRATION_TOKENS_PER_S, rel=1e-9)
    assert 0 < pred.efficiency <= 1
    big, big_plan = predict_model("llama3-70b")
    assert big_plan.num_wafers >= 4 and big.tokens_per_s < pred.tokens_per_s
    assert big.inter_wafer_s == pytest.approx(
        big_plan.wafer_crossings
        * (8192 * 2 / plan.spec.host_io_bytes_per_s + INTER_WAFER_LATENCY_S)
    )
    # Uncalibrated time is the sum of the regions' PerfModel times: more layers, more time.
    small = predict_decode(
        preset_config("llama3-1b"),
        plan_pipeline(preset_config("llama3-1b"), preset("wse3"), context_len=8192),
        calibrated=False,
    )
    full = predict_decode(preset_config("llama3-8b"), plan, calibrated=False)
    assert small.on_wafer_s < full.on_wafer_s
    assert math.isclose(full.on_wafer_s / pred.efficiency, 1 / 1800, rel_tol=1e-9)
