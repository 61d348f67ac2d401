"""Hunt 67: leftovers of the earlier hostile-input hunts, in the `wse` command.

Broken before:
- an output path (`--png z/a.png`, `--out z/o`) under a folder that cannot be entered (mode
  000) was a PermissionError traceback for any user but root (root ignores mode bits: these
  tests drop its CAP_DAC_OVERRIDE with `setpriv`, or fake the file system's answer);
- under `umask 777`, `wse experiments run` wrote its files, then failed reading table.md back
  to print it (PermissionError traceback, exit 1);
- `wse launch` exited 130 without a word when its own process alone got SIGINT;
- `wse infer generate` ran a `--speculative-config` holding `mock_accepted_tokens` (the mock
  server's key), silently ignoring it;
- the root help's cache key held no `WSE_LIMIT_*`: after a limit changed, `wse --help`
  showed the old range;
- `--steps 1e12` was refused as outside [0, 2147483647], the type's range, not the limit
  in force (10,000,000 steps), and `wse train --num-csx` showed no limit in its help (it was
  refused later as `runconfig.num_csx`).

Oracles: the exact refusal line and exit code; the file written against the text printed;
the limit's value and variable from `wse_core.host.limits`; the processes left running.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import typer
from wse_cli import interrupts
from wse_cli.app import app
from wse_cli.testing import WSE, clean_env, invoke, refused_in_one_line, unprivileged
from wse_core.host.limits import LIMITS, limit

ROOT = typer.main.get_command(app)


# --- outputs under a folder that cannot be entered ------------------------------------------
def _unprivileged() -> list[str]:
    """`wse_cli.testing.unprivileged`'s prefix; the test skips where none is at hand."""
    prefix = unprivileged()
    if prefix is None:
        pytest.skip("root, without setpriv to drop CAP_DAC_OVERRIDE")
    return prefix


def _closed_folder(tmp_path: Path) -> Path:
    z = tmp_path / "z"
    z.mkdir()
    z.chmod(0)
    return z


def _entered_line(option: str, path: Path, folder: Path) -> str:
    return (
        f"Error: {option} {path} cannot be written: {folder} cannot be entered (permission "
        "denied); give a path in a folder you can write"
    )


@pytest.mark.parametrize(
    ("args", "option", "under"),
    [(["wafer", "defects", "--png"], "--png", "a.png"),
     (["hpc", "cfd", "--grid", "8", "8", "1", "--out"], "--out", "sub/o")],
)  # fmt: skip
def test_an_output_under_a_closed_folder_is_refused_in_one_line(tmp_path, args, option, under):
    prefix = _unprivileged()
    z = _closed_folder(tmp_path)
    try:
        done = subprocess.run([*prefix, *WSE, *args, str(z / under)], capture_output=True,
                              text=True, env=clean_env(), timeout=120)  # fmt: skip
    finally:
        z.chmod(0o700)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [_entered_line(option, z / under, z)]
    assert list(z.iterdir()) == []  # nothing left behind


def test_a_closed_folder_faked_is_refused_in_one_line(tmp_path, monkeypatch):
    """The same, where the file system's answer is faked (any user, no setpriv): every stat
    under `z` is EACCES, as it is for a user other than root."""
    z = tmp_path / "z"
    z.mkdir()

    def denied(real):
        def stat(path, *args, **kw):
            if isinstance(path, str | os.PathLike) and os.fspath(path).startswith(f"{z}{os.sep}"):
                raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
            return real(path, *args, **kw)

        return stat

    monkeypatch.setattr(os, "stat", denied(os.stat))
    monkeypatch.setattr(os, "lstat", denied(os.lstat))
    for args, option in ((["wafer", "defects", "--png"], "--png"), (["view", "t.npz", "--out"],
                                                                   "--out")):  # fmt: skip
        line = refused_in_one_line(ROOT, [*args, z / "a" / "b.png"], "cannot be entered")
        assert line == _entered_line(option, z / "a" / "b.png", z)


# --- experiments under umask 777 -----------------------------------------------------------
# `wse experiments run hunt67-tiny`: one row, no figure (no matplotlib), in a second
_RUN_TINY = """
import sys
from wse_cli.commands import experiments
from wse_core.studies.experiment import ExperimentResult, PredictionRow

def tiny(*, quick, seed):
    row = PredictionRow("speed", 2.5, "Gcell/s", {"grid": 8})
    return ExperimentResult("hunt67-tiny", seed, {"quick": quick}, [{"n": 1}], [row])

experiments.EXPERIMENTS["hunt67-tiny"] = ("__main__:tiny", "one row")
sys.argv = ["wse", *sys.argv[1:]]
from wse_cli.entry import module_main
module_main()
"""


