"""The systems package's pieces that came out of wse_core (issue 40): the decoder's
zero-skipping price, the pipeline trace per wafer, and the calibration experiment with its
LLM check. Oracles: hand counts, the SRAM ledger's own sums, the experiment's constants."""

from __future__ import annotations

import pytest
from wse_core import preset
from wse_core.cost.mechanisms import CONSTANTS


def test_zero_skipping_prices_only_the_down_projections_fired_fmacs():
    from wse_core.hw.sram import SramLedger
    from wse_systems.decoder import layer_phases, matvec_work
    from wse_systems.transformer import DecoderCounts

    region = SramLedger(4, 8, 48 * 1024).region("r", 0, 0, 4, 8)
    spec = preset("wse3")
    dense = matvec_work(region, 64, 32, spec=spec)
    half = matvec_work(region, 64, 32, input_density=0.5, spec=spec)
    # 64 inputs over 8 columns: 8 column AXPYs of 32 / 4 = 8 outputs; half of them fire.
    assert dense.ops[0].count == 8 and half.ops[0].count == 4
    assert half.sram_read_bytes == dense.sram_read_bytes / 2
    assert half.links == dense.links  # zeros still cross the fabric
    shape = DecoderCounts(
        name="s", arch="llama", vocab_size=256, d_model=64, n_layers=1, n_heads=4,
        n_kv_heads=4, d_ff=128, max_seq_len=64,
    )  # fmt: skip
    a = layer_phases(shape, region, kv_tokens=8, spec=spec).total_work().ops_by_kind()
    b = layer_phases(shape, region, kv_tokens=8, mlp_zero_fraction=0.75, spec=spec).total_work()
    down_dense = matvec_work(region, 128, 64, spec=spec).ops_by_kind()["fmac.fp16"]
    assert b.ops_by_kind()["fmac.fp16"] == pytest.approx(a["fmac.fp16"] - 0.75 * down_dense)


def test_pipeline_traces_put_each_stage_on_its_own_region_and_wafer():
    from wse_systems.pipeline import Regions, plan_pipeline
    from wse_systems.trace import pipeline_traces
    from wse_systems.transformer import DecoderCounts

    shape = DecoderCounts(
        name="toy", arch="llama", n_layers=4, d_model=256, n_heads=4, n_kv_heads=2, d_ff=512,
        vocab_size=1000, max_seq_len=128,
    )  # fmt: skip
    spec = preset("demo")
    plan = plan_pipeline(shape, spec, num_wafers=2, context_len=64, regions=Regions(stages=4))
    traces = pipeline_traces(shape, plan)
    assert len(traces) == 2
    names = [[g["name"] for g in t.regions] for t in traces]
    assert names == [["head", "stage0", "stage1"], ["stage2", "stage3"]]
    for w, t in enumerate(traces):
        mine = [s for s in (plan.head, *plan.stages) if s.wafer == w]
        assert t.layers["sram_bytes"].sum() == sum(
            s.region.num_pes
            * sum(-(-b // s.region.num_pes) for b in (s.weight_bytes, s.kv_bytes, s.act_bytes))
            for s in mine
        )
        for s in mine:  # each region is busy with its own phases only
            r = s.region
            crit = [p["critical_pe"] for p in t.phases if p["path"].split("/")[1] == s.name]
            assert all(r.row0 <= pe[0] < r.row0 + r.rows for pe in crit)
    busy = [t.layers["busy_cycles"].max() for t in traces]
    assert 0 < max(busy) < traces[0].meta["critical_cycles"]  # batch 1: one region at a time


@pytest.mark.slow
def test_calibration_experiment_prints_constants_rows_and_leave_one_out(tmp_path):
    from wse_core import write_experiment
    from wse_systems.studies.calibration_check import run

    res = run(quick=True)
    consts = [m for m in res.measurements if m["kind"] == "constant"]
    assert {m["constant"] for m in consts} == set(CONSTANTS)
    assert all(m["units"] and m["basis"] and m["source_or_rows"] for m in consts)
    loo = [m for m in res.measurements if m["kind"] == "leave_one_out"]
    assert len(loo) == 10  # eight Table II rows, the busy share, the SUMMA run
    table = [m for m in loo if str(m["case"]).startswith("stencil25 ") and "busy" not in m["case"]]
    assert all(abs(m["error_without_row"]) < 0.05 for m in table)
    roles = {p.params["role"] for p in res.predictions}
    assert roles >= {"fits router_switch_cycles", "fits dsd_issue_cycles", "check"}
    folder = write_experiment(res, tmp_path)
    assert (folder / "mechanisms.png").stat().st_size > 1000
