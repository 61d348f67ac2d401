"""A serving leftover found by hunt 60: the 404 or 405 for a request whose method is a
10,000-character token (h11 takes any token as a method) repeated the method whole in its
message (10 KB); the method and path are echoed as `wse_core.errors.shown` echoes input,
their head and length. A chat template's exception (`raise_exception`) came back whole, its
newlines too; now one line of at most 200 characters of it and its length."""

from __future__ import annotations

import json
import socket

import httpx
import pytest
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(120)


def _raw(port: int, data: bytes) -> tuple[int, str]:
    """Status and error message of one raw HTTP/1.1 request."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]["message"]


@pytest.mark.parametrize(
    ("line", "status", "start"),
    [(b"X" * 10_000 + b" /v1/models", 405, "XXXX"), (b"X" * 10_000 + b" /nope", 404,
      "Invalid URL (XXXX"), (b"GET /" + b"a" * 10_000, 404, "Invalid URL (GET /aaaa")],
    ids=["method (405)", "method (404)", "path (404)"],
)  # fmt: skip
def test_an_http_error_echoes_a_long_method_or_path_as_its_head_and_length(line, status, start):
    with running_server() as server:
        port = int(server.http_url.rsplit(":", 1)[1])
        got, message = _raw(port, line + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert got == status and message.startswith(start), (got, message[:200])
    assert len(message) < 1_000 and "... (10,00" in message, len(message)


def test_a_template_exception_is_one_short_line():
    # hunt 60: raise_exception's text came back whole, its newlines too (a template that
    # names the offending message repeated 100,000 characters of it)
    template = "{{ raise_exception('bad turn:\\n' + messages[0].content) }}"
    body = {"model": "mock", "messages": [{"role": "user", "content": "x" * 100_000}]}
    with running_server(chat_template=template) as server:
        r = httpx.post(server.http_url + "/v1/chat/completions", json=body, timeout=30)
    message = r.json()["error"]["message"]
    assert r.status_code == 400 and "\n" not in message and len(message) < 400, message[:300]
    assert message.startswith("The chat template cannot render these messages: bad turn: xxx")
    assert message.endswith("... (100,010 characters)")


@pytest.mark.parametrize(
    ("path", "body", "start"),
    [("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 100_000}]},
      "However, the messages are 100,0"),
     ("/v1/completions", {"prompt": "x" * 100_000}, "However, the prompt is 100,000 bytes, "
      "at least 100,000 tokens of this tokenizer (at most 1 byte each). Please reduce")],
    ids=["messages", "prompt"],
)  # fmt: skip
def test_the_context_length_refusal_reads_as_english(path, body, start):
    # hunt 60: "the messages is N bytes", "(at most 1 bytes each)"
    with running_server() as server:
        r = httpx.post(server.http_url + path, json={"model": "mock", **body}, timeout=30)
    message = r.json()["error"]["message"]
    assert r.status_code == 400 and start in message, message
    assert " messages is " not in message and " 1 bytes " not in message, message
