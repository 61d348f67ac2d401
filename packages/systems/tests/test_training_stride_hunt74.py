"""Hunt 74 (train10), the activation stride a plan keeps when the params file sets none.

Before: a plan with no stride given kept the smallest stride whose layer inputs fit, which can
leave the products so little SRAM that the step is several times slower: `wse plan train -m
llama3-8b --batch 48 --micro-batch none` priced stride 3 at 33.37 s a step where
`runconfig.activation_stride=4` took 8.923 s; Llama 3 70B with 12 sequences ran 2,195
tokens/s at stride 4 against 5,884 at stride 8.

Oracle: the predictor itself, asked once per stride. For every stride k from 1 to the layer
count, the plan `runconfig.activation_stride=k` runs (`memory_plan(stride=k)`; strides that do
not place skipped) is priced by `predict_step` (one micro-batch on one system); the stride
of the run's plan with no stride given (`run_plan`, what `plan_step` prices) must be their
argmin (the smaller on a tie), whatever subset the chooser itself prices. A stride given is
kept as given.
"""

from __future__ import annotations

import dataclasses

import pytest
import wse_models
from wse_core.cost.assumptions import assumed_spec
from wse_systems.training.micro_batch import plan_step
from wse_systems.training.performance import StepLayout, predict_step
from wse_systems.training.plan import memory_plan, plan_activations
from wse_systems.training.stride import run_plan

# the hunt's cases on a PE whose every byte is data, as they were found (hunt 81 took each PE's
# program off its data budget: at 2 KiB, 8B's 48 x 8,192 no longer places stride 3, and its
# smallest stride that places is also its fastest); the chooser under test reads the budget
WSE3 = dataclasses.replace(assumed_spec("wse3"), code_stack_bytes_per_pe=0)
CASES = [  # (preset, micro-batch, sequence): the hunt's two and a small model (stride 1)
    ("llama3-8b", 48, 8192),
    ("llama3-70b", 12, 8192),
    ("llama3-8b", 32, 8192),
    ("gpt2-124m", 16, 1024),
]


def _model(preset: str):
    return wse_models.preset_config(preset, dtype="bfloat16")


def _step_s(model, micro: int, seq: int, stride: int) -> float | None:
    """The predicted step of the plan that `activation_stride=stride` runs (None: no place)."""
    plan = memory_plan(model, WSE3, micro, seq, stride=stride)
    if plan.streaming is None:
        return None
    return predict_step(model, WSE3, num_csx=1, batch_per_system=micro, micro_batch=micro,
                        seq_len=seq, layout=StepLayout(plan)).predicted_s  # fmt: skip


def _every_stride(model, micro: int, seq: int) -> dict[int, float]:
    timed = {k: _step_s(model, micro, seq, k) for k in range(1, int(model.n_layers) + 1)}
    return {k: s for k, s in timed.items() if s is not None}


@pytest.mark.parametrize(("preset", "micro", "seq"), CASES)
def test_the_stride_kept_is_the_fastest_of_every_stride_that_places(preset, micro, seq):
    model = _model(preset)
    timed = _every_stride(model, micro, seq)
    best = min(timed, key=lambda k: (timed[k], k))
    plan = run_plan(model, WSE3, micro, seq).streaming
    assert plan.stride == best
    assert f"stride {best}: the fastest predicted step" in plan.stride_reason
    assert "runconfig.activation_stride sets one" in plan.stride_reason
    # the planner's step (`wse plan train --micro-batch none`) runs it too
    step = plan_step(model, WSE3, num_csx=1, batch_per_system=micro, seq_len=seq,
                     micro_batch="none")  # fmt: skip
    assert step.extra["stride"] == best
    assert step.predicted_s == pytest.approx(timed[best], rel=1e-12)


@pytest.mark.parametrize(("preset", "micro", "seq"), CASES[:2])
def test_the_hunts_cases_were_not_the_smallest_stride_that_fits(preset, micro, seq):
    """The hole: the smallest stride that fits (what the plan kept) is not the fastest."""
    model = _model(preset)
    timed = _every_stride(model, micro, seq)
    least = plan_activations(model, WSE3, micro, seq).stride
    assert least == min(timed)  # the smallest that places
    assert min(timed.values()) < timed[least]
    assert run_plan(model, WSE3, micro, seq).streaming.stride != least


def test_a_stride_given_is_kept():
    model = _model("llama3-8b")
    for k in (3, 5):
        plan = run_plan(model, WSE3, 48, 8192, stride=k).streaming
        assert plan.stride == k and plan.stride_reason == ""
        step = plan_step(model, WSE3, num_csx=1, batch_per_system=48, seq_len=8192,
                         micro_batch="none", stride=k)  # fmt: skip
        assert step.extra["stride"] == k


def test_the_reason_reaches_the_validate_only_why_line():
    """`wse train --validate-only` prints the chunks' reason after "why:"."""
    model = _model("llama3-8b")
    plan = run_plan(model, WSE3, 48, 8192).streaming
    assert plan.chunks.reason.endswith(plan.stride_reason)
    assert f"layer inputs (stride {plan.stride})" in plan.chunks.reason


def test_a_plan_that_does_not_place_carries_the_ledgers_line():
    model = _model("llama3-8b")  # 64 x 8,192 tokens at once: no stride places them
    got, want = run_plan(model, WSE3, 64, 8192), memory_plan(model, WSE3, 64, 8192)
    assert got.streaming is None and got.streaming_error == want.streaming_error
    assert "SRAM" in got.streaming_error or "needs" in got.streaming_error
