"""Helpers for tests of the serving stack (importable; test files never import each other).

- `running_server(...)`: a `Server` over a `MockEngine` on free loopback ports, closed (with
  a bounded drain) on exit;
- `wait_until(predicate, timeout_s)`: poll with a deadline, for "slot freed" style checks;
- `events_until_finished(q, timeout_s)`: drain a scheduler sink queue up to the final event;
- `serve_subprocess(args)`: `python -c "...serve..."` in a child process, its HTTP URL parsed
  from the announce line; used for SIGTERM tests.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

from wse_inference.mock import MockEngine
from wse_inference.scheduler import StreamEvent
from wse_inference.server import ServeConfig, Server

__all__ = ["running_server", "wait_until", "events_until_finished", "serve_subprocess"]


@contextlib.contextmanager
def running_server(
    *, grpc: bool = False, max_queued: int = 64, drain_s: float = 2.0, **engine_kw: object
) -> Iterator[Server]:
    """A started mock server on 127.0.0.1 (free ports); yields the `Server`."""
    engine = MockEngine(**engine_kw)  # type: ignore[arg-type]
    cfg = ServeConfig(port=0, grpc_port=0 if grpc else None, max_queued=max_queued, drain_s=drain_s)
    server = Server(engine, cfg).start()
    try:
        yield server
    finally:
        server.close()


def wait_until(
    predicate: Callable[[], bool], timeout_s: float = 5.0, interval_s: float = 0.005
) -> bool:
    """True as soon as `predicate()` is; False after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


def events_until_finished(q: queue.Queue, timeout_s: float = 10.0) -> list[StreamEvent]:
    """Events from a sink queue, up to and including the one with `finish_reason`."""
    deadline = time.monotonic() + timeout_s
    events: list[StreamEvent] = []
    while True:
        ev = q.get(timeout=max(0.01, deadline - time.monotonic()))
        events.append(ev)
        if ev.finish_reason is not None:
            return events


_SERVE_CODE = """
import sys
from wse_inference.mock import MockEngine
from wse_inference.server import ServeConfig, serve
kw = eval(sys.argv[1])
serve(MockEngine(**kw.pop("engine")), ServeConfig(**kw), announce=lambda s: print(s, flush=True))
"""


@contextlib.contextmanager
def serve_subprocess(
    *, engine: dict, config: dict, timeout_s: float = 20.0
) -> Iterator[tuple[subprocess.Popen, str]]:
    """A mock server in a child process; yields (process, http_url). Killed on exit."""
    args = repr({"engine": engine, **config, "port": 0})
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE_CODE, args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        yield proc, _read_url(proc, timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _read_url(proc: subprocess.Popen, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()  # the server announces before anything else
        if not line and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before announcing")
        m = re.search(r"(http://[\d.]+:\d+)", line)
        if m:
            return m.group(1)
    raise TimeoutError("server did not announce its URL")
