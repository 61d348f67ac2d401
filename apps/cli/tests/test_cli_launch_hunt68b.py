"""Hunt 68 (E1, E2, E4, E6): `wse launch` and `experiments run --sweep`. Broken before:
- a child killed by a signal: the surviving peer's traceback (and JAX's coordination-service
  lines) came before the launcher's line, which said "exited with code -9";
- `-- --version` / `-- hpc swe --help` printed once per process;
- `-- python -c 1` started every child (2-2.7 s) before a child refused it;
- a sweep rerun into the same --out replaced the earlier sweep's files without a note, and
  its last line named the .md alone."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
import typer
from wse_cli.app import app
from wse_cli.commands.launch import _Relay, _watch
from wse_cli.testing import invoke, refused_in_one_line

ROOT = typer.main.get_command(app)
LAUNCH = ["launch", "--nproc", "2", "--devices-per-proc", "1", "--"]


def _child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stderr=subprocess.PIPE)


def _until(ready, what: str, timeout_s: float = 30.0) -> None:
    """Wait for `ready()`, however loaded the machine (a fixed sleep raced the relay's thread
    on CI's 2 loaded cores); fail naming `what` past `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.005)


def test_a_killed_child_is_named_by_its_signal_and_the_peers_dying_words_are_dropped(
    tmp_path, capfd
):
    kept = tmp_path / "kept"
    # process 0 prints a traceback once process 1 has died, as a JAX peer does: here once the
    # relay has taken process 1's death (written below), before the launcher's next poll
    peer = _child(f"""
        import os, sys, time
        sys.stderr.write("before\\n"); sys.stderr.flush()
        while not os.path.exists({str(kept)!r}):
            time.sleep(0.001)
        for n in range(50):
            sys.stderr.write(f"Traceback line {{n}}\\n"); sys.stderr.flush()
        os.close(2)  # its reader sees the end of its lines (it lives on until stopped)
        time.sleep(30)
    """)
    relay, err = _Relay(), []
    relay.watch(0, peer)
    _until(lambda: err.append(capfd.readouterr().err) or "before\n" in "".join(err), "'before'")
    victim = _child("""
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    relay.watch(1, victim)
    procs = [peer, victim]
    # the relay keeps process 1 alone as its reader thread sees it die, not at the launcher's
    # poll (`_watch` is not running yet): the peer's next lines are noise
    _until(lambda: relay.only == 1, "relay.only == 1 (process 1's death)")
    kept.touch()
    _until(lambda: peer.stderr.closed, "end of the peer's stderr")  # its 50 lines taken
    started = time.monotonic()
    with pytest.raises(typer.Exit) as e:
        _watch(procs, relay, 2)
    assert e.value.exit_code == 1 and time.monotonic() - started < 5
    assert peer.returncode is not None  # stopped by the launcher
    err = "".join(err) + capfd.readouterr().err
    assert err.splitlines() == [
        "before",
        "Error: process 1 was killed by SIGKILL (signal 9; out of memory?); stopped the other 1",
    ], err


def test_a_program_that_is_no_wse_command_is_refused_before_any_child_starts():
    started = time.monotonic()
    for word in ("python", "nosuchcmd"):
        line = f"wse launch runs wse commands: '{word}' is none (wse --help lists them)"
        refused_in_one_line(ROOT, [*LAUNCH, word, "-c", "1"], line)
    refused_in_one_line(ROOT, [*LAUNCH, "hpc", "stencl"], "'hpc stencl' is none")
    assert time.monotonic() - started < 5  # no child: no JAX import (2 s a launch before)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--version"], "wse launch: --version is not a run; use wse --version without launch"),
        (
            ["hpc", "swe", "--help"],
            "wse launch: --help is not a run; use wse hpc swe --help without launch",
        ),  # fmt: skip
    ],
)
def test_help_and_version_are_refused_under_several_processes(args, line):
    assert refused_in_one_line(ROOT, [*LAUNCH, *args], line) == f"Error: {line}"


def test_a_sweep_rerun_notes_the_earlier_sweep_and_names_both_files(tmp_path):
    out = tmp_path / "o"
    base = ["experiments", "run", "sc22-stencil25", "--out", str(out), "--sweep"]
    code, first = invoke(ROOT, [*base, "clock_hz=1e9,2e9"])  # wafer-yield reads no clock: refused
    folder = out / "sc22-stencil25"
    assert code == 0, first[-2000:]
    assert "note:" not in first
    assert first.strip().splitlines()[-1] == f"wrote {folder}/sweep_clock_hz.md, sweep_clock_hz.csv"
    code, second = invoke(ROOT, [*base, "clock_hz=1e9,3e9"])
    assert code == 0, second[-2000:]
    assert f"note: {folder} held an earlier sweep of clock_hz (written " in second
    assert "; its files are replaced by this run's" in second
    head = (folder / "sweep_clock_hz.csv").read_text().splitlines()[0]
    assert head == "prediction,unit,1e+09,3e+09", head
