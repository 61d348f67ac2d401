"""Hunt 74: a `PerfModel` prices under the assumptions in force at each call, not those of
its first call (`Pricing.rates` was a cached_property: a model first used inside
`assume(dsd_issue_cycles=30)` kept 30 outside the block, and one first used outside ignored
the block). The oracle: a fresh model built in the same context, and the analytic
dsd_issue term, instructions x the held cycles per instruction."""

from __future__ import annotations

import pytest
from wse_core import Op, PerfModel, Work, preset
from wse_core.cost.assumptions import assume

WORK = Work(ops=(Op("add", "fp32", 64, count=10),), task_activations=5)
HELD = 30.0  # dsd_issue_cycles inside the block: within its limits, far from the fit


def _cycles(model: PerfModel) -> float:
    return model.cost(WORK).cycles


@pytest.mark.parametrize("first_inside", [False, True])
def test_same_model_follows_assume_both_ways(first_inside: bool) -> None:
    spec = preset("wse3")
    model = PerfModel(spec)
    figures = {}
    order = ("inside", "outside") if first_inside else ("outside", "inside", "outside again")
    for where in order:
        if where == "inside":
            with assume(dsd_issue_cycles=HELD):
                figures[where] = (_cycles(model), _cycles(PerfModel(spec)))
                dsd = model.cost(WORK).mechanisms["dsd_issue"]
                assert dsd == pytest.approx(WORK.instructions * HELD, rel=1e-12)
        else:
            figures[where] = (_cycles(model), _cycles(PerfModel(spec)))
    for where, (same, fresh) in figures.items():
        assert same == fresh, where
    assert figures["inside"][0] != figures["outside"][0]


def test_nested_blocks_and_back() -> None:
    spec = preset("wse2")
    model = PerfModel(spec)
    with assume(dsd_issue_cycles=HELD):
        outer = _cycles(model)
        with assume(dsd_issue_cycles=2 * HELD):
            inner = model.cost(WORK).mechanisms["dsd_issue"]
            assert inner == pytest.approx(WORK.instructions * 2 * HELD, rel=1e-12)
        assert _cycles(model) == outer == _cycles(PerfModel(spec))
    assert _cycles(model) == _cycles(PerfModel(spec))
