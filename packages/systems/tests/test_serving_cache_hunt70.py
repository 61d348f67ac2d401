"""The wafer serving model's shared caches (`wse_systems.serving.memo`) change no figure.

Broken before (hunt 70): every `WaferServing` searched the placements and priced the same
plans again (a 96-layer model and its draft: 13 s for four systems, half of it a second
system of the same layout), every load priced its speculative round's two models and whole
phase tree again, and `wse plan infer --draft` spent most of its 5-6 s there.

Oracles: a system built with the caches emptied (cold) against one built again (warm): the
same points, occupancies and round, and the same constants listed as read
(`wse_core.cost.reads.recording`); an `assume` block, whose cold system differs, is never
answered from the unassumed one's entries; a round's seconds against `PerfModel.evaluate`
of its phase tree, node by node.
"""

from __future__ import annotations

import collections

import pytest
import wse_models
import wse_systems.serving.wafer as wafer
from wse_core import preset
from wse_core.cost.assumptions import assume, setting
from wse_core.cost.listing import listed
from wse_core.cost.perf import PerfModel
from wse_core.cost.reads import recording
from wse_systems.planning import infer as pi
from wse_systems.planning.choice import ModelChoice
from wse_systems.serving import Speculation, WaferServing, Workload, blocks
from wse_systems.serving.memo import Memo
from wse_systems.transformer import DecoderCounts

WSE3 = preset("wse3")
WORK = Workload(prompt_tokens=512, output_tokens=128)
TARGET = DecoderCounts(name="t", arch="llama", vocab_size=32000, d_model=512, n_layers=12,
                       n_heads=8, n_kv_heads=2, d_ff=1536, max_seq_len=4096)  # fmt: skip
DRAFT = DecoderCounts(name="d", arch="llama", vocab_size=32000, d_model=256, n_layers=4,
                      n_heads=4, n_kv_heads=4, d_ff=512, max_seq_len=4096)  # fmt: skip
MEMOS = (wafer._SEARCHES, wafer._MOST_USERS, wafer._PIPELINES, wafer._ROUNDS, blocks._LAYERS)


def _empty() -> None:
    for memo in MEMOS:
        memo.clear()


def _served(draft) -> tuple[list, dict, set]:
    """(points, occupancies and rounds at four loads; the constants read; those moving)."""
    spec = None if draft is None else Speculation(draft=draft, gamma=3, alpha=0.7)
    with recording() as got:
        ws = WaferServing(TARGET, WSE3, num_wafers=1, workload=WORK, speculation=spec)
        users = sorted({1, 2, max(1, ws.max_users // 3), ws.max_users})
        figures = [(ws.layout, u, ws.point(u), ws.occupancy(u), ws.round_s(u)) for u in users]
    return figures, {k: set(v) for k, v in got.values.items()}, set(got.moving)


@pytest.mark.parametrize("draft", [None, DRAFT])
def test_a_warm_system_and_its_reads_equal_a_cold_one(draft, monkeypatch):
    _empty()
    cold = _served(draft)
    priced = collections.Counter()
    real = wafer.price_pipeline

    def counted(*a, **k):
        priced["price_pipeline"] += 1
        return real(*a, **k)

    monkeypatch.setattr(wafer, "price_pipeline", counted)
    warm = _served(draft)
    assert warm == cold
    assert cold[1] and "clock_hz" in cold[1]  # the listing is not empty
    assert priced["price_pipeline"] == 0  # the second system searched and priced nothing


def test_an_assumption_misses_the_cache():
    _empty()
    plain = _served(DRAFT)
    exp = {"attention.exp_fmacs": 20.0}  # read by every layer tree, kept in `blocks._LAYERS`
    with assume(**exp):
        warm_assumed = _served(DRAFT)  # the plain system's entries are in the caches
    _empty()
    with assume(**exp):
        cold_assumed = _served(DRAFT)
    assert warm_assumed == cold_assumed
    assert cold_assumed[0] != plain[0]
    assert cold_assumed[1]["attention.exp_fmacs"] == {20.0} != plain[1]["attention.exp_fmacs"]


def test_the_round_prices_its_tree_as_the_model_evaluates_it():
    _empty()
    spec = Speculation(draft=DRAFT, gamma=4, alpha=0.8)
    ws = WaferServing(TARGET, WSE3, num_wafers=1, workload=WORK, speculation=spec)
    for users in (1, ws.max_users):
        ws.round_s(users)
        rnd = ws._rounds[users]
        assert rnd.seconds == PerfModel(WSE3).evaluate(rnd.phases).seconds


def test_the_memo_is_bounded_and_replays_what_it_read():
    memo, calls = Memo(2), collections.Counter()

    def compute(key):
        def run():
            calls[key] += 1
            return setting("table_ii_block_z") + key  # a read noted for the listing

        return run

    with recording() as got:
        assert memo.get((1,), compute(1)) == memo.get((1,), compute(1))
    assert calls[1] == 1 and "table_ii_block_z" in got.values
    with recording() as again:
        memo.get((1,), compute(1))  # a hit reads what the computation read
    assert again.values == got.values and calls[1] == 1
    for key in (2, 3):
        with recording():
            memo.get((key,), compute(key))
    with recording():
        memo.get((1,), compute(1))  # evicted: only the two latest are kept
    assert calls[1] == 2


def test_a_warm_plan_lists_what_a_cold_one_does():
    def plan():
        choice = ModelChoice("tiny-llama", wse_models.preset_config("tiny-llama", dtype="bfloat16"))
        with recording() as got:
            p = pi.plan_infer(choice, wafer=pi.WaferSetup(WSE3, None), target=pi.Target(users=1))
        return p.to_dict(), [e.to_dict() for e in listed(got)]

    _empty()
    cold = plan()
    assert cold[1] and plan() == cold  # `wse plan infer`'s JSON and its constants listed
