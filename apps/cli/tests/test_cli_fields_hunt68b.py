"""Hunt 68 (fields), holes 1-5, at the command line. Before the fix:

1. `stencil --kind jacobi --grid 2 2 2 --boundary periodic` was a ZeroDivisionError traceback
   (the sine test field is zero on a 2-point periodic axis, so ||f|| = 0);
2. `--grid 2 8 8` (jacobi) and heat `2 2 2` "solved" an all-zero problem with exit 0;
3. bicgstab `--tol` below what an fp32 residual certifies (2.4e-07) ran the whole solve, then
   exited 1 "out of reach"; `--tol`'s help did not name the floor;
4. `cfd --case cavity` printed a Nusselt column (always 1.00000) for an isothermal case, and
   its JSON `nusselt` was 1.0;
5. `cfd --dt`'s help said the default is half the limit (the cavity's is 0.8 of it), and the
   refusal suggested half the limit for both cases.
"""

from __future__ import annotations

import json
import re

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

ROOT = typer.main.get_command(app)
ENV = {"WSE_DEVICES": "8"}
STENCIL = ["hpc", "stencil", "--preset", "small"]
CFD = ["hpc", "cfd", "--preset", "small"]
PERIODIC_LINE = (
    "a periodic axis needs at least 3 points: sin(2 pi x) vanishes on 2, so the test problem "
    "would be all zero; got --grid {}"
)


@pytest.mark.parametrize(
    ("kind", "grid"),
    [("jacobi", "2 2 2"), ("jacobi", "2 8 8"), ("heat", "2 2 2"), ("heat", "8 8 2")],
)
def test_periodic_two_point_axis_is_refused_for_the_sine_kinds(kind, grid):
    args = [*STENCIL, "--kind", kind, "--grid", *grid.split(), "--boundary", "periodic"]
    line = refused_in_one_line(ROOT, args, PERIODIC_LINE.format(grid), env=ENV)
    assert line == "Error: " + PERIODIC_LINE.format(grid)


def test_periodic_three_points_still_runs():
    args = [*STENCIL, "--kind", "jacobi", "--grid", "3", "3", "3", "--boundary", "periodic"]
    code, out = invoke(ROOT, [*args, "--steps", "3", "--json"], ENV)
    assert code == 0, out
    assert json.loads(out)["history"][0][1] == 1.0  # a nonzero problem: residual starts at 1


def _floor() -> float:
    from wse_hpc.stencil.reach import least_tol
    from wse_hpc.stencil.refine import CERTIFY_FLOOR

    return least_tol(CERTIFY_FLOOR)


@pytest.mark.parametrize(("dtype", "tol"), [("fp32", "1e-12"), ("mixed", "1e-9"), ("fp32", "1e-7")])
def test_bicgstab_tol_below_the_floor_is_refused_before_the_run(dtype, tol):
    floor = _floor()
    assert floor == pytest.approx(2 * 2.0**-23)  # independent: twice fp32's eps
    args = [*STENCIL, "--kind", "bicgstab", "--grid", "9", "7", "5", "--dtype", dtype, "--tol", tol]
    line = refused_in_one_line(ROOT, args, f"--tol {float(tol):g} is below", env=ENV)
    assert f"{dtype} BiCGSTAB" in line and f"give --tol {floor:.1e} or more" in line


def test_tol_help_states_the_floor():
    code, out = invoke(ROOT, ["hpc", "stencil", "--help"], {**ENV, "COLUMNS": "400"})
    assert code == 0 and f"above {_floor():.1e}" in " ".join(out.split())


def _cfd(*args):
    code, out = invoke(ROOT, [*CFD, *args], ENV)
    assert code == 0, out
    return out


def test_cavity_shows_no_nusselt_and_rayleigh_benard_does():
    cavity = _cfd("--case", "cavity", "--grid", "16", "16", "1", "--steps", "4")
    assert "Nusselt" not in cavity and "kinetic energy" in cavity
    assert "Nusselt" in _cfd("--grid", "16", "8", "1", "--steps", "4")
    x = json.loads(_cfd("--case", "cavity", "--grid", "16", "16", "1", "--steps", "2", "--json"))
    assert "nusselt" in x and x["nusselt"] is None  # null, as for a run of no steps
    rb = json.loads(_cfd("--grid", "16", "8", "1", "--steps", "2", "--json"))
    assert isinstance(rb["nusselt"], float)


@pytest.mark.parametrize(
    ("case", "grid", "share"), [("cavity", "16 16 1", 0.8), ("rayleigh-benard", "16 8 1", 0.5)]
)
def test_dt_refusal_suggests_the_cases_real_default(case, grid, share):
    # the default step, as the run reports it, is the oracle for the suggestion
    default = json.loads(_cfd("--case", case, "--grid", *grid.split(), "--steps", "1", "--json"))[
        "dt"
    ]
    args = [*CFD, "--case", case, "--grid", *grid.split(), "--dt", "10"]
    line = refused_in_one_line(ROOT, args, "breaks the explicit step's limit", env=ENV)
    limit = float(re.search(r"limit (\S+) ", line).group(1))
    assert f"use --dt {default:.4g} (the {case} default, {share:g} of the limit)" in line
    assert default == pytest.approx(share * limit, rel=1e-3)


def test_dt_help_states_both_defaults():
    code, out = invoke(ROOT, ["hpc", "cfd", "--help"], {**ENV, "COLUMNS": "400"})
    text = " ".join(out.split())
    assert code == 0 and "rayleigh-benard half the explicit limit, cavity 0.8 of it" in text
