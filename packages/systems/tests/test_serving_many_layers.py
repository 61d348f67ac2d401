"""Many-layer models price in time that does not grow with the layers' repetition (hunt 63:
a 4,096-layer config took a minute in `wse plan infer`, a 4,096-layer draft minutes), and
to the last digit as the unshared path prices them.

Oracles: every stage's layer tree as `layer_phases` builds it on that stage's own region
(the per-stage path the plan priced before); whole serving points priced on those unshared
trees; the wafer-wide SRAM ledger the plan declared its regions in before; the per-wafer
scan of `edge_hops`; a serving system given its layout, against one that chose it. Speed is
asserted as counts of the expensive calls, a many-layer model against a 32-layer one (a
shared 2-core host makes times too noisy)."""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np
import pytest
import wse_systems.serving.blocks as blocks
import wse_systems.token as token
from wse_core import preset
from wse_core.errors import SramBudgetError
from wse_core.hw.sram import Region, SramLedger
from wse_systems import decoder
from wse_systems.pipeline import PipelinePlanError, Regions, plan_pipeline, to_edge
from wse_systems.serving import Speculation, WaferServing, Workload
from wse_systems.serving.blocks import price_pipeline
from wse_systems.token import price_token
from wse_systems.transformer import DecoderCounts

WSE3 = preset("wse3")
WORK = Workload(prompt_tokens=1024, output_tokens=256)


def _llama(n_layers: int, d: int = 4096, ff: int = 14336, heads: int = 32, kv: int = 8):
    return DecoderCounts(name=f"l{n_layers}", arch="llama", vocab_size=128256, d_model=d,
                         n_layers=n_layers, n_heads=heads, n_kv_heads=kv, d_ff=ff,
                         max_seq_len=8192)  # fmt: skip


SMALL = DecoderCounts(name="small", arch="llama", vocab_size=32000, d_model=512, n_layers=96,
                      n_heads=8, n_kv_heads=2, d_ff=1536, max_seq_len=4096)  # fmt: skip
DRAFT = DecoderCounts(name="draft", arch="llama", vocab_size=32000, d_model=256, n_layers=64,
                      n_heads=4, n_kv_heads=4, d_ff=512, max_seq_len=4096)  # fmt: skip


def _layer_of(stage_tree):
    (layer,) = (p for p in stage_tree.parts if p.name == "layer")
    return layer


def _unshared(real):
    """`decode_phases` as priced before hunt 63: each stage's layer built on its own region."""

    def phases(shape, plan, *, kv_tokens=None, mlp_zero_fraction=0.0, block_tokens=1, **kw):
        step = real(shape, plan, kv_tokens=kv_tokens, mlp_zero_fraction=mlp_zero_fraction,
                    block_tokens=block_tokens, **kw)  # fmt: skip
        kv = plan.context_len // 2 if kv_tokens is None else kv_tokens
        zeros = np.broadcast_to(np.asarray(mlp_zero_fraction, np.float64), (shape.n_layers,))
        parts = list(step.parts)
        for i, stage in enumerate(plan.stages):
            z = float(zeros[stage.layers[0] : stage.layers[1]].mean())
            own = decoder.layer_phases(
                shape, stage.region, kv_tokens=kv, bytes_per_value=plan.bytes_per_param,
                mlp_zero_fraction=z, spec=plan.spec, gemv=plan.gemv,
                block_tokens=block_tokens,
            )  # fmt: skip
            own = dataclasses.replace(own, repeat=stage.num_layers)
            kids = tuple(own if p.name == "layer" else p for p in parts[i].parts)
            parts[i] = dataclasses.replace(parts[i], parts=kids)
        return dataclasses.replace(step, parts=tuple(parts))

    return phases


