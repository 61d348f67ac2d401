"""Hunt 74 (train10): the activation stride `wse train` runs (its one memory plan,
`wse_trainer.run.validate`) when `runconfig.activation_stride` is unset is the fastest of the
strides that place, the one `wse plan train` prices; a stride given is run as given.

Oracle: the predictor asked once per stride: for every k, the plan `activation_stride=k`
runs, priced by `predict_step` (one micro-batch, one system); the run's stride is their
argmin (the smaller on a tie). Llama 3 8B with 48 sequences of 8,192 tokens per system, at
once: before, stride 3 (33.37 s a step) where stride 4 takes 8.923 s.
"""

from __future__ import annotations

import dataclasses

from wse_core.cost.assumptions import assumed_spec
from wse_systems.training.performance import StepLayout, predict_step
from wse_systems.training.plan import memory_plan
from wse_trainer.config import config_from_dict
from wse_trainer.run import validate

# the hunt's case on a PE whose every byte is data, as it was found (hunt 81 took each PE's
# program off its data budget: at 2 KiB, 48 x 8,192 no longer places stride 3, and its smallest
# stride that places, 4, is also its fastest); the chooser under test reads the budget
WSE3 = dataclasses.replace(assumed_spec("wse3"), code_stack_bytes_per_pe=0)


def _config(**run):
    return config_from_dict({
        "model": {"preset": "llama3-8b", "dtype": "bfloat16"},
        "train_input": {"batch_size": 48, "max_sequence_length": 8192, "micro_batch_size": "none"},
        "eval_input": {"batch_size": 48, "max_sequence_length": 8192},
        "runconfig": {"num_csx": 1, "wafer": "wse3", **run},
    })  # fmt: skip


def test_the_run_keeps_the_fastest_stride_and_a_given_one():
    model, plan = validate(_config(), WSE3)
    timed = {}
    for k in range(1, int(model.n_layers) + 1):
        p = memory_plan(model, WSE3, 48, 8192, stride=k)
        if p.streaming is not None:
            timed[k] = predict_step(model, WSE3, num_csx=1, batch_per_system=48, micro_batch=48,
                                    seq_len=8192, layout=StepLayout(p)).predicted_s  # fmt: skip
    assert plan.streaming.stride == min(timed, key=lambda k: (timed[k], k))
    assert plan.streaming.stride != min(timed)  # not the smallest that places: the hole
    _, given = validate(_config(activation_stride=3), WSE3)
    assert given.streaming.stride == 3
