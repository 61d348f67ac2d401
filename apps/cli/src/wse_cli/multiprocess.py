"""Multi-process options shared by the commands that can span processes (train, hpc stencil,
hpc md, hpc swe) and by the root callback: `--num-processes N --process-id I --coordinator
HOST:PORT`, or the WSE_* variables `wse launch` sets, or a cluster launcher's (SLURM's)
environment.

`join` connects this process to the run before the command touches JAX (joining twice is
harmless). The root callback's join (`join_later`) checks the flags at once (no JAX) and
joins when the command first imports JAX (a hook on the `jax` import: JAX runs nothing
before the join), or before the body when JAX is already imported: an input refused at
parsing or in the command's body before JAX is refused in each process without JAX or the
coordinator (a `wse launch` child's error reaches the user in about a second, not after
every child has imported JAX, joined and shut the run down), and a command that never uses
JAX never joins. A joined process's native stdout (gloo's C++ log) goes to stderr, so that
stdout holds the command's output alone (`_native_stdout_to_stderr`). `is_primary()` says
whether this process writes what people read.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import io
import os
import sys
from collections.abc import Callable

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
    _native_stdout_to_stderr()
    distributed.initialize(num_processes, process_id, coordinator)


def _native_stdout_to_stderr() -> None:
    """From here on, what native code writes to file descriptor 1 goes to stderr, and Python's
    `sys.stdout` writes to a copy of the real stdout. Gloo (JAX's CPU collectives) prints
    `[Gloo] Rank N is connected to ...` from C++ to fd 1 when a communicator first connects,
    at a collective (not in `jax.distributed.initialize`: hunt 65, each line went to stdout
    ahead of a command's `--json`, or inside it, from another thread). Splitting the
    descriptors here keeps the command's own output whole and in order, and a terminal a
    terminal (rich's colours and width), which filtering the children's stdout through a
    pipe in `wse launch` would lose. A test runner's captured stdout (no fd 1) is left be."""
    try:
        if sys.stdout.fileno() != 1:
            return
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return
    old = sys.stdout
    old.flush()
    real = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = io.TextIOWrapper(
        os.fdopen(real, "wb"),
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=old.line_buffering,
    )


class _JoinOnImport(importlib.abc.MetaPathFinder):
    """Runs `then` right after the `jax` package is imported, once: the first `import jax`
    (or of any jax module, flax, ...) returns a jax that has joined the run."""

    def __init__(self, then: Callable[[], None]) -> None:
        self.then = then

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001  (importlib's protocol)
        if name != "jax":
            return None
        _unhook()
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run, then = spec.loader.exec_module, self.then

        def exec_then_join(module) -> None:  # noqa: ANN001  (in sys.modules already)
            run(module)
            then()

        spec.loader.exec_module = exec_then_join  # type: ignore[method-assign]
        return spec


def _unhook() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _JoinOnImport)]


_PENDING: list[int | None] = []  # this process's id while its join waits for JAX


def join_later(num_processes: int | None, process_id: int | None, coordinator: str | None) -> None:
    """The root callback's `join` (module docstring): flags checked now, the join made at the
    first JAX import once the command's arguments parse (`WseGroup` runs what
    `errors.before_body` holds before the command's body)."""
    from wse_core.host import distributed

    n, i, c = distributed.resolve(num_processes, process_id, coordinator)
    if (n, i, c) == (None, None, None) and not distributed.cluster_detected():
        return
    joined = functools.partial(join, num_processes, process_id, coordinator)
    if "jax" in sys.modules:
        before_body("join", joined)
        return

    def hook() -> None:
        if "jax" in sys.modules:  # imported while the arguments parsed: join now
            joined()
            return

        def on_import() -> None:
            _PENDING.clear()
            joined()

        _PENDING[:] = [i]
        _unhook()
        sys.meta_path.insert(0, _JoinOnImport(on_import))

    before_body("join", hook)


def is_primary() -> bool:
    """True in process 0 of a run, and in a single-process run (imports JAX only if needed:
    before a deferred join, the process id asked for says it)."""
    if "jax" not in sys.modules:
        return _PENDING[0] in (None, 0) if _PENDING else True
    import jax

    return jax.process_index() == 0
