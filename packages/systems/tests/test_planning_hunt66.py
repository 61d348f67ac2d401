"""Hunt 66, `wse plan train|infer`'s planners (`wse_systems.planning`). Broken before:

- hole 11: `wse plan train`'s default batch was the smallest whose streams add <= 1% of the
  step; for Llama 3 8B that is 17, a prime whose only micro-batch is 17 (shorter vectors),
  51,715 tokens/s against 61,925 at 16 = 2 x 8 (16.5% slower), and nothing said why;
- hole 12: the token's trip to the host was left out of serving with no assumption saying
  so (hotchips24-inference prices it for its 8B row: 2,986.41 against 3,004.36 tokens/s),
  and "time_s" meant seconds per output token in the infer JSON and the whole run in the
  train JSON.
"""

from __future__ import annotations

import pytest
import wse_models
from wse_core.cost.assumptions import assumed_spec
from wse_systems.pipeline import Regions, plan_pipeline
from wse_systems.planning.choice import ModelChoice
from wse_systems.planning.infer import GpuSetup, Target, WaferSetup, plan_infer
from wse_systems.planning.train import TrainBatch, plan_train
from wse_systems.serving import Workload
from wse_systems.token import price_token
from wse_systems.training.micro_batch import plan_step

LLAMA8B = ModelChoice("llama3-8b", wse_models.preset_config("llama3-8b", dtype="bfloat16"))
WSE3 = assumed_spec("wse3")


def _step_tokens_per_s(batch: int) -> float:
    report = plan_step(LLAMA8B.config, WSE3, num_csx=1, batch_per_system=batch, seq_len=8192,
                       micro_batch="explore")  # fmt: skip
    return report.extra["tokens_per_s"]


# ---- hole 11: the default batch is the one the run is best served by ------------------------


def test_the_default_batch_is_no_slower_than_a_smaller_one_and_says_why():
    # hunt 72: an unset micro-batch is priced as `wse train` runs it, auto; this hole's figures
    # are explore's (the fastest micro-batch of each batch), so explore is asked for
    plan = plan_train(LLAMA8B, tokens=1e12, spec=WSE3, batch=TrainBatch(micro_batch="explore"))
    w = plan.wafer.figures
    assert plan.inputs["batch_per_system"] == 16  # before: 17 (micro-batch 17)
    assert w["micro_batch"] == 8 and w["micro_batches"] == 2
    assert w["tokens_per_s"] == pytest.approx(_step_tokens_per_s(16))
    # hunt 74: 17's step at its fastest stride (54,473 tokens/s; 51,715 at the smallest;
    # 54,364 since hunt 82 took the program's 2 KiB off the token passes; 54,347 since
    # session 84's CS-3 hop and relay latencies; 63,406 since issue 41's CS-3 DSD issue and
    # control instruction, fitted on the same rows: 16 is 1% ahead of it, 13.7% before)
    assert w["tokens_per_s"] > _step_tokens_per_s(17)
    # no smaller batch is faster beyond the policy's 1% (since issue 41 12 and 15 are 0.9%
    # and 0.5% ahead of 16: 64,618 and 64,344 against 64,023; none was before)
    for smaller in (8, 12, 15):
        assert w["tokens_per_s"] >= _step_tokens_per_s(smaller) * (1 - 0.01)
    why = w["batch_choice"]
    # hunt 78: the default plan's batch is kept at the micro-batch asked that runs it, so
    # asking one no longer moves the batch (--micro-batch 1: 17). Hunt 82: ranked at auto's
    # tokens/s, 16 x 1 (54,408) was within 1% of 17 (54,364) and 17 was kept; each batch is
    # ranked at its fastest micro-batch now, what the hint offers (16: 2 x 8, 61,833;
    # session 84, CS-3's hop and relay latencies fitted on measured MeshGEMV: 17 at 54,347,
    # 16 at 61,792; issue 41: the batches near 19, not 17, 19 at 56,376, 16 at 64,023)
    assert why.startswith("16: ") and "19 (56,376 tokens/s)" in why and "16 (64,023" in why
    assert why.endswith("tokens/s at each batch's fastest micro-batch, kept at micro-batch "
                        "explore")  # fmt: skip
    assert any("default_batch" in n for n in plan.assumptions)


def test_a_batch_asked_for_is_kept_and_no_choice_is_reported():
    plan = plan_train(LLAMA8B, tokens=1e12, spec=WSE3, batch=TrainBatch(batch_per_system=17))
    assert plan.inputs["batch_per_system"] == 17 and plan.wafer.figures["batch_choice"] is None


# ---- hole 12: the token's trip to the host is stated; keys name what they are ---------------


def _infer(**target):
    work = Workload(prompt_tokens=1024, output_tokens=256)
    return plan_infer(LLAMA8B, wafer=WaferSetup(WSE3, 1), gpu=GpuSetup(gpus=8),
                      workload=work, target=Target(**target))  # fmt: skip


def test_serving_states_the_tokens_trip_to_the_host_with_its_price():
    plan = _infer(users=1)
    lay = plan.wafer_point.layout
    # on the point's footprint (jobs18 L4, session 84: the plan may leave rows idle)
    spec = WSE3.replace(pe_rows=lay["pe_rows"])
    held = plan_pipeline(LLAMA8B.config, spec, num_wafers=1, context_len=1280, slots=1,
                         regions=Regions(layout=lay["layout"], head_rows=lay["head_rows"],
                                         stages=lay["stages"]))  # fmt: skip
    kv = 1024 + 128
    without = price_token(LLAMA8B.config, held, kv_tokens=kv).predicted_s
    with_trip = price_token(LLAMA8B.config, held, kv_tokens=kv, token_out=True).predicted_s
    assert plan.wafer_point.user_tokens_per_s == pytest.approx(1 / without)  # left out
    trip = f"{(with_trip - without) * 1e6:.3g} us a token"
    notes = [n for n in plan.assumptions if "trip to the host" in n]
    assert len(notes) == 1 and trip in notes[0] and "hotchips24-inference" in notes[0]


def test_time_keys_name_what_they_are():
    served = _infer(users=4).to_dict()
    for side in ("wafer", "gpu"):
        d = served[side]
        assert "time_s" not in d  # before: seconds per output token, beside a year's energy
        assert d["s_per_output_token"] == pytest.approx(1 / d["tokens_per_s"])
    trained = plan_train(LLAMA8B, tokens=1e11, spec=WSE3).to_dict()
    for side in ("wafer", "gpu"):
        d = trained[side]
        assert d["train_s"] == pytest.approx(d["steps"] * d["step_s"])
        assert d["time_s"] == d["train_s"]  # the alias apps/cli's tests read
