"""`wse launch --nproc N -- <wse command>`: N local processes of one multi-process run.

Each child gets `WSE_NUM_PROCESSES`, `WSE_PROCESS_ID`, `WSE_COORDINATOR` (a free loopback
port) and `WSE_DEVICES` (virtual CPU devices per process), which the `wse` root callback
hands to `wse_core.host.distributed.initialize`. The launcher watches its children: when one
exits with an error, the others are stopped (SIGTERM, then SIGKILL after a grace period) and
the launcher exits 1 naming the process (2, like the child, when the child rejected its
input) — a dead peer never leaves the rest hanging. A SIGTERM or SIGHUP to the launcher (from
SLURM, `timeout`, `kill`) stops the children the same way and exits 128 + the signal's number
(143, 129); Ctrl-C (a SIGINT to the launcher alone, or to the whole process group) stops
them too, and the launcher says every command's line, "interrupted (Ctrl-C)", and exits 130
(`wse_cli.interrupts`); a child stops on SIGTERM (`distributed.initialize` turns
JAX's preemption service off, whose SIGTERM handler only logged it: hunt 62), and on the
launcher's death, even by SIGKILL (`multiprocess.die_with_launcher`). The children's stderr
goes through the launcher (`launch_relay.Relay`: a line another process already printed is
not printed again, the first child `Error: ...` line is said once, in the launcher's one
line naming its process, as soon as a child has failed, JAX's native log never). A stop
signal's line carries what process 0's own said of its files (`--out t.xyz keeps ...`).
The children's stdout is the launcher's: process 0's output, alone (a `--json` is one JSON
object; gloo's C++ log goes to stderr, `multiprocess.join`).
Before a child is started the launch is checked (exit 2, one line): `--nproc` within the
usable cores and `--devices-per-proc` within the devices limit (`wse_core.host.limits`), all
the processes' devices within host memory, a free coordinator --port (held by a lock per
port until the launch ends: a second launch on it is refused), no `infer serve` under
several processes (they would all bind its one port), under several processes only a
command that runs across them (one with --num-processes, or `wafer check`: `launchable`),
none of the options the launcher sets in each child (--num-processes, --process-id,
--coordinator, --devices: `OWN_FLAGS`, in every spelling the child reads), and on a host
with NVIDIA GPUs (JAX_PLATFORMS not cpu) no more processes than GPUs (one GPU a process).
An option before `--` that the launcher does not know is refused, and so is a launch made as
one process of a run (a task of `srun -n 4`: `inside_a_run`). On a real cluster, start one
`wse ...` per host with --num-processes/--process-id/--coordinator (or under SLURM with
none of them) instead.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import typer
from typer.core import TyperCommand

from wse_cli.commands.launch_relay import Relay as _Relay
from wse_cli.commands.launch_relay import failure_line
from wse_cli.errors import fail
from wse_cli.interrupts import GRACE_S
from wse_cli.option_names import dashed
from wse_cli.options import PORT, number

POLL_S = 0.2  # how often the launcher looks at its children
# The root options the launcher sets in every child, and what sets them. A child's own would
# win over the launcher's WSE_* variable (click's rule): hunt 65, `-- --devices 2` ran 2
# devices a process under --devices-per-proc 1, past the memory check made for 1.
OWN_FLAGS = {
    "--num-processes": "itself",
    "--process-id": "itself",
    "--coordinator": "itself",
    "--devices": "(--devices-per-proc)",
}
# Commands that span processes through the root callback's join alone, without a
# --num-processes option of their own (wafer.py's check reports jax.process_count()).
JOINED_BY_ROOT = (("wafer", "check"),)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # what SLURM, timeout, kill and a hangup send


class _Signalled(Exception):
    """A stop signal reached the launcher (raised by its handler in the main thread)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_signalled(signum: int, frame) -> None:  # noqa: ANN001  (signal's protocol)
    raise _Signalled(signum)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _command(root, args: list[str]) -> tuple[tuple[str, ...], object | None]:
    """The names and click command that `args` run under `root` (a group's own options and
    their values skipped); None where a word names no command (the child refuses it)."""
    path, cmd, rest = (), root, list(args)
    while rest and getattr(cmd, "commands", None):
        word = rest.pop(0)
        if word.startswith("-"):
            opt = next((p for p in cmd.params if word.split("=")[0] in p.opts), None)
            if opt is not None and "=" not in word and not (opt.is_flag or opt.count):
                rest = rest[opt.nargs :]
            continue
        if word not in cmd.commands:
            return (*path, word), None
        path, cmd = (*path, word), cmd.commands[word]
    return path, cmd


