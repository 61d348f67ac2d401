"""Hunt decode41 (session 82) on issue 41's 8B decode check. Broken before:

- hole 1: the check planned one region per layer (`token.choose_layout`, no stage count
  searched: 32 stages, 3,010.58 tokens/s) where `wse plan infer` serves the same setting on
  16 stages (3,478 tokens/s per user, a token alone 288 us). Oracle: a brute force over the
  layouts and the stage counts the planner weighs (each asked of the serving model alone, as
  `wse plan infer --stages S` asks it), the policy applied by hand (the most output, a 1%
  tie, then the soonest first token), and `plan_infer`'s own point at one user.
- hole 3: WaferLLM's decode rewrites its allreduce's routes 6 times a layer, 5 colours each
  (MeshInfra/WaferLLM 2cd13b5: Decode/WSE-3/src/decode.csl lines 774-811,
  comm_lib/comm_pe.csl lines 989-1007), unpriced under `gemv="meshgemv"`. Oracle: a hand
  count, 6 x 5 resets a layer at the assumed cost, and the token's difference between two
  assumed costs on one plan.
- holes 4-7: no sweep beside the check of the assumptions that move it (the clock, the cache
  the attention reads, the trip's latency, the users in flight); the latency's sweep stopped
  at 10 us. Oracles: the token's cycles and host seconds at 1.1 GHz rescaled by hand, the
  21 PB/s total over the PEs' 24 B a cycle, `price_token` at the whole buffer, a fresh
  serving system's points.
(Hole 8, the GPUs' prompt share, is test_gpu_prompt_share_decode41.py.)
"""

from __future__ import annotations

import pytest
from wse_core.cost.assumptions import assume, assumed_spec
from wse_core.cost.listing import listed
from wse_core.cost.mechanisms import CONSTANTS
from wse_core.cost.perf import PerfModel
from wse_core.cost.reads import recording
from wse_systems import published
from wse_systems.decoder import decode_phases, layer_phases, token_out_work
from wse_systems.meshgemv import (
    COLOURS_PER_RECONFIG,
    RECONFIGS_PER_LAYER,
    ROUTE_RESET_CYCLES,
    ROUTE_RESET_KEY,
)
from wse_systems.pipeline import LAYOUTS, Regions
from wse_systems.planning import infer as pi
from wse_systems.planning.choice import ModelChoice
from wse_systems.serving import WaferServing
from wse_systems.serving.placements import OUTPUT_TIE
from wse_systems.serving.stage_counts import STAGE_COUNTS
from wse_systems.token import price_token
from wse_systems.transformer import LLAMA31_8B

pytestmark = pytest.mark.timeout(600)

WORK = published.PUBLISHED_WORKLOAD


# ---- hole 1: the check prices the plan the planner serves it on ----------------------------


def _key(plan) -> tuple:
    return (plan.layout, plan.num_stages, plan.head.region.rows, plan.spec.pe_rows, plan.gemv)


def test_the_check_prices_the_plan_the_planner_chooses_brute_force():
    spec = assumed_spec("wse3")
    counts = (None, *(s for s in STAGE_COUNTS if LLAMA31_8B.n_layers % s == 0))
    shapes = {}
    for layout in LAYOUTS:
        for stages in counts:  # each shape alone: `wse plan infer --stages S`, one layout
            asked = Regions(stages=stages, layout=layout, gemv="sdk")
            ws = WaferServing(LLAMA31_8B, spec, num_wafers=1, workload=WORK, regions=asked)
            point = ws.point(1)
            shapes[layout, stages] = (point.aggregate_tokens_per_s, point.ttft_s, ws.plans(1)[0])
    most = max(out for out, _, _ in shapes.values())
    tied = [k for k, (out, _, _) in shapes.items() if out >= (1 - OUTPUT_TIE) * most]
    chosen = shapes[min(tied, key=lambda k: (shapes[k][1], -shapes[k][0]))][2]
    case = published.check_case()
    assert _key(case.plan) == _key(chosen)  # before: 32 stages (one a layer), chosen 16
    assert case.plan.num_stages < LLAMA31_8B.n_layers
    # and `wse plan infer --users 1` itself serves that plan
    plan = pi.plan_infer(ModelChoice("llama3-8b", LLAMA31_8B), wafer=pi.WaferSetup(spec, 1),
                         workload=WORK, target=pi.Target(users=1))  # fmt: skip
    lay = plan.wafer_point.layout
    assert (lay["layout"], lay["stages"], lay["head_rows"]) == _key(case.plan)[:3]
    # the row: the planner's token alone and the trip to the host, summed by hand
    trip = PerfModel(spec).cost(token_out_work(case.plan)).seconds
    row = published.decode_check_row()
    assert row["model"] == pytest.approx(lay["token_s"] + trip, rel=1e-9)
    assert 1 / row["model"] > 1 / (lay["token_s"] + trip) * (1 - 1e-9)


