"""`wse launch` holes found by hunt 65 (options). Before the fixes:
- `wse launch --nproc 2 --devices-per-proc 1 -- --devices 2 wafer check` ran on 4 devices,
  not the 2 asked for: the child's `--devices` won over the `WSE_DEVICES` the launcher sets,
  and the launcher's host-memory check had counted 1 device a process;
- the launcher refused `--num-processes` in the child command but not `--num_processes`,
  `--process_id` spellings (nor `--num_processes=3`) that the child reads as the same option
  (`wse_cli.option_names.dashed`): the child joined the launcher's run and dropped the value;
- `wse launch -- wafer check --json` put gloo's `[Gloo] Rank N is connected to ...` lines
  (C++, at the run's first collective) on stdout before the JSON, so stdout was not JSON.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import WSE, clean_env, refused_in_one_line

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)
LAUNCH = ["launch", "--nproc", "2", "--devices-per-proc", "1", "--"]
DEVICES = "--devices is set by wse launch (--devices-per-proc); remove it from the command"


@pytest.mark.parametrize(
    "command",
    [
        ["--devices", "2", "wafer", "check"],
        ["--devices=2", "wafer", "check"],
        ["hpc", "swe", "--preset", "tiny", "--devices", "2"],  # not the child's: refused too
    ],
    ids=["devices", "devices=", "after the command"],
)
def test_a_child_devices_is_refused_before_any_child_starts(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    line = refused_in_one_line(ROOT, [*LAUNCH, *command], DEVICES)
    assert line == f"Error: {DEVICES}"
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["hpc", "swe", "--n", "8", "--preset", "tiny", "--num_processes", "3"],
         "--num-processes"),
        (["hpc", "swe", "--n", "8", "--preset", "tiny", "--num_processes=3"], "--num-processes"),
        (["--process_id", "1", "wafer", "check"], "--process-id"),
        (["--process_id=1", "wafer", "check"], "--process-id"),
        # held before, kept: the dash forms
        (["train", "tiny", "--coordinator=127.0.0.1:1"], "--coordinator"),
        (["--num-processes", "3", "wafer", "check"], "--num-processes"),
    ],
    ids=["num_processes", "num_processes=", "process_id", "process_id=", "coordinator=",
         "dash form"],
)  # fmt: skip
def test_every_spelling_of_the_launchers_own_flags_is_refused(tmp_path, monkeypatch, command,
                                                              flag):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    line = refused_in_one_line(ROOT, [*LAUNCH, *command], flag)
    assert line == f"Error: {flag} is set by wse launch itself; remove it from the command"
    assert os.listdir(tmp_path) == []


def test_a_word_after_the_childs_own_double_dash_is_not_an_option():
    """After a bare `--` the child reads no option (click's rule, and `dashed` stops there):
    the launcher does not refuse `--devices` there; the child's click refuses the extra word."""
    from wse_cli.commands.launch import _own_flag

    assert _own_flag(ROOT, ["wafer", "check", "--", "--devices", "2"]) is None
    assert _own_flag(ROOT, ["wafer", "check", "--num_processes", "2"]) == "--num-processes"


def test_json_under_launch_is_one_json_object_on_stdout(tmp_path):
    """Two processes of two devices each (gloo connects one context per collective's
    communicator; with 2 devices a process, two threads print at once): stdout is exactly
    the JSON process 0 prints, for the 2 x 2 devices asked for."""
    cmd = WSE + ["launch", "--nproc", "2", "--devices-per-proc", "2", "--",
                 "wafer", "check", "--json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=110, env=clean_env(),
                          cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)  # the whole of stdout, nothing before or after
    assert report["ok"] is True and report["processes"] == 2, report
    assert report["devices"] == 4, report
    assert "[Gloo]" not in done.stdout
