"""The `wse` process under faults of its surroundings, hunt 69. Before the fixes:
- a report cut short on stdout (a full disk or quota, `ulimit -f` under `--json > run.json`)
  exited 0 with nothing said (Python's unbuffered stdout drops what a short write leaves;
  its buffered one said `cannot write: File too large`, then "Exception ignored" at exit);
- SIGTERM and SIGHUP stopped every command but `wse hpc md` silently, skipping its `finally`
  blocks: `experiments run --out NEW` left its lock in the folder it had made;
- a Ctrl-C while `guarded` prepared the streams (before it installed its handler) was a
  KeyboardInterrupt traceback;
- `wse infer bench` against a server that went away mid-run saved a summary of nothing over
  a good earlier one, exit 0 ("0 completed, 40 failed", "saved b.json").
"""

from __future__ import annotations

import http.server
import json
import signal
import subprocess
import sys
import threading

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import clean_env, invoke

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)

# a command added to the app in a child, run as the console script runs every command (SIGINT
# and SIGHUP as a terminal's: a background job inherits SIGINT ignored, nohup SIGHUP)
CHILD = """import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGHUP, signal.SIG_DFL)
{setup}
import typer
from wse_cli.app import app, main

@app.command("hunt69")
def hunt69(case: str, arg: str = "") -> None:
    if case == "report":
        typer.echo("x" * int(arg))
    elif case == "lock":  # `wse experiments run --out NEW` while it runs
        from pathlib import Path
        from wse_cli.commands.experiments import _writing
        with _writing(Path(arg), "wafer-yield"):
            print("ready", flush=True)
            time.sleep(60)

sys.argv = ["wse", "hunt69", *sys.argv[1:]]
main()
"""


def _child(*args: str, setup: str = "", stdout=subprocess.PIPE, **env: str) -> subprocess.Popen:
    code = CHILD.format(setup=setup)
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=stdout,
                            stderr=subprocess.PIPE, text=True, env=clean_env(**env))  # fmt: skip


# -- hole 1: a report cut short on stdout ------------------------------------------------------
@pytest.mark.parametrize("unbuffered", ["1", ""], ids=["PYTHONUNBUFFERED", "buffered"])
def test_a_report_cut_short_on_stdout_is_one_line_and_exit_1(tmp_path, unbuffered):
    limit = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))"
    with open(tmp_path / "o.json", "w") as out:
        child = _child("report", "--arg", "3000", setup=limit, stdout=out,
                       PYTHONUNBUFFERED=unbuffered)  # fmt: skip
        _, err = child.communicate(timeout=60)
    # before: exit 0 and nothing said (unbuffered); `cannot write: File too large` and
    # "Exception ignored ... OSError" at exit (buffered)
    cut = "File too large (1,024 of 3,001 bytes written)"
    assert (child.returncode, err) == (1, f"Error: cannot write the report to stdout: {cut}\n")
    assert (tmp_path / "o.json").stat().st_size == 1024


def test_a_report_that_fits_is_written_whole(tmp_path):
    with open(tmp_path / "o.json", "w") as out:
        child = _child("report", "--arg", "100000", stdout=out)
        _, err = child.communicate(timeout=60)
    assert (child.returncode, err) == (0, "")
    assert (tmp_path / "o.json").read_text() == "x" * 100000 + "\n"


# -- holes 5 and 6: SIGTERM and SIGHUP stop a command as Ctrl-C does -----------------------------
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_says_one_line_and_removes_what_the_run_made(tmp_path, signum):
    out = tmp_path / "ex2"  # a new --out: the run makes it, and its lock file in it
    child = _child("lock", "--arg", str(out))
    try:
        assert child.stdout.readline() == "ready\n"
        assert (out / ".wse-experiments-wafer-yield.lock").is_file()
        child.send_signal(signum)
        _, err = child.communicate(timeout=30)
    finally:
        child.kill()
    # before: killed with nothing said, `ex2/.wse-experiments-wafer-yield.lock` left behind
    assert err == f"stopped by {signal.Signals(signum).name}\n"
    assert child.returncode == -signum  # ended by the signal: a shell says 128 + it
    assert not out.exists()


def test_a_stop_signal_under_nohup_stays_ignored(tmp_path):
    child = _child("lock", "--arg", str(tmp_path / "ex"),
                   setup="signal.signal(signal.SIGHUP, signal.SIG_IGN)")  # fmt: skip
    try:
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGHUP)  # nohup's: the run goes on
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert (child.returncode, err) == (130, "interrupted (Ctrl-C)\n")


# -- hole 12: a Ctrl-C as the process starts ----------------------------------------------------
def test_a_ctrl_c_while_the_streams_are_prepared_is_one_line():
    early = (
        "import wse_cli.process as P\nprepare = P._prepare\n"
        "P._prepare = lambda: (os.kill(os.getpid(), signal.SIGINT), prepare())[1]"
    )
    child = _child("report", "--arg", "1", setup=early)
    out, err = child.communicate(timeout=60)
    # before: a KeyboardInterrupt traceback from `_prepare`, exit 1
    assert (child.returncode, err, out) == (130, "interrupted (Ctrl-C)\n", "")


# -- hole 8: a server that fails every request mid-bench ---------------------------------------
class _GoingAway(http.server.BaseHTTPRequestHandler):
    """A server that lists a model, drops the first two completions unanswered and then goes
    away (the hunt's `kill -9` of the server mid-bench)."""

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.close_connection = True  # no reply: "Server disconnected without ..."
        self.server.posts += 1
        if self.server.posts == 2:
            threading.Thread(target=_gone, args=(self.server,)).start()

    def log_message(self, *args) -> None:
        pass


def _gone(server: http.server.HTTPServer) -> None:
    server.shutdown()
    server.server_close()  # its port refuses connections from now on


def test_bench_against_a_server_gone_mid_run_keeps_the_earlier_results(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _GoingAway)
    server.posts = 0
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    out = tmp_path / "b.json"
    out.write_text('{"completed": 8, "failed": 0}')  # a good earlier run
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        args = ["--url", url, "-n", "4", "-c", "1", "--max-tokens", "4", "--timeout-s", "20"]
        code, output = invoke(ROOT, ["infer", "bench", *args, "--out", out])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    # before: exit 0, "0 completed, 4 failed" and "saved b.json", a summary of nothing
    lines = output.strip().splitlines()
    assert code == 1 and len(lines) == 1, output
    assert lines[0].startswith(f"Error: {url} failed every request (4 of 4: RemoteProtocolError: ")
    assert lines[0].endswith(f"then ConnectError: All connection attempts failed); nothing "
                             f"saved, --out {out} is as it was")  # fmt: skip
    assert out.read_text() == '{"completed": 8, "failed": 0}'
