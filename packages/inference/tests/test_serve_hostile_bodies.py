"""Hostile HTTP requests of hunt 58b, each answered with OpenAI's JSON error body naming what
would be right, the server still healthy after: a body declared in a charset other than
UTF-8 (was read as UTF-8 anyway, or "Malformed JSON ... can't decode byte"), an empty body
(was "Expecting value: line 1 column 1 (char 0)"), GET /openapi.json (was FastAPI's schema
of 422 bodies this server never sends) and n choices beyond the server's slots + queue (was
a 429 "retry later" on an idle server, which no retry could pass), numbers of thousands of
digits (a 500, or an 8 KB message), and a request line or headers past 16 KiB sent in one
write (taken up to ~256 KB: the limit held only for a head that arrived in pieces)."""

from __future__ import annotations

import json
import socket

import httpx
import pytest
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(120)

BODY = {"model": "mock", "prompt": "abc", "max_tokens": 2}


@pytest.fixture(scope="module")
def server():
    with running_server(max_slots=2, max_queued=1) as s:
        yield s


def _error(r: httpx.Response, status: int, server) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code", "reason"} and "\n" not in err["message"]
    assert httpx.get(server.http_url + "/health").status_code == 200
    return err


@pytest.mark.parametrize("charset", ["utf-16", "latin-1", '"ISO-8859-1"', "ascii"])
def test_a_charset_other_than_utf8_is_a_400_naming_it(server, charset):
    ctype = f"application/json; charset={charset}"
    r = httpx.post(server.http_url + "/v1/completions", json=BODY, headers={"content-type": ctype})
    err = _error(r, 400, server)
    assert err["reason"] == "invalid_content_type" and "UTF-8" in err["message"]
    assert charset.strip('"').lower() in err["message"]


@pytest.mark.parametrize("charset", ["utf-8", "UTF-8", '"utf-8"', "utf8"])
def test_utf8_declared_is_still_served(server, charset):
    headers = {"content-type": f"application/json; charset={charset}"}
    r = httpx.post(server.http_url + "/v1/completions", json=BODY, headers=headers)
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "de"


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/tokenize"])
@pytest.mark.parametrize("raw", [b"", b"  \r\n "])
def test_an_empty_body_is_a_400_saying_so(server, path, raw):
    r = httpx.post(server.http_url + path, content=raw)
    err = _error(r, 400, server)
    assert err["reason"] == "invalid_json" and "body is empty" in err["message"]


@pytest.mark.parametrize("path", ["/openapi.json", "/docs", "/redoc"])
def test_no_schema_or_docs_route_is_served(server, path):
    err = _error(httpx.get(server.http_url + path), 404, server)
    assert "Invalid URL" in err["message"] and "POST /v1/completions" in err["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_more_choices_than_slots_and_queue_is_a_400_not_a_429(server, stream):
    r = httpx.post(server.http_url + "/v1/completions", json={**BODY, "n": 4, "stream": stream})
    err = _error(r, 400, server)
    assert err["param"] == "n" and "at most 3 (2 decode slots + 1 queued" in err["message"]
    assert "n <= 3" in err["message"]
    ok = httpx.post(server.http_url + "/v1/completions", json={**BODY, "n": 3})
    assert ok.status_code == 200 and [c["text"] for c in ok.json()["choices"]] == ["de"] * 3


BIG = 10**4000  # JSON reads it (4,001 digits, under Python's 4,300); past 1.8e308 as a float


@pytest.mark.parametrize(
    "field, value, param",
    [
        ("temperature", BIG, "temperature"),  # was a 500: math.isfinite(int) overflowed
        ("top_p", -BIG, "top_p"),
        ("presence_penalty", BIG, "presence_penalty"),
        ("repetition_penalty", 10**309, "repetition_penalty"),
        ("max_tokens", BIG, "max_tokens"),  # was an 8 KB message, the digits twice
        ("max_completion_tokens", -BIG, "max_completion_tokens"),
        ("seed", BIG, "seed"),
        ("n", BIG, "n"),
        ("best_of", BIG, "best_of"),
        ("top_k", BIG, "top_k"),
        ("logprobs", BIG, "logprobs"),
        ("prompt", [BIG], "prompt"),
        ("prompt", [[1, BIG]], "prompt"),
        ("stop_token_ids", [BIG], "stop_token_ids"),
    ],
)
def test_a_number_of_thousands_of_digits_is_a_short_400(server, field, value, param):
    r = httpx.post(server.http_url + "/v1/completions", json={**BODY, field: value}, timeout=30)
    err = _error(r, 400, server)
    assert err["param"] == param and len(err["message"]) < 200, err["message"][:300]
    assert "4,001 digits" in err["message"] or "310 digits" in err["message"]


def test_detokenize_of_a_token_id_of_thousands_of_digits_is_a_short_400(server):
    r = httpx.post(server.http_url + "/detokenize", json={"tokens": [65, BIG]}, timeout=30)
    err = _error(r, 400, server)
    assert err["param"] == "tokens" and len(err["message"]) < 200


def _send_whole(server, head: bytes) -> bytes:
    """A request written in one sendall (one read on the server: h11 sees a complete head)."""
    port = int(server.http_url.rsplit(":", 1)[1])
    body = json.dumps(BODY).encode()
    end = b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head + end % len(body) + body)
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except ConnectionResetError:  # closed after its 400, with our bytes still unread
            pass
    return answer


