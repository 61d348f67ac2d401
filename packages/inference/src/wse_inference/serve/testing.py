"""Helpers for tests of the serving stack (importable; test files never import each other).

- `running_server(...)`: a `Server` over a `MockEngine` on free loopback ports, closed (with
  a bounded drain) on exit;
- `wait_until(predicate, timeout_s)`: poll with a deadline, for "slot freed" style checks;
- `events_until_finished(q, timeout_s)`: drain a scheduler sink queue up to the final event;
- `serve_subprocess(engine=..., config=...)`: `wse_inference.serve.app.serve` over a MockEngine
  in a child process (`ServedProcess(proc, http_url, grpc_target)`), for SIGTERM tests.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

from wse_inference.mock import MockEngine
from wse_inference.serve.admission import RequestLimits
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.request import StreamEvent

__all__ = [
    "running_server",
    "wait_until",
    "events_until_finished",
    "serve_subprocess",
    "ServedProcess",
    "ipv6_loopback",
]


def ipv6_loopback() -> bool:
    """Whether this machine can bind ::1 (the IPv6 tests skip where it cannot)."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.create_server(("::1", 0), family=socket.AF_INET6):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def running_server(
    *,
    grpc: bool = False,
    max_queued: int = 64,
    drain_s: float = 2.0,
    chat_template: str | None = None,
    limits: RequestLimits | None = None,
    **engine_kw: object,
) -> Iterator[Server]:
    """A started mock server on 127.0.0.1 (free ports); yields the `Server`."""
    engine = MockEngine(**engine_kw)  # type: ignore[arg-type]
    cfg = ServeConfig(
        port=0,
        grpc_port=0 if grpc else None,
        max_queued=max_queued,
        drain_s=drain_s,
        chat_template=chat_template,
        limits=limits or RequestLimits(),
    )
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
import ast
import sys
from wse_inference.mock import MockEngine
from wse_inference.serve.admission import RequestLimits
from wse_inference.serve.app import ServeConfig, serve
kw = ast.literal_eval(sys.argv[1])
serve(MockEngine(**kw.pop("engine")), ServeConfig(**kw), announce=lambda s: print(s, flush=True))
"""


class ServedProcess(NamedTuple):
    proc: subprocess.Popen
    http_url: str
    grpc_target: str | None  # host:port when the config asked for gRPC


@contextlib.contextmanager
def serve_subprocess(
    *, engine: dict, config: dict, timeout_s: float = 20.0
) -> Iterator[ServedProcess]:
    """A mock server in a child process, its addresses read from its announce line.

    The child is killed on exit if it is still running.
    """
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
        line = _announce_line(proc, timeout_s)
        url = re.search(r"http://(\[[\da-f:]+\]|[\d.]+):\d+", line)
        grpc = re.search(r"gRPC ((\[[\da-f:]+\]|[\d.]+):\d+)", line)
        assert url is not None, line
        yield ServedProcess(proc, url.group(0), grpc.group(1) if grpc else None)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _announce_line(proc: subprocess.Popen, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()  # the server announces before anything else
        if not line and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before announcing")
        if "serving" in line and "http://" in line:
            return line
    raise TimeoutError("server did not announce its URL")