@pytest.mark.parametrize("layout", ["banded", "compact"])
@pytest.mark.parametrize("gemv,block", [("sdk", 1), ("meshgemv", 1), ("meshgemv", 4)])
def test_each_stage_prices_the_layer_its_own_region_builds(layout, gemv, block):
    plan = plan_pipeline(SMALL, WSE3, num_wafers=2, context_len=2048,
                         regions=Regions(stages=48, layout=layout, gemv=gemv))  # fmt: skip
    zeros = [(i % 7) / 10 for i in range(SMALL.n_layers)]  # stages of unequal zero fractions
    step = decoder.decode_phases(SMALL, plan, kv_tokens=700, mlp_zero_fraction=zeros,
                                 block_tokens=block)  # fmt: skip
    oracle = _unshared(decoder.decode_phases)(
        SMALL, plan, kv_tokens=700, mlp_zero_fraction=zeros, block_tokens=block
    )
    shared = decoder.decode_phases(SMALL, plan, kv_tokens=700, mlp_zero_fraction=zeros,
                                   block_tokens=block, shared_layers=True)  # fmt: skip
    assert step == oracle == shared
    for part, stage in zip(step.parts, plan.stages, strict=False):
        assert _layer_of(part).repeat == stage.num_layers
    # by default every leaf is a node of its own (a trace tells the stages' leaves apart)
    leaves = [id(leaf) for leaf, _ in step.leaves()]
    assert len(set(leaves)) == len(leaves)
    assert len({id(leaf) for leaf, _ in shared.leaves()}) < len(leaves)


# meshgemv's unshared oracle builds a layer tree a stage a block size: 96 stages x 17 sizes
# took 25 s; 16 stages of 6 layers (3 region shapes) price the same sharing in 3 s
@pytest.mark.parametrize(("gemv", "stages"), [("sdk", None), ("meshgemv", 16)])
def test_pipeline_seconds_equal_the_unshared_trees_to_the_last_digit(gemv, stages, monkeypatch):
    plan = plan_pipeline(SMALL, WSE3, num_wafers=2, context_len=2048, slots=3,
                         regions=Regions(stages=stages, layout="compact", gemv=gemv))  # fmt: skip
    pipe = price_pipeline(SMALL, plan, kv_tokens=900)
    ks = pipe.block_sizes()
    got = [pipe.occupancy_s(k) for k in ks] + [pipe.token_s, pipe.pass_s(1000)]
    monkeypatch.setattr(blocks, "decode_phases", _unshared(decoder.decode_phases))
    slow = price_pipeline(SMALL, plan, kv_tokens=900)
    assert slow.block_sizes() == ks
    assert got == [slow.occupancy_s(k) for k in ks] + [slow.token_s, slow.pass_s(1000)]
    # and the one pricer of a token, evaluated node by node by `PerfModel`, agrees
    assert pipe.token_s == pytest.approx(price_token(SMALL, plan, kv_tokens=900).predicted_s,
                                         rel=1e-12)  # fmt: skip