def test_the_check_is_priced_on_its_plan_by_the_one_pricer():
    case = published.check_case()
    kv = int(published.PUBLISHED_SETUP["kv_tokens"])
    report = price_token(LLAMA31_8B, case.plan, kv_tokens=kv, token_out=True)
    assert published.decode_check_row()["model"] == pytest.approx(report.predicted_s, rel=1e-12)


# ---- hole 3: WaferLLM's route resets, an assumed cost a colour --------------------------------


def test_a_meshgemv_layer_pays_its_route_resets_by_hand():
    spec = assumed_spec("wse3")
    plan = published.served_plan(LLAMA31_8B, spec, num_wafers=1, gemv="meshgemv")
    region = plan.stages[0].region
    layer = layer_phases(LLAMA31_8B, region, kv_tokens=1500, spec=spec, gemv="meshgemv")
    (resets,) = [p for p in layer.parts if p.name == "route_resets"]
    assert (RECONFIGS_PER_LAYER, COLOURS_PER_RECONFIG) == (6, 5)  # decode.csl, comm_pe.csl
    assert resets.work.fixed_cycles == 6 * 5 * ROUTE_RESET_CYCLES == 300.0
    sdk = layer_phases(LLAMA31_8B, region, kv_tokens=1500, spec=spec, gemv="sdk")
    assert all(p.name != "route_resets" for p in sdk.parts)  # the SDK dataflow keeps its routes
    # a prompt block's tree holds the same leaf (the serving blocks walk both trees as one)
    block = layer_phases(LLAMA31_8B, region, kv_tokens=1500, spec=spec, gemv="meshgemv",
                         block_tokens=8)  # fmt: skip
    assert [p.name for p in block.parts] == [p.name for p in layer.parts]


def test_the_reset_cost_moves_a_meshgemv_token_by_the_count():
    spec = assumed_spec("wse3")
    plan = published.served_plan(LLAMA31_8B, spec, num_wafers=1, gemv="meshgemv")
    secs = {}
    for cycles in (0.0, 302.0):
        with assume(**{ROUTE_RESET_KEY: cycles}):
            secs[cycles] = price_token(LLAMA31_8B, plan, kv_tokens=1500).predicted_s
    per_token = LLAMA31_8B.n_layers * 6 * 5 * 302.0  # every layer's 30 resets
    assert secs[302.0] - secs[0.0] == pytest.approx(per_token / spec.clock_hz, rel=1e-9)


def test_the_reset_is_listed_beside_meshgemv_and_absent_from_the_sdk_check():
    spec = assumed_spec("wse3")
    mesh, _ = published.served_token(LLAMA31_8B, spec, num_wafers=1, gemv="meshgemv")
    got = {e.key: e for e in mesh.assumed}
    assert got[ROUTE_RESET_KEY].basis == "assumed"
    assert got[ROUTE_RESET_KEY].sweep == (2.0, 302.0)
    assert mesh.predicted.by_mechanism()["fixed"] == pytest.approx(32 * 30 * ROUTE_RESET_CYCLES)
    with recording() as got_check:
        published.decode_check_row()
    assert ROUTE_RESET_KEY not in {e.key for e in listed(got_check, {})}
    spec_, phases = published.decode_case()
    assert PerfModel(spec_).evaluate(phases).by_mechanism().get("fixed", 0.0) == 0.0


# ---- holes 4-7: the assumptions that move the check, swept beside it -------------------------


def _sweeps() -> dict[str, published.Swept]:
    return {s.key: s for s in published.check_sweeps()}