@pytest.mark.parametrize(
    "head",
    [
        b"POST /v1/completions?" + b"q" * 17_000 + b" HTTP/1.1\r\nHost: x\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 17_000 + b"\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
        + b"".join(b"X-%d: %s\r\n" % (i, b"a" * 90) for i in range(200)),
    ],
)
def test_a_head_past_16kib_in_one_write_is_a_400_naming_the_limit(server, head):
    answer = _send_whole(server, head)
    status, _, rest = answer.partition(b"\r\n")
    assert status == b"HTTP/1.1 400 Bad Request", answer[:200]
    err = json.loads(rest.partition(b"\r\n\r\n")[2])["error"]
    assert "the request line and headers exceed 16,384 bytes" in err["message"]
    assert httpx.get(server.http_url + "/health").status_code == 200


def test_a_head_under_16kib_in_one_write_is_served(server):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 15_000 + b"\r\n"
    assert _send_whole(server, head).startswith(b"HTTP/1.1 200 OK")


def test_both_transfer_encoding_and_content_length_is_a_400_and_a_close(server):
    # was a 200 read as chunked, the connection kept open (RFC 9112 6.3: close it)
    port = int(server.http_url.rsplit(":", 1)[1])
    body = json.dumps(BODY).encode()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    framing = b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head + framing + chunked)
        while chunk := s.recv(65536):  # ends: the server closed the connection
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 Bad Request"), answer[:200]
    err = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert "both Transfer-Encoding and Content-Length" in err["message"]
    assert "decimal integer" not in err["message"]
    assert httpx.get(server.http_url + "/health").status_code == 200


@pytest.mark.parametrize(
    "raw",
    [
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",  # h2 preface
        b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n",
        b"GET /health HTTP/1.2\r\nHost: x\r\n\r\n",
    ],
)
def test_an_http_version_other_than_1x_is_one_400_naming_it(server, raw):
    # the preface was a 404 for "PRI *", then a 400 on "SM"; HTTP/2.0 lines were served
    port = int(server.http_url.rsplit(":", 1)[1])
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(raw)
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.count(b"content-length:") == 1, answer[:300]  # one answer
    assert answer.startswith(b"HTTP/1.1 400"), answer[:300]
    err = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert "is not served here; send HTTP/1.1" in err["message"]


def test_http_10_is_still_served(server):
    port = int(server.http_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.0\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 200 OK")


@pytest.mark.parametrize(
    "path, field", [("/v1/completions", "prompt"), ("/v1/chat/completions", "messages")]
)
@pytest.mark.parametrize("how", ["left out", "null"])
def test_a_missing_prompt_is_missing_required_parameter(server, path, field, how):
    body = {"model": "mock", "max_tokens": 2, **({field: None} if how == "null" else {})}
    err = _error(httpx.post(server.http_url + path, json=body), 400, server)
    assert (err["param"], err["reason"]) == (field, "missing_required_parameter")
    assert err["message"].startswith(f"{field} is required")


@pytest.mark.parametrize(
    "raw, words",
    [
        (json.dumps(BODY).encode("utf-16"), "in UTF-16 or UTF-32"),
        (json.dumps(BODY).encode("utf-32-le"), "in UTF-16 or UTF-32"),
        (b'{"model": "mock", "prompt": "caf\xe9"}', "not UTF-8 (byte 32 is 0xe9)"),
        (b'\xef\xbb\xbf{"prompt": "\xff"}', "not UTF-8 (byte 12 is 0xff)"),  # after its BOM
    ],
)
def test_a_body_not_in_utf8_says_so_and_what_to_send(server, raw, words):
    # was Python's "Malformed JSON ...: 'utf-8' codec can't decode byte 0xff in position 0"
    err = _error(httpx.post(server.http_url + "/v1/completions", content=raw), 400, server)
    assert err["reason"] == "invalid_json" and words in err["message"]
    assert "send the JSON in UTF-8" in err["message"] and "codec" not in err["message"]
