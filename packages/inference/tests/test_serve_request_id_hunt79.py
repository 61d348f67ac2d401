"""Review 79 (revB): serving holes around the response id and error bodies. Before the fixes:

1. the body's `request_id` and the X-Request-Id header had no length bound, and every
   streamed chunk of every choice repeats the id: a 1,000,000-character request_id, n = 2,
   answered 2,001,280 bytes (n = 4: 6,002,896);
2. a request the engine itself refused answered `reason` "invalid_value" whole but
   "invalid" streamed (the status mapping was written twice in `generation`);
3. `bench_tokens._model_refused` read `code == "model_not_found"`, which this server no
   longer sends (`code` is the status; the string is `reason`), and took vLLM's 404 only by
   its message's words.

Oracles: hand-counted lengths at and one past `RequestLimits.max_request_id_chars` (256, as
`user`); the bytes of the refusal against the id's; the same refusal whole and streamed;
error bodies written as this server and vLLM send them, and this server's own /tokenize 404.
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest
from wse_core.errors import WseError
from wse_inference.demo.bench_tokens import _model_refused
from wse_inference.mock import MockEngine
from wse_inference.serve.admission import RequestLimits
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(120)

CHAT = {"model": "mock", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
PROMPT = {"model": "mock", "max_tokens": 2, "prompt": "hi"}
ROUTES = {"/v1/chat/completions": CHAT, "/v1/completions": PROMPT}
LIMIT = 256  # `RequestLimits.max_request_id_chars`, as `user`'s


@pytest.fixture(scope="module")
def server():
    with running_server(max_slots=2) as s:
        yield s


def _ids(r: httpx.Response) -> set[str]:
    if r.headers["content-type"].startswith("text/event-stream"):
        return {json.loads(x[6:])["id"] for x in r.text.splitlines() if x.startswith("data: {")}
    return {r.json()["id"]}


def test_the_bound_is_users():
    assert RequestLimits().max_request_id_chars == RequestLimits().max_user_chars == LIMIT


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("stream", [False, True])
def test_a_body_request_id_past_256_characters_is_a_400_naming_it(server, route, stream):
    body = {**ROUTES[route], "stream": stream, "n": 2}
    ok = httpx.post(server.http_url + route, json={**body, "request_id": "r" * LIMIT}, timeout=10)
    assert ok.status_code == 200, ok.text
    assert {i.split("-", 1)[1] for i in _ids(ok)} == {"r" * LIMIT}
    r = httpx.post(server.http_url + route, json={**body, "request_id": "r" * (LIMIT + 1)},
                   timeout=10)  # fmt: skip
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["message"] == (
        "request_id must be at most 256 characters (the response id repeats it in every "
        "chunk), got 257 characters."
    )
    assert (err["param"], err["code"], err["reason"]) == (
        "request_id", 400, "string_above_max_length")  # fmt: skip


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("stream", [False, True])
def test_an_x_request_id_header_past_256_characters_is_a_400_naming_it(server, route, stream):
    body = {**ROUTES[route], "stream": stream}
    ok = httpx.post(server.http_url + route, json=body, headers={"X-Request-Id": "h" * LIMIT},
                    timeout=10)  # fmt: skip
    assert ok.status_code == 200 and {i.split("-", 1)[1] for i in _ids(ok)} == {"h" * LIMIT}
    r = httpx.post(server.http_url + route, json={**body, "request_id": "short"},
                   headers={"X-Request-Id": "h" * 1000}, timeout=10)  # fmt: skip
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["message"] == (
        "X-Request-Id must be at most 256 characters (the response id repeats it in every "
        "chunk), got 1,000 characters."
    )
    assert (err["param"], err["reason"]) == ("X-Request-Id", "string_above_max_length")


def test_a_megabyte_request_id_no_longer_comes_back_per_chunk(server):
    """The review's repro: 1,000,000 characters, stream, n = 2 answered 2,001,280 bytes."""
    body = {**PROMPT, "stream": True, "n": 2, "request_id": "x" * 1_000_000}
    r = httpx.post(server.http_url + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 400 and len(r.content) < 400, len(r.content)


def test_a_body_request_id_with_cr_lf_stays_in_the_json(server):
    """The body's id is never a response header (only the client's own X-Request-Id header
    is echoed), so CR/LF in it cannot add a header; the JSON escapes it."""
    rid = "a\r\nX-Injected: 1"
    r = httpx.post(server.http_url + "/v1/completions", json={**PROMPT, "request_id": rid},
                   timeout=10)  # fmt: skip
    assert r.status_code == 200 and r.json()["id"] == "cmpl-" + rid
    assert "x-injected" not in r.headers and "x-request-id" not in r.headers


def test_an_x_request_id_header_with_a_bare_cr_is_refused_by_h11(server):
    """h11 refuses CR, LF and NUL in a header value before any route sees it."""
    host, port = server.http_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\rX-Injected: 1"
                  b"\r\nContent-Length: 2\r\n\r\n{}")  # fmt: skip
        head = s.recv(4096).split(b"\r\n\r\n")[0]
    assert head.startswith(b"HTTP/1.1 400") and b"x-injected" not in head.lower()