def launchable(path: tuple[str, ...], cmd) -> bool:  # noqa: ANN001  (a click command)
    """Whether a command runs across processes: it takes --num-processes, or it is one that
    the root's join alone spreads (`JOINED_BY_ROOT`)."""
    return path in JOINED_BY_ROOT or any("--num-processes" in p.opts for p in cmd.params)


def launchable_names(cmd, path: tuple[str, ...] = ()) -> list[str]:  # noqa: ANN001
    """The launchable commands under the click command `cmd`, as "hpc md", ..."""
    names = [" ".join(path)] if path and launchable(path, cmd) else []
    for name, sub in getattr(cmd, "commands", {}).items():
        names += launchable_names(sub, (*path, name))
    return names


def inside_a_run(run) -> str:  # noqa: ANN001  (a wse_core.host.distributed.Run)
    """The refusal of `wse launch` run as one process of a run (`multiprocess.join_later`):
    under `srun -n 4` each of the 4 tasks would start its own run of the whole job, into
    the same files (hunt 71: it did, exit 0)."""
    i, n = run.process_id, run.num_processes
    if run.launcher == "SLURM":
        return (f"wse launch is running as SLURM task {i} of {n} (srun -n {n}); it starts its "
                "own processes: use srun -n 1 wse launch ..., or srun -n N wse <command> "
                "without launch")  # fmt: skip
    if run.launcher is not None:
        return (f"wse launch is running as {run.launcher} rank {i} of {n} (mpirun -n {n}); "
                "it starts its own processes: use mpirun -n 1 wse launch ..., or mpirun -n N "
                "wse <command> without launch")  # fmt: skip
    given = ", ".join(run.names)
    return (f"wse launch is running as process {i} of {n} of a run ({given}); it starts its "
            f"own processes: run it alone, without {given}")  # fmt: skip


def _own_flag(root, args: list[str]) -> str | None:  # noqa: ANN001  (a click command)
    """The first of the launcher's own options (`OWN_FLAGS`) in the child's `args`, in every
    spelling the child reads: `--a_b` and `--a_b=V` as `--a-b` (the child's
    `option_names.dashed`; hunt 65: `--num_processes 3` ran, and the child dropped it) and
    none after a bare `--`, where the child reads no options. click takes no abbreviations
    (`--num-proc` is "No such option"), so there are no other spellings."""
    for arg in dashed(args, root.params):
        if arg == "--":
            return None
        if (name := arg.partition("=")[0]) in OWN_FLAGS:
            return name
    return None


def _eager(args: list[str]) -> str | None:
    """--help or --version among the child's options (before a bare `--`): click answers
    them in every process, before the command's code keeps the others quiet."""
    for arg in args:
        if arg == "--":
            return None
        if arg in ("--help", "--version"):
            return arg
    return None


