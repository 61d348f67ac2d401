"""`wse launch --nproc N -- <wse command>`: N local processes of one multi-process run.

Each child gets `WSE_NUM_PROCESSES`, `WSE_PROCESS_ID`, `WSE_COORDINATOR` (a free loopback
port) and `WSE_DEVICES` (virtual CPU devices per process), which the `wse` root callback
hands to `wse_core.host.distributed.initialize`. The launcher watches its children: when one
exits with an error, the others are stopped (SIGTERM, then SIGKILL after a grace period) and
the launcher exits 1 naming the process (2, like the child, when the child rejected its
input) — a dead peer never leaves the rest hanging.
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
import time
from pathlib import Path

import typer

from wse_cli.errors import fail
from wse_cli.options import PORT, number

GRACE_S = 10.0
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
    procs = []
    for i in range(nproc):
        env = dict(
            os.environ,
            WSE_NUM_PROCESSES=str(nproc),
            WSE_PROCESS_ID=str(i),
            WSE_COORDINATOR=coordinator,
            WSE_DEVICES=str(per_proc),
        )
        procs.append(subprocess.Popen([sys.executable, "-m", "wse_cli", *args], env=env))
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                i, code = failed[0]
                _stop(procs)
                typer.echo(
                    f"Error: process {i} exited with code {code}; stopped the other {nproc - 1}",
                    err=True,
                )
                raise typer.Exit(2 if code == 2 else 1)  # bad input stays exit 2
            if all(c == 0 for c in codes):
                return
            time.sleep(0.2)
    except KeyboardInterrupt:
        _stop(procs)
        raise typer.Exit(130) from None


def register(app: typer.Typer) -> None:
    app.command(
        "launch",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(launch)
