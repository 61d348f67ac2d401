"""Hostile inputs fixed by hunt 62 (`wse launch`, `wse demo`, `wse experiments run`). Before
the fixes: a SIGTERM to `wse launch` (SLURM's, `timeout`'s, `kill`'s) ended the launcher alone,
and its children ran on under PID 1, deaf to SIGTERM (JAX's preemption service catches it);
`launch --nproc 2 -- hpc cfd` / `hpc tlrmvm run` crashed in every child with a traceback and
`-- demo` ran two demos into one folder; a file where `experiments run` writes its folder was
a FileExistsError after the run, a file `train` in the demo's --out a NotADirectoryError at
part 6, and a user's files in --out named like the demo's were overwritten."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest
import typer
from wse_cli.app import app
from wse_cli.commands import demo as demo_cmd
from wse_cli.testing import WSE, clean_env, invoke, refused_in_one_line
from wse_trainer.config import ConfigError
from wse_trainer.demo import MARKER, fresh_model_dir

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)
LAUNCH = ["launch", "--nproc", "2", "--devices-per-proc", "1", "--"]
# the commands that run across processes, read off their options by hand
SPANNING = "hpc md, hpc stencil, hpc swe, train, wafer check"


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (["hpc", "cfd", "--grid", "16", "8", "1", "--steps", "100"], "hpc cfd"),
        (["--devices", "2", "hpc", "tlrmvm", "run", "--operator", "op.npz"], "hpc tlrmvm run"),
        (["demo", "--quick", "--out", "d"], "demo"),
        (["experiments", "run", "wafer-yield", "--quick"], "experiments run"),
        (["hpc", "md", "potential", "x.eam.alloy"], "hpc md potential"),
    ],
    ids=["cfd", "tlrmvm run", "demo", "experiments", "md potential"],
)
def test_a_command_that_does_not_span_processes_is_not_launched(tmp_path, monkeypatch, command,
                                                                 name):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    line = refused_in_one_line(ROOT, [*LAUNCH, *command], f"wse {name} does not run across")
    assert line.endswith(f"launch one that does: {SPANNING}"), line
    assert os.listdir(tmp_path) == []


def test_one_process_of_any_command_and_a_typo_are_left_to_the_child(tmp_path, monkeypatch):
    """--nproc 1 collides with nothing; a word that names no command is the child's to refuse
    (click's "No such command", with its suggestion)."""
    monkeypatch.chdir(tmp_path)
    code, out = invoke(ROOT, ["launch", "--nproc", "1", "--", "wafer", "info", "--preset", "nope"])
    assert code == 2 and "unknown wafer preset 'nope'" in out, out
    code, out = invoke(ROOT, [*LAUNCH, "hpc", "stencl"])
    # hunt 68: refused by the launcher before any child starts
    assert code == 2 and "'hpc stencl' is none (wse --help lists them)" in out, out


def _started(launcher: subprocess.Popen, timeout_s: float = 90) -> list[psutil.Process]:
    """The launcher's two children once both have joined the run (each holds a connection to
    the coordinator's port: JAX's distributed client, and its SIGTERM handler, are up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert launcher.poll() is None, launcher.communicate()[1][-2000:]
        kids = psutil.Process(launcher.pid).children()
        if len(kids) == 2:
            port = int(kids[0].environ()["WSE_COORDINATOR"].rpartition(":")[2])
            joined = [
                any(c.raddr and c.raddr.port == port for c in k.net_connections("tcp"))
                for k in kids
            ]
            if all(joined):
                time.sleep(2)  # past the join: the preemption service would be up by now
                return kids
        time.sleep(0.2)
    raise AssertionError("the children did not join the run")


def _long_run() -> subprocess.Popen:
    args = [*LAUNCH, "hpc", "swe", "--n", "16", "--steps", "5000000"]
    return subprocess.Popen(WSE + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=clean_env())  # fmt: skip


def _kill(launcher: subprocess.Popen) -> None:
    """A failed test leaves no process behind (the children first: they would outlive it)."""
    if launcher.poll() is None:
        for kid in psutil.Process(launcher.pid).children():
            kid.kill()
        launcher.kill()


def _gone(kids: list[psutil.Process]) -> bool:
    return all(not k.is_running() or k.status() == psutil.STATUS_ZOMBIE for k in kids)


@pytest.mark.timeout(180)
def test_a_sigterm_to_the_launcher_stops_its_children():
    launcher = _long_run()
    try:
        kids = _started(launcher)
        sent = time.monotonic()
        launcher.send_signal(signal.SIGTERM)
        _, err = launcher.communicate(timeout=60)
        # the children stop on the launcher's SIGTERM at once, not on its SIGKILL at 10 s
        assert time.monotonic() - sent < 8, err[-2000:]
        assert launcher.returncode == 128 + signal.SIGTERM, err[-2000:]
        assert err.strip().splitlines()[-1] == "wse launch: SIGTERM; stopped the 2 process(es)"
        psutil.wait_procs(kids, timeout=5)
        assert _gone(kids)
    finally:
        _kill(launcher)


@pytest.mark.timeout(180)
def test_a_child_of_a_launch_stops_on_sigterm():
    """A child that joined the run stops on SIGTERM, as torchrun's workers do (it ignored it:
    XLA's preemption notifier caught it); the launcher then stops the other."""
    launcher = _long_run()
    try:
        kids = _started(launcher)
        victim = next(k for k in kids if k.environ()["WSE_PROCESS_ID"] == "1")
        victim.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs([victim], timeout=8)  # the launcher reaps it
        assert not alive, "the child ignored SIGTERM"
        _, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 1
        killed = "process 1 was killed by SIGTERM (signal 15); stopped the other 1"
        assert killed in err, err[-2000:]
        psutil.wait_procs(kids, timeout=5)
        assert _gone(kids)
    finally:
        _kill(launcher)


# --- output-folder collisions ----------------------------------------------------------------
def test_a_file_where_an_experiment_writes_its_folder_is_refused_before_the_run(tmp_path):
    (tmp_path / "wafer-yield").write_text("x\n")
    for extra in ([], ["--sweep", "link_bytes_per_cycle=1,2"]):
        began = time.monotonic()
        line = refused_in_one_line(
            ROOT, ["experiments", "run", "wafer-yield", "--quick", "--out", tmp_path, *extra],
            f"--out {tmp_path} holds 'wafer-yield', which is not a folder",
        )  # fmt: skip
        assert "remove or rename it, or give another --out" in line
        assert time.monotonic() - began < 10  # before the experiment, not after
    assert os.listdir(tmp_path) == ["wafer-yield"]
    assert (tmp_path / "wafer-yield").read_text() == "x\n"


def _fake_parts(monkeypatch, written: list[str]) -> None:
    """The demo with one part that writes `defects.png` and `md_cu.xyz`, as the real parts do."""

    def part(console, *, out_dir, quick):  # noqa: ANN001
        for name in ("defects.png", "md_cu.xyz"):
            (out_dir / name).write_text("demo\n")
        written.append(str(out_dir))

    monkeypatch.setattr(demo_cmd, "fake_part", part, raising=False)
    monkeypatch.setattr(demo_cmd, "DEMO_PARTS", [("fake", "wse_cli.commands.demo:fake_part")])


@pytest.mark.parametrize(
    "entries",
    [{"md_cu.xyz": "mine\n", "defects.png": "precious\n"}, {"train": "x\n"}, {"notes": None}],
    ids=["files named like the demo's", "a file train", "a folder of the user's"],
)
def test_a_demo_out_that_is_not_a_demos_is_refused_before_the_work(tmp_path, monkeypatch,
                                                                   entries):  # fmt: skip
    _fake_parts(monkeypatch, written := [])
    out = tmp_path / "d"
    out.mkdir()
    for name, text in entries.items():
        (out / name).write_text(text) if text is not None else (out / name).mkdir()
    first = sorted(entries)[0]
    line = refused_in_one_line(ROOT, ["demo", "--quick", "--out", out],
                               f"--out {out} holds '{first}'")  # fmt: skip
    assert "not written by `wse demo`" in line and "give a new or empty folder" in line
    assert written == []  # no part ran
    assert sorted(os.listdir(out)) == sorted(entries)
    for name, text in entries.items():
        assert text is None or (out / name).read_text() == text


def test_a_demo_reruns_into_its_own_folder(tmp_path, monkeypatch):
    _fake_parts(monkeypatch, written := [])
    out = tmp_path / "d"
    for _ in range(2):  # new, then a demo's own
        code, output = invoke(ROOT, ["demo", "--quick", "--out", out])
        assert code == 0, output
    assert len(written) == 2 and (out / MARKER).is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert invoke(ROOT, ["demo", "--quick", "--out", empty])[0] == 0
    older = tmp_path / "older"  # a demo's from before the mark: its marked model_dir
    (older / "train" / "model_dir").mkdir(parents=True)
    (older / "train" / "model_dir" / MARKER).write_text("demo\n")
    (older / "defects.png").write_text("demo\n")
    assert invoke(ROOT, ["demo", "--quick", "--out", older])[0] == 0
    assert (older / MARKER).is_file() and (older / "md_cu.xyz").read_text() == "demo\n"


def test_fresh_model_dir_refuses_a_file_train(tmp_path):
    (tmp_path / "train").write_text("x\n")
    with pytest.raises(ConfigError, match="train is not a folder"):
        fresh_model_dir(tmp_path)
    assert (tmp_path / "train").read_text() == "x\n"