def _points(system: WaferServing) -> list:
    """Each load's point and occupancy; the point's "not_held" note aside: it names the
    arrangements the system searched that do not hold the load (hunt 82), which a layout
    given does not search."""
    users = sorted({1, 2, max(1, system.max_users // 3), system.max_users})

    def bare(p):
        return dataclasses.replace(p, layout={k: v for k, v in p.layout.items()
                                              if k != "not_held"})  # fmt: skip

    return [(bare(system.point(u)), system.occupancy(u)) for u in users]


@pytest.mark.slow  # 31 s since hunt 67's placement search (each point searches twice); the
# pipeline's own shared/unshared equality above stays in the default suite
@pytest.mark.parametrize("draft", [None, DRAFT])
def test_serving_points_equal_the_unshared_path(draft, monkeypatch):
    spec = None if draft is None else Speculation(draft=draft, gamma=4, alpha=0.8)

    def serve():
        return WaferServing(SMALL, WSE3, num_wafers=1, workload=WORK, speculation=spec)

    fast = serve()
    got = (fast.layout, _points(fast))
    for module in (blocks, token):
        monkeypatch.setattr(module, "decode_phases", _unshared(decoder.decode_phases))
    slow = serve()
    assert got == (slow.layout, _points(slow))


@pytest.mark.parametrize("draft", [None, DRAFT])
def test_the_chosen_layouts_kept_round_equals_one_priced_afresh(draft):
    spec = None if draft is None else Speculation(draft=draft, gamma=3, alpha=0.7)
    chose = WaferServing(SMALL, WSE3, num_wafers=1, workload=WORK, speculation=spec)
    given = WaferServing(SMALL, WSE3, num_wafers=1, workload=WORK, speculation=spec,
                         regions=Regions(layout=chose.layout))  # fmt: skip
    assert chose.round_s(1) == given.round_s(1)
    assert _points(chose) == _points(given)


def _wafer_ledger_holds(plan) -> bool:
    """The plan's regions declared on one ledger per wafer (the path before hunt 63)."""
    ledgers: dict[int, SramLedger] = {}
    try:
        for s in (plan.head, *plan.stages):
            led = ledgers.setdefault(s.wafer, SramLedger.for_spec(WSE3))  # code + stack aside
            for part, b in (("w", s.weight_bytes), ("kv", s.kv_bytes), ("act", s.act_bytes)):
                led.allocate(f"{s.name}.{part}", math.ceil(b / s.region.num_pes), s.region)
    except SramBudgetError:
        return False
    return True


@pytest.mark.parametrize("layout", ["banded", "compact"])
def test_region_ledgers_refuse_where_the_wafer_ledger_does(layout):
    def plan(slots):
        return plan_pipeline(SMALL, WSE3, num_wafers=2, context_len=4096, slots=slots,
                             regions=Regions(layout=layout))  # fmt: skip

    lo, hi = 1, 1 << 16  # the most slots the region ledgers hold
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            plan(mid)
            lo = mid
        except PipelinePlanError:
            hi = mid - 1
    assert _wafer_ledger_holds(plan(lo))
    with pytest.raises(PipelinePlanError, match="does not fit"):
        plan(lo + 1)
    # the refused plan's regions, as laid out (rows by bytes, whatever the SRAM), overflow a
    # wafer-wide ledger too
    roomy = WSE3.replace(sram_bytes_per_pe=2 * WSE3.sram_bytes_per_pe)
    bigger = plan_pipeline(SMALL, roomy, num_wafers=2, context_len=4096, slots=lo + 1,
                           regions=Regions(layout=layout))  # fmt: skip
    assert not _wafer_ledger_holds(bigger)


def test_edge_hops_equal_the_per_wafer_scan():
    plan = plan_pipeline(SMALL, WSE3, num_wafers=5, context_len=2048,
                         regions=Regions(layout="compact"))  # fmt: skip

    def inset(s):  # the regions moved off the wafers' edges, so that the hops count
        r = s.region
        return dataclasses.replace(s, region=Region(r.name, r.row0 + 2, r.col0 + 3, 1, 1))

    plan = dataclasses.replace(plan, head=inset(plan.head), stages=tuple(map(inset, plan.stages)))
    hops = 0
    for w in range(plan.num_wafers):
        mine = [s for s in plan.stages if s.wafer == w]
        first = plan.head if w == 0 else mine[0]
        hops += to_edge(first.region, WSE3) + to_edge(mine[-1].region, WSE3)
    assert plan.edge_hops == hops > 0


def _counting(monkeypatch) -> collections.Counter:
    calls: collections.Counter = collections.Counter()
    layer, overlaps = decoder.layer_phases, Region.overlaps

    def counted_layer(*a, **k):
        calls["layer_phases"] += 1
        return layer(*a, **k)

    def counted_overlaps(self, other):
        calls["overlaps"] += 1
        return overlaps(self, other)

    monkeypatch.setattr(decoder, "layer_phases", counted_layer)
    monkeypatch.setattr(Region, "overlaps", counted_overlaps)
    return calls


def test_a_4096_layer_plan_builds_no_more_layers_than_a_32_layer_one(monkeypatch):
    calls = _counting(monkeypatch)
    counts = {}
    # 49: the fewest wafers that hold 4,096 layers beside each PE's code and stack (hunt 81;
    # 46 while every byte was data's)
    for n, wafers in ((32, 1), (4096, 49)):
        calls.clear()
        WaferServing(_llama(n), WSE3, num_wafers=wafers, workload=WORK).point(1)
        counts[n] = dict(calls)
    # before hunt 63 every token priced built every stage's layer: 4,096 per price
    assert counts[4096]["layer_phases"] <= 4 * counts[32]["layer_phases"], counts
    # each region declares 3 allocations on a ledger of its own: linear in the regions
    assert counts[4096]["overlaps"] <= 64 * counts[32]["overlaps"], counts


def test_a_4096_layer_draft_plans_in_linear_ledger_work(monkeypatch):
    calls = _counting(monkeypatch)
    tiny = _llama(4096, d=256, ff=512, heads=4, kv=4)
    plan = plan_pipeline(tiny, WSE3, num_wafers=6, context_len=1280)
    regions = 1 + len(plan.stages)
    # 3 allocations a region, each checked against its region's earlier ones (a wafer-wide
    # ledger checked each against every region before it: ~ (3 x 683)^2 / 2 a wafer)
    assert calls["overlaps"] <= 3 * regions
