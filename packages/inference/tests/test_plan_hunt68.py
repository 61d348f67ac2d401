"""Hunt 68's engine-plan hole (`wse_inference.pipeline.plan.engine_plan`). Broken before:

- `engine_plan` sized the engine's regions by bytes, so a longer `max_context` (or more stages,
  each a slot) gave the layers more of the wafer and `engine.report()` predicted a faster
  token: Llama 3 8B (its preset's 4-byte weights), 8 stages, 512 cached tokens read: 472.39 us
  at a 1,024-token context, 471.52 us at 4,096. The plan is now the fastest placement of its
  banded regions (`wse_systems.token.fastest_plan`, priced as the report's default token):
  470.80 us at both. The emulation reads the plan's layers and bytes, never its regions: the
  engine's tokens are the same on either plan, only the prediction moved (two-layer tiny model,
  2 stages, 32 tokens of context: 26.25 -> 23.04 us).

Oracles: the unmodified planner's plan (`plan_pipeline` by bytes) given to the engine, and
every placement of the head's ladder priced by the report's pricer (`price_token`).
"""

from __future__ import annotations

import jax.numpy as jnp
from wse_core import preset
from wse_inference.engine import SamplingParams
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.pipeline.plan import engine_plan
from wse_inference.testing import one_request, tiny_model
from wse_models import preset_config
from wse_systems.pipeline import PipelinePlanError, Regions, plan_pipeline
from wse_systems.token import head_rows_ladder, price_token

WSE3 = preset("wse3")


def _by_bytes(config, *, stages: int, context: int):
    """The engine's plan before hunt 68: its regions in proportion to their bytes."""
    return plan_pipeline(config, WSE3, context_len=context, slots=stages,
                         bytes_per_param=int(jnp.dtype(config.param_dtype).itemsize),
                         regions=Regions(stages=stages))  # fmt: skip


def test_a_longer_context_never_predicts_a_faster_engine_token():
    config = preset_config("llama3-8b")

    def token_us(context: int) -> float:
        plan = engine_plan(config, stages=8, max_context=context, spec=WSE3)
        assert plan.num_wafers == 1
        return price_token(config, plan, kv_tokens=512).predicted_s * 1e6

    tokens = [token_us(c) for c in (1024, 2048, 4096)]
    assert tokens == sorted(tokens)
    old = [price_token(config, _by_bytes(config, stages=8, context=c), kv_tokens=512).predicted_s
           for c in (1024, 2048, 4096)]  # fmt: skip
    assert old != sorted(old)  # the hole, as it was: 472.39, 472.15, 471.52 us


def test_the_engines_plan_is_the_fastest_placement_and_its_tokens_do_not_move():
    model = tiny_model("llama", n_layers=2)
    priced = PipelineEngine(model, spec=WSE3, stages=2, max_context=32)
    given = PipelineEngine(model, spec=WSE3, plan=_by_bytes(model.config, stages=2, context=32))
    sampling = SamplingParams(max_tokens=6, temperature=0.0)
    assert one_request(priced, [3, 1, 4], sampling) == one_request(given, [3, 1, 4], sampling)
    assert [s.layers for s in priced.plan.stages] == [s.layers for s in given.plan.stages]
    new, old = priced.report().predicted_s, given.report().predicted_s
    assert new < old  # 23.04 against 26.25 us
    # every other head size of the ladder, planned as the engine asks and priced as its
    # report prices: none is faster
    for rows in head_rows_ladder(WSE3):
        try:
            other = plan_pipeline(model.config, WSE3, context_len=32, slots=2,
                                  bytes_per_param=priced.plan.bytes_per_param,
                                  regions=Regions(stages=2, head_rows=rows))  # fmt: skip
        except PipelinePlanError:
            continue
        assert new <= price_token(model.config, other).predicted_s * (1 + 1e-12)