def _gpu_count() -> int | None:
    """NVIDIA GPUs the driver lists (None: no driver, or JAX is told to use the CPU)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    if os.environ.get("JAX_PLATFORMS", "").strip() == "cpu" or not gpus.is_dir():
        return None
    return len(list(gpus.iterdir()))


def _check_children(root, args: list[str], nproc: int, per_proc: int) -> None:  # noqa: ANN001
    """Refuse a launch whose children would collide (module docstring); `root` is the click
    command of the app."""
    from wse_core.host.limits import VIRTUAL_DEVICE_HOST_BYTES
    from wse_core.host.memory import require

    words = [a for a in args if not a.startswith("-")]
    if words and words[0] == "launch":  # each child would start nproc more, and so on
        fail("wse launch cannot run inside wse launch; give the command each process runs, "
             "e.g. wse launch --nproc 2 -- wafer check")  # fmt: skip
    if nproc > 1 and "serve" in args and "infer" in args:
        fail(
            f"wse launch --nproc {nproc} -- infer serve: every process would bind the same "
            "--port; start one server (wse infer serve) instead"
        )
    path, cmd = _command(root, args)
    if nproc > 1 and (asked := _eager(args)):  # hunt 68: every process printed it
        name = " ".join(path)
        fail(f"wse launch: {asked} is not a run; use wse {name + ' ' if name else ''}{asked} "
             "without launch")  # fmt: skip
    if nproc > 1 and cmd is not None and not launchable(path, cmd):
        # hunt 62: `hpc cfd`, `hpc tlrmvm run` crashed in every child with a traceback, two
        # demos wrote into one folder
        name = " ".join(path)
        fail(
            f"wse {name} does not run across processes (each of the {nproc} would run all of "
            f"it, into the same files); run `wse {name}` alone, or launch one that does: "
            f"{', '.join(sorted(launchable_names(root)))}"
        )
    # after the command's own check: removing --devices would not make `hpc cfd` launchable
    if (own := _own_flag(root, args)) is not None:
        fail(f"{own} is set by wse launch {OWN_FLAGS[own]}; remove it from the command")
    # after it: `--process_id 1` reads the 1 as a command (hunt 68: both children started,
    # importing JAX, before one refused an unknown word)
    if cmd is None:
        fail(f"wse launch runs wse commands: {' '.join(path)!r} is none (wse --help lists them)")
    gpus = _gpu_count()
    if gpus is not None and nproc > gpus:
        fail(
            f"--nproc {nproc} is more processes than this host's {gpus} GPU(s) (one GPU a "
            "process); give --nproc <= the GPUs, or JAX_PLATFORMS=cpu for the emulator"
        )
    require(
        f"wse launch: {nproc} processes x {per_proc} virtual devices",
        nproc * per_proc * VIRTUAL_DEVICE_HOST_BYTES,
        fits=lambda b: f"at most {b // VIRTUAL_DEVICE_HOST_BYTES:,} devices in all",
    )


def launch(
    ctx: typer.Context,
    nproc: int = number(
        ..., "--nproc", help="Number of local processes.", kind=int, ge=1, limit="processes"
    ),
    devices_per_proc: int = number(
        None,
        "--devices-per-proc",
        help="Virtual CPU devices per process (default: cores / N).",
        kind=int,
        ge=1,
        limit="devices",
    ),
    port: int = number(0, "--port", help="Coordinator port (default: a free one).", **PORT),
) -> None:
    """Start N local processes of a wse command as one run: wse launch --nproc 2 -- hpc md ..."""
    args = list(ctx.args)
    if nproc <= 0:
        fail(f"--nproc must be positive, got {nproc}")
    if not args:
        fail("give the wse command to run after `--`, e.g. wse launch --nproc 2 -- wafer check")
    from wse_core.host.runtime import usable_cores

    per_proc = devices_per_proc or max(1, usable_cores() // nproc)
    _check_children(ctx.find_root().command, args, nproc, per_proc)
    held = _hold_port(port) if port else None  # closed with the launcher's process
    coordinator = f"127.0.0.1:{port or _free_port()}"
    procs, relay = [], _Relay()
    # hunt 62: a SIGTERM killed the launcher alone and its children ran on under PID 1
    previous = {sig: signal.signal(sig, _raise_signalled) for sig in STOP_SIGNALS}
    try:
        for i in range(nproc):
            env = dict(
                os.environ,
                WSE_NUM_PROCESSES=str(nproc),
                WSE_PROCESS_ID=str(i),
                WSE_COORDINATOR=coordinator,
                WSE_DEVICES=str(per_proc),
                WSE_LAUNCHER_PID=str(os.getpid()),  # `multiprocess.die_with_launcher`
            )
            cmd = [sys.executable, "-m", "wse_cli", *args]
            procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE))
            relay.watch(i, procs[-1])
        _watch(procs, relay, nproc)
    except KeyboardInterrupt:  # every command's Ctrl-C line and 130 (`wse_cli.errors`)
        _shut_down(procs, relay)  # hunt 67: exited 130 with nothing said (`typer.Exit(130)`)
        raise
    except _Signalled as e:
        kept = _shut_down(procs, relay)
        name = signal.Signals(e.signum).name
        line = f"wse launch: {name}; stopped the {len(procs)} process(es)"
        typer.echo(line + (f"; process 0: {kept}" if kept else ""), err=True)
        raise typer.Exit(128 + e.signum) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if held is not None:
            os.close(held)


def _hold_port(port: int) -> int:
    """Hold --port for this launch (a lock on a file per port, kept until the launcher
    ends): a second `wse launch --port P` is refused (hunt 71: both passed a bind check
    before either child bound the port, gRPC binds it with SO_REUSEPORT, and a child of one
    joined the other's coordinator, which JAX aborted). Then the port must be free of other
    programs. The lock's file descriptor, to close at the end."""
    import fcntl
    import tempfile

    path = Path(tempfile.gettempdir()) / f"wse-launch-port-{port}.lock"
    try:
        lock = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o444)  # any user's
    except OSError as e:
        fail(f"--port {port}: cannot open its lock file {path} ({e.strerror or e})")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with socket.create_server(("127.0.0.1", port)):
            pass
    except BlockingIOError:
        os.close(lock)
        fail(f"--port {port} is in use (another wse launch's coordinator); give another "
             "--port, or leave it out for a free one")  # fmt: skip
    except OSError as e:
        os.close(lock)
        fail(f"--port {port} cannot be the coordinator's: {e.strerror or e}")
    return lock


