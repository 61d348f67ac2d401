"""What surrounds `jax.distributed.initialize` in `wse_core.host.distributed.initialize`: the
processes of a run meet at process 0's coordinator, and each failure to meet is one line.

- `check_reachable(run)`, before the join: the coordinator's host resolves, and process 0 can
  bind its port, as JAX's service binds it on every address (hunt 71: 'nosuchhost.invalid'
  waited 135 s, then SIGABRT; a port another program held was a SIGSEGV in process 0 and a
  127-s wait in the others). A `WseError`.
- `watched(run, timeout_s)`, around the join: a run not gathered within `timeout_s` ends
  this process with one line and exit 1, while JAX's own timeout (later) would abort it with
  14 lines of absl log naming neither host nor port (hunt 71). JAX holds the main thread in
  native code meanwhile, where no exception reaches: a watchdog thread ends the process.
- `agree_on_count(run, timeout_s)`, after it: JAX's service runs process 0's count, and a
  process told 3 joined a run of 2 and exited 0 (hunt 71). Each process publishes its count
  in the coordination service's key-value store (`jax._src.distributed.global_state.client`:
  `key_value_set`, `blocking_key_value_get`, in jaxlib 0.4 to 0.10) and compares it with
  process 0's, and process 0 with every other's, so each of them refuses (a `WseError`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from wse_core.errors import WseError, shown

if TYPE_CHECKING:
    from wse_core.host.distributed import Run

__all__ = ["COUNT_KEY", "said", "check_reachable", "watched", "agree_on_count"]

COUNT_KEY = "wse/num_processes"  # the key-value store's key of each process's count


def said(name: str, value: object) -> str:
    """A value with what set it: `--num-processes 3`, `WSE_NUM_PROCESSES=3`."""
    return f"{name} {value}" if name.startswith("-") else f"{name}={value}"


def _host_port(coordinator: str) -> tuple[str, int]:
    host, _, port = coordinator.rpartition(":")
    return host.strip("[]"), int(port)


def check_reachable(run: Run) -> None:
    """Refuse a coordinator whose host does not resolve, or, in process 0, whose port is
    taken (module doc)."""
    host, port = _host_port(str(run.coordinator))
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:  # socket.gaierror is an OSError
        why = getattr(e, "strerror", None) or e
        raise WseError(f"{run.names[2]} host {shown(host)} does not resolve ({why})") from None
    if run.process_id != 0:
        return
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a past run's TIME_WAIT
        try:
            probe.bind(("", port))
        except OSError as e:
            raise WseError(
                f"{run.names[2]} port {port} is in use by another program ({e.strerror}); "
                "give a free port"
            ) from None


@contextlib.contextmanager
def watched(run: Run, timeout_s: float) -> Iterator[None]:
    """The join inside this block, ended with one line and exit 1 past `timeout_s`."""
    joined = threading.Event()

    def watch() -> None:
        if not joined.wait(timeout_s):
            _end(_not_gathered(run, timeout_s))

    threading.Thread(target=watch, name="wse-join-watchdog", daemon=True).start()
    try:
        yield
    finally:
        joined.set()


def _not_gathered(run: Run, timeout_s: float) -> str:
    c, n = run.coordinator, run.num_processes
    if run.process_id != 0 and not _answers(str(c)):
        return f"no coordinator answered at {c} within {timeout_s:g} s (is process 0 running?)"
    return (
        f"the run at {c} did not gather its {n} processes within {timeout_s:g} s (is every "
        f"process started, with the same {run.names[0]} and coordinator?)"
    )


def _answers(coordinator: str) -> bool:
    try:
        with socket.create_connection(_host_port(coordinator), timeout=2):
            return True
    except OSError:
        return False


def _end(message: str) -> None:
    """End this process now, `message` its one line, exit 1 (the main thread is in JAX's
    native join: nothing can be raised into it)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(OSError):
        os.write(2, f"Error: {message}\n".encode(errors="replace"))
    os._exit(1)


def agree_on_count(run: Run, timeout_s: float) -> None:
    """Refuse (a `WseError`) where this process's count is not process 0's (module doc)."""
    try:
        from jax._src.distributed import global_state

        client = global_state.client
        put, get = client.key_value_set, client.blocking_key_value_get  # type: ignore[union-attr]
    except (ImportError, AttributeError):  # a JAX without the store (or no client): no check
        return
    n, i, name = run.num_processes, run.process_id, run.names[0]
    wait_ms = int(timeout_s * 1000)
    put(f"{COUNT_KEY}/{i}", str(n))
    theirs = int(get(f"{COUNT_KEY}/0", wait_ms))
    if theirs != n:
        raise WseError(
            f"process {i} was started with {said(name, n)}, but the coordinator (process 0) "
            f"runs {theirs}"
        )
    for k in range(1, n) if i == 0 else ():
        if (other := int(get(f"{COUNT_KEY}/{k}", wait_ms))) != n:
            raise WseError(
                f"process {k} was started with {said(name, other)}, but the coordinator "
                f"(process 0) runs {n}"
            )
