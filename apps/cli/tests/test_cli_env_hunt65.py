"""Hunt 65, surface `env`: the process around every `wse` command. Broken before:
- Ctrl-C that landed in a finalizer (JAX's `_xla_gc_callback`, a `__del__`) was "ignored"
  by Python and the command ran on to its end with exit 0; Ctrl-C during a compile aborted
  or segfaulted the interpreter as it finalized under XLA's threads (rc 134/139); a command
  stopped by Ctrl-C said nothing;
- a closed stdout (`>&-`): `wse hpc md` failed on `None.isatty()` (progress.py), and a
  command whose report was lost exited 0 without a word;
- a deleted current folder: a relative output path was a FileNotFoundError traceback;
- `wse --help` on a closed pipe, a closed stdout or a full disk, and `wse --version` on a full
  disk: tracebacks;
- a stdout that cannot encode "—" or "µ" (PYTHONIOENCODING=ascii): a UnicodeEncodeError
  traceback after a partly printed report;
- COLUMNS below a table's width: tables without values (COLUMNS=8), numbers cut with "…"
  (COLUMNS=30), nothing at all (COLUMNS=0), exit 0;
- a HOME matplotlib cannot write: its two-line warning after every PNG.
The signal tests run `wse` as a child (the handler is the console script's, never an
in-process runner's); the rest run in this process through `wse_cli.process.guarded`.
"""

from __future__ import annotations

import errno
import gc
import io
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import typer
from wse_cli import entry, interrupts, process
from wse_cli.app import app
from wse_cli.testing import clean_env, invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)

# a command added to the app in a child, run as the console script runs every command;
# SIGINT raises KeyboardInterrupt there as a terminal's Ctrl-C does (a background job
# inherits it ignored)
CHILD = """import gc, os, signal, sys, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)
from wse_cli.app import app, main

@app.command("hunt65")
def hunt65(out: str, case: str) -> None:
    if case == "gc":  # JAX's `_xla_gc_callback`: Python run by the collector gets the Ctrl-C
        fired = []
        def callback(phase, info):
            if not fired:
                fired.append(1)
                os.kill(os.getpid(), signal.SIGINT)
        gc.callbacks.append(callback)
        gc.collect()
        junk = [[i] for i in range(200_000)]  # the run going on
    else:  # XLA's threads: still running when the Ctrl-C ends the process
        threading.Thread(target=time.sleep, args=(60,)).start()
        print("ready", flush=True)
        time.sleep(60)
    with open(out, "w") as f:
        f.write("ran to its end")

sys.argv = ["wse", "hunt65", *sys.argv[1:]]
main()
"""


def _child(tmp_path, case: str) -> subprocess.Popen:
    args = [sys.executable, "-c", CHILD, str(tmp_path / "out.txt"), case]
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env()
    )


def test_ctrl_c_in_a_gc_callback_stops_the_command_with_one_line(tmp_path):
    child = _child(tmp_path, "gc")
    out, err = child.communicate(timeout=60)
    assert (child.returncode, err, out) == (130, "interrupted (Ctrl-C)\n", ""), err[-2000:]
    assert not (tmp_path / "out.txt").exists()  # before: exit 0, the file written


def test_ctrl_c_ends_the_process_at_once_while_other_threads_run(tmp_path):
    child = _child(tmp_path, "threads")
    try:
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGINT)
        start = time.monotonic()
        out, err = child.communicate(timeout=30)  # before: the exit waited for the thread
    finally:
        child.kill()
    assert time.monotonic() - start < 10
    assert (child.returncode, err) == (130, "interrupted (Ctrl-C)\n"), err[-2000:]


class _Dies:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs on the next line, in here


@pytest.mark.parametrize("where", ["__del__", "gc callback"])
def test_a_ctrl_c_in_a_finalizer_is_raised_on_the_next_line_outside(where, monkeypatch):
    lost: list = []
    monkeypatch.setattr(sys, "unraisablehook", lost.append)
    fired: list = []

    def callback(phase: str, info: dict) -> None:
        if phase == "start" and not fired:
            fired.append(os.kill(os.getpid(), signal.SIGINT))

    tracer, ran_on = sys.gettrace(), []
    interrupts.install()
    if where == "gc callback":
        gc.callbacks.append(callback)
    try:
        with pytest.raises(KeyboardInterrupt):  # before: lost, "Exception ignored in ..."
            _Dies() if where == "__del__" else gc.collect()
            ran_on.append("the next line")  # raised before it runs
        assert (lost, ran_on) == ([], []) and interrupts.requested()
    finally:
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)
        interrupts.uninstall()
    assert sys.gettrace() is tracer
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_inside_a_command_says_one_line(monkeypatch):
    from rich.console import Console

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Console, "print", ctrl_c)
    assert invoke(ROOT, ["wafer", "info"]) == (130, "interrupted (Ctrl-C)\n")  # before: ""


# --- the streams -----------------------------------------------------------------------------
@pytest.fixture
def environ(monkeypatch, tmp_path):
    """`guarded` may set COLUMNS and MPLCONFIGDIR: put back after the test; the root help's
    cache in the test's folder."""
    monkeypatch.setenv("WSE_CACHE_DIR", str(tmp_path))
    for name in ("COLUMNS", "MPLCONFIGDIR"):
        # set, then removed: monkeypatch records an absent variable only so, and puts back
        # its absence (a leaked MPLCONFIGDIR, whose folder `guarded` removes, made later
        # tests' children rebuild matplotlib's font cache)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def _guarded(args: list[str]) -> int:
    with pytest.raises(SystemExit) as done:
        process.guarded(lambda: app(args, prog_name="wse"))
    return done.value.code


