"""Hunt 75 (trainfix): the training planner's MemoryX capacity read, strides past the layer
count, and what the stride times after "why:" are.

Broken before:
- `check_memoryx` compared against `memoryx_capacity_bytes` without noting the read, so
  `--assume memoryx_capacity_bytes` was refused where the model fits;
- `runconfig.activation_stride` past the layer count was planned (`memory_plan` kept it as
  "kept every 100 layer(s)"), and the plan's note glossed stride 0 as "as the SRAM ledger
  allows" where it means the fastest predicted stride that fits;
- the "why:" line listed each stride's time (one micro-batch on one system, MemoryX updating
  per group) beside the run's clipped step without saying what they were.

Oracles: the layer count and `inputs_held`'s closed form (ceil(L / k) + k - 1); the listing's
contract (a constant with no sweep is listed only where `--assume` changed it); the predictor
asked once per stride on one micro-batch of one system, unclipped and clipped.
"""

from __future__ import annotations

import math
import re

import pytest
import wse_models
from wse_core import SramBudgetError, WseError
from wse_core.cost.assumptions import assumed_spec
from wse_core.cost.listing import listed
from wse_core.cost.reads import recording
from wse_systems.planning.choice import ModelChoice
from wse_systems.training.performance import StepLayout, predict_step
from wse_systems.training.plan import check_memoryx, memory_plan, plan_activations
from wse_systems.training.stride import run_plan

WSE3 = assumed_spec("wse3")
KEY = "memoryx_capacity_bytes"


def _model(preset: str = "gpt2-124m"):
    return wse_models.preset_config(preset, dtype="bfloat16")


def test_the_capacity_check_notes_its_read_listed_only_where_assumed():
    model = _model()
    plan = memory_plan(model, WSE3, 1, 1024)
    with recording() as got:
        check_memoryx(plan)
    assert got.values == {KEY: {WSE3.memoryx_capacity_bytes}} and KEY not in got.moving
    assert not [e for e in listed(got, {}) if e.key == KEY]  # no sweep: not listed unasked
    (entry,) = [e for e in listed(got, {KEY: WSE3.memoryx_capacity_bytes}) if e.key == KEY]
    assert entry.assumed


@pytest.mark.parametrize("call", ["plan_activations", "memory_plan", "run_plan"])
def test_a_stride_past_the_layer_count_is_refused_not_planned(call):
    model = _model()
    n = int(model.n_layers)
    fn = {"plan_activations": plan_activations, "memory_plan": memory_plan,
          "run_plan": run_plan}[call]  # fmt: skip
    for k in (n + 1, 100):
        with pytest.raises(WseError) as err:
            fn(model, WSE3, 1, 1024, stride=k)
        assert not isinstance(err.value, SramBudgetError)
        msg = str(err.value)
        assert "\n" not in msg and f"more than the model's {n} layers" in msg
        assert f"give 1 to {n}" in msg and "0 (the fastest predicted stride that fits)" in msg


def test_a_stride_of_the_layer_count_keeps_one_input_and_recomputes_the_rest():
    model = _model()
    n = int(model.n_layers)
    plan = plan_activations(model, WSE3, 1, 1024, stride=n)
    assert plan.stride == n and plan.held_layers == math.ceil(n / n) + n - 1


def test_the_plans_note_says_what_stride_0_means():
    (note, _) = ModelChoice("m", _model(), wafer="wse3").file_notes("wse3")
    assert "activation_stride 0 (0: the fastest predicted stride that fits)" in note
    assert "weight_chunks 0 (0: whole layers when they fit, else column chunks" in note


def test_the_why_lines_times_are_one_unclipped_micro_batch_on_one_system():
    """Llama 3 8B with 16 x 8,192 tokens (`wse train llama3_8b --validate-only`): each time
    listed is the predictor's step of that stride's plan, one micro-batch on one system with
    per-group updates, which the line now says; the clipped step of the same plan differs."""
    model, micro, seq = _model("llama3-8b"), 16, 8192
    reason = run_plan(model, WSE3, micro, seq).streaming.stride_reason
    tried = dict(re.findall(r"(\d+): ([\d.]+) s", reason))
    assert len(tried) > 1
    for k, shown in tried.items():
        plan = memory_plan(model, WSE3, micro, seq, stride=int(k))
        at = {clip: predict_step(model, WSE3, num_csx=1, batch_per_system=micro,
                                 micro_batch=micro, seq_len=seq,
                                 layout=StepLayout(plan, clip_gradients=clip)).predicted_s
              for clip in (False, True)}  # fmt: skip
        assert float(shown) == float(f"{at[False]:.4g}")
        assert at[True] > at[False]  # the held update: not what the line lists
    assert f"each a step of one micro-batch of {micro} on one system" in reason
    assert "MemoryX updating each group as its gradient arrives, not the run's step" in reason
    assert "the update held to the step's end" in reason
