"""`wse hpc cfd`: NPZ / VTK output, restart equal to a straight run, PNG, trace, bad input."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner
from wse_cli.app import app
from wse_hpc.fields.vtk import read_vtk, to_centres

runner = CliRunner()
ENV = {"WSE_DEVICES": "8"}  # the test process already has 8 CPU devices (conftest.py)
BASE = ["hpc", "cfd", "--preset", "small"]
CAVITY = [*BASE, "--case", "cavity", "--grid", "12", "12", "1", "--re", "100"]


def _last(folder, step):
    return np.load(folder / f"step_{step:07d}.npz")


def test_cavity_writes_fields_and_restart_equals_a_straight_run(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    r = runner.invoke(app, [*CAVITY, "--steps", "20", "--output-every", "10", "--out", str(a)],
                      env=ENV)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert (a / "step_0000010.npz").exists() and (a / "step_0000020.vtk").exists()
    r = runner.invoke(app, [*CAVITY, "--steps", "10", "--out", str(a), "--restart"], env=ENV)
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, [*CAVITY, "--steps", "30", "--out", str(b)], env=ENV)
    assert r.exit_code == 0, r.output
    resumed, straight = _last(a, 30), _last(b, 30)
    for name in "uvwp":  # no T: the cavity solves none (hunt 71)
        np.testing.assert_allclose(resumed[name], straight[name], rtol=0, atol=1e-6)
    assert "T" not in resumed.files and "T" not in straight.files
    assert resumed["u"].shape == (12, 12, 1) and np.abs(resumed["u"]).max() > 0.01
    vtk = read_vtk(b / "step_0000030.vtk")
    np.testing.assert_allclose(vtk["velocity"][..., 0], to_centres(straight["u"], 0), atol=1e-7)
    np.testing.assert_allclose(vtk["p"], straight["p"], atol=1e-7)


def test_rayleigh_benard_json_png_and_trace(tmp_path):
    png, trace = tmp_path / "t.png", tmp_path / "t.npz"
    args = ["--grid", "16", "8", "1", "--ra", "5000", "--steps", "20"]
    r = runner.invoke(app, [*BASE, *args, "--json", "--png", str(png), "--trace", str(trace)],
                      env=ENV)  # fmt: skip
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["steps"] == 20 and d["nusselt"] > 0.99 and d["predicted_s"] > 0
    assert d["cg_iterations_per_step"] >= 1
    assert png.stat().st_size > 1000 and trace.stat().st_size > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ra", "0"], "--ra must be a finite number in [1, 1e+17]"),
        (["--grid", "40", "8", "1"], "does not fit the small wafer"),
        (["--grid", "16", "8", "1", "--dt", "1"], "breaks the explicit step's limit"),
        (["--grid", "16", "8", "20000"], "needs"),
        (["--case", "cavty"], "unknown --case"),
        (["--restart"], "--restart needs --out"),
        (["--time-scheme", "rk4"], "unknown --time-scheme"),
        (["--time-scheme", "rk3"], "rk3 is the cavity's"),
        (
            ["--case", "cavity", "--grid", "16", "16", "1", "--time-scheme", "rk3", "--dt", "1"],
            "breaks the explicit step's limit",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message):
    r = runner.invoke(app, [*BASE, "--steps", "1", *args], env=ENV)
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_swe_conserves_mass_and_reports(tmp_path):
    r = runner.invoke(app, ["hpc", "swe", "--preset", "small", "--n", "16", "--steps", "50",
                            "--json"], env=ENV)  # fmt: skip
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["mass_drift"] < 2e-6 and d["predicted_s"] > 0 and d["steps"] == 50
    r = runner.invoke(app, ["hpc", "swe", "--preset", "small", "--n", "40"], env=ENV)
    assert r.exit_code == 2 and "does not fit the small wafer" in r.output


def test_rayleigh_benard_3d_runs_and_declares_its_work_columns(tmp_path):
    args = ["--grid", "8", "8", "6", "--ra", "5000", "--aspect", "1.5", "--steps", "10"]
    r = runner.invoke(app, [*BASE, *args, "--out", str(tmp_path), "--json"], env=ENV)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    names = {a["name"] for a in d["sram"]["allocations"]}
    assert {"fields.u", "fields.v", "fields.w", "fields.T", "fields.cg.r", "fields.w_star"} <= names
    # a hand count: u v w T, the 5 PCG columns, the Poisson rhs, u* v* w*: 13 Z columns of
    # 6 fp32 cells
    assert d["sram"]["used_bytes_per_pe"] == 13 * 6 * 4
    f = _last(tmp_path, 10)
    assert f["w"].shape == (8, 8, 6) and np.abs(f["w"]).max() > 0 and np.isfinite(f["T"]).all()