def test_a_closed_stdout_loses_the_report_with_one_line_and_keeps_the_files(
    environ, monkeypatch, capsys, tmp_path
):
    monkeypatch.setattr(sys, "stdout", None)  # Python's stdout where fd 1 is closed
    assert _guarded(["wafer", "info", "--json"]) == 1  # before: 0
    assert capsys.readouterr().err == "Error: cannot write the report: stdout is closed\n"
    png = tmp_path / "d.png"
    monkeypatch.setattr(sys, "stdout", None)
    assert _guarded(["wafer", "defects", "--preset", "tiny", "--png", str(png)]) == 1
    assert capsys.readouterr().err == "Error: cannot write the report: stdout is closed\n"
    assert png.read_bytes().startswith(b"\x89PNG")  # the run's file is whole


def test_the_progress_bar_of_a_closed_stdout_is_absent(monkeypatch):
    from wse_core.host.progress import progress

    monkeypatch.setattr(sys, "stdout", None)
    with progress(10, "steps") as done:  # before: AttributeError: 'NoneType' ... 'isatty'
        done(5)


def test_a_deleted_current_folder_is_one_line_for_a_relative_output(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    commands = {
        "--png": ["wafer", "defects", "--preset", "tiny", "--png", "x.png"],
        "--out": ["hpc", "cfd", "--grid", "8", "8", "1", "--out", "o"],
    }
    for name, args in commands.items():
        line = refused_in_one_line(ROOT, args, "current folder")
        assert line == (
            "Error: the current folder no longer exists (deleted); cd to a folder that exists "
            f"or give {name} an absolute path"
        )
    assert list(tmp_path.iterdir()) == []


class _Failing(io.TextIOBase):
    """A stdout whose writes fail with `errno`: a closed pipe, a full disk."""

    def __init__(self, code: int) -> None:
        self.code = code

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(self.code, os.strerror(self.code))


@pytest.mark.parametrize("cached", [False, True], ids=["rendered", "from its cache"])
@pytest.mark.parametrize(
    ("code", "said"),
    [(errno.EPIPE, ""), (errno.ENOSPC, "Error: cannot write: No space left on device\n")],
    ids=["closed pipe", "full disk"],
)
def test_the_root_help_on_a_broken_stdout(environ, monkeypatch, capsys, code, said, cached):
    monkeypatch.setattr(sys, "argv", ["wse", "--help"])
    if cached:
        with pytest.raises(SystemExit):
            entry.main()  # renders and stores it
        capsys.readouterr()
    monkeypatch.setattr(sys, "stdout", _Failing(code))
    with pytest.raises(SystemExit) as done:
        entry.main()
    assert (done.value.code, capsys.readouterr().err) == (1, said)  # before: tracebacks


def test_the_version_on_a_full_disk_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _Failing(errno.ENOSPC))
    with pytest.raises(SystemExit) as done:
        app(["--version"], prog_name="wse")
    assert done.value.code == 1
    assert capsys.readouterr().err == "Error: cannot write: No space left on device\n"


def test_an_ascii_stdout_gets_question_marks_not_a_traceback(environ, monkeypatch):
    from rich.console import Console

    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="ascii"))
    monkeypatch.setattr(sys, "argv", ["wse", "--help"])
    with pytest.raises(SystemExit) as done:
        entry.main()  # the root help's "—"
    assert done.value.code == 0
    process.guarded(lambda: Console().print("11.155 µs per step"))  # `hpc cfd`'s line, by rich
    sys.stdout.flush()
    text = raw.getvalue().decode("ascii")
    assert "on JAX ? emulate, predict" in text and "11.155 ?s per step" in text


@pytest.mark.parametrize("columns", ["0", "5", "8", "30"])
def test_a_narrow_console_neither_drops_nor_cuts_numbers(environ, capsys, columns):
    args = ["plan", "train", "-m", "gpt2-124m", "--tokens", "1e9"]
    os.environ["COLUMNS"] = "200"
    assert _guarded(args) == 0
    wide = capsys.readouterr().out
    os.environ["COLUMNS"] = columns
    assert _guarded(args) == 0
    narrow = capsys.readouterr().out
    assert "…" not in narrow  # before: "$16,0…", "1.516…", or no values at all
    numbers = re.findall(r"\d[\d,.]*(?:e[+-]\d+)?", wide)  # the plan's, 200 columns wide
    assert len(numbers) > 20 and [n for n in numbers if n not in narrow] == []


def test_matplotlib_gets_a_private_folder_where_it_cannot_write_its_own(
    environ, tmp_path, monkeypatch
):
    (tmp_path / "file").write_text("")  # no folder can be made under a file, even by root
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "file" / "config"))
    probe = [sys.executable, "-c", "import matplotlib; matplotlib.get_configdir()"]
    before = subprocess.run(probe, env=os.environ, capture_output=True, text=True, timeout=60)
    assert "mkdir -p failed" in before.stderr  # the oracle: matplotlib's own verdict

    made: list[str] = []
    process.guarded(lambda: made.append(os.environ["MPLCONFIGDIR"]))
    after = subprocess.run(probe, env=os.environ, capture_output=True, text=True, timeout=60)
    assert (after.returncode, after.stderr) == (0, "")
    assert os.path.isdir(made[0]) and os.access(made[0], os.W_OK)
    process._remove_private()  # as at the process's exit
    assert not os.path.exists(made[0])
