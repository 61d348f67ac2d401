"""Hunt 82 (jobs18 L4): the footprints a plan is tried on.

Before: only PE-row counts on the ladder of `token.GRID_STEP` (1, 2, 4, ..., 512 of a
WSE-3's 762): Llama 3.2 1B at one user took 512 rows where the compact layout's six strips
start at 474 and price its token 0.75% shorter (110.66 against 111.50 us). Now
`token.footprint_rows` adds, for the compact layout, the fewest rows of each count of column
strips, and a small wafer (at most `FOOTPRINT_EXHAUSTIVE_ROWS`) is tried on every row count.

Oracles: brute force over every footprint and head size of a small wafer, each plan
`plan_pipeline`'s priced by `price_token` (the report, not the search's seconds_fn);
`compact_strips` itself at each row count of a WSE-3.
"""

from __future__ import annotations

import pytest
import wse_models
from wse_core import preset
from wse_core.cost.assumptions import assumed_spec
from wse_systems import token
from wse_systems.pipeline import PipelinePlanError, Regions, compact_strips, plan_pipeline
from wse_systems.transformer import DecoderCounts

TOY = DecoderCounts(name="toy", arch="llama", vocab_size=512, d_model=128, n_layers=4,
                    n_heads=4, n_kv_heads=2, d_ff=256, max_seq_len=64)  # fmt: skip


def _brute_force(config, spec, layout: str, kv: int):
    """(seconds, PE rows, head rows) of the fastest token on every footprint of every row
    count and the whole wafer, each with every head size that holds; ties: the whole wafer,
    then fewer rows, then fewer head rows."""
    best = None
    for rows in (spec.pe_rows, *range(1, spec.pe_rows)):
        cut = spec.replace(pe_rows=rows)
        step = token.HEAD_ROWS_STEP if rows == spec.pe_rows else token.GRID_STEP
        heads = token.head_rows_ladder(cut, step=step)
        for head in heads:
            try:
                plan = plan_pipeline(config, spec.replace(pe_rows=rows), context_len=32,
                                     regions=Regions(layout=layout, head_rows=head))  # fmt: skip
            except PipelinePlanError:
                continue
            s = token.price_token(config, plan, kv_tokens=kv).predicted_s
            if best is None or s < best[0] * (1 - 1e-12):
                best = (s, rows, head)
    return best


@pytest.mark.parametrize("rows", [8, 16])
@pytest.mark.parametrize("layout", ["banded", "compact"])
def test_on_a_small_wafer_the_plan_is_the_fastest_of_every_footprint(rows, layout):
    spec = preset("small").replace(pe_rows=rows)
    assert token.footprint_rows(TOY, spec, regions=Regions(layout=layout)) == tuple(range(1, rows))
    seconds = token.token_seconds_fn(TOY, kv_tokens=16)
    plan = token.fastest_plan(TOY, spec, seconds, context_len=32, regions=Regions(layout=layout))
    s, best_rows, head = _brute_force(TOY, spec, layout, 16)
    assert (plan.spec.pe_rows, plan.head.region.rows) == (best_rows, head)
    assert token.price_token(TOY, plan, kv_tokens=16).predicted_s == pytest.approx(s, rel=1e-12)


def test_a_wse3_compact_plan_tries_each_strip_counts_fewest_rows():
    config = wse_models.preset_config("llama3-1b", dtype="bfloat16")
    spec = assumed_spec("wse3")
    rows = token.footprint_rows(config, spec, regions=Regions(layout="compact"))
    regions = config.n_layers + 1  # one stage a layer and the head
    first = {}
    for r in range(1, spec.pe_rows):
        first.setdefault(compact_strips(regions, spec.replace(pe_rows=r)), r)
    assert set(first.values()) <= set(rows) and 474 in rows  # six strips from 474 rows
    ladder = set(token.head_rows_ladder(spec, step=token.GRID_STEP)[:-1])
    assert set(rows) == ladder | set(first.values())
    banded = token.footprint_rows(config, spec, regions=Regions(layout="banded"))
    assert set(banded) == ladder  # one strip at every count: the ladder alone
    seconds = token.token_seconds_fn(config, kv_tokens=192, token_out=True)
    plan = token.fastest_plan(config, spec, seconds, context_len=256,
                              regions=Regions(layout="compact"))  # fmt: skip
    on_512 = min(token.ladder_plans(config, spec.replace(pe_rows=512), step=token.GRID_STEP,
                                    context_len=256, regions=Regions(layout="compact")),
                 key=seconds)  # fmt: skip
    assert seconds(plan) < seconds(on_512)  # before: 512 rows was the choice
