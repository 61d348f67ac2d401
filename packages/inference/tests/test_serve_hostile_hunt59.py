"""Serving leftovers of earlier hunts, fixed by hunt 59. A stop string of 1 MB was taken by
both front ends (the stream holds back len - 1 characters of text to match a stop, so it held
the whole completion back); now a stop string is at most `RequestLimits.max_stop_chars`
(1,024) characters, refused with OpenAI's wording and code. After a 413 on its
Content-Length, the rest of a body was read and dropped for as long as the client sent (8.9
GB in 15 s); now at most `max_discard_bytes` and `discard_s`, then the connection closes,
while a client that finishes its body within them keeps its connection."""

from __future__ import annotations

import json
import socket
import time

import grpc
import httpx
import pytest
from wse_inference.serve.admission import RequestLimits
from wse_inference.serve.proto import load_stubs
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(120)
pb2, pb2_grpc = load_stubs()
C, CHAT = "/v1/completions", "/v1/chat/completions"
BASE = {
    C: {"model": "mock", "prompt": "abc", "max_tokens": 3},
    CHAT: {"model": "mock", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
}


@pytest.fixture(scope="module")
def server():
    with running_server(grpc=True, max_slots=2, max_context=64) as s:
        yield s


@pytest.mark.parametrize("route", [C, CHAT])
@pytest.mark.parametrize("stop", ["s" * 1025, ["end", "s" * 1_000_000]], ids=["1025", "list 1MB"])
def test_a_stop_string_past_1024_characters_is_a_400_naming_it(server, route, stop):
    r = httpx.post(server.http_url + route, json={**BASE[route], "stop": stop}, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    index = 0 if isinstance(stop, str) else 1
    length = len(stop if isinstance(stop, str) else stop[1])
    assert err["message"] == (
        f"Invalid 'stop[{index}]': string too long. Expected a string with maximum length 1024, "
        f"but got a string with length {length:,} instead."
    )
    assert (err["param"], err["reason"]) == ("stop", "string_above_max_length")


def test_a_stop_string_of_1024_characters_is_served(server):
    body = {**BASE[C], "stop": ["s" * 1024, "t"]}
    assert httpx.post(server.http_url + C, json=body, timeout=30).status_code == 200


def test_grpc_refuses_a_long_stop_string_as_invalid_argument(server):
    channel = grpc.insecure_channel(server.grpc_target)
    req = pb2.GenerateRequest(text="hi", max_tokens=2, stop=["x" * 1_000_000])
    with channel, pytest.raises(grpc.RpcError) as info:
        list(pb2_grpc.GenerationStub(channel).Generate(req, timeout=10))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "maximum length 1024" in info.value.details()


def _port(server) -> int:
    return int(server.http_url.rsplit(":", 1)[1])


def _head(length: int) -> bytes:
    return (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % length
    )


def _send_until_closed(s: socket.socket, seconds: float) -> tuple[int, float]:
    """Bytes sent before the server closed the connection, and when (s from the start)."""
    sent, t0, chunk = 0, time.monotonic(), b"x" * 65536
    try:
        while time.monotonic() - t0 < seconds:
            s.sendall(chunk)
            sent += len(chunk)
    except OSError:  # reset or broken pipe: closed
        return sent, time.monotonic() - t0
    return sent, float("inf")


def test_a_refused_body_is_dropped_within_its_byte_bound_then_closed():
    limits = RequestLimits(max_discard_bytes=4 << 20, discard_s=60)
    with running_server(limits=limits) as server:
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as s:
            s.sendall(_head(10**11))
            assert s.recv(400).startswith(b"HTTP/1.1 413")
            sent, when = _send_until_closed(s, 30)
        assert when < 30 and sent < 64 << 20, (sent, when)  # socket buffers: a few MB over
        assert httpx.get(server.http_url + "/health").status_code == 200


def test_a_refused_body_is_dropped_within_its_time_bound_then_closed():
    limits = RequestLimits(max_discard_bytes=1 << 40, discard_s=0.5)
    with running_server(limits=limits) as server:
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as s:
            s.sendall(_head(10**11))
            assert s.recv(400).startswith(b"HTTP/1.1 413")
            t0 = time.monotonic()
            s.settimeout(10)
            while True:  # a slow client: a byte every 50 ms until the server closes
                try:
                    s.sendall(b"x")
                except OSError:
                    break
                time.sleep(0.05)
                assert time.monotonic() - t0 < 10, "still open"
        assert time.monotonic() - t0 >= 0.4


def test_a_client_that_finishes_its_refused_body_keeps_its_connection():
    limit = 1 << 20
    with running_server(limits=RequestLimits(max_body_bytes=limit)) as server:
        body = json.dumps({"model": "mock", "prompt": "x" * (2 * limit)}).encode()
        ok = json.dumps({"model": "mock", "prompt": "abc", "max_tokens": 2}).encode()
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as s:
            s.sendall(_head(len(body)) + body)  # the whole body, then a second request
            s.sendall(_head(len(ok)) + ok)
            answer = b""
            while answer.count(b"HTTP/1.1 ") < 2 or not answer.endswith(b"}"):
                chunk = s.recv(65536)
                assert chunk, answer
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 413") and b"HTTP/1.1 200 OK" in answer
