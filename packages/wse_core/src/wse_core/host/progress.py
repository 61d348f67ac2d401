"""A progress bar for long runs: rich's on a terminal, nothing at all elsewhere.

Contract. `progress(total, description)` is a context manager that yields `done(n)`: call it
with the count finished so far (steps, iterations, rows). On a terminal (`sys.stdout.isatty()`)
it draws a transient rich bar that disappears when the run ends; when output goes to a file,
a pipe, a closed stdout or a test (`quiet`, or not a terminal) it draws nothing and `done`
does nothing, so logs and captured output stay exactly as they were. `total` None or 0
shows a spinner.
Training steps (`wse train`) and MD steps (`wse hpc md`) use it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator

__all__ = ["progress"]


@contextlib.contextmanager
def progress(
    total: int | None, description: str, *, quiet: bool = False
) -> Iterator[Callable[[int], None]]:
    """Yields `done(n)`, drawing a bar of `total` only on a terminal (see module doc)."""
    if quiet or not _terminal():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import Progress

    # the terminal's own width: the `wse` command reads a COLUMNS below 80 as 80 for its
    # tables (wse_cli.entry), and a bar wider than the terminal wraps, and its redraw leaves
    # a line behind at every refresh
    with Progress(console=Console(width=_terminal_width()), transient=True) as bar:
        task = bar.add_task(description, total=total or None)
        yield lambda n: bar.update(task, completed=n)


def _terminal_width() -> int | None:
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns or None
    except (AttributeError, OSError, ValueError):
        return None


def _terminal() -> bool:
    """Whether stdout is a terminal; a closed one is none (hunt 65: `>&-` made sys.stdout
    None, and `wse hpc md` failed on its `isatty`)."""
    try:
        return sys.stdout is not None and sys.stdout.isatty()
    except (OSError, ValueError):  # a stream closed by the program
        return False
