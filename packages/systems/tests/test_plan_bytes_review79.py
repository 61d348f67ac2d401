"""Review 79 (M2, L3): `wse plan train`'s notes said "16 bytes/param" beside a layout note
of 18 bytes a parameter (the priced `gpu_layout.BYTES_PER_PARAM_TRAIN`), and the fp32 note
said the gradient all-reduce bytes were not priced (they are: `GRAD_BYTES` = 4 a value); the
layout note said a stage sends seq_len x d_model, where a micro-batch of b sequences is sent
(`stage_hop_s`).

Oracles: `gpu_layout`'s constants (every byte count a parameter in the notes is the one
priced) and a hand count of fp32 training's state (fp32 weight, gradient, Adam m and v:
4 + 4 + 4 + 4 = 16 bytes a parameter, no separate master)."""

from __future__ import annotations

import re

import pytest
import wse_models
from wse_core.cost.assumptions import assumed_spec
from wse_systems import gpu_layout
from wse_systems.planning.choice import ModelChoice
from wse_systems.planning.train import TrainBatch, plan_train

WSE3 = assumed_spec("wse3")
BATCH = TrainBatch(batch_per_system=16, micro_batch=16, seq_len=1024)
PER_PARAM = re.compile(r"(\d+) bytes ?(?:/|a |per )param")
FP32_STATE = 4 + 4 + 4 + 4  # fp32 weight, gradient, Adam m, v: by hand


def _notes(dtype: str) -> str:
    cfg = wse_models.preset_config("gpt2-124m", dtype=dtype)
    plan = plan_train(ModelChoice("gpt2", cfg), tokens=1e9, spec=WSE3, batch=BATCH)
    return " ".join(plan.assumptions)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_every_byte_count_a_parameter_in_the_notes_is_the_one_priced(dtype):
    notes = _notes(dtype)
    counts = [int(n) for n in PER_PARAM.findall(notes)]
    assert len(counts) >= 3  # the GPU training note, the layout note, its configuration
    assert set(counts) == {gpu_layout.BYTES_PER_PARAM_TRAIN}  # before: 16 and 18
    assert "16 bytes" not in notes


def test_the_fp32_note_states_fp32s_own_need_and_the_priced_all_reduce():
    notes = _notes("float32")
    assert f"fp32 training needs {FP32_STATE} " in notes  # before: "16 bytes/param holds"
    over = gpu_layout.BYTES_PER_PARAM_TRAIN - FP32_STATE
    assert f"so {over} more than it holds" in notes
    assert f"all-reduced at {gpu_layout.GRAD_BYTES} bytes a value" in notes
    assert "all-reduce bytes are not priced" not in notes  # before: said so, though priced


def test_the_layout_note_sends_a_micro_batch_of_sequences():
    notes = _notes("bfloat16")
    assert "micro-batch x seq_len x d_model bf16 each way" in notes  # stage_hop_s's bytes
    assert "(seq_len x d_model" not in notes