def test_experiments_under_umask_777_prints_its_table(tmp_path):
    prefix = _unprivileged()
    out = tmp_path / "out"
    args = ["experiments", "run", "hunt67-tiny", "--quick", "--out", str(out)]
    done = subprocess.run([*prefix, sys.executable, "-c", _RUN_TINY, *args],
                          capture_output=True, text=True, timeout=120,
                          env=clean_env(PYTHONDONTWRITEBYTECODE="1"),  # no .pyc of mode 000
                          preexec_fn=lambda: os.umask(0o777))  # fmt: skip
    folder = out / "hunt67-tiny"
    for p in [out, *out.rglob("*")] if out.exists() else []:  # root reads them: readable again
        p.chmod(0o700)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == ""
    written = (folder / "table.md").read_text()
    assert "| speed | prediction | 2.5 | Gcell/s | grid=8 |" in written
    assert (
        done.stdout == f"{written}\nwrote {folder}/results.json, table.md, table.csv, "
        "measurements.csv, figure.png\n"
    )


# --- wse launch: SIGINT to the launcher alone ----------------------------------------------
@pytest.mark.timeout(120)
def test_a_sigint_to_the_launcher_alone_says_the_ctrl_c_line():
    args = ["launch", "--nproc", "2", "--devices-per-proc", "1", "--", "hpc", "swe", "--n", "16",
            "--steps", "5000000"]  # fmt: skip
    launcher = subprocess.Popen(
        WSE + args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal's
    )
    try:
        while len(kids := psutil.Process(launcher.pid).children()) < 2:
            assert launcher.poll() is None, launcher.communicate()[1][-2000:]
            time.sleep(0.1)
        time.sleep(1.0)  # the launcher watches them
        launcher.send_signal(signal.SIGINT)  # not its children: `kill -INT PID`
        _, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 130, err[-2000:]
        assert err.strip().splitlines()[-1] == interrupts.LINE, err[-2000:]
        assert err.count(interrupts.LINE) == 1, err[-2000:]
        _, alive = psutil.wait_procs(kids, timeout=10)
        assert not alive
    finally:
        if launcher.poll() is None:
            for kid in psutil.Process(launcher.pid).children():
                kid.kill()
            launcher.kill()


# --- infer generate: mock_accepted_tokens --------------------------------------------------
def test_generate_refuses_the_mock_servers_accepted_tokens(tmp_path):
    from wse_inference.testing import save_tiny_model

    save_tiny_model(tmp_path / "target", n_layers=1)  # its own draft: it ran (exit 0) before
    draft = {"model": str(tmp_path / "target"), "num_speculative_tokens": 2}
    cfg = json.dumps({**draft, "mock_accepted_tokens": 0})
    args = ["infer", "generate", "--model-dir", tmp_path / "target", "--prompt-ids", "1,2,3",
            "--max-tokens", "4", "--speculative-config", cfg]  # fmt: skip
    line = refused_in_one_line(ROOT, args, "mock_accepted_tokens")
    assert line == (
        "Error: --speculative-config's mock_accepted_tokens applies to `wse infer serve "
        "--model-dir mock`; a real model's drafts are accepted by the target (leave the key "
        "out)"
    )


# --- the root help's cache and the limits ---------------------------------------------------
def _root_help(cache: Path, devices_limit: str) -> str:
    code = "import sys; sys.argv = ['wse', '--help']; from wse_cli.entry import main; main()"
    env = clean_env(WSE_CACHE_DIR=str(cache), WSE_LIMIT_DEVICES=devices_limit, COLUMNS="100")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return " ".join(done.stdout.split())


def test_the_root_helps_cache_follows_the_limits(tmp_path):
    assert "integer in [1, 16]; WSE_LIMIT_DEVICES" in _root_help(tmp_path, "16")
    assert "integer in [1, 32]; WSE_LIMIT_DEVICES" in _root_help(tmp_path, "32")  # was [1, 16]
    assert len(list((tmp_path / "help").iterdir())) == 2  # one text per limit
    assert "integer in [1, 16]; WSE_LIMIT_DEVICES" in _root_help(tmp_path, "16")  # a hit


# --- numeric options and their limits -------------------------------------------------------
@pytest.mark.parametrize("value", ["1e12", "1000000000000", "2147483648"])
def test_steps_past_int32_are_refused_naming_the_limit_in_force(value):
    top, env = limit("time_steps"), LIMITS["time_steps"].env
    line = refused_in_one_line(ROOT, ["hpc", "swe", "--n", "8", "--steps", value], "--steps")
    assert line == (
        f"Error: --steps is {int(float(value)):,}, over the limit of {top:,} steps (time steps "
        f"(or solver iterations) of one HPC run); set {env} to lift it"
    )


def test_num_csx_shows_and_enforces_the_systems_limit():
    top, env = limit("systems"), LIMITS["systems"].env
    code, out = invoke(ROOT, ["train", "--help"])
    assert code == 0, out
    assert f"--num-csx <int> Data-parallel wafer replicas. (an integer in [1, {top}]; {env} " \
        "lifts the top)" in " ".join(out.split())  # fmt: skip
    line = refused_in_one_line(ROOT, ["train", "tiny", "--num-csx", "1e12"], "--num-csx")
    assert line == (
        f"Error: --num-csx is 1,000,000,000,000, over the limit of {top:,} systems (wafer "
        f"systems of one plan or training run); set {env} to lift it"
    )
