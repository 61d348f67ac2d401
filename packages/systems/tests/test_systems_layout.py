"""Regions banded or compact, and a crossing between wafers by its mechanisms, counted by
hand (`wse_systems.pipeline`, `wse_systems.decoder`, `wse_systems.token.choose_layout`)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from wse_core import PerfModel, preset
from wse_core.cost.perf import Work
from wse_core.hw.sram import Region
from wse_systems.decoder import decode_phases, matvec_phases
from wse_systems.pipeline import PipelinePlanError, Regions, compact_strips, plan_pipeline, to_edge
from wse_systems.token import choose_layout, price_token
from wse_systems.transformer import LLAMA31_8B, DecoderCounts

TOY = DecoderCounts(
    name="toy", arch="llama", n_layers=4, d_model=256, n_heads=4, n_kv_heads=2, d_ff=512,
    vocab_size=1000, max_seq_len=128,
)  # fmt: skip


def _move_hops(region: Region) -> float:
    spec = preset("wse3")
    parts = matvec_phases(region, 4096, 4096, spec=spec).parts
    (move,) = (p for p in parts if p.name == "move")
    return move.work.latency_hops


def test_8b_traversal_hops_banded_against_compact():
    spec = preset("wse3")  # 762 x 1176 PEs
    banded = plan_pipeline(LLAMA31_8B, spec, context_len=8192)
    compact = plan_pipeline(LLAMA31_8B, spec, context_len=8192, regions=Regions(layout="compact"))
    # 33 regions (32 layers + head): round(sqrt(33 * 1176 / 762)) = round(7.14) = 7 strips
    assert compact_strips(33, spec) == 7
    b, c = banded.stages[0].region, compact.stages[0].region
    assert (b.cols, c.cols) == (1176, 168)  # a full row; 1176 / 7
    # the output's way back to the top row: half a row, then up the region's rows
    assert _move_hops(b) == math.ceil(1175 / 2) + b.rows - 1 == 588 + b.rows - 1
    assert _move_hops(c) == math.ceil(167 / 2) + c.rows - 1 == 84 + c.rows - 1
    assert _move_hops(c) < _move_hops(b) / 2
    assert compact.summary()["layout"] == "compact" and banded.layout == "banded"
    # every region keeps its bytes, and the strips tile the wafer without overlap
    regions = [s.region for s in (compact.head, *compact.stages)]
    assert sum(r.num_pes for r in regions) == spec.pe_rows * spec.pe_cols
    assert not any(a.overlaps(o) for i, a in enumerate(regions) for o in regions[i + 1 :])


def test_choose_layout_takes_the_faster_and_says_which():
    spec = preset("wse3")
    plan, seconds = choose_layout(LLAMA31_8B, spec, context_len=8192)
    assert set(seconds) == {"banded", "compact"}
    assert plan.layout == min(seconds, key=seconds.__getitem__)
    assert price_token(LLAMA31_8B, plan).predicted_s == pytest.approx(min(seconds.values()))
    with pytest.raises(PipelinePlanError, match="layout"):
        plan_pipeline(TOY, spec, regions=Regions(layout="diagonal"))


def test_to_edge_counts_the_nearest_border():
    spec = dataclasses.replace(preset("small"), pe_rows=32, pe_cols=32)
    assert to_edge(Region("a", 12, 5, 8, 20), spec) == 5  # min(12, 32 - 20, 5, 32 - 25)
    assert to_edge(Region("b", 3, 9, 10, 10), spec) == 3  # min(3, 19, 9, 13)
    assert to_edge(Region("band", 7, 0, 4, 32), spec) == 0  # a band touches both sides


def test_a_wafer_crossing_is_edge_trips_serialisation_and_a_latency():
    spec = preset("small")  # 32 x 32
    plan = plan_pipeline(TOY, spec, num_wafers=2, context_len=64)
    by = {s.name: s for s in plan.stages}
    moved = {  # stage1 ends wafer 0, stage2 starts wafer 1, stage3 ends it
        "stage1": Region("stage1", 12, 5, 8, 20),  # 5 hops to the west edge
        "stage2": Region("stage2", 3, 9, 10, 10),  # 3 hops from the north edge
    }
    stages = tuple(dataclasses.replace(by[n], region=moved.get(n, by[n].region)) for n in by)
    plan = dataclasses.replace(plan, stages=stages)
    assert plan.wafer_crossings == 2  # wafer 0 -> 1, and back to the head on wafer 0
    assert plan.edge_hops == 0 + 5 + 3 + 0  # head and stage3 touch an edge
    (between,) = (p for p in decode_phases(TOY, plan, kv_tokens=32).parts
                  if p.name == "between_wafers")  # fmt: skip
    w = between.work
    assert (w.latency_hops, w.system_hops, w.host_io_bytes) == (8, 2, 2 * 256 * 2)
    model = PerfModel(spec)
    rates = model.rates
    hand = (
        8 * rates.hop_latency_cycles / rates.clock_hz
        + 2 * 256 * 2 / rates.host_io_bytes_per_s
        + 2 * rates.system_latency_s
    )
    assert model.cost(w).seconds == pytest.approx(hand, rel=1e-12)
    assert model.cost(Work(latency_hops=8)).seconds == pytest.approx(
        8 * rates.hop_latency_cycles / rates.clock_hz
    )


def test_to_next_across_a_strip_and_back_to_the_head_by_hand():
    plan = plan_pipeline(TOY, preset("small"), context_len=64, regions=Regions(layout="compact"))
    got = [(s.region.row0, s.region.col0, s.region.rows, s.region.cols)
           for s in (plan.head, *plan.stages)]  # fmt: skip
    assert got == [
        (0, 0, 10, 16),
        (10, 0, 11, 16),
        (21, 0, 11, 16),
        (0, 16, 16, 16),
        (16, 16, 16, 16),
    ]  # fmt: skip  (2 strips of 16 columns)
    step = decode_phases(TOY, plan, kv_tokens=32)
    to_next = {p.name: next(q for q in p.parts if q.name == "to_next").work
               for p in step.parts if p.name.startswith("stage")}  # fmt: skip
    assert to_next["stage0"].latency_hops == 11  # down its rows onto stage1's top row
    assert "E" not in to_next["stage0"].links
    # stage1 -> stage2: 11 rows, then from (32, 8) to (0, 24): 32 + 16 hops
    assert to_next["stage1"].latency_hops == 11 + 32 + 16
    assert to_next["stage1"].links["E"] == 256 * 2 / 4  # the row's d values over one link
    # stage3 -> the head (the way back): 16 rows, then from (32, 24) to (0, 8)
    assert to_next["stage3"].latency_hops == 16 + 32 + 16


def test_the_tokens_trip_to_the_host_by_hand():
    """`token_out`: the head's trip to its nearest edge, one 32-bit id at the system I/O
    rate and one pass to the host, added once per token to `per_token` and nothing else."""
    spec = preset("small")  # 32 x 32
    plan = plan_pipeline(TOY, spec, context_len=64)
    head = Region("head", 4, 6, 10, 20)  # min(4, 32 - 14, 6, 32 - 26) = 4 hops to the edge
    plan = dataclasses.replace(plan, head=dataclasses.replace(plan.head, region=head))
    plain = decode_phases(TOY, plan, kv_tokens=32)
    out = decode_phases(TOY, plan, kv_tokens=32, token_out=True)
    per = {p.name: p for p in out.parts}["per_token"]
    assert [p.name for p in per.parts] == ["norm_final", "lm_head", "argmax", "embed", "token_out"]
    w = per.parts[-1].work
    assert (w.latency_hops, w.system_hops, w.host_io_bytes) == (4, 1, 4)
    model = PerfModel(spec)
    r = model.rates
    hand = 4 * r.hop_latency_cycles / r.clock_hz + 4 / r.host_io_bytes_per_s + r.system_latency_s
    assert model.cost(w).seconds == pytest.approx(hand, rel=1e-12)
    # the step grows by that trip alone
    grown = model.evaluate(out).seconds - model.evaluate(plain).seconds
    assert grown == pytest.approx(hand, rel=1e-9)
    # the calibration case as published: the measuring workload's cache, the trip paid
    from wse_systems.published import PUBLISHED_SETUP

    assert PUBLISHED_SETUP["kv_tokens"] == 1000 + 1000 // 2 and PUBLISHED_SETUP["token_out"]
