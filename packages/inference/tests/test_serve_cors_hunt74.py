"""Hunt 74, hole 1: cross-origin requests. vLLM's server takes --allowed-origins,
--allowed-methods, --allowed-headers (JSON lists, default ["*"]) and --allow-credentials
(default false) and wraps its app in Starlette's CORSMiddleware; ours had none: a GET with an
Origin came back without Access-Control-Allow-Origin, and a browser's preflight (OPTIONS) was
a 405, so no web page could call the server.

Oracle: the CORS protocol as the Fetch standard and Starlette's CORSMiddleware documentation
state it, written out here: a request without an Origin is no CORS request (no CORS
headers); an allowed origin is answered "*" when every origin is allowed and credentials are
not, else with its own Origin (and "Vary: Origin"), plus "Access-Control-Allow-Credentials:
true" when they are; a preflight (OPTIONS with Origin and Access-Control-Request-Method)
is a 200 naming the method and the requested headers it allows, and a 400 ("Disallowed
CORS origin" / "method") for what it does not. The CLI's list options are read as vLLM reads
them, `json.loads`, here the standard library's on the same text.
"""

from __future__ import annotations

import json

import httpx
import pytest
import typer
from fastapi.testclient import TestClient
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line, serve_configs
from wse_inference.mock import MockEngine
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.cors import CorsConfig

pytestmark = pytest.mark.timeout(120)

GOOD, BAD = "http://localhost:3000", "http://evil.example"
COMPLETION = {"model": "mock", "prompt": "abc", "max_tokens": 3}
ROOT = typer.main.get_command(app)
MOCK = ["infer", "serve", "--model-dir", "mock", "--port", "0"]


def _server(cors: CorsConfig = CorsConfig()) -> Server:
    return Server(MockEngine(), ServeConfig(port=0, drain_s=2.0, warmup=False, cors=cors)).start()


@pytest.fixture(scope="module")
def default():
    server = _server()
    yield server
    server.close()


@pytest.fixture(scope="module")
def narrow():
    """One origin, GET and POST, one header, credentials."""
    cors = CorsConfig(allowed_origins=(GOOD,), allowed_methods=("GET", "POST"),
                      allowed_headers=("Content-Type",), allow_credentials=True)  # fmt: skip
    server = _server(cors)
    yield server
    server.close()


def _preflight(url: str, origin: str, method: str = "POST", headers: str | None = None):
    asked = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers is not None:
        asked["Access-Control-Request-Headers"] = headers
    return httpx.options(url, headers=asked, timeout=10)


def _names(value: str) -> set[str]:
    return {v.strip().lower() for v in value.split(",")}


def test_vllms_defaults_allow_every_origin(default):
    url = default.http_url
    r = httpx.get(f"{url}/v1/models", headers={"Origin": BAD}, timeout=10)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in r.headers  # vLLM's default: false
    r = httpx.post(f"{url}/v1/completions", json=COMPLETION, headers={"Origin": GOOD}, timeout=30)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    plain = httpx.get(f"{url}/health", timeout=10)  # no Origin: not a CORS request
    assert not any(k.startswith("access-control-") for k in plain.headers)


def test_a_preflight_is_answered_not_405(default):
    asked = "Content-Type, Authorization, X-Custom"
    r = _preflight(f"{default.http_url}/v1/chat/completions", GOOD, "POST", asked)
    assert r.status_code == 200, r.text  # was a 405 "this route takes POST"
    assert r.headers["access-control-allow-origin"] == "*"
    assert "post" in _names(r.headers["access-control-allow-methods"])  # ["*"]: every method
    assert _names(asked) <= _names(r.headers["access-control-allow-headers"])  # ["*"]: any


