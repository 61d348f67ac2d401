"""`--trace FILE` of `wse hpc tlrmvm run`, `wse hpc md` and `wse train --validate_only`: the
file loads back, its SRAM layer sums to the run's ledger (bytes per PE x the PEs each
allocation covers), its busiest PE does the report's cycles (`critical_cycles`), and the
per-PE work is the placement's (TLR-MVM: each PE's own tiles; MD: the PEs holding atoms;
training: every PE)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner
from wse_cli.app import app
from wse_core import PerfModel, preset
from wse_core.trace import critical_cycles, load

runner = CliRunner(env={"COLUMNS": "200", "WSE_DEVICES": "8"})  # conftest: 8 devices


@pytest.fixture(autouse=True)
def _keep_test_devices(monkeypatch):
    monkeypatch.setenv("WSE_DEVICES", "8")  # the root callback must not shrink the devices


def _ledger_total(trace) -> float:
    return sum(a["bytes_per_pe"] * a["region"][2] * a["region"][3] for a in trace.allocations)


def test_tlrmvm_trace_is_each_pes_own_tiles(tmp_path):
    from wse_hpc.tlrmvm import compress, save_operator
    from wse_hpc.tlrmvm.engine import TlrEngine
    from wse_hpc.tlrmvm.perf import pe_tiles
    from wse_hpc.tlrmvm.testing import smooth_kernel

    op = compress(smooth_kernel(256, 256), nb=32, threshold=1e-3, seed=0)
    path = save_operator(op, tmp_path / "op.npz")
    out = tmp_path / "tlr.npz"
    args = ["hpc", "tlrmvm", "run", "--operator", path, "--preset", "small", "--json"]
    r = runner.invoke(app, [*map(str, args), "--trace", str(out)])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    trace = load(d["trace"])
    eng = TlrEngine.build(op, preset("small"))
    report = eng.report()
    assert (trace.rows, trace.cols) == eng.plan.grid
    used = d["predicted"]["sram"]["used_bytes_per_pe"]
    assert (
        trace.layers["sram_bytes"].sum() == used * trace.rows * trace.cols == _ledger_total(trace)
    )
    assert trace.layers["busy_cycles"].max() == pytest.approx(critical_cycles(report), rel=1e-9)
    # phase 1 per PE: its own V tiles' cycles (the busiest PE's are the phase's cost)
    model = PerfModel(eng.wafer.spec)
    own = sorted(model.cost(p.work(1, 1)).cycles for p in pe_tiles(eng.plan))
    phase1 = next(p for p in trace.phases if p["name"] == "phase1_vhx")
    assert phase1["cycles"] == pytest.approx(own[-1], rel=1e-9)
    # the regions are the PE rows' groups: every tile column served exactly once
    served = [int(j) for g in trace.regions for j in g["name"].split()[-1].split(",")]
    assert sorted(served) == list(range(op.tiles[1]))


def test_train_validate_only_trace_is_every_layer_on_every_pe(tmp_path):
    out = tmp_path / "train.npz"
    r = runner.invoke(app, ["train", "tiny", "--validate_only", "--trace", str(out)])
    assert r.exit_code == 0, r.output
    assert "per-PE trace:" in r.output
    trace = load(out)
    spec = preset(trace.wafer)
    from wse_trainer.config import load_config
    from wse_trainer.run import predict, validate

    config = load_config("tiny", [])
    spec = preset(config.runconfig.wafer)
    model, plan = validate(config, spec)
    report = predict(config, spec, model, plan)
    pes = spec.pe_rows * spec.pe_cols
    used = report.sram["used_bytes_per_pe"]
    assert trace.layers["sram_bytes"].sum() == used * pes == _ledger_total(trace)
    assert trace.layers["busy_cycles"].max() == pytest.approx(critical_cycles(report), rel=1e-9)
    assert trace.layers["busy_cycles"].min() == trace.layers["busy_cycles"].max()  # every PE
    assert trace.meta["predicted_s"] == pytest.approx(report.predicted_s, rel=1e-12)


def test_train_trace_needs_validate_only(tmp_path):
    r = runner.invoke(app, ["train", "tiny", "--trace", str(tmp_path / "t.npz")])
    assert r.exit_code == 2 and "--validate-only" in r.output


@pytest.fixture(scope="module")
def cu_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("md") / "Cu.eam.alloy"
    args = ["hpc", "md", "potential", "--elements", "Cu", "--out", str(path), "--knots", "500"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return path


def test_md_trace_is_the_pes_holding_atoms(cu_file, tmp_path):
    out = tmp_path / "md.npz"
    lattice = ["--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4", "4"]
    args = ["hpc", "md", *lattice, "--potential", str(cu_file), "--steps", "2", "--thermo-every"]
    args += ["1", "--preset", "small", "--json", "--trace", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    trace = load(d["trace"])
    assert [trace.rows, trace.cols] == d["grid"]
    pes = trace.rows * trace.cols
    assert trace.layers["sram_bytes"].sum() == d["sram_bytes_per_pe"] * pes == _ledger_total(trace)
    busy = trace.layers["busy_cycles"]
    cycles = d["report"]["predicted_s"] * preset("small").clock_hz
    assert busy.max() == pytest.approx(cycles, rel=1e-9)
    assert busy.max() == pytest.approx(trace.meta["critical_cycles"], rel=1e-12)
    assert np.count_nonzero(busy) == d["atoms"] == 256  # one atom per PE, empty PEs idle
    assert set(np.unique(busy)) <= {0.0, busy.max()}


def test_infer_generate_trace_is_the_plans_head_and_stages(tmp_path):
    from wse_inference.testing import save_tiny_model

    save_tiny_model(tmp_path / "model" / "hf", n_layers=2)
    out = tmp_path / "infer.npz"
    args = ["--devices", "8", "infer", "generate", "--model_dir", str(tmp_path / "model")]
    args += ["--prompt-ids", "5,6,7", "--max_tokens", "4", "--temperature", "0", "--stages"]
    args += ["2", "--json", "--trace", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    d = json.loads(r.output.strip().splitlines()[-1])
    traces = [load(p) for p in d["trace"]]
    assert len(traces) == d["predicted"]["wafers"] and d["trace"][0] == str(out)
    names = sorted(g["name"] for t in traces for g in t.regions)
    assert len(names) == d["predicted"]["regions"] == 3 and "head" in names  # head + 2 stages
    for t in traces:  # each region's weights, KV cache and activations, per PE
        assert t.layers["sram_bytes"].sum() == _ledger_total(t) > 0
        busy = t.layers["busy_cycles"]
        inside = np.zeros(busy.shape, bool)
        for g in t.regions:
            r0, c0, nr, nc = g["rect"]
            inside[r0 : r0 + nr, c0 : c0 + nc] = True
        assert busy[~inside].max(initial=0.0) == 0.0  # no PE outside the plan works
    cycles = d["predicted"]["wafer_s_per_token"] * preset(d["predicted"]["wafer"]).clock_hz
    busiest = max(t.layers["busy_cycles"].max() for t in traces)
    assert busiest <= traces[0].meta["critical_cycles"] <= cycles * (1 + 1e-9)
    spec = json.dumps({"model": str(tmp_path / "model"), "num_speculative_tokens": 2})
    r = runner.invoke(app, [*args[:-2], "--speculative-config", spec, "--trace", str(out)])
    assert r.exit_code == 2 and "pipelined" in r.output
