"""Multi-process options shared by the commands that can span processes (train, hpc stencil,
hpc md, hpc swe) and by the root callback: `--num-processes N --process-id I --coordinator
HOST:PORT`, or the WSE_* variables `wse launch` sets, or a cluster launcher's (SLURM's)
environment.

`join` connects this process to the run before the command touches JAX (joining twice is
harmless); the root callback's join waits (`join_later`) until the command's own arguments
are parsed (`WseGroup` makes it before a command's body), so that an input
refused at parsing is refused in each process without JAX or the coordinator; `is_primary()`
says whether this process writes what people read.
"""

from __future__ import annotations

import functools

import typer

from wse_cli.errors import before_body
from wse_cli.options import number

__all__ = [
    "NUM_PROCESSES",
    "PROCESS_ID",
    "COORDINATOR",
    "join",
    "join_later",
    "is_primary",
]

NUM_PROCESSES = number(
    None,
    "--num-processes",
    envvar="WSE_NUM_PROCESSES",
    help="Processes in a multi-process run.",
    kind=int,
    ge=1,
)
PROCESS_ID = number(
    None,
    "--process-id",
    envvar="WSE_PROCESS_ID",
    help="This process's index (0..N-1).",
    kind=int,
    ge=0,
)
COORDINATOR = typer.Option(
    None, "--coordinator", envvar="WSE_COORDINATOR", help="HOST:PORT of process 0."
)


def join(num_processes: int | None, process_id: int | None, coordinator: str | None) -> None:
    """Join a multi-process run when one is asked for; a no-op otherwise."""
    from wse_core.host import distributed

    asked = (num_processes, process_id, coordinator) != (None, None, None)
    if not asked and not distributed.cluster_detected():
        return
    import jax

    if jax.distributed.is_initialized():
        return
    distributed.initialize(num_processes, process_id, coordinator)


def join_later(num_processes: int | None, process_id: int | None, coordinator: str | None) -> None:
    """The root callback's `join`, made once the command's arguments parse (`WseGroup` runs
    what `errors.before_body` holds before the command's body)."""
    before_body("join", functools.partial(join, num_processes, process_id, coordinator))


def is_primary() -> bool:
    """True in process 0 of a run, and in a single-process run (imports JAX only if needed)."""
    import sys

    if "jax" not in sys.modules:
        return True
    import jax

    return jax.process_index() == 0
