"""Hunt 71: multi-process runs (`wse launch`, --num-processes/--process-id/--coordinator, WSE_*,
SLURM_*, OMPI_*). Broken before:
- under srun (or --num-processes / WSE_*), `hpc cfd` joined the run and crashed in every
  process with an 80-line JAX traceback (hunt 62's refusal held inside `wse launch` only);
- `--num-processes 2147483647` took 3 GB in process 0 (and 2**31 up was a 73-line TypeError);
- a 5,000-digit port, SLURM_NTASKS or OMPI_COMM_WORLD_SIZE was a 55-line ValueError, even for
  `wafer info`; SLURM_JOB_ID=abc and SLURM_PROCID=abc/-1/5 of 2 were 71-77 line tracebacks;
- an empty WSE_COORDINATOR refused every command, and WSE_PROCESS_ID=1 alone was refused in
  the words of flags never given;
- a command's own --process-id 9 --coordinator junk after the root's flags (or a stale
  WSE_PROCESS_ID) were silently ignored;
- two `wse launch --port P` both passed the port check, and one died with ~50 absl lines;
- `kill -9` of the launcher left its children running under PID 1;
- a SIGTERM to `wse launch -- hpc md --out` dropped process 0's line on what became of --out;
- `wse launch` inside an srun task started its own run in every task;
- `wse launch --nproc 2 --typo --` and torchrun's `--nproc-per-node 4` went to the children.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import typer
from wse_cli.app import app
from wse_cli.commands.launch import _hold_port, _Relay, _shut_down, _watch
from wse_cli.interrupts import GRACE_S
from wse_cli.testing import WSE, clean_env, invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)
SPANNING = "hpc md, hpc stencil, hpc swe, train, wafer check"
SRUN = {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "localhost",
        "SLURM_PROCID": "1", "SLURM_LOCALID": "1"}  # fmt: skip
MPIRUN = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0",
          "OMPI_COMM_WORLD_LOCAL_RANK": "0",
          "OMPI_MCA_orte_hnp_uri": "1.0;tcp://10.0.0.1:1"}  # fmt: skip
FLAGS = ["--num-processes", "2", "--process-id", "1", "--coordinator", "127.0.0.1:23491"]
WSE_ENV = {"WSE_NUM_PROCESSES": "2", "WSE_PROCESS_ID": "1", "WSE_COORDINATOR": "127.0.0.1:9"}
CFD = ["hpc", "cfd", "--grid", "8", "8", "1", "--steps", "4"]
SWE = ["hpc", "swe", "--n", "8", "--steps", "2", "--preset", "tiny"]
DIGITS = "1" * 5000
NOT_A_TASK = "is not a task of this step (SLURM_NTASKS=2: 0..1)"


RUN_VARIABLES = ("WSE_NUM_PROCESSES", "WSE_PROCESS_ID", "WSE_COORDINATOR")


@pytest.fixture(autouse=True)
def _no_launch_env(monkeypatch):
    """No run asked for by the environment; the suite's devices kept (WSE_DEVICES), and what a
    command sets for JAX restored after (it set JAX_NUM_CPU_DEVICES 2 for later tests)."""
    for key in [k for k in os.environ if k.startswith(("SLURM_", "OMPI_")) or k in RUN_VARIABLES]:
        monkeypatch.delenv(key)
    for key in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS"):
        if key in os.environ:
            monkeypatch.setenv(key, os.environ[key])  # restored at the end
        else:
            monkeypatch.delenv(key, raising=False)


@pytest.mark.parametrize(
    ("args", "env", "where", "alone"),
    [
        (CFD, SRUN, "SLURM task 1 of 2", "run it as one task (srun -n 1)"),
        ([*FLAGS, *CFD], {}, "process 1 of 2, from --num-processes",
         "run it as one process (without --num-processes, --process-id, --coordinator)"),
        (CFD, WSE_ENV, "process 1 of 2, from WSE_NUM_PROCESSES, WSE_PROCESS_ID, WSE_COORDINATOR",
         "run it as one process (unset WSE_NUM_PROCESSES, WSE_PROCESS_ID, WSE_COORDINATOR)"),
    ],
    ids=["srun", "flags", "wse-variables"],
)  # fmt: skip
def test_a_command_that_cannot_span_processes_is_refused_in_any_run(args, env, where, alone):
    line = refused_in_one_line(ROOT, args, "", env)
    assert line == (f"Error: wse hpc cfd does not run across processes (this is {where}); "
                    f"{alone}, or use one of: {SPANNING}")  # fmt: skip
    # the list is `wse launch`'s own
    refused_in_one_line(ROOT, [*FLAGS, "wafer", "info"], f"or use one of: {SPANNING}")


def test_one_process_asked_for_runs_any_command():
    code, out = invoke(ROOT, ["--num-processes", "1", "--process-id", "0", "wafer", "info"])
    assert code == 0, out


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (["--num-processes", "2147483647", "--process-id", "0", "--coordinator", "127.0.0.1:5",
          "wafer", "check"], {}, "--num-processes is 2,147,483,647"),
        (["--num-processes", "4294967298", "--process-id", "0", "--coordinator", "127.0.0.1:5",
          "wafer", "check"], {}, "--num-processes is 4,294,967,298"),
        (["wafer", "check"], {**WSE_ENV, "WSE_NUM_PROCESSES": "100000000"},
         "WSE_NUM_PROCESSES is 100,000,000"),
        (SWE, {**SRUN, "SLURM_NTASKS": "3000000000"}, "SLURM_NTASKS is 3,000,000,000"),
        (SWE, {**MPIRUN, "OMPI_COMM_WORLD_SIZE": "65537"}, "OMPI_COMM_WORLD_SIZE is 65,537"),
    ],
    ids=["2**31-1", "2**32+2", "wse-variable", "slurm", "ompi"],
)  # fmt: skip
def test_a_process_count_past_the_launch_limit_is_refused(args, env, line):
    from wse_core.host.limits import limit

    got = refused_in_one_line(ROOT, args, "", env)
    assert got == (f"Error: {line}, over the limit of {limit('run_processes'):,} processes of "
                   "one run; set WSE_LIMIT_RUN_PROCESSES to lift it")  # fmt: skip


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (["--coordinator", f"127.0.0.1:{DIGITS}", "--num-processes", "2", "--process-id", "0",
          "wafer", "check"], {}, "--coordinator must be HOST:PORT"),
        (["wafer", "check"], {**WSE_ENV, "WSE_COORDINATOR": f"127.0.0.1:{DIGITS}"},
         "WSE_COORDINATOR must be HOST:PORT"),
        (["wafer", "info"], {**SRUN, "SLURM_NTASKS": DIGITS}, "SLURM_NTASKS must be a task count"),
        (["wafer", "info"], {**MPIRUN, "OMPI_COMM_WORLD_SIZE": DIGITS},
         "OMPI_COMM_WORLD_SIZE must be a task count"),
    ],
    ids=["port", "port-variable", "slurm", "ompi"],
)  # fmt: skip
def test_integers_past_4300_digits_are_one_line(args, env, line):
    got = refused_in_one_line(ROOT, args, line, env)
    assert "(5,0" in got and "characters)" in got, got


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"SLURM_JOB_ID": "abc"}, "SLURM_JOB_ID must be an integer, got 'abc'"),
        ({"SLURM_PROCID": "abc"}, f"SLURM_PROCID=abc {NOT_A_TASK}"),
        ({"SLURM_PROCID": "-1"}, f"SLURM_PROCID=-1 {NOT_A_TASK}"),
        ({"SLURM_PROCID": "5"}, f"SLURM_PROCID=5 {NOT_A_TASK}"),
        ({"SLURM_LOCALID": "x"}, "SLURM_LOCALID must be this task's index on its node, got 'x'"),
        ({"SLURM_STEP_NODELIST": "["},
         "SLURM_STEP_NODELIST='[' names no host to join (its first node reads as '')"),
    ],
    ids=["job-id", "procid-abc", "procid-negative", "procid-past", "localid", "nodelist"],
)  # fmt: skip
def test_bad_slurm_values_are_one_line_naming_the_variable(env, line):
    assert refused_in_one_line(ROOT, SWE, "", {**SRUN, **env}) == f"Error: {line}"


def test_an_empty_coordinator_variable_is_unset_and_refusals_name_the_variables():
    code, out = invoke(ROOT, ["wafer", "info"], {"WSE_COORDINATOR": ""})
    assert code == 0, out
    line = refused_in_one_line(ROOT, ["wafer", "info"], "", {"WSE_PROCESS_ID": "1"})
    assert line == ("Error: WSE_PROCESS_ID=1 is set but WSE_NUM_PROCESSES is not; set both "
                    "(and WSE_COORDINATOR), or unset WSE_PROCESS_ID")  # fmt: skip
    line = refused_in_one_line(ROOT, SWE, "", {**WSE_ENV, "WSE_PROCESS_ID": "5"})
    assert line == "Error: WSE_PROCESS_ID must be in 0..1, got 5"


@pytest.mark.parametrize(
    ("before", "env", "after", "line"),
    [
        (FLAGS, {}, ["--num-processes", "2", "--process-id", "9", "--coordinator", "junk"],
         "--process-id is given both before the command (1 of wse) and after it (9 of hpc swe); "
         "give it once"),
        ([], WSE_ENV, ["--process-id", "0"],
         "--process-id 0 of hpc swe disagrees with WSE_PROCESS_ID=1; unset WSE_PROCESS_ID, or "
         "leave --process-id out"),
        ([], SRUN, ["--num-processes", "3"],
         "--num-processes 3 of hpc swe disagrees with this SLURM task's SLURM_NTASKS (2); leave "
         "--num-processes out under SLURM"),
    ],
    ids=["flags", "wse-variables", "srun"],
)  # fmt: skip
def test_a_commands_own_process_options_that_disagree_with_the_run_are_refused(
    before, env, after, line
):
    assert refused_in_one_line(ROOT, [*before, *SWE, *after], "", env) == f"Error: {line}"


def test_launch_inside_an_srun_task_is_refused():
    line = refused_in_one_line(ROOT, ["launch", "--nproc", "2", "--", *SWE], "", SRUN)
    assert line == ("Error: wse launch is running as SLURM task 1 of 2 (srun -n 2); it starts "
                    "its own processes: use srun -n 1 wse launch ..., or srun -n N wse <command> "
                    "without launch")  # fmt: skip


@pytest.mark.parametrize(
    ("option", "line"),
    [
        (["--typo"], "No such option for wse launch: --typo"),
        (["--nproc-per-node", "4"],
         "No such option for wse launch: --nproc-per-node (did you mean '--nproc'?)"),
        (["--nproc_per_node=4"],
         "No such option for wse launch: --nproc_per_node (did you mean '--nproc'?)"),
    ],
    ids=["typo", "torchrun", "torchrun-underscore"],
)  # fmt: skip
def test_the_launchers_unknown_options_are_refused_before_any_child(option, line):
    started = time.monotonic()
    got = refused_in_one_line(ROOT, ["launch", "--nproc", "2", *option, "--", "wafer", "check"],
                              line)  # fmt: skip
    assert got.startswith(f"Error: {line}") and time.monotonic() - started < 3


def test_a_port_another_launch_holds_is_refused():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    held = _hold_port(port)  # as the first `wse launch --port P` holds it for its whole run
    try:
        line = refused_in_one_line(ROOT, ["launch", "--nproc", "2", "--port", port, "--",
                                          "wafer", "check"], "")  # fmt: skip
    finally:
        os.close(held)
    assert line == (f"Error: --port {port} is in use (another wse launch's coordinator); give "
                    "another --port, or leave it out for a free one")  # fmt: skip


def _child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stderr=subprocess.PIPE)


ABSL = [
    "E1205 23:34:04.034383   27008 coordination_service.cc:518] 0 unexpectedly tried to "
    "connect with a different incarnation. It has likely restarted.",
    "F1205 23:34:04.034781   27019 client.h:80] Terminating process because the JAX "
    "distributed service detected fatal errors.",
    "RPC: /xla.coordination.CoordinationService/RegisterTask",
    "*** Check failure stack trace: ***",
    "    @     0x7fb982758634  absl::log_internal::LogMessage::SendToLog()",
]


def test_a_child_jax_aborts_is_one_line_without_its_native_log(capfd):
    aborted = _child(f"""
        import os, sys
        sys.stderr.write("before\\n"); sys.stderr.flush()
        sys.stderr.write({"".join(line + chr(10) for line in ABSL)!r}); sys.stderr.flush()
        os.abort()
    """)
    peer = _child("import time; time.sleep(30)")
    procs, relay = [aborted, peer], _Relay()
    for i, p in enumerate(procs):
        relay.watch(i, p)
    with pytest.raises(typer.Exit) as e:
        _watch(procs, relay, 2)
    assert e.value.exit_code == 1
    assert capfd.readouterr().err.splitlines() == [
        "before",
        "Error: process 0 was killed by SIGABRT (signal 6); stopped the other 1 (JAX: 0 "
        "unexpectedly tried to connect with a different incarnation. It has likely restarted.)",
    ]


def test_a_stop_signal_relays_what_process_0_kept(tmp_path, capfd):
    kept = ("stopped by SIGTERM after step 1,020; --out t.xyz keeps the 103 frames up to step "
            "1,020, as LAMMPS keeps its dump")  # fmt: skip
    code = f"""
        import os, signal, sys, time
        def stop(*_):
            if sys.argv[1] == "0":
                sys.stderr.write({kept!r} + "\\n")
            else:
                sys.stderr.write("stopped by SIGTERM\\n")
            sys.stderr.flush(); os._exit(143)
        signal.signal(signal.SIGTERM, stop)
        sys.stderr.write("ready\\n"); sys.stderr.flush()
        open(os.path.join({str(tmp_path)!r}, sys.argv[1]), "w").close()
        time.sleep(30)
    """
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(i)],
                              stderr=subprocess.PIPE) for i in range(2)]  # fmt: skip
    relay = _Relay()
    for i, p in enumerate(procs):
        relay.watch(i, p)
    deadline = time.monotonic() + 30
    while len(os.listdir(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # both ready: their handlers are set
    handlers = {
        sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    }
    try:
        assert _shut_down(procs, relay) == kept.partition("; ")[2]
    finally:  # `_shut_down` ignores stop signals, as the launcher does while it stops
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert capfd.readouterr().err.splitlines() == ["ready"]


def _running(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _threads(pid: int) -> int:
    try:
        return psutil.Process(pid).num_threads()
    except psutil.Error:  # gone: nothing to wait for
        return 1 << 10


@pytest.mark.parametrize("past", [min, max], ids=["both-started", "one-started"])
def test_the_children_die_with_a_launcher_killed_by_sigkill(past):
    """`min`: both children run the command; `max`: the launcher dies while process 0 waits
    in JAX's distributed join for process 1 (native code, where its SIGTERM is never
    handled: stop 77's CI), so the orphan's watch SIGKILLs it `GRACE_S` later."""
    args = ["launch", "--nproc", "2", "--devices-per-proc", "1", "--", *SWE[:-4],
            "--steps", "10000000", "--preset", "tiny"]  # fmt: skip
    launcher = subprocess.Popen(WSE + args, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=clean_env())  # fmt: skip
    kids: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while len(kids) < 2 and time.monotonic() < deadline:
            kids = [k.pid for k in psutil.Process(launcher.pid).children()]
            time.sleep(0.1)
        # past their root callback, where the death signal is set: a child whose JAX backend
        # runs (a process holds 2 threads after the CLI's imports, ~14 once JAX's CPU client
        # starts, after the callback) is past it; a fixed 1.5 s was not enough under the
        # suite's load (stop 74)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and past(map(_threads, kids), default=0) < 8:
            time.sleep(0.1)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + GRACE_S + 10
        while _running(kids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(kids) == 2 and _running(kids) == []
    finally:
        for pid in _running(kids):
            os.kill(pid, signal.SIGKILL)
