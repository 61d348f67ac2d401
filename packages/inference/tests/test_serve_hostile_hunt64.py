"""HTTP request bodies of hunt 64 against a running mock server, refused at once with OpenAI's
error body, the server still healthy after. Broken before:

- two Content-Encoding headers, "identity" then "gzip": only the first was read, and the gzip
  body was refused as "in UTF-16 or UTF-32" (code invalid_json); RFC 9110 reads repeated
  headers as one list of codings, applied in order. "identity, identity" was refused as a
  coding not supported, and an empty Content-Encoding (a list of no codings) too;
- a chunked body whose chunk-size line declares more than the 2 MiB body limit ("40000000",
  1 GiB) was waited on for `body_idle_s` (10 s) and then refused with 400 "The request body
  stopped arriving ... with a Content-Length", holding the connection and a worker; it is now
  a 413 at the size line, as a Content-Length past the limit already was.
"""

from __future__ import annotations

import gzip
import json
import socket
import time

import httpx
import pytest
from wse_inference.serve.admission import RequestLimits
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(120)

BODY = {"model": "mock", "prompt": "abc", "max_tokens": 2}
RAW = json.dumps(BODY).encode()
HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
CHUNKED = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
SMALL = 1000  # max_body_bytes of the second server, for the bound itself


@pytest.fixture(scope="module")
def server():
    with running_server(max_slots=2) as s:
        yield s


@pytest.fixture(scope="module")
def small_server():
    with running_server(max_slots=2, limits=RequestLimits(max_body_bytes=SMALL)) as s:
        yield s


def _port(server) -> int:
    return int(server.http_url.rsplit(":", 1)[1])


def _answer(server, *writes: bytes, timeout_s: float = 30.0) -> tuple[float, int, dict]:
    """Seconds from the last write to a whole answer, its status and JSON body; the writes are
    sent 0.2 s apart (so each arrives in its own read)."""
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=timeout_s) as s:
        for i, raw in enumerate(writes):
            time.sleep(0.2 if i else 0.0)
            s.sendall(raw)
        start, answer = time.monotonic(), b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
            chunk = s.recv(65536)
            assert chunk, answer[:300]  # closed before a whole answer
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert httpx.get(server.http_url + "/health").status_code == 200
    return time.monotonic() - start, int(head.split()[1]), json.loads(body)


def _length(answer: bytes) -> int:
    head = answer.partition(b"\r\n\r\n")[0].lower()
    line = head.partition(b"content-length:")[2].partition(b"\r\n")[0]
    return int(line) if line.strip() else 1 << 30


def _error(r: httpx.Response, status: int, server) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code", "reason"} and "\n" not in err["message"]
    assert httpx.get(server.http_url + "/health").status_code == 200
    return err


# --- hole 8: every Content-Encoding header counts --------------------------------------


@pytest.mark.parametrize(
    "headers, named",
    [
        (["identity", "gzip"], "identity, gzip"),  # was "in UTF-16 or UTF-32"
        (["identity", "Identity", "GZIP"], "identity, identity, gzip"),
        (["identity,", "br, gzip"], "identity, br, gzip"),
        (["gzip", "identity"], "gzip, identity"),
        (["identity, gzip"], "identity, gzip"),
    ],
)
def test_every_content_encoding_header_is_read_and_named(server, headers, named):
    gz = gzip.compress(RAW)
    sent = [("content-type", "application/json")] + [("content-encoding", h) for h in headers]
    r = httpx.post(server.http_url + "/v1/completions", content=gz, headers=sent)
    err = _error(r, 400, server)
    assert err["reason"] == "invalid_content_encoding", err
    assert err["message"] == (
        f"Content-Encoding {named!r} is not supported; send the JSON body uncompressed "
        "(no Content-Encoding)."
    )


@pytest.mark.parametrize(
    "headers", [["identity", "identity"], ["identity, identity"], ["identity,,"], [""]]
)
def test_codings_that_are_all_identity_or_empty_are_served(server, headers):
    sent = [("content-type", "application/json")] + [("content-encoding", h) for h in headers]
    r = httpx.post(server.http_url + "/v1/completions", content=RAW, headers=sent)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == "de"  # the mock continues "abc" with "de"


# --- hole 9: a chunk-size line past the body limit is a 413 at once --------------------


def _too_large(declared: int, limit: int = 2**21) -> str:
    # hunt 75: the chunks' declared sizes so far are a lower bound of a chunked body's size
    return (
        f"The request body is at least {declared:,} bytes (its chunk sizes so far); this server "
        f"takes at most {limit:,} bytes."
    )


@pytest.mark.parametrize(
    "size_line, declared",
    [(b"40000000", 2**30), (b"ffffffffffffffffffff", 16**20 - 1), (b"200001", 2**21 + 1)],
)
def test_a_chunk_declaring_more_than_the_limit_is_a_413_at_once(server, size_line, declared):
    # was a 400 "stopped arriving ... then nothing for 10 s" after 10 s
    wait_s, status, body = _answer(server, CHUNKED + size_line + b"\r\n" + RAW[:50])
    assert (status, body["error"]["reason"]) == (413, "request_too_large"), body
    assert body["error"]["message"] == _too_large(declared)
    assert wait_s < 2.0, wait_s


def test_a_size_line_arriving_alone_is_a_413_before_its_first_byte(server):
    wait_s, status, body = _answer(server, CHUNKED, b"40000000\r\n")
    assert (status, body["error"]["message"]) == (413, _too_large(2**30)), body
    assert wait_s < 2.0, wait_s


def test_a_later_chunk_counts_with_the_bytes_before_it(server):
    first = b"%x\r\n%s\r\n" % (2**20 + 2**19, b" " * (2**20 + 2**19))  # 1.5 MiB taken
    wait_s, status, body = _answer(server, CHUNKED + first, b"100000\r\n")  # 1 MiB more
    assert (status, body["error"]["message"]) == (413, _too_large(2**20 * 5 // 2)), body
    assert wait_s < 2.0, wait_s


def _chunked(body: bytes, piece: int) -> bytes:
    parts = [body[i : i + piece] for i in range(0, len(body), piece)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


@pytest.mark.parametrize("piece", [SMALL, 7])
def test_a_chunked_body_of_exactly_the_limit_is_served(small_server, piece):
    body = RAW + b" " * (SMALL - len(RAW))
    _, status, answer = _answer(small_server, CHUNKED + _chunked(body, piece))
    assert status == 200 and answer["choices"][0]["text"] == "de", answer


def test_one_byte_past_the_limit_in_a_size_line_is_a_413(small_server):
    _, status, body = _answer(small_server, CHUNKED + b"%x\r\n" % (SMALL + 1) + RAW)
    assert (status, body["error"]["message"]) == (413, _too_large(SMALL + 1, SMALL)), body


def test_the_connection_serves_the_next_request_after_a_chunked_body(server):
    one = CHUNKED + _chunked(RAW, 10)
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=30) as s:
        for _ in range(2):  # kept alive: the second request on the same connection
            s.sendall(one)
            answer = b""
            while b'"de"' not in answer:
                chunk = s.recv(65536)
                assert chunk, answer[:300]
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 OK"), answer[:300]
