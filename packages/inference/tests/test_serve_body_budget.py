"""The bytes of request bodies a server holds at once, all connections together
(`RequestLimits.max_body_bytes_in_flight`): past it a body is refused with 429 and
Retry-After, and what a body held is given back when it is parsed, refused or its client
leaves. Before hunt 58b each connection could hold `max_body_bytes`, so memory grew with the
number of clients: 300 clients each stalling a 2 MB body held 650 MB, 600 held 1.2 GB."""

from __future__ import annotations

import json
import socket

import httpx
import pytest
from wse_inference.serve.admission import RequestLimits
from wse_inference.serve.testing import running_server, wait_until

pytestmark = pytest.mark.timeout(120)

LIMITS = RequestLimits(max_body_bytes=100_000, max_body_bytes_in_flight=250_000)


def _stall(port: int, path: str = "/v1/completions") -> socket.socket:
    """A connection that sent 90 KB of a 100 KB body, then nothing."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" % path.encode()
    s.sendall(head + b"Content-Length: 100000\r\n\r\n" + b" " * 90_000)
    return s


def test_bodies_past_the_budget_are_a_429_and_the_budget_comes_back():
    with running_server(limits=LIMITS) as server:
        port = int(server.http_url.rsplit(":", 1)[1])
        held = lambda: server.app.state.body_budget.held  # noqa: E731
        first, second = _stall(port), _stall(port)
        assert wait_until(lambda: getattr(server.app.state, "body_budget", None) is not None)
        assert wait_until(lambda: held() == 180_000, 10), held()
        third = _stall(port, "/tokenize")  # was a 500 on the utility routes' path too
        answer = third.recv(65536)
        assert answer.startswith(b"HTTP/1.1 429"), answer[:200]
        assert b"retry-after: 1" in answer.lower()
        err = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
        assert err["reason"] == "queue_full" and "request bodies" in err["message"]
        small = {"model": "mock", "prompt": "abc", "max_tokens": 2}
        r = httpx.post(server.http_url + "/v1/completions", json=small, timeout=30)
        assert r.status_code == 200, r.text  # small bodies still fit beside the stalled ones
        assert httpx.get(server.http_url + "/health").status_code == 200
        for s in (first, second, third):
            s.close()
        assert wait_until(lambda: held() == 0, 10), held()  # given back by clients that left
        r = httpx.post(server.http_url + "/v1/completions", json=small, timeout=30)
        assert r.status_code == 200 and held() == 0  # and by a body parsed


def test_a_refused_or_malformed_body_gives_its_bytes_back():
    with running_server(limits=LIMITS) as server:
        url = server.http_url + "/v1/completions"
        assert httpx.post(url, content=b"{" * 50_000, timeout=30).status_code == 400
        big = httpx.post(url, content=(b"x" * 65536 for _ in range(3)), timeout=30)
        assert big.status_code == 413
        assert server.app.state.body_budget.held == 0
