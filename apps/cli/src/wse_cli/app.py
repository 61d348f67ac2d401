"""The `wse` command: wafer, train, infer, plan, hpc, experiments, demo, launch.

Multi-process: `--num-processes N --process-id I --coordinator HOST:PORT` (or the WSE_*
variables `wse launch` sets, or SLURM's environment) join one jax.distributed run before any
command touches JAX.

Global options: `--devices N` (or `WSE_DEVICES`) sets the number of virtual CPU devices
before JAX starts; the persistent JAX compile cache lives in `WSE_CACHE_DIR`
(default `~/.cache/wse/jax`), so a second run of a command starts fast.
"""

from __future__ import annotations

import os

import typer

from wse_cli import __version__, multiprocess
from wse_cli.commands import demo, experiments, hpc, infer, launch, plan, train, view, wafer
from wse_cli.errors import WseGroup
from wse_cli.options import number

app = typer.Typer(
    cls=WseGroup,
    help="wse-stack: wafer-scale computing on JAX — emulate, predict, train, serve, simulate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: `wse --help` imports no rich (0.3 s budget)
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"wse {__version__}")  # a full disk: one line (`WseGroup.make_context`)
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    devices: int = number(
        None,
        "--devices",
        envvar="WSE_DEVICES",
        help="Virtual CPU devices (default: one per core).",
        kind=int,
        ge=1,
        limit="devices",
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    num_processes: int = multiprocess.NUM_PROCESSES,
    process_id: int = multiprocess.PROCESS_ID,
    coordinator: str = multiprocess.COORDINATOR,
) -> None:
    from wse_core.host.limits import check_variables
    from wse_core.host.runtime import configure

    check_variables()  # a misspelt or fractional WSE_LIMIT_* before any work
    configure(devices)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    multiprocess.die_with_launcher()  # in a child of `wse launch`
    multiprocess.join_later(num_processes, process_id, coordinator, ctx)  # once it parses


for module in (wafer, hpc, train, infer, plan, experiments, launch, demo, view):
    module.register(app)


def main() -> None:
    """The app as the console script runs it (`wse_cli.process.guarded`: Ctrl-C, closed or
    narrow streams), for a caller that starts `wse` here (`from wse_cli.app import main`)."""
    from wse_cli.process import guarded

    guarded(app)
