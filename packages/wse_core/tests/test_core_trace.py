"""The per-PE trace: its totals are the RunReport's, its schema round-trips, and
downsampling keeps sums (sum layers) and maxima (max layers). Costs here are counted by hand
on an uncalibrated model (efficiency 1): an fp32 add of 64 elements on WSE-2 is 64 / 2
(SIMD width) = 32 cycles + the issue cycles."""

from __future__ import annotations

import numpy as np
import pytest
from wse_core import Op, PerfModel, Phase, RunReport, Work, overlap, preset, serial
from wse_core.cost.calibration import UNCALIBRATED
from wse_core.hw.defects import defect_map, remap
from wse_core.hw.sram import SramLedger
from wse_core.testing import tiny_trace
from wse_core.trace import (
    LAYERS,
    SCHEMA_VERSION,
    TraceError,
    critical_cycles,
    downsample,
    load,
    trace_from,
)


def _report(spec, phases):
    return RunReport.build("t", spec, phases, model=PerfModel(spec, UNCALIBRATED), units="step")


def _phases():
    add = Phase("add", Work(ops=(Op("add", "fp32", 64),), links={"E": 10.0}), repeat=3)
    halo = Phase("halo", Work(links={"N": 5.0, "W": 7.0}, latency_hops=4))
    return serial(add, overlap(halo, Phase("read", Work(sram_read_bytes=1600))), name="step")


def test_busiest_pe_cycles_equal_the_reports_and_are_counted_by_hand():
    spec = preset("tiny")
    report = _report(spec, _phases())
    tr = trace_from(spec, report)
    add_cycles = spec.dsd_issue_cycles + 64 / spec.simd_width("add", "fp32", 1)
    halo = 7 * 4 / spec.link_bytes_per_cycle + 4 * spec.hop_latency_cycles
    read = 1600 / spec.sram_read_bytes_per_cycle
    by_hand = 3 * add_cycles + max(halo, read)
    assert critical_cycles(report) == pytest.approx(by_hand)
    assert critical_cycles(report) == pytest.approx(report.predicted_s * spec.clock_hz)
    assert tr.layers["busy_cycles"].max() == pytest.approx(by_hand)
    assert tr.layers["link_E"][0, 0] == 30.0 and tr.layers["link_W"][0, 0] == 7.0
    assert tr.layers["compute_cycles"][3, 3] == pytest.approx(3 * add_cycles)


def test_sram_layer_sums_to_the_ledgers_total_and_regions_weight_phases():
    spec = preset("small")
    ledger = SramLedger(spec.pe_rows, spec.pe_cols, spec.sram_bytes_per_pe)
    left = ledger.region("left", 0, 0, 32, 10)
    ledger.allocate("field", 400)
    ledger.allocate("halo", 96, left)
    report = _report(spec, _phases())
    w = np.zeros((32, 32))
    w[5, 7], w[6, 7] = 1.0, 0.5
    tr = trace_from(spec, report, per_pe_work={"add": left, "halo": w}, sram=ledger)
    total = sum(a.bytes_per_pe * a.region.num_pes for a in ledger.allocations)
    assert tr.layers["sram_bytes"].sum() == total == 400 * 1024 + 96 * 320
    assert tr.layers["busy_cycles"].max() == pytest.approx(critical_cycles(report))
    crit = {p["name"]: p["critical_pe"] for p in tr.phases}
    assert crit["halo"] == [5, 7]
    assert tr.layers["link_N"][6, 7] == 2.5 and tr.layers["link_N"][0, 0] == 0
    assert tr.layers["link_E"][:, 10:].sum() == 0  # add runs only on the left region
    with pytest.raises(ValueError, match="per_pe_work"):
        trace_from(spec, report, per_pe_work={"add": 2 * w})


def test_schema_round_trips(tmp_path):
    tr, rm = tiny_trace(seed=3, rate=0.05)
    assert len(tr.dead) > 0
    back = load(tr.save(tmp_path / "t.npz"))
    assert back.header() == tr.header() and back.header()["schema_version"] == SCHEMA_VERSION
    for key in tr.layers:
        np.testing.assert_array_equal(back.layers[key], tr.layers[key])
    np.testing.assert_array_equal(back.dead, tr.dead)
    assert back.layers["detour_hops"].sum() == rm.extra_hops["ew_total"] + rm.extra_hops["ns_total"]


def test_downsampling_keeps_sums_and_maxima_and_the_full_wse3_is_blocked():
    rng = np.random.default_rng(0)
    spec = preset("small")
    tr = trace_from(spec, _report(spec, _phases()))
    noisy = {k: rng.random((32, 32)) * 100 for k in tr.layers}
    tr = type(tr)(**{**tr.__dict__, "layers": noisy})
    small = downsample(tr, 5)  # 32 is not a multiple of 5: edge blocks are partial
    assert small.shape == (7, 7) and small.block == 5
    for layer in LAYERS:
        a, b = noisy[layer.key], small.layers[layer.key]
        if layer.reduction == "sum":
            assert b.sum() == pytest.approx(a.sum())
        else:
            assert b.max() == a.max()
    wse3 = preset("wse3")
    report = _report(wse3, _phases())
    big = trace_from(wse3, report)
    assert big.block == 3 and big.shape == (254, 392)
    assert big.layers["link_E"].sum() == pytest.approx(30.0 * 762 * 1176)
    assert big.layers["busy_cycles"].max() == pytest.approx(critical_cycles(report))


def test_load_refuses_what_is_not_a_trace(tmp_path):
    bad = tmp_path / "x.npz"
    bad.write_text("hello")
    with pytest.raises(TraceError, match="not a wse trace"):
        load(bad)
    with pytest.raises(TraceError, match="no trace file"):
        load(tmp_path / "missing.npz")


def test_uniform_trace_of_a_region_with_defects():
    from wse_core.trace import trace_uniform

    spec = preset("small")
    ledger = SramLedger(20, 12, spec.sram_bytes_per_pe)
    ledger.allocate("u", 256)
    ledger.allocate("f", 128)
    report = RunReport.build(
        "s", spec, _phases(), model=PerfModel(spec, UNCALIBRATED), sram=ledger.summary()
    )
    dm = defect_map(spec, seed=5, rate=0.01)
    region = ledger.region("stencil grid", 0, 0, 20, 12)
    tr = trace_uniform(spec, report, region=region, defects=dm)
    assert tr.layers["sram_bytes"].sum() == (256 + 128) * 20 * 12
    assert tr.layers["busy_cycles"][:20, :12].min() == pytest.approx(critical_cycles(report))
    assert tr.layers["busy_cycles"][20:].max() == 0 and tr.layers["busy_cycles"][:, 12:].max() == 0
    assert len(tr.dead) == dm.num_dead and tr.regions[0]["rect"] == [0, 0, 20, 12]
    extra = remap(spec, dm).extra_hops
    assert tr.layers["detour_hops"].sum() == extra["ew_total"] + extra["ns_total"]
