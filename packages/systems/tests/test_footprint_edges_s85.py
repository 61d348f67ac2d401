"""Session 85: a plan on a footprint (a wafer cut to its top rows, `token.footprint_plans`;
a speculative target below its draft's rows) measures a region's trip to its wafer's edge
to the wafer's rows, not the footprint's.

Broken before: `to_edge(region, plan.spec)` took the footprint's last row for the wafer's
bottom edge (and a speculative target's first row for its top), so a region on a
footprint's last row was counted on the edge. What is priced (the head's trip off the wafer,
`decoder.token_out_work`; each wafer's first and last region, `PipelinePlan.edge_hops`) is
unchanged in every plan below: those regions touch a column edge (the head and a wafer's
first region at column 0, its last in the last strip); a region inside the wafer is not.

Oracle: each region's PEs walked one by one, each PE's hops to the nearest of the wafer's
four edges (a PE on an edge row or column is 0 hops from it), the least of them, with the
footprint's rows placed on the whole wafer's grid by hand.
"""

from __future__ import annotations

import pytest
from wse_core import preset
from wse_core.hw.sram import Region
from wse_inference.testing import tiny_model
from wse_systems.pipeline import Regions
from wse_systems.placement import to_edge
from wse_systems.serving.speculative import RoundSetup, place_speculative
from wse_systems.token import footprint_plans

WAFER = preset("tiny").replace(pe_rows=16, pe_cols=16)  # every footprint row count tried
CONTEXT = 16  # tokens of KV cache a user holds


def _hops_by_pes(region: Region, first_row: int, rows: int = WAFER.pe_rows) -> int:
    """The least hops from a PE of `region` (its rows start `first_row` rows down the
    wafer) to an edge of a wafer of `rows` x `WAFER.pe_cols` PEs, PE by PE."""
    cols = WAFER.pe_cols
    return min(
        min(r, rows - 1 - r, c, cols - 1 - c)
        for r in range(first_row + region.row0, first_row + region.row0 + region.rows)
        for c in range(region.col0, region.col0 + region.cols)
    )


def _edge_hops_by_hand(plan, first_row: int) -> int:
    """Each wafer's first region (the head on wafer 0) and last, by `_hops_by_pes`."""
    if plan.num_wafers == 1:
        return 0
    hops = 0
    for w in range(plan.num_wafers):
        mine = [s for s in plan.stages if s.wafer == w]
        first = plan.head if w == 0 else mine[0]
        hops += _hops_by_pes(first.region, first_row) + _hops_by_pes(mine[-1].region, first_row)
    return hops


def test_a_region_on_a_footprints_last_row_is_not_on_the_wafers_edge():
    """By hand: rows [1, 3), columns [4, 8) of a 3-row footprint at the top of a 16 x 16
    wafer: 1 hop up, 13 rows below it, 4 columns left, 8 right -> 1 (the footprint's last
    row gave 0)."""
    cut, region = WAFER.replace(pe_rows=3), Region("r", row0=1, col0=4, rows=2, cols=4)
    assert to_edge(region, cut) == 0  # the footprint's measure
    assert to_edge(region, cut, rows_below=13) == 1 == _hops_by_pes(region, 0)
    # the same rows below a draft's 5 (rows 6 and 7 of the wafer): 6 up, 8 down, 4 left
    assert to_edge(region, cut, rows_above=5, rows_below=8) == 4 == _hops_by_pes(region, 5)


@pytest.mark.parametrize("layout", ["banded", "compact"])
def test_footprint_plans_measure_to_the_wafers_edges(layout):
    config = tiny_model("llama", n_layers=9).config
    moved = 0
    kw = dict(num_wafers=2, context_len=CONTEXT, bytes_per_param=2)
    for cut, plans in footprint_plans(config, WAFER, regions=Regions(layout=layout), **kw):
        for plan in plans:
            assert (plan.rows_above, plan.rows_below) == (0, WAFER.pe_rows - cut.pe_rows)
            for s in (plan.head, *plan.stages):
                assert plan.to_edge(s.region) == _hops_by_pes(s.region, 0)
                moved += to_edge(s.region, plan.spec) != plan.to_edge(s.region)
            assert plan.edge_hops == _edge_hops_by_hand(plan, 0)
    if layout == "compact":  # the case: regions inside the wafer that touched a footprint's
        assert moved > 0  # last row


def test_a_speculative_target_lies_below_its_drafts_rows():
    target, draft = tiny_model("llama", n_layers=6).config, tiny_model("llama", n_layers=2).config
    t, d = place_speculative(target, draft, WAFER, num_wafers=2, context_len=CONTEXT,
                             round=RoundSetup(gamma=4, kv_tokens=CONTEXT // 2),
                             regions=Regions(layout="compact"))  # fmt: skip
    # the draft from the wafer's top row, the target below it, each on the wafer's rows
    assert d.rows_above == 0 and d.spec.pe_rows + d.rows_below == WAFER.pe_rows
    assert t.rows_above + t.spec.pe_rows + t.rows_below == WAFER.pe_rows
    assert t.rows_above >= d.spec.pe_rows  # the target starts below the draft's rows
    for plan in (t, d):
        for s in (plan.head, *plan.stages):
            assert plan.to_edge(s.region) == _hops_by_pes(s.region, plan.rows_above)
        assert plan.edge_hops == _edge_hops_by_hand(plan, plan.rows_above)
