"""`wse hpc stencil`: JSON output checked against the problem's physics, PNG, bad input."""

import json

import pytest
from typer.testing import CliRunner
from wse_cli.app import app

runner = CliRunner()
# The root callback configures JAX's device count; the test process already has 8 devices
# (conftest.py), so say so (otherwise the default of one per core conflicts).
ENV = {"WSE_DEVICES": "8"}
BASE = ["hpc", "stencil", "--preset", "small", "--json"]


@pytest.mark.smoke
def test_heat_json_reports_exact_decay_and_prediction():
    r = runner.invoke(
        app, [*BASE, "--kind", "heat", "--grid", "9", "11", "8", "--steps", "20"], env=ENV
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["steps"] == 20 and d["history"][0][1] < 1e-7  # fp32 rounding of u0
    # fp32 explicit Euler on the eigenmode follows (1 - dt lambda)^n to rounding.
    assert d["final"]["max_deviation_from_scheme_decay"] < 1e-5
    assert d["predicted_s_per_step"] > 0 and d["measured_cells_per_s"] > 0
    assert d["predicted_s"] == pytest.approx(20 * d["predicted_s_per_step"])
    assert d["measured_wall_s"] > 0 and d["predicted"]["children"][0]["name"] == "heat_step"
    assert d["sram"]["used_bytes_per_pe"] == 2 * 8 * 4 + 4 * 4  # u, u_next; Z ghosts


def test_bicgstab_converges_and_writes_png(tmp_path):
    png = tmp_path / "b.png"
    args = ["--kind", "bicgstab", "--grid", "8", "8", "8", "--dtype", "fp32", "--tol", "1e-6"]
    r = runner.invoke(app, [*BASE, *args, "--png", str(png)], env=ENV)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["converged"] is True and d["final"]["true_residual"] <= 1e-6
    assert png.stat().st_size > 1000


def test_bicgstab_out_of_reach_is_refused_before_the_run():
    # hunt 68: the floor is known up front, so a tol below it is refused (it ran, then exit 1)
    args = ["--kind", "bicgstab", "--grid", "8", "8", "8", "--tol", "1e-9"]
    r = runner.invoke(app, [*BASE, *args], env=ENV)
    assert r.exit_code == 2 and "below what mixed BiCGSTAB's residual can certify" in r.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--kind", "jacobi", "--grid", "8", "8", "100000"], "largest nz"),
        (["--kind", "wave25", "--grid", "8", "8", "3"], "at least 5 points"),
        (["--kind", "bicgstab", "--grid", "8", "8", "8", "--tol", "0"], "tol must be"),
        (["--kind", "jacobi", "--grid", "8", "8", "8", "--steps", "-1"], "steps must be"),
        (["--kind", "jacobi", "--grid", "8", "8", "8", "--tol", "1e-3"], "--tol applies"),
        (["--kind", "wave", "--grid", "8", "8", "8"], "did you mean"),
        (["--kind", "bicgstab", "--grid", "8", "8", "8", "--boundary", "periodic"], "singular"),
        # hunt 77: neumann is no choice; it was refused pointing at `wse hpc cfd`, which
        # takes no boundary: the field equations' Python API has it
        (["--kind", "bicgstab", "--grid", "8", "8", "8", "--boundary", "neumann"], "neumann()"),
        (["--kind", "heat", "--grid", "8", "8", "8", "--boundary", "neumann"], "wse_hpc.fields"),
        (["--kind", "heat", "--grid", "8", "8", "8", "--boundary", "wall"], "unknown --boundary"),
    ],
)
def test_bad_input_is_a_clear_error(args, message):
    r = runner.invoke(app, [*BASE, *args], env=ENV)
    assert r.exit_code == 2, r.output
    assert message in r.output


@pytest.mark.parametrize("kind", ["jacobi", "bicgstab"])
def test_zero_steps_report_no_rates_instead_of_nan(kind):
    """`--steps 0` is a run of nothing (as LAMMPS's `run 0`): the initial state, no rates.
    The JSON's rates are null (NaN is not JSON) and the text says no step ran (hunt 57: it
    printed "nan TFLOP/s" / "nan Gcell/s")."""
    args = ["--kind", kind, "--grid", "8", "8", "8", "--steps", "0"]
    d = json.loads(runner.invoke(app, [*BASE, *args], env=ENV).stdout)
    rates = ("measured_cells_per_s", "predicted_gcells_per_s", "predicted_flops_per_s")
    assert d["steps"] == 0 and [d[k] for k in rates] == [None, None, None]
    text = runner.invoke(app, [*BASE[:-1], *args], env={**ENV, "COLUMNS": "200"}).output
    assert "nan" not in text.lower() and "ran, so no rates" in text, text
