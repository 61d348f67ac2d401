"""Hunt 69 (faults, hole 9): a `wse hpc cfd` run stopped at step 20 of 40 and rerun as it was
is refused with "give --restart to continue that run"; doing so ran --steps 40 more, to step
60, because --steps counts the steps run after the restart (as LAMMPS's `run N`). The
refusal now names the --steps that reaches the stopped run's end. Oracle: the step file's
number and the command's --steps; a stopped run (Ctrl-C) names the step files it kept and
the --restart that reaches its end, checked against the folder's newest file."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import typer
from wse_cli.app import app
from wse_cli.testing import clean_env, invoke, refused_in_one_line
from wse_hpc.cfd_steps import latest_output

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


def test_a_stopped_run_says_what_it_kept_and_the_restart_that_ends_it(tmp_path):
    # faults hole 7: Ctrl-C said only "interrupted (Ctrl-C)", not the step files kept
    out = tmp_path / "o"
    args = [*CFD, "--steps", "50000", "--output-every", "10", "--out", str(out)]
    # SIGINT as a terminal's Ctrl-C (a job started in the background inherits it ignored)
    prelude = ("import runpy, signal, sys; "
               "signal.signal(signal.SIGINT, signal.default_int_handler); "
               "sys.argv = ['wse', *sys.argv[1:]]; "
               "runpy.run_module('wse_cli', run_name='__main__', alter_sys=True)")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", prelude, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=clean_env())  # fmt: skip
    t0 = time.monotonic()
    while latest_output(out) is None or latest_output(out).name == "step_0000000.npz":
        assert proc.poll() is None and time.monotonic() - t0 < 200, "no step file came"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    last = latest_output(out)
    done = int(last.stem.rpartition("_")[2])
    assert proc.returncode == 130 and done > 0, err
    assert err.strip().splitlines()[-1] == (
        f"interrupted (Ctrl-C); --out {out} keeps the step files up to {last.name}; give "
        f"--restart --steps {50000 - done} to continue to step 50000"
    )
