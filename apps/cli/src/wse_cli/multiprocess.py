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
JAX never joins. In a run of several processes, before the join, a command that cannot
span them is refused as `wse launch` refuses it (`launch.launchable`), and so is a
command's own --num-processes/--process-id/--coordinator that differs from the run's
(whether the root's flags, the WSE_* variables or a cluster launcher set it; refusals name
the flag or the variable that holds the value). A child of `wse launch` dies with its
launcher (`die_with_launcher`). A joined process's native stdout (gloo's C++ log) goes to
stderr, so that stdout holds the command's output alone (`_native_stdout_to_stderr`).
`is_primary()` says whether this process writes what people read.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import io
import os
import sys
import threading
import time
from collections.abc import Callable

import typer

from wse_cli.errors import before_body, fail
from wse_cli.interrupts import GRACE_S
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


def join(
    num_processes: int | None,
    process_id: int | None,
    coordinator: str | None,
    *,
    names: tuple[str, str, str] | None = None,
) -> None:
    """Join a multi-process run when one is asked for; a no-op otherwise. `names`: what set
    each value (a flag or its variable), for the refusals."""
    from wse_core.host import distributed

    asked = (num_processes, process_id, coordinator) != (None, None, None)
    if not asked and not distributed.cluster_detected():
        return
    import jax

    if jax.distributed.is_initialized():
        return
    _native_stdout_to_stderr()
    distributed.initialize(num_processes, process_id, coordinator, names=names)


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


_PENDING: list[int] = []  # this process's id while its join waits for JAX


def join_later(
    num_processes: int | None,
    process_id: int | None,
    coordinator: str | None,
    ctx: typer.Context | None = None,
) -> None:
    """The root callback's `join` (module docstring): the run asked for checked now (flags,
    WSE_* variables or a cluster launcher's), the join made at the first JAX import once the
    command's arguments parse (`WseGroup` runs what `errors.before_body` holds before the
    command's body), where the command can span processes (`_refuse_alone`) and its own
    multi-process options agree with the run's (`_refuse_disagreement`). `ctx`: the root's,
    which says whether a value came from its flag or its variable."""
    from wse_core.host import distributed

    names = None
    if ctx is not None:
        names = tuple(_source(ctx, p, f) for p, f in zip(_PARAMS, distributed.FLAGS, strict=True))
    run = distributed.asked(num_processes, process_id, coordinator, names=names)
    if run is None:
        return
    joined = functools.partial(join, num_processes, process_id, coordinator, names=names)

    def hook() -> None:
        if run.num_processes > 1 and (leaf := _current_context()) is not None:
            _refuse_alone(run, leaf)
            _refuse_disagreement(run, leaf)
        if "jax" in sys.modules:  # imported already (or while the arguments parsed): join now
            joined()
            return

        def on_import() -> None:
            _PENDING.clear()
            joined()

        _PENDING[:] = [run.process_id]
        _unhook()
        sys.meta_path.insert(0, _JoinOnImport(on_import))

    before_body("join", hook)


_PARAMS = ("num_processes", "process_id", "coordinator")  # the parameters' names, as FLAGS


def _source(ctx: typer.Context, param: str, flag: str) -> str:
    """`flag`, or its variable where the value came from there (`WSE_PROCESS_ID`): hunt 71, a
    stale exported variable was refused in the words of a flag never given."""
    source = ctx.get_parameter_source(param)
    return f"WSE_{param.upper()}" if getattr(source, "name", "") == "ENVIRONMENT" else flag


def _current_context() -> typer.Context | None:
    """The context of the command about to run (click's, or the click typer ships: typer
    0.16 and later carry their own, whose `get_current_context` is not click's)."""
    click_context = typer.Context.__mro__[1]
    package = click_context.__module__.rpartition(".")[0]
    return sys.modules[f"{package}.globals"].get_current_context(silent=True)


def _path(ctx: typer.Context) -> tuple[str, ...]:
    names = []
    while ctx.parent is not None:
        names.append(str(ctx.info_name))
        ctx = ctx.parent
    return tuple(reversed(names))


def _refuse_alone(run, leaf: typer.Context) -> None:  # noqa: ANN001  (a distributed.Run)
    """Refuse a command that cannot span processes in a run of several, before the join, as
    `wse launch` refuses it (hunt 71: under srun or --num-processes, `hpc cfd` joined the run
    and crashed in every process with an 80-line JAX traceback)."""
    from wse_cli.commands import launch

    path = _path(leaf)
    if path == ("launch",):
        fail(launch.inside_a_run(run))
    if launch.launchable(path, leaf.command):
        return
    where, alone = _where(run)
    names = ", ".join(sorted(launch.launchable_names(leaf.find_root().command)))
    fail(f"wse {' '.join(path)} does not run across processes (this is {where}); {alone}, or "
         f"use one of: {names}")  # fmt: skip


