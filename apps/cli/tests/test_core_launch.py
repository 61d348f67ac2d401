"""Multi-process runs on loopback: `wse launch` gives the same results as one process, and a
process that dies stops the others with a clear error."""

import json
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
from wse_cli.testing import WSE, clean_env


def _json_tail(text: str) -> dict:
    start = text.index("{")
    return json.loads(text[start:])


@pytest.mark.timeout(240)
def test_two_processes_match_one_process():
    args = ["wafer", "check", "--grid", "13", "21", "--json"]
    one = subprocess.run(
        WSE + args, capture_output=True, text=True, timeout=120, env=clean_env(WSE_DEVICES="8")
    )
    assert one.returncode == 0, one.stderr
    two = subprocess.run(
        WSE + ["launch", "--nproc", "2", "--devices-per-proc", "4", "--"] + args,
        capture_output=True,
        text=True,
        timeout=180,
        env=clean_env(),
    )
    assert two.returncode == 0, two.stderr[-2000:]
    a, b = _json_tail(one.stdout), _json_tail(two.stdout)
    assert (a["processes"], b["processes"]) == (1, 2)
    assert a["devices"] == b["devices"] == 8 and a["mesh"] == b["mesh"]
    assert a["ok"] and b["ok"]
    # Data movement is bit-identical; sums may differ in the last bits (reduction order).
    exact = [k for k in a["sha256"] if not k.startswith("allreduce_sum")]
    assert exact and all(a["sha256"][k] == b["sha256"][k] for k in exact)
    assert abs(a["max_abs_error"]["allreduce_sum"] - b["max_abs_error"]["allreduce_sum"]) < 1e-4
    assert two.stdout.count('"sha256"') == 1  # only process 0 prints


@pytest.mark.timeout(240)
def test_a_dead_process_stops_the_run_with_a_clear_error():
    cmd = WSE + [
        "launch",
        "--nproc",
        "2",
        "--devices-per-proc",
        "2",
        "--",
        "wafer",
        "check",
        "--repeat",
        "1000000",
    ]
    launcher = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env()
    )
    try:
        deadline = time.monotonic() + 90
        children = []
        while time.monotonic() < deadline and not _joined(children):
            children = psutil.Process(launcher.pid).children()
            time.sleep(0.2)
        assert len(children) == 2 and _joined(children)
        time.sleep(2)  # past the join (was a blind 8 s): both at work
        assert launcher.poll() is None, launcher.communicate()[1][-2000:]  # none died yet
        victim = next(c for c in children if c.environ().get("WSE_PROCESS_ID") == "1")
        killed_at = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        _, err = launcher.communicate(timeout=60)
        assert time.monotonic() - killed_at < 30  # bounded: the launcher's grace period
        assert launcher.returncode == 1
        killed = "process 1 was killed by SIGKILL (signal 9; out of memory?); stopped the other 1"
        assert killed in err
        assert all(not c.is_running() or c.status() == psutil.STATUS_ZOMBIE for c in children)
    finally:
        if launcher.poll() is None:
            launcher.kill()


def _joined(kids: list[psutil.Process]) -> bool:
    """Both children hold a connection to the coordinator's port: both joined the run."""
    try:
        if len(kids) != 2:
            return False
        port = int(kids[0].environ()["WSE_COORDINATOR"].rpartition(":")[2])
        return all(
            any(c.raddr and c.raddr.port == port for c in k.net_connections("tcp")) for k in kids
        )
    except (psutil.Error, KeyError):  # a child not yet set up (or gone: asserted after)
        return False


