"""`wse launch --nproc N -- <wse command>`: N local processes of one multi-process run.

Each child gets `WSE_NUM_PROCESSES`, `WSE_PROCESS_ID`, `WSE_COORDINATOR` (a free loopback
port) and `WSE_DEVICES` (virtual CPU devices per process), which the `wse` root callback
hands to `wse_core.host.distributed.initialize`. The launcher watches its children: when one
exits with an error, the others are stopped (SIGTERM, then SIGKILL after a grace period) and
the launcher exits 1 naming the process (2, like the child, when the child rejected its
input) — a dead peer never leaves the rest hanging. The children's stderr goes through the
launcher (`_Relay`): a line another process already printed is not printed again (every
process of a run says the same things), the children's `Error: ...` lines are held, and the
first of them is printed once, in the launcher's one line naming its process, as soon as a
child has failed (the launcher looks every 0.2 s); what the stopped children print after is
dropped.
Before a child is started the launch is checked (exit 2, one line): `--nproc` within the
usable cores and `--devices-per-proc` within the devices limit (`wse_core.host.limits`), all
the processes' devices within host memory, a free coordinator --port, no `infer serve` under
several processes (they would all bind its one port), no multi-process flags of the
launcher's own, and on a host with NVIDIA GPUs (JAX_PLATFORMS not cpu) no more processes
than GPUs (one GPU a process).
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
from wse_cli.options import PORT, number

GRACE_S = 10.0
POLL_S = 0.2  # how often the launcher looks at its children
DRAIN_S = 2.0  # how long a failed child's last stderr lines are waited for
SEEN_LINES = 10_000  # distinct stderr lines remembered for the de-duplication
MULTIPROCESS_FLAGS = ("--num-processes", "--process-id", "--coordinator")


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
        self._threads: dict[int, threading.Thread] = {}

    def watch(self, i: int, proc: subprocess.Popen) -> None:
        t = threading.Thread(target=self._read, args=(i, proc.stderr), daemon=True)
        self._threads[i] = t
        t.start()

    def _read(self, i: int, stream) -> None:
        for line in iter(stream.readline, b""):
            with self._lock:
                self._line(i, line)
        stream.close()

    def _line(self, i: int, line: bytes) -> None:
        if self.closed:
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
    if relay.first_error is None:
        return f"Error: process {i} exited with code {code}; stopped the other {others}"
    j, text = relay.first_error
    why = f"process {i} exited with code {code}; stopped the other {others}"
    return f"Error: process {j}: {text} ({why})"


def _gpu_count() -> int | None:
    """NVIDIA GPUs the driver lists (None: no driver, or JAX is told to use the CPU)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    if os.environ.get("JAX_PLATFORMS", "").strip() == "cpu" or not gpus.is_dir():
        return None
    return len(list(gpus.iterdir()))


def _check_children(args: list[str], nproc: int, per_proc: int) -> None:
    """Refuse a launch whose children would collide (module docstring)."""
    from wse_core.host.limits import VIRTUAL_DEVICE_HOST_BYTES
    from wse_core.host.memory import require

    words = [a for a in args if not a.startswith("-")]
    if words and words[0] == "launch":  # each child would start nproc more, and so on
        fail("wse launch cannot run inside wse launch; give the command each process runs, "
             "e.g. wse launch --nproc 2 -- wafer check")  # fmt: skip
    own = [a for a in args if a.split("=")[0] in MULTIPROCESS_FLAGS]
    if own:
        fail(f"{own[0].split('=')[0]} is set by wse launch itself; remove it from the command")
    if nproc > 1 and "serve" in args and "infer" in args:
        fail(
            f"wse launch --nproc {nproc} -- infer serve: every process would bind the same "
            "--port; start one server (wse infer serve) instead"
        )
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
    _check_children(args, nproc, per_proc)
    if port:
        try:
            with socket.create_server(("127.0.0.1", port)):
                pass
        except OSError as e:
            fail(f"--port {port} cannot be the coordinator's: {e.strerror or e}")
    coordinator = f"127.0.0.1:{port or _free_port()}"
    procs, relay = [], _Relay()
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
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                i, code = failed[0]
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
    except KeyboardInterrupt:
        relay.close()
        _stop(procs)
        raise typer.Exit(130) from None


def register(app: typer.Typer) -> None:
    app.command(
        "launch",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(launch)
