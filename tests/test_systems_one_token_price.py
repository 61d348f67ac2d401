"""One pricer of a decode token (issue 40): the pipelined engine's report, the serving model
at one user, the per-wafer trace's report and `wse plan infer --users 1` give the same
batch-1 token time, to the cycle, on the same plan and KV read. The oracle is the one
pricer itself (`wse_systems.token.price_token`); each consumer reaches it its own way."""

from __future__ import annotations

import pytest
from wse_core import preset
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.testing import tiny_model
from wse_systems.planning.choice import ModelChoice
from wse_systems.planning.infer import Target, WaferSetup, plan_infer
from wse_systems.serving import Workload
from wse_systems.serving.wafer import WaferServing
from wse_systems.token import price_token
from wse_systems.trace import pipeline_report


@pytest.mark.parametrize("prompt, output", [(16, 8), (4, 20)])
def test_engine_serving_trace_and_plan_price_a_token_alike(prompt, output):
    model = tiny_model("llama", n_layers=1)  # one layer: one region, one slot at one user
    spec = preset("wse3")
    work = Workload(prompt_tokens=prompt, output_tokens=output)
    serving = WaferServing(model.config, spec, num_wafers=1, workload=work)
    plan, _ = serving.plans(1)
    kv = work.kv_tokens
    engine = PipelineEngine(model, plan=plan, spec=spec)
    planned = plan_infer(
        ModelChoice("tiny", model.config), wafer=WaferSetup(spec, 1), workload=work,
        target=Target(users=1),
    )  # fmt: skip
    seconds = {
        "one pricer": price_token(model.config, plan, kv_tokens=kv).predicted_s,
        "engine": engine.report(kv_tokens=kv).predicted_s,
        "serving, one user": 1 / serving.point(1).user_tokens_per_s,
        "trace": pipeline_report(model.config, plan, kv_tokens=kv).predicted_s,
        "wse plan infer": 1 / planned.wafer.figures["tokens_per_s_per_user"],
    }
    cycles = {k: v * spec.clock_hz for k, v in seconds.items()}
    assert max(cycles.values()) - min(cycles.values()) < 1.0, cycles
    assert cycles["one pricer"] > 100  # a real token, not an empty phase tree