def test_bad_process_flags_are_exit_2():
    r = subprocess.run(
        WSE
        + [
            "--num_processes",
            "2",
            "--process_id",
            "5",
            "--coordinator",
            "127.0.0.1:1",
            "wafer",
            "check",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert r.returncode == 2
    assert r.stderr.strip() == "Error: --process-id must be in 0..1, got 5"
    r = subprocess.run(
        WSE
        + [
            "--num_processes",
            "2",
            "--process_id",
            "0",
            "--coordinator",
            "nohost",
            "wafer",
            "check",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert r.returncode == 2 and "HOST:PORT" in r.stderr


@pytest.mark.timeout(240)
def test_a_childs_error_is_printed_once_within_seconds(tmp_path):
    """Both children refuse the same bad input: its one line is printed once, by the launcher
    naming the process, a few seconds at most after the first child exited (the launcher
    looks every 0.2 s and waits up to 2 s for the child's last lines)."""
    missing = tmp_path / "missing.yaml"
    cmd = WSE + ["launch", "--nproc", "2", "--devices-per-proc", "1", "--", "wafer", "check"]
    launcher = subprocess.Popen(
        [*cmd, "--spec", str(missing)], stderr=subprocess.PIPE, text=True, env=clean_env()
    )
    lines: list[tuple[float, str]] = []

    def read():
        for line in launcher.stderr:
            lines.append((time.monotonic(), line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    first_exit, kids = None, {}
    try:
        while launcher.poll() is None:
            try:
                kids.update((c.pid, c) for c in psutil.Process(launcher.pid).children())
            except psutil.NoSuchProcess:
                break
            if first_exit is None and any(_exited(c) for c in kids.values()):
                first_exit = time.monotonic()
            time.sleep(0.05)
        reader.join(timeout=30)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    text = "".join(line for _, line in lines)
    assert launcher.returncode == 2, text
    assert len(lines) == 1 and text.count("cannot read spec file") == 1, text
    assert text.startswith("Error: process ") and "stopped the other 1" in text, text
    assert first_exit is not None
    assert lines[0][0] - first_exit < 5.0, f"{lines[0][0] - first_exit:.1f} s after a child exit"


def _exited(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


SITE_PROBE = """import atexit, os, sys
def _said():
    with open(os.path.join(os.environ["JAX_PROBE_DIR"], f"{os.getpid()}.jax"), "w") as f:
        f.write(str("jax" in sys.modules))
atexit.register(_said)
"""


@pytest.mark.timeout(120)
def test_a_childs_error_in_its_body_comes_before_jax_and_the_join(tmp_path):
    """`launch --nproc 2 -- wafer check --preset nope` (bench_hostile, with `wafer info`, which
    launch now refuses itself: 5.8 s, each child imported JAX and joined the run before its
    body refused the preset): one line, exit 2, and no process of the launch imported JAX
    (each says so at exit, from a sitecustomize)."""
    import os

    site, probes = tmp_path / "site", tmp_path / "probes"
    site.mkdir()
    probes.mkdir()
    (site / "sitecustomize.py").write_text(SITE_PROBE)
    env = clean_env(JAX_PROBE_DIR=str(probes))
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    cmd = WSE + ["launch", "--nproc", "2", "--devices-per-proc", "1", "--", "wafer", "check"]
    r = subprocess.run([*cmd, "--preset", "nope"], capture_output=True, text=True, timeout=100,
                       env=env)  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("Error: process ") and "unknown wafer preset 'nope'" in lines[0]
    said = [p.read_text() for p in probes.iterdir()]
    assert len(said) >= 2 and set(said) == {"False"}, said  # the launcher and a child at least


@pytest.mark.parametrize(("process_id", "primary"), [("0", True), ("1", False)])
def test_a_deferred_join_knows_its_process_before_jax(process_id, primary):
    """Before the join (no JAX yet) `is_primary` is the process id asked for: a command that
    never imports JAX writes its files from process 0 only; nothing connects to the
    coordinator (none listens at port 9) until JAX is imported."""
    code = (
        "import sys\nfrom wse_cli import errors, multiprocess\n"
        "multiprocess.join_later(None, None, None)\n"
        "while errors._BEFORE_BODY:\n    errors._BEFORE_BODY.popitem()[1]()\n"
        "print(multiprocess.is_primary(), 'jax' in sys.modules)\n"
    )
    env = clean_env(WSE_NUM_PROCESSES="2", WSE_PROCESS_ID=process_id,
                    WSE_COORDINATOR="127.0.0.1:9")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=env, check=True)  # fmt: skip
    assert r.stdout.split() == [str(primary), "False"], r.stdout + r.stderr