def _watch(procs: list[subprocess.Popen], relay: _Relay, nproc: int) -> None:
    """Wait for the children: return when all succeeded, stop the rest when one fails."""
    while True:
        codes = [p.poll() for p in procs]
        failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            i, code = failed[0]
            relay.keep_only(i)  # the others are stopped: their dying words are noise
            relay.drain(i)
            relay.close()  # what the stopped children say next is not news
            typer.echo(failure_line(relay, i, code, nproc - 1), err=True)
            _stop(procs)
            raise typer.Exit(2 if code == 2 else 1)  # bad input stays exit 2
        if all(c == 0 for c in codes):
            for i in range(nproc):
                relay.drain(i)
            return
        time.sleep(POLL_S)


def _shut_down(procs: list[subprocess.Popen], relay: _Relay) -> str | None:
    """Stop the children once (a second signal meanwhile would leave them half stopped);
    what process 0's stop line says of its files, if anything (`Relay.stop_detail`; hunt
    71: the relay was closed first, and `--out t.xyz keeps the 103 frames` went unsaid)."""
    for sig in (*STOP_SIGNALS, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    relay.stop()
    _stop(procs)
    if procs:
        relay.drain(0)
    relay.close()
    return relay.stop_detail()


class _LaunchCommand(TyperCommand):
    """`wse launch`'s parsing: an option before `--` is the launcher's, and one it does not
    know is refused before any child starts (hunt 71: `--typo` went to the children, refused
    by process 0 after both had started; torchrun's `--nproc-per-node 4` read 4 as the
    command). Without `--`, unknown options go to the command, as before."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if "--" in args:
            _refuse_unknown(self.get_params(ctx), args[: args.index("--")])
        return super().parse_args(ctx, args)


TORCHRUN = {"--nproc-per-node": "--nproc", "--nproc_per_node": "--nproc"}  # torchrun's names


def _refuse_unknown(params: list, words: list[str]) -> None:
    """Refuse the first of `words` (the launcher's, before `--`) that is no option of its."""
    from wse_core.errors import suggest

    known = {name: p for p in params for name in (*p.opts, *p.secondary_opts)}
    value_next = False
    for word in words:
        name, eq, _ = word.partition("=")
        if value_next or not word.startswith("-"):
            value_next = False
            continue
        if name in known:
            value_next = not eq and not getattr(known[name], "is_flag", False)
            continue
        hint = f" (did you mean {TORCHRUN[name]!r}?)" if name in TORCHRUN else suggest(name, known)
        fail(f"No such option for wse launch: {name}{hint}")


def register(app: typer.Typer) -> None:
    app.command(
        "launch",
        cls=_LaunchCommand,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(launch)
