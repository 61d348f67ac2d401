"""`wse launch --nproc N -- <wse command>`: N local processes of one multi-process run.

Each child gets `WSE_NUM_PROCESSES`, `WSE_PROCESS_ID`, `WSE_COORDINATOR` (a free loopback
port) and `WSE_DEVICES` (virtual CPU devices per process), which the `wse` root callback
hands to `wse_core.host.distributed.initialize`. The launcher watches its children: when one
exits with an error, the others are stopped (SIGTERM, then SIGKILL after a grace period) and
the launcher exits 1 naming the process (2, like the child, when the child rejected its
input) — a dead peer never leaves the rest hanging.
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

import typer

from wse_cli.errors import fail
from wse_cli.options import PORT, number

GRACE_S = 10.0


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


def launch(
    ctx: typer.Context,
    nproc: int = number(..., "--nproc", help="Number of local processes.", kind=int, ge=1),
    devices_per_proc: int = number(
        None,
        "--devices-per-proc",
        help="Virtual CPU devices per process (default: cores / N).",
        kind=int,
        ge=1,
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
