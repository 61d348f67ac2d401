"""Ctrl-C that a run cannot lose.

Python raises KeyboardInterrupt wherever the main thread is when SIGINT arrives. When that is
inside a finalizer (a `__del__` or a weakref callback run by the garbage collector), the
exception is only reported as "ignored" and the code around it goes on: `wse train tiny`,
interrupted at about step 60, twice ran on to its last step and exited 0 (stop 66, 2 of
about 12 tries). `caught()` installs a handler that records the signal and then raises as
Python's own does; the training loop asks `requested()` at each step and raises the
interrupt itself if it was lost. Only the main thread, and only where SIGINT has Python's
default handler (an embedding program's own handler is left alone). The `wse` command sets
its own (`wse_cli.interrupts`), which raises a Ctrl-C that landed in a finalizer at the
first line outside it: `caught()` then leaves it alone, and the loop never raises a second
interrupt of its own during the cleanup of the first.

`held()` makes a block whole: a SIGINT, SIGTERM or SIGHUP that comes inside it is raised at its
end by the handler it would have met (hunt 75: a Ctrl-C inside tensorboardX's `add_scalar`, a
multiprocessing queue's put, left its feeder thread waiting for ever, and the run's close hung
on it, 1 of 8 tries).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["caught", "held", "requested"]

_requested = threading.Event()


def _on_sigint(signum: int, frame: object) -> None:
    _requested.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def caught() -> Iterator[None]:
    """Inside this block a Ctrl-C is also recorded for `requested()`."""
    mine = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    if mine:
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        if mine:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            _requested.clear()


def requested() -> bool:
    """Whether Ctrl-C reached the run inside `caught()` (raised or not)."""
    return _requested.is_set()


_HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Inside this block SIGINT, SIGTERM and SIGHUP wait: the first that came is raised at its
    end by its own handler (only Python handlers are held, and only in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []

    def hold(signum: int, frame: object) -> None:
        came.append(signum)

    before = {}
    for s in _HELD:
        handler = signal.getsignal(s)
        if callable(handler):
            before[s] = signal.signal(s, hold)
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        if came:
            before[came[0]](came[0], None)
