"""The streams table's head row, hunt 68: `wse train gpt2_124m --validate-only` printed the
head's whole forward + backward (19.4 ms) under both "fwd" and "bwd", so the table's rows
summed to 94.5 ms beside a 76.8 ms step. Oracles: the head's parts priced alone sum to the
whole head the step prices; the rows' compute, counted once each, stays within the step."""

from __future__ import annotations

import pytest
import wse_models
from wse_core import PerfModel, preset
from wse_systems.training.layer_cost import head_phases
from wse_systems.training.performance import StepLayout, predict_step
from wse_systems.training.placement import StepWorkload, place_step
from wse_systems.training.plan import memory_plan
from wse_systems.training.stall import stream_budget

WSE3 = preset("wse3")


@pytest.fixture(scope="module")
def case():
    model = wse_models.preset_config("gpt2-124m")
    plan = memory_plan(model, WSE3, 8, 1024)
    rows = stream_budget(model, WSE3, plan, num_csx=1, micro_batch=8, seq_len=1024)
    step = predict_step(
        model, WSE3, num_csx=1, batch_per_system=8, seq_len=1024, layout=StepLayout(plan)
    )
    return model, plan, {r.unit.split()[0]: r for r in rows}, step


def test_the_head_row_shows_its_forward_and_backward_apart(case):
    model, plan, rows, _ = case
    pl = place_step(model, WSE3, plan, StepWorkload(micro_batch=8, seq_len=1024), num_csx=1)
    s = PerfModel(WSE3).seconds
    head = rows["head"]
    assert head.forward_s == pytest.approx(s(head_phases(model, pl, "forward")))
    assert head.backward_s == pytest.approx(s(head_phases(model, pl, "backward")))
    assert head.forward_s + head.backward_s == pytest.approx(s(head_phases(model, pl)))
    assert 0 < head.forward_s < head.backward_s  # two gradient products against one
    # its streams hide under both parts together, as the step overlaps them with the head
    back = max(head.stream_in_s, head.write_back_s)
    assert head.no_stall == (back <= head.forward_s + head.backward_s)


def test_the_rows_count_each_units_compute_once_within_the_step(case):
    _, _, rows, step = case
    compute = sum(r.per_step * (r.forward_s + r.backward_s) for r in rows.values())
    assert compute <= step.predicted_s * (1 + 1e-9)
