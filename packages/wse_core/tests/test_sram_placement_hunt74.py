"""Hunt 74: who records a field's SRAM. `wafer.place` / `full` / `zeros` record nothing (a
kernel places the same field many times); the kernel declares a field's bytes once, where
it plans it, and over budget is `SramBudgetError` (docs/architecture.md, `hw.sram`). The
oracle: the field's per-PE bytes counted by NumPy (`nbytes` of one PE's values)."""

from __future__ import annotations

import numpy as np
import pytest
from wse_core import preset
from wse_core.errors import SramBudgetError
from wse_core.hw.wafer import build_wafer


def test_place_records_nothing_and_the_kernel_declares_once() -> None:
    wafer = build_wafer(preset("tiny"))
    x = np.ones((wafer.rows, wafer.cols, 8), np.float32)
    for _ in range(3):  # placed again and again: no bytes recorded
        wafer.place(x)
        wafer.zeros((8,))
    assert wafer.sram.used_bytes() == 0
    wafer.sram.allocate("x", x[0, 0].nbytes)
    wafer.place(x)
    assert wafer.sram.used_bytes() == 8 * np.dtype(np.float32).itemsize


def test_a_field_past_the_budget_is_refused_when_declared() -> None:
    wafer = build_wafer(preset("tiny"))
    per_pe = wafer.spec.sram_bytes_per_pe // 4 + 1  # fp32 values: one word past the budget
    with pytest.raises(SramBudgetError, match="field"):
        wafer.sram.allocate("field", np.zeros(per_pe, np.float32).nbytes)
    assert wafer.sram.used_bytes() == 0
