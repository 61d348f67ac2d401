"""The BiCGSTAB guidance: `wse_hpc.stencil.reach` is the committed sweep's table, and its
advice reaches the user as a warning and in the not-converged reason.

Oracles: bench/results/bicgstab_reach.json (the runs of bench/bench_bicgstab_reach.py, each
with its float64 true residual) recomputed into the table; the CLI's own output.
"""

import json
from pathlib import Path

from typer.testing import CliRunner
from wse_cli.app import app
from wse_hpc.stencil.reach import LARGEST_TRIED, MEASURED_MAXITER, REACH, advice

SWEEP = Path(__file__).resolve().parents[1] / "bench" / "results" / "bicgstab_reach.json"


def test_the_reach_table_is_the_sweeps():
    sweep = json.loads(SWEEP.read_text())
    assert sweep["devices"] == 1 and sweep["maxiter"] == MEASURED_MAXITER
    for precision, row in REACH.items():
        runs = [r for r in sweep["runs"] if r["solver"] == f"{precision} + refinement"]
        tols = {r["tol"] for r in runs}
        measured = {
            t: max([r["n"] for r in runs if r["tol"] == t and r["truth"] <= t], default=0)
            for t in tols
        }
        assert {t: n for t, n in measured.items() if n} == row
    assert LARGEST_TRIED == max(r["n"] for r in sweep["runs"])


def test_inside_the_reach_there_is_no_advice():
    for precision, row in REACH.items():
        for tol, n in row.items():
            assert advice(precision, (n, n, n), tol, MEASURED_MAXITER) is None
            assert advice(precision, (n, n, n), tol * 10, MEASURED_MAXITER) is None


def test_mixed_beyond_its_reach_is_sent_to_fp32():
    # issue 32: --grid 256 256 256 --tol 1e-6 in mixed precision stopped at the cap (H200)
    note = advice("mixed", (256, 256, 256), 1e-6, 1000)
    assert "--dtype fp32" in note and f"up to {REACH['mixed'][1e-6]}^3" in note
    # a higher cap than the sweep's: nothing measured to compare with
    assert advice("mixed", (256, 256, 256), 1e-6, MEASURED_MAXITER + 1) is None


def test_the_cli_warns_first_and_says_it_again_in_the_reason():
    n = REACH["mixed"][1e-4] + 8  # beyond mixed precision's measured reach at tol 1e-4
    args = ["hpc", "stencil", "--kind", "bicgstab", "--grid", str(n), str(n), str(n)]
    r = CliRunner().invoke(app, [*args, "--tol", "1e-4", "--steps", "1", "--json"])
    assert r.exit_code == 1  # one iteration cannot reach 1e-4
    warning = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "--dtype fp32" in warning[0]
    assert "--dtype fp32" in json.loads(r.stdout)["reason"]
