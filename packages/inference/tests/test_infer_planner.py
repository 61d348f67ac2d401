"""Planner (SRAM ledger sizing, refusal with numbers); its prices: test_infer_decode_perf.py."""

import pytest
from wse_core import preset
from wse_models import preset_config
from wse_systems.pipeline import PipelinePlanError, Regions, min_wafers, plan_pipeline


@pytest.mark.parametrize("stages, wafers", [(2, 1), (3, 1), (4, 2)])
def test_plan_partitions_layers_rows_and_bytes(stages, wafers):
    config = preset_config("tiny-llama", n_layers=4)
    spec = preset("tiny")
    plan = plan_pipeline(
        config, spec, num_wafers=wafers, context_len=64, slots=2, regions=Regions(stages=stages)
    )
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
    wse3 = preset("wse3")  # its SRAM for data: 762 x 1176 PEs x (49,152 - 4,096) B = 40.4 GB
    data_gb = f"{wse3.num_pes * (wse3.sram_bytes_per_pe - wse3.code_stack_bytes_per_pe) / 1e9:.3g}"
    with pytest.raises(
        PipelinePlanError, match=rf"needs 1\d\d GB .* {data_gb} GB of SRAM for data .*at least 4"
    ):
        plan_pipeline(config, wse3, num_wafers=1, context_len=8192)
    assert 4 <= min_wafers(config, preset("wse3"), context_len=8192) <= 5
    with pytest.raises(PipelinePlanError, match="stages must be"):
        plan_pipeline(preset_config("tiny-llama"), preset("tiny"), regions=Regions(stages=3))


def test_longer_context_needs_more_wafers():
    config = preset_config("llama3-8b")
    short = min_wafers(config, preset("wse3"), context_len=8192)
    long = min_wafers(config, preset("wse3"), context_len=131072, slots=4)
    assert short == 1 and long > short
