"""Hunt 75: `wse plan infer` planned one layer stage a layer, never searching the count
(llama3-8b 1,024 + 256 at one user: 2,736 output tokens/s in all on 32 stages, 2,937 on 16).
Now `WaferServing(..., search_stages=True)` (what `wse plan infer` builds unless --stages is
given) weighs `serving.stage_counts` and keeps the placement search's policy.

Oracle: brute force with the same pricer: one `WaferServing` pinned to each candidate count,
each serving its own best placement; the policy applied by hand over their points (the most
output tokens/s, within `OUTPUT_TIE` a tie, then the soonest first token) must pick the
searched system's count and figures. At one user the most output is the shortest request
period, U O / output: the searched period is the least over the pinned ones.
"""

from __future__ import annotations

import pytest
from wse_core import preset
from wse_models import preset_config
from wse_systems.pipeline import Regions
from wse_systems.planning.choice import PlanError
from wse_systems.planning.infer import wafer_serving
from wse_systems.serving import WaferServing, Workload
from wse_systems.serving.placements import OUTPUT_TIE
from wse_systems.serving.stage_counts import stage_counts

WORK = Workload(prompt_tokens=1024, output_tokens=256)


def _pinned(config, wafers: int, stages: int | None) -> WaferServing:
    return WaferServing(config, preset("wse3"), num_wafers=wafers, workload=WORK,
                        regions=Regions(stages=stages, layout=None))  # fmt: skip


def _by_hand(points: list) -> object:
    most = max(p.aggregate_tokens_per_s for p in points)
    tied = [p for p in points if p.aggregate_tokens_per_s >= (1 - OUTPUT_TIE) * most]
    return min(tied, key=lambda p: p.ttft_s)


@pytest.mark.parametrize("users", [1, 8])
def test_searched_stage_count_is_the_policys_over_pinned_counts(users):
    config = preset_config("llama3-8b")
    searched = WaferServing(config, preset("wse3"), num_wafers=1, workload=WORK,
                            search_stages=True)  # fmt: skip
    counts = stage_counts(searched)
    assert counts[0] is None and set(counts[1:]) == {8, 16}  # one a layer first, then 8, 16
    got = searched.point(users)
    points = [_pinned(config, 1, s).point(users) for s in (config.n_layers, 8, 16)]
    want = _by_hand(points)
    assert got.layout["stages"] == want.layout["stages"]
    assert got.aggregate_tokens_per_s == pytest.approx(want.aggregate_tokens_per_s, rel=1e-12)
    assert got.ttft_s == pytest.approx(want.ttft_s, rel=1e-12)
    if users == 1:  # the period U O / output, the least over the candidates (within the tie)
        periods = [WORK.output_tokens / p.aggregate_tokens_per_s for p in points]
        assert WORK.output_tokens / got.aggregate_tokens_per_s <= min(periods) / (1 - OUTPUT_TIE)
        # The hunt's figure was 16 stages, not 32, past the tie of one a layer (7% ahead at
        # the hunt; 2,116 against 2,070, 2.2%, since session 84's CS-3 hop and relay
        # latencies fitted on measured MeshGEMV). Since issue 41 (CS-3's DSD issue, 2.14
        # cycles, not WSE-2's 11.49, and control instruction fitted on the same rows) one a
        # layer is 2,443 against 16 stages' 2,432: within the 1% tie, and its first token
        # sooner, so the policy takes one region a layer.
        assert got.layout["stages"] == config.n_layers
        sixteen = points[2].aggregate_tokens_per_s
        assert sixteen >= (1 - OUTPUT_TIE) * got.aggregate_tokens_per_s
        assert got.ttft_s < points[2].ttft_s


def test_a_pinned_count_is_the_only_one_weighed_and_its_bounds():
    config = preset_config("llama3-8b")
    ws = wafer_serving(config, preset("wse3"), num_wafers=None, workload=WORK, stages=8)
    assert stage_counts(ws) == (8,) and ws.point(1).layout["stages"] == 8
    assert ws.point(1).layout["regions"] == 9
    for bad in (0, config.n_layers + 1):
        with pytest.raises(PlanError, match=rf"--stages {bad}: .*give --stages in \[1, 32\]"):
            wafer_serving(config, preset("wse3"), num_wafers=None, workload=WORK, stages=bad)


def test_max_users_is_the_most_any_weighed_count_holds():
    """The frontier's range: the most users over the counts weighed, each count's by hand."""
    config = preset_config("llama3-1b")
    searched = wafer_serving(config, preset("wse3"), num_wafers=None, workload=WORK)
    pinned = [_pinned(config, searched.units, s).max_users for s in (config.n_layers, 8)]
    assert searched.max_users == max(pinned)