def test_a_streamed_answer_and_an_error_carry_the_header(default):
    url, origin = default.http_url, {"Origin": GOOD}
    body = {**COMPLETION, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, headers=origin) as r:
        assert r.headers["access-control-allow-origin"] == "*"
        assert "data: [DONE]" in list(r.iter_lines())
    for r in (
        httpx.get(f"{url}/no/such/route", headers=origin, timeout=10),  # 404
        httpx.post(f"{url}/v1/completions", json={"model": "mock"}, headers=origin, timeout=10),
    ):
        assert r.status_code in (400, 404) and r.headers["access-control-allow-origin"] == "*"


def test_listed_origins_methods_headers_and_credentials(narrow):
    url = narrow.http_url
    r = httpx.get(f"{url}/v1/models", headers={"Origin": GOOD}, timeout=10)
    assert r.headers["access-control-allow-origin"] == GOOD  # its own origin, not "*"
    assert r.headers["access-control-allow-credentials"] == "true"
    assert "origin" in _names(r.headers["vary"])
    r = httpx.get(f"{url}/v1/models", headers={"Origin": BAD}, timeout=10)
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    ok = _preflight(f"{url}/v1/completions", GOOD, "POST", "content-type")
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == GOOD
    assert _names(ok.headers["access-control-allow-methods"]) == {"get", "post"}
    assert ok.headers["access-control-allow-credentials"] == "true"
    for origin, method, headers, why in (
        (BAD, "POST", None, "origin"),
        (GOOD, "DELETE", None, "method"),
        (GOOD, "POST", "x-custom", "headers"),
    ):
        r = _preflight(f"{url}/v1/completions", origin, method, headers)
        assert r.status_code == 400 and f"Disallowed CORS {why}" in r.text
        if why == "origin":  # an origin not listed is never named back
            assert "access-control-allow-origin" not in r.headers


def test_the_app_alone_through_testclient():
    server = Server(MockEngine(), ServeConfig(port=0, cors=CorsConfig(allowed_origins=(GOOD,))))
    try:
        client = TestClient(server.app)
        r = client.get("/version", headers={"Origin": GOOD})
        assert r.headers["access-control-allow-origin"] == GOOD
        asked = {"Origin": GOOD, "Access-Control-Request-Method": "POST"}
        r = client.options("/tokenize", headers=asked)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == GOOD
    finally:
        server.close()


# -- the CLI's options: vLLM's spellings and defaults, a bad list refused in one line -----------
@pytest.fixture
def served(monkeypatch):
    """The ServeConfig each `wse infer serve` would serve (the server is not started)."""
    return serve_configs(monkeypatch)


def test_the_cli_defaults_are_vllms(served):
    code, out = invoke(ROOT, [*MOCK, "--no-warmup"])
    assert code == 0, out
    cors = served[-1].cors
    assert (cors.allowed_origins, cors.allowed_methods, cors.allowed_headers) == (("*",),) * 3
    assert cors.allow_credentials is False


def test_the_cli_reads_the_lists_as_json(served):
    origins = '["http://a.example:8080", "https://b.example"]'
    args = [*MOCK, "--allowed-origins", origins, "--allowed-methods", '["GET","POST"]',
            "--allowed-headers", "[]", "--allow-credentials"]  # fmt: skip
    code, out = invoke(ROOT, args)
    assert code == 0, out
    cors = served[-1].cors
    assert cors.allowed_origins == tuple(json.loads(origins))
    assert (cors.allowed_methods, cors.allowed_headers) == (("GET", "POST"), ())
    assert cors.allow_credentials is True


@pytest.mark.parametrize(
    "option, value",
    [
        ("--allowed-origins", '["http://a'),  # not JSON
        ("--allowed-origins", "http://localhost:3000"),  # not JSON: a bare origin
        ("--allowed-methods", '"GET"'),  # JSON, not a list
        ("--allowed-headers", "[1, 2]"),  # a list, not of strings
        ("--allowed-origins", "[" * 100_000),  # too deep for json.loads
    ],
)
def test_a_list_option_that_is_no_json_list_exits_2_in_one_line(option, value):
    line = refused_in_one_line(ROOT, [*MOCK, option, value], f"{option} must be a JSON list")
    assert len(line) < 400
