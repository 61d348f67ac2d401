"""Hostile inputs found by hunt 57 (plan, wafer, view, launch, experiments, hpc flags, infer
bench, the multi-process variables): each exits 2 with one line that names the input and what
is allowed, with nothing written. Before the fixes: a refused command with `--png out` printed
the "note: ... writes out.png" line too, `--png /dev/null` wrote /dev/null.png, `wse view ''`
was a ValueError traceback, a second `--sweep` was dropped silently, a coordinator on port 0
or at 256.1.1.1 waited 120 s for a process 0 nobody could reach, `--block-z` / `--ra` were
taken and ignored by the kinds and cases that have none, `--tol 1e300` and `--dt 1e-300` ran
into NumPy overflow warnings, `infer bench` against a server that
is down exited 0 once `--model` was given, a 1e-300 Hz clock, a gigadollar hourly rate and
100,000 spare rows were taken as a wafer, `plan` took 0.5 training tokens and 1e-300 days,
and a 70B draft for an 8B model searched placements for minutes."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

ROOT = typer.main.get_command(app)
TRAIN = ["plan", "train", "--model", "llama3-8b", "--tokens", "1e12"]
INFER = ["plan", "infer", "--model", "llama3-8b"]


def _refused(args: list, message: str, env: dict[str, str] | None = None) -> str:
    return refused_in_one_line(ROOT, [str(a) for a in args], message, env)


def test_a_refusal_with_a_png_lacking_its_suffix_is_still_one_line(tmp_path):
    _refused(["plan", "train", "--model", "nope", "--tokens", "1e12", "--png", tmp_path / "p"],
             "unknown model")  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_a_png_of_dev_null_draws_nothing_and_writes_no_file_beside_it():
    before = Path("/dev/null.png").exists()
    code, output = invoke(ROOT, ["wafer", "defects", "--preset", "tiny", "--png", "/dev/null"])
    assert code == 0, output
    assert "note:" not in output and Path("/dev/null.png").exists() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["view", ""], "FILE is empty or '.': give a trace file (.npz)"),
        (["experiments", "run", "wafer-yield", "--sweep", "clock_hz=1e9", "--sweep",
          "clock_hz=2e9"], "--sweep takes one assumption, given 2 times"),
        (["hpc", "stencil", "--kind", "jacobi", "--grid", "8", "8", "8", "--block-z", "2"],
         "--block-z applies to --kind wave25 only"),
        (["hpc", "cfd", "--case", "cavity", "--ra", "1e5"],
         "--ra applies to --case rayleigh-benard only"),
        (["hpc", "cfd", "--re", "5"], "--re applies to --case cavity only"),
        (["hpc", "stencil", "--kind", "bicgstab", "--grid", "8", "8", "8", "--tol", "1e300"],
         "--tol must be a finite number in (0, 1), got 1e300"),
        (["hpc", "cfd", "--dt", "1e-300"], "--dt must be a finite number >= 1e-09, got 1e-300"),
        (["infer", "bench", "--url", "http://127.0.0.1:1", "--model", ""],
         "--model must not be empty"),
        (["infer", "bench", "--url", "http://127.0.0.1:1", "--model", "m", "-n", "2"],
         "cannot reach http://127.0.0.1:1: ConnectError"),
    ],
)  # fmt: skip
def test_flags_taken_and_ignored_or_dropped_are_refused(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    _refused(args, message)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WSE_COORDINATOR": "127.0.0.1:0"}, "the port must be in [1, 65535]"),
        ({"WSE_COORDINATOR": "256.1.1.1:80"}, "'256.1.1.1' is no hostname, IPv4 address"),
        ({"WSE_COORDINATOR": "a b:80"}, "'a b' is no hostname"),
        ({"WSE_COORDINATOR": "host:٣٣"}, "must be HOST:PORT"),
        ({"WSE_COORDINATOR": "garbage", "WSE_NUM_PROCESSES": "1", "WSE_PROCESS_ID": "0"},
         "must be HOST:PORT"),
    ],
)  # fmt: skip
def test_a_coordinator_no_process_can_reach_is_refused_before_jax(env, message):
    env = {"WSE_NUM_PROCESSES": "2", "WSE_PROCESS_ID": "1", **env}
    _refused(["hpc", "swe", "--n", "8", "--steps", "1"], message, env)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("clock_hz: 1e-300\n", "clock_hz must be in [1e+06, 1e+11] Hz, got 1e-300"),
        ("system_usd_per_hour: 1e308\n", "system_usd_per_hour must be in [0, 1e+06] USD/h"),
        ("system_peak_w: 1e12\n", "system_peak_w must be in [0, 1e+09] W"),
        ("spare_rows: 100000\n", "spare_rows must be at most pe_rows (762), got 100,000"),
        ("spare_cols: 5000\n", "spare_cols must be at most pe_cols (1,176), got 5,000"),
    ],
)  # fmt: skip
def test_wafer_figures_that_describe_no_machine_are_refused(tmp_path, spec, message):
    (tmp_path / "s.yaml").write_text("base: wse3\n" + spec)
    _refused(["wafer", "info", "--spec", tmp_path / "s.yaml"], message)
    field, value = spec.strip().split(": ")
    _refused(["wafer", "defects", "--set", f"{field}={value}"], message)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([*TRAIN[:-1], "0.5"], "--tokens must be a finite number in [1, 1e+17] (tokens)"),
        ([*INFER, "--days", "1e-300"], "--days must be a finite number in [1, 36500] (days)"),
        ([*INFER, "--users", "1", "--wafers", "20480"],
         "--wafers 20480: each wafer holds at least one of the model's 32 layers; give "
         "--wafers in [1, 32]"),  # hunt 77: the range from the fewest wafers that hold it
        ([*INFER, "--draft", "llama3-70b", "--alpha", "0.5"],
         "--draft llama3-70b (70.6B parameters) is larger than the model llama3-8b (8.03B)"),
    ],
)  # fmt: skip
def test_plan_quantities_outside_what_they_can_mean_are_refused(args, message):
    _refused(args, message)