def test_the_clock_sweep_rescales_the_tokens_cycles_by_hand():
    spec, phases = published.decode_case()
    mech = PerfModel(spec).evaluate(phases).by_mechanism()
    host_s = mech["host_io"] / spec.clock_hz  # seconds at any clock
    cycles = sum(v for k, v in mech.items() if k != "host_io")
    implied = 21e15 / (762 * 1176 * (16 + 8))  # 21 PB/s over the PEs' 16 B read + 8 B write
    assert implied == pytest.approx(0.9764e9, rel=1e-4)
    (_, lo), (_, mid), (_, hi) = _sweeps()["clock_hz"].values
    for hz, got in ((0.85e9, lo), (implied, mid), (1.1e9, hi)):
        assert got == pytest.approx(1 / (cycles / hz + host_s), rel=1e-9)
    assert hi == pytest.approx(1 / published.decode_check_row()["model"], rel=1e-12)


def test_the_trip_latency_sweep_reaches_50_us_and_adds_one_pass_a_token():
    assert CONSTANTS["system_latency_s"].sweep == (0.5e-6, 2e-6, 10e-6, 50e-6)
    base = published.decode_check_row()["model"]
    swept = _sweeps()["system_latency_s"].values
    assert [label.split()[0] for label, _ in swept] == ["0.5", "2", "10", "50"]
    for (_, tps), lat in zip(swept, (0.5e-6, 2e-6, 10e-6, 50e-6), strict=True):
        assert 1 / tps == pytest.approx(base + (lat - 2e-6), rel=1e-9)  # one pass a token


def test_the_whole_buffer_is_the_named_alternative():
    case = published.check_case()
    (filled_label, filled), (whole_label, whole) = _sweeps()["kv read"].values
    assert filled_label.startswith("1,500 filled") and whole_label.startswith("8,192")
    by_hand = price_token(LLAMA31_8B, case.plan, kv_tokens=8192, token_out=True).predicted_s
    assert whole == pytest.approx(1 / by_hand, rel=1e-9) and whole < filled
    report = price_token(LLAMA31_8B, case.plan, kv_tokens=1500, token_out=True)
    assert "the whole allocated buffer" in report.assumptions["kv_tokens"]


def test_the_users_in_flight_are_the_serving_models_own_points():
    spec = assumed_spec("wse3")
    fresh = WaferServing(LLAMA31_8B, spec, num_wafers=1, workload=WORK, bytes_per_param=2,
                         regions=Regions(layout=None, gemv="sdk"), search_stages=True)  # fmt: skip
    swept = dict(_sweeps()["users in flight"].values)
    assert list(swept) == ["1", "8", "16"]
    for u in (1, 8, 16):
        assert swept[str(u)] == pytest.approx(fresh.point(u).user_tokens_per_s, rel=1e-12)
    assert swept["1"] > swept["8"] > swept["16"]
    # one user: the check's token without its trip to the host
    case = published.check_case()
    trip = PerfModel(spec).cost(token_out_work(case.plan)).seconds
    assert 1 / swept["1"] == pytest.approx(published.decode_check_row()["model"] - trip, rel=1e-6)


def test_the_calibration_experiment_prints_the_sweeps_beside_the_check():
    from wse_systems.studies import calibration_check as cc

    (row,) = [r for r in cc.run_predictions() if r.name == "tokens_per_s"]
    keys = {"swept clock_hz", "swept system_latency_s", "swept kv read", "swept users in flight"}
    assert keys <= set(row.params)
    assert (
        row.params["swept kv read"]
        == published.sweep_params(published.check_sweeps())["swept kv read"]
    )
    # the swept values are no values the row read (its clock is WSE-3's alone)
    assert {e.key: e.values for e in listed(row.assumed, {})}["clock_hz"] == (1.1e9,)


def test_decode_phases_read_the_filled_cache_unless_asked():
    case = published.check_case()
    spec = case.spec
    a = PerfModel(spec).evaluate(decode_phases(LLAMA31_8B, case.plan, kv_tokens=1500)).seconds
    b = PerfModel(spec).evaluate(decode_phases(LLAMA31_8B, case.plan, kv_tokens=8192)).seconds
    assert b > a
