"""Review 79 (L6): a step's tokens/s was written twice, `predict_step`'s figure and the speed
`micro_batch.plan_step`'s search compares; one function now (`step_tokens_per_s`). Oracle:
the hand count, systems x sequences a system x tokens a sequence over the step's seconds."""

from __future__ import annotations

import pytest
import wse_models
from wse_core import preset
from wse_systems.training import micro_batch as mb
from wse_systems.training import performance as perf

TINY = wse_models.preset_config("tiny-gpt2")


def test_the_formula_by_hand():
    assert perf.step_tokens_per_s(3, 8, 128, 0.5) == 3 * 8 * 128 / 0.5


@pytest.mark.timeout(600)
def test_the_report_and_the_search_read_the_one_formula(monkeypatch):
    """Both callers go through `step_tokens_per_s`: replaced, both figures move with it."""
    spec, calls = preset("wse3"), []
    real = perf.step_tokens_per_s

    def counted(*a):
        calls.append(a)
        return real(*a)

    monkeypatch.setattr(perf, "step_tokens_per_s", counted)
    report = mb.plan_step(TINY, spec, num_csx=2, batch_per_system=8, seq_len=128)
    got = report.extra["tokens_per_s"]
    assert got == 2 * 8 * 128 / report.predicted_s
    assert {a[:3] for a in calls} == {(2, 8, 128)} and len(calls) >= 2  # search + report