def _where(run) -> tuple[str, str]:  # noqa: ANN001  (a distributed.Run)
    """(which process of which run this is, how to run a command as one process)."""
    i, n = run.process_id, run.num_processes
    if run.launcher == "SLURM":
        return f"SLURM task {i} of {n}", "run it as one task (srun -n 1)"
    if run.launcher is not None:
        return f"{run.launcher} rank {i} of {n}", "run it as one process (mpirun -n 1)"
    if run.names[0].startswith("-"):
        flags = "--num-processes, --process-id, --coordinator"
        return (
            f"process {i} of {n}, from --num-processes",
            f"run it as one process (without {flags})",
        )
    given = ", ".join(name for name in run.names if not name.startswith("-"))
    return f"process {i} of {n}, from {given}", f"run it as one process (unset {given})"


def _refuse_disagreement(run, leaf: typer.Context) -> None:  # noqa: ANN001  (a Run)
    """Refuse a command's own --num-processes/--process-id/--coordinator that differs from
    the run's (hunt 71: `hpc swe --process-id 9 --coordinator junk` after the root's flags
    was neither checked nor used; a stale WSE_PROCESS_ID beat a --process-id written after
    the command)."""
    from wse_core.host.distributed import FLAGS

    from wse_cli.options import typed

    command = " ".join(_path(leaf))
    for param, flag, name, value in zip(_PARAMS, FLAGS, run.names, run[:3], strict=True):
        if param not in leaf.params or not typed(leaf, param) or leaf.params[param] == value:
            continue
        mine = f"{leaf.params[param]} of {command}"
        if name == flag:
            fail(f"{flag} is given both before the command ({value} of wse) and after it "
                 f"({mine}); give it once")  # fmt: skip
        if run.launcher is None:
            fail(f"{flag} {mine} disagrees with {name}={value}; unset {name}, or leave "
                 f"{flag} out")  # fmt: skip
        fail(f"{flag} {mine} disagrees with this {run.launcher} task's {name} ({value}); "
             f"leave {flag} out under {run.launcher}")  # fmt: skip


def die_with_launcher() -> None:
    """In a child of `wse launch` (`WSE_LAUNCHER_PID`, taken out of the environment so this
    process's own children do not read it): a SIGTERM when the launcher dies, as torchrun's
    workers get one (hunt 71: after a `kill -9` of the launcher, by the OOM killer or a
    batch system, its children ran on for ever under PID 1). Linux's parent-death signal,
    set here rather than in the launcher's `preexec_fn` (unsafe beside its relay threads);
    a launcher already gone by now is seen by the parent's pid. Honoured only beside the
    run's variables the launcher sets with it (WSE_NUM_PROCESSES, WSE_PROCESS_ID,
    WSE_COORDINATOR), otherwise dropped (hunt 78:
    `WSE_LAUNCHER_PID=1 wse wafer info` stopped itself with a SIGTERM, exit 143)."""
    launcher = os.environ.pop("WSE_LAUNCHER_PID", "")
    launched = all(
        os.environ.get(f"WSE_{v}") for v in ("NUM_PROCESSES", "PROCESS_ID", "COORDINATOR")
    )
    if not launched or not launcher.isdigit() or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != int(launcher):
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=_kill_when_orphaned, args=(int(launcher),), daemon=True,
                     name="wse-orphan-watch").start()  # fmt: skip


def _kill_when_orphaned(launcher: int, poll_s: float = 0.25) -> None:
    """SIGKILL this process `GRACE_S` after its launcher died, as the launcher itself ends a
    child that outlives its SIGTERM's grace (stop 77's CI: the SIGTERM came while the
    main thread waited in native code — JAX's `distributed.initialize`, or a collective —
    for a peer that had died with the launcher, and the process ran on, its Python handler
    never reached). A thread, so it runs while the main thread is in XLA's calls."""
    import signal

    while os.getppid() == launcher:
        time.sleep(poll_s)
    time.sleep(GRACE_S)
    os.kill(os.getpid(), signal.SIGKILL)


def is_primary() -> bool:
    """True in process 0 of a run, and in a single-process run (imports JAX only if needed:
    before a deferred join, the process id asked for says it)."""
    if "jax" not in sys.modules:
        return _PENDING[0] in (None, 0) if _PENDING else True
    import jax

    return jax.process_index() == 0
