"""Hunt 66, experiment `hc24-frontier`. Broken before: it priced its 8 x H100 at MFU 0.4 and
HBM 0.8 (assumed) while `wse plan infer` priced the same GPU job at the fractions fitted on
TensorRT-LLM's H100 rows (0.269 / 0.713): Llama 3.1 8B, one user, 128 prompt / 20 output
tokens came out 620.33 tokens/s in the experiment and 589.1 in the plan. Now both read
`wse_systems.serving.gpu_step.FITTED_*`, and the experiment's one-user GPU figure is the
plan's."""

from __future__ import annotations

import pytest
import wse_models
from wse_core.cost.assumptions import assumed_spec
from wse_systems.planning.choice import ModelChoice
from wse_systems.planning.infer import GpuSetup, Target, WaferSetup, plan_infer
from wse_systems.serving import gpu_step as gs


def test_the_experiment_prices_the_gpus_at_the_fitted_fractions():
    from wse_inference.studies import hc24_frontier as hc

    assert (hc.MFU, hc.HBM_FRACTION) == (gs.FITTED_MFU, gs.FITTED_HBM_FRACTION)
    config = wse_models.preset_config("llama3-8b", dtype="bfloat16")
    wafer, gpu = hc._systems(config, 1, None)
    plan = plan_infer(ModelChoice("llama3-8b", config), wafer=WaferSetup(assumed_spec("wse3"), 1),
                      gpu=GpuSetup(gpus=hc.GPUS), workload=hc.WORKLOAD,
                      target=Target(users=1))  # fmt: skip
    assert gpu.point(1).user_tokens_per_s == pytest.approx(plan.gpu_point.user_tokens_per_s)
    assert gpu.point(1).aggregate_tokens_per_s == pytest.approx(
        plan.gpu_point.aggregate_tokens_per_s
    )
    assert wafer.point(1).user_tokens_per_s == pytest.approx(plan.wafer_point.user_tokens_per_s)
