"""Review 80 (hole 9): the fp32 word was spelled `GRAD_BYTES` (the bytes a gradient value is
all-reduced in) where it meant 4 bytes of fp32: `planning.train`'s fp32 state (4 x
GRAD_BYTES) and `TRAIN_CONFIG`'s distributed optimizer (18 - 3 x GRAD_BYTES + 3 x
GRAD_BYTES / dp). Priced under --grad-reduce-in-bf16 (GRAD_BYTES 2), the fp32 note would
have said "Adam m and v, 2 each" and "fp32's own". Now `FP32_BYTES` names the word.

Oracles: NumPy's float32 item size; Megatron Core's distrib_optimizer doc by hand (bf16
parameters with fp32 gradients: 18 bytes, 6 + 12/d distributed; the master weight and Adam's
two moments are fp32 words, sharded over d)."""

from __future__ import annotations

import numpy as np
from wse_systems import gpu as gpum
from wse_systems import gpu_layout as gl
from wse_systems.planning import train as plan_train_module


def test_the_fp32_word_is_its_own_constant():
    assert gl.FP32_BYTES == np.dtype(np.float32).itemsize == 4
    assert gl.BYTES_PER_PARAM_TRAIN == 2 + 4 + 3 * 4 == 18  # bf16 weight, fp32 grad, 3 words
    assert "18, 6 + 12/dp distributed" in gl.TRAIN_CONFIG  # Megatron's doc, by hand
    assert gpum.FP32_BYTES == gl.FP32_BYTES


def test_the_fp32_note_keeps_fp32s_word_when_gradients_are_reduced_in_bf16(monkeypatch):
    """The gradient word moved to bf16's 2 (--grad-reduce-in-bf16): fp32 training's state is
    still four fp32 words, and the all-reduce's 2 bytes are not fp32's."""
    monkeypatch.setattr(gpum, "GRAD_BYTES", 2)
    note = plan_train_module._peak_source("fp32")
    assert "training needs 16 (weight, gradient, Adam m and v, 4 each)" in note  # before: 2 each
    assert "all-reduced at 2 bytes a value, fp32's is 4" in note  # before: "fp32's own"
    monkeypatch.undo()
    note = plan_train_module._peak_source("fp32")
    assert "Adam m and v, 4 each" in note and "all-reduced at 4 bytes a value, fp32's own" in note
