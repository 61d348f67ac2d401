"""A progress bar for long runs: rich's on a terminal, nothing at all elsewhere.

Contract. `progress(total, description)` is a context manager that yields `done(n)`: call it
with the count finished so far (steps, iterations, rows). On a terminal (`sys.stdout.isatty()`)
it draws a transient rich bar that disappears when the run ends; when output goes to a file,
a pipe or a test (`quiet`, or not a terminal) it draws nothing and `done` does nothing, so
logs and captured output stay exactly as they were. `total` None or 0 shows a spinner.
Training steps (`wse train`) and MD steps (`wse hpc md`) use it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

__all__ = ["progress"]


@contextlib.contextmanager
def progress(
    total: int | None, description: str, *, quiet: bool = False
) -> Iterator[Callable[[int], None]]:
    """Yields `done(n)`, drawing a bar of `total` only on a terminal (see module doc)."""
    if quiet or not sys.stdout.isatty():
        yield lambda n: None
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(description, total=total or None)
        yield lambda n: bar.update(task, completed=n)
