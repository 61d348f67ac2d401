"""Hunt 69 (faults, hole 9): a `wse hpc cfd` run stopped at step 20 of 40 and rerun as it was
is refused with "give --restart to continue that run"; doing so ran --steps 40 more, to step
60, because --steps counts the steps run after the restart (as LAMMPS's `run N`). The
refusal now names the --steps that reaches the stopped run's end. Oracle: the step file's
number and the command's --steps."""

from __future__ import annotations

import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

ROOT = typer.main.get_command(app)
CFD = ["hpc", "cfd", "--case", "rayleigh-benard", "--grid", "16", "8", "1", "--preset", "small"]


def test_the_refusal_names_the_steps_that_reach_the_stopped_runs_end(tmp_path):
    run = tmp_path / "o"
    run.mkdir()
    (run / "step_0000020.npz").write_bytes(b"a stopped run's")
    refused_in_one_line(ROOT, [*CFD, "--steps", "40", "--out", run],
                        "give --restart --steps 20 to reach step 40 to continue that run from "
                        "step 20 (--steps counts the steps run after it)")  # fmt: skip
    refused_in_one_line(ROOT, [*CFD, "--steps", "10", "--out", run],
                        "give --restart to continue that run from step 20")  # fmt: skip
    assert [p.name for p in run.iterdir()] == ["step_0000020.npz"]
    code, out = invoke(ROOT, [*CFD, "--help"], env={"COLUMNS": "200"})
    assert code == 0 and "running --steps more" in " ".join(out.split())
