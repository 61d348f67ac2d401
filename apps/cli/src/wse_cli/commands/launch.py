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
JAX's preemption service off, whose SIGTERM handler only logged it: hunt 62). The
children's stderr goes through the launcher (`_Relay`): a line another process already
printed is not printed again (every process of a run says the same things), the children's
`Error: ...` lines are held, and the first of them is printed once, in the launcher's one
line naming its process, as soon as a child has failed (the launcher looks every 0.2 s);
what the stopped children print after is dropped. The children's stdout is the launcher's:
process 0's output, alone (a `--json` is one JSON object; gloo's C++ log goes to stderr,
`multiprocess.join`).
Before a child is started the launch is checked (exit 2, one line): `--nproc` within the
usable cores and `--devices-per-proc` within the devices limit (`wse_core.host.limits`), all
the processes' devices within host memory, a free coordinator --port, no `infer serve` under
several processes (they would all bind its one port), under several processes only a
command that runs across them (one with --num-processes, or `wafer check`: `launchable`),
none of the options the launcher sets in each child (--num-processes, --process-id,
--coordinator, --devices: `OWN_FLAGS`, in every spelling the child reads), and on a host
with NVIDIA GPUs (JAX_PLATFORMS not cpu) no more processes than GPUs (one GPU a process).
On a real cluster, start one `wse ...` per host with --num-processes/--process-id/
--coordinator (or under SLURM with none of them) instead.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import typer

from wse_cli.errors import fail
from wse_cli.option_names import dashed
from wse_cli.options import PORT, number

GRACE_S = 10.0
POLL_S = 0.2  # how often the launcher looks at its children
DRAIN_S = 2.0  # how long a failed child's last stderr lines are waited for
SEEN_LINES = 10_000  # distinct stderr lines remembered for the de-duplication
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


class _Relay:
    """The children's stderr, relayed line by line (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[bytes, int] = {}  # line -> the process that printed it first
        self.first_error: tuple[int, str] | None = None  # (process, message)
        self.closed = False
        self.only: int | None = None  # once a process failed: the one whose lines are relayed
        self._threads: dict[int, threading.Thread] = {}

    def watch(self, i: int, proc: subprocess.Popen) -> None:
        t = threading.Thread(target=self._read, args=(i, proc), daemon=True)
        self._threads[i] = t
        t.start()

    def _read(self, i: int, proc: subprocess.Popen) -> None:
        for line in iter(proc.stderr.readline, b""):
            with self._lock:
                self._line(i, line)
        proc.stderr.close()
        if proc.wait() != 0:  # at once, not at the next poll: the peers' next lines are noise
            self.keep_only(i, first=True)

    def keep_only(self, i: int, *, first: bool = False) -> None:
        """Relay process i's lines alone (hunt 68: once a peer died, the others' tracebacks
        and JAX's coordination-service lines came before the launcher's line); `first`: only
        where no process was chosen yet."""
        with self._lock:
            if not (first and self.only is not None):
                self.only = i

    def _line(self, i: int, line: bytes) -> None:
        if self.closed or self.only not in (None, i):
            return
        if line.startswith(b"Error: "):
            if self.first_error is None:
                text = line[len(b"Error: ") :].decode(errors="replace").strip()
                self.first_error = (i, text)
            return
        if self._seen.setdefault(line, i) != i:
            return
        if len(self._seen) > SEEN_LINES:
            self._seen.clear()
        sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()

    def drain(self, i: int) -> None:
        """Wait (briefly) for the lines process i wrote before it exited."""
        self._threads[i].join(timeout=DRAIN_S)

    def close(self) -> None:
        with self._lock:
            self.closed = True


def _failure_line(relay: _Relay, i: int, code: int, others: int) -> str:
    """The launcher's one line for process i's exit `code` (its first error, if any)."""
    why = f"process {i} {_exit_words(code)}; stopped the other {others}"
    if relay.first_error is None:
        return f"Error: {why}"
    j, text = relay.first_error
    return f"Error: process {j}: {text} ({why})"


def _exit_words(code: int) -> str:
    """How a child ended: "exited with code 3", or the signal that killed it by name (hunt
    68: "code -9"; SIGKILL is most often the kernel's out-of-memory killer)."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "a signal"
    hint = "; out of memory?" if -code == signal.SIGKILL else ""
    return f"was killed by {name} (signal {-code}{hint})"


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


def _launchable_names(cmd, path: tuple[str, ...] = ()) -> list[str]:  # noqa: ANN001
    """The launchable commands under the click command `cmd`, as "hpc md", ..."""
    names = [" ".join(path)] if path and launchable(path, cmd) else []
    for name, sub in getattr(cmd, "commands", {}).items():
        names += _launchable_names(sub, (*path, name))
    return names


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
            f"{', '.join(sorted(_launchable_names(root)))}"
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
    if port:
        try:
            with socket.create_server(("127.0.0.1", port)):
                pass
        except OSError as e:
            fail(f"--port {port} cannot be the coordinator's: {e.strerror or e}")
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
            )
            cmd = [sys.executable, "-m", "wse_cli", *args]
            procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE))
            relay.watch(i, procs[-1])
        _watch(procs, relay, nproc)
    except KeyboardInterrupt:  # every command's Ctrl-C line and 130 (`wse_cli.errors`)
        _shut_down(procs, relay)  # hunt 67: exited 130 with nothing said (`typer.Exit(130)`)
        raise
    except _Signalled as e:
        _shut_down(procs, relay)
        name = signal.Signals(e.signum).name
        typer.echo(f"wse launch: {name}; stopped the {len(procs)} process(es)", err=True)
        raise typer.Exit(128 + e.signum) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
            typer.echo(_failure_line(relay, i, code, nproc - 1), err=True)
            _stop(procs)
            raise typer.Exit(2 if code == 2 else 1)  # bad input stays exit 2
        if all(c == 0 for c in codes):
            for i in range(nproc):
                relay.drain(i)
            return
        time.sleep(POLL_S)


def _shut_down(procs: list[subprocess.Popen], relay: _Relay) -> None:
    """Stop the children once: a second signal meanwhile would leave them half stopped."""
    for sig in (*STOP_SIGNALS, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    relay.close()
    _stop(procs)


def register(app: typer.Typer) -> None:
    app.command(
        "launch",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(launch)