class _RefusingEngine(MockEngine):
    """A mock whose prefill refuses every request (a `WseError`: the client's fault)."""

    def prefill(self, **kw):  # type: ignore[override]
        raise WseError("this engine refuses it")


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_an_engine_refusal_is_the_same_400_whole_and_streamed(route):
    server = Server(_RefusingEngine(max_slots=2), ServeConfig(port=0, grpc_port=None)).start()
    try:
        whole = httpx.post(server.http_url + route, json=ROUTES[route], timeout=10)
        streamed = httpx.post(server.http_url + route, json={**ROUTES[route], "stream": True},
                              timeout=10)  # fmt: skip
    finally:
        server.close()
    assert whole.status_code == 400
    want = {"message": "this engine refuses it", "type": "BadRequestError", "param": None,
            "code": 400, "reason": "invalid_value"}  # fmt: skip
    assert whole.json()["error"] == want
    errors = [json.loads(x[6:]) for x in streamed.text.splitlines()
              if x.startswith("data: {") and '"error"' in x]  # fmt: skip
    assert [e["error"] for e in errors] == [want]


# -- bench_tokens._model_refused ----------------------------------------------------------


def test_this_servers_tokenize_404_is_a_model_refusal_by_its_reason(server):
    r = httpx.post(server.http_url + "/tokenize", json={"model": "nope", "prompt": "hi"},
                   timeout=10)  # fmt: skip
    said = r.json()
    assert r.status_code == 404 and said["error"]["reason"] == "model_not_found"
    assert _model_refused(404, r.content)
    said["error"]["param"] = None  # by its reason alone (the code is 404, not the string)
    assert _model_refused(404, json.dumps(said).encode())


def test_this_servers_route_404_and_a_texts_400_are_not_model_refusals(server):
    r = httpx.post(server.http_url + "/no-such-route", json={"model": "mock"}, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["type"] == "Not Found"
    assert not _model_refused(404, r.content)
    assert not _model_refused(404, b'{"detail": "Not Found"}')  # Starlette's own 404
    r = httpx.post(server.http_url + "/tokenize", json={"model": "mock", "prompt": 5},
                   timeout=10)  # fmt: skip
    assert r.status_code == 400 and not _model_refused(400, r.content)


def test_vllms_404_not_found_error_is_a_model_refusal_whatever_its_words():
    body = {"error": {"message": "Model nope not served", "type": "NotFoundError",
                      "param": None, "code": 404}}  # fmt: skip
    assert _model_refused(404, json.dumps(body).encode())
    body["error"]["message"] = "The model `nope` does not exist."
    assert _model_refused(404, json.dumps(body).encode())
    assert not _model_refused(500, json.dumps(body).encode())
