"""Fuzzed request bodies against a running mock server: never a 500 or an INTERNAL, every
refusal is a 4xx with an OpenAI error body whose message is one line, every accepted stream
ends, and the server keeps serving (a plain request answers the mock's rule afterwards).

Bodies start from valid requests of each route and are mutated at the JSON level (fields
replaced by arbitrary JSON, including lone surrogate escapes, deleted or added) and at the
byte level (`wse_core.testing.mutate` on the serialized body). gRPC requests are drawn field
by field over the proto's whole range (NaN, infinities, negative and huge integers)."""

from __future__ import annotations

import json

import grpc
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wse_core.testing import mutate
from wse_inference.mock import ByteTokenizer, expected_continuation
from wse_inference.serve.admission import RequestLimits
from wse_inference.serve.proto import load_stubs
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(120)
pb2, pb2_grpc = load_stubs()

VALID = {
    "/v1/completions": {"model": "mock", "prompt": "abc", "max_tokens": 3},
    "/v1/chat/completions": {
        "model": "mock",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
        "max_tokens": 3,
    },
    "/tokenize": {"model": "mock", "prompt": "abc"},
    "/detokenize": {"model": "mock", "tokens": [97, 98]},
}
FIELDS = [
    "model", "prompt", "messages", "max_tokens", "temperature", "top_p", "top_k", "n", "stop",
    "seed", "logprobs", "top_logprobs", "echo", "stream", "stream_options", "tokens",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "best_of", "logit_bias",
    "min_tokens", "ignore_eos", "content", "role",
]  # fmt: skip
SURROGATES = st.sampled_from(["\udcff", "a\ud800b", "\udfff" * 3])
SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    SURROGATES,
)
JSON = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(FIELDS), inner, max_size=4)
    ),
    max_leaves=10,
)


@pytest.fixture(scope="module")
def server():
    with running_server(grpc=True, max_slots=4, max_context=64, max_queued=256) as s:
        yield s


def _replace(body, path: list[int], value):
    """`body` with one value, chosen by `path` through dicts and lists, replaced."""
    if not path or not isinstance(body, dict | list) or not body:
        return value
    keys = list(body) if isinstance(body, dict) else list(range(len(body)))
    k = keys[path[0] % len(keys)]
    out = dict(body) if isinstance(body, dict) else list(body)
    out[k] = _replace(out[k], path[1:], value)
    return out


def _check_answer(r: httpx.Response, stream: bool) -> None:
    assert r.status_code < 500, (r.status_code, r.text[:500])
    if r.status_code >= 400:
        err = r.json()["error"]
        assert err["message"] and "\n" not in err["message"], err
        return
    assert r.status_code == 200
    if stream and r.headers.get("content-type", "").startswith("text/event-stream"):
        assert r.text.rstrip().endswith("data: [DONE]"), r.text[-300:]
    else:
        json.loads(r.text)


def _post(server, route: str, content: bytes) -> None:
    stream = b'"stream": true' in content
    r = httpx.post(
        server.http_url + route,
        content=content,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    _check_answer(r, stream)


@settings(max_examples=80)
@given(
    route=st.sampled_from(sorted(VALID)),
    path=st.lists(st.integers(0, 50), max_size=4),
    value=JSON,
    extra=st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=2),
    drop=st.sets(st.sampled_from(FIELDS), max_size=2),
    stream=st.booleans(),
)
def test_http_json_mutations(server, route, path, value, extra, drop, stream):
    body = _replace(VALID[route], path, value) if path else dict(VALID[route])
    if isinstance(body, dict):
        body = {k: v for k, v in {**body, **extra}.items() if k not in drop}
        if stream and route.startswith("/v1"):
            body["stream"] = True
    # ensure_ascii keeps lone surrogates as legal \\udcff escapes, as a client would send them
    _post(server, route, json.dumps(body, ensure_ascii=True).encode())


@settings(max_examples=60)
@given(
    route=st.sampled_from(sorted(VALID)),
    ops=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 2**16), st.integers(0, 255)), max_size=5
    ),
)
def test_http_byte_mutations(server, route, ops):
    _post(server, route, mutate(json.dumps(VALID[route]).encode(), ops))


INT32 = st.integers(-(2**31), 2**31 - 1)
FLOAT = st.floats(width=32, allow_nan=True, allow_infinity=True)


@st.composite
def grpc_requests(draw):
    req = pb2.GenerateRequest(model=draw(st.sampled_from(["", "mock", "other"])))
    if draw(st.booleans()):
        req.text = draw(st.text(max_size=12))
    else:
        req.token_ids.ids.extend(draw(st.lists(INT32, max_size=6)))
    for name, strategy in [
        ("max_tokens", INT32),
        ("temperature", FLOAT),
        ("top_p", FLOAT),
        ("logprobs", INT32),
        ("repetition_penalty", FLOAT),
        ("seed", st.integers(-(2**63), 2**63 - 1)),
    ]:
        if draw(st.booleans()):
            setattr(req, name, draw(strategy))
    req.top_k = draw(INT32)
    req.presence_penalty = draw(FLOAT)
    req.frequency_penalty = draw(FLOAT)
    req.ignore_eos = draw(st.booleans())
    req.stop.extend(draw(st.lists(st.text(max_size=3), max_size=8)))
    req.stop_token_ids.extend(draw(st.lists(INT32, max_size=3)))
    return req


@pytest.fixture(scope="module")
def grpc_stub(server):
    channel = grpc.insecure_channel(server.grpc_target)
    yield pb2_grpc.GenerationStub(channel)
    channel.close()


@settings(max_examples=150)
@given(req=grpc_requests())
def test_grpc_requests(grpc_stub, req):
    try:
        responses = list(grpc_stub.Generate(req, timeout=30))
    except grpc.RpcError as e:
        assert e.code() in (
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.NOT_FOUND,  # a model not served (hunt 81: HTTP's 404)
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        ), (e.code(), e.details(), req)
        assert e.details() and "\n" not in e.details()
        return
    assert responses and responses[-1].finish_reason in ("stop", "length")


def test_the_server_still_serves_after_the_fuzzing(server, grpc_stub):
    r = httpx.post(
        server.http_url + "/v1/completions",
        json={"model": "mock", "prompt": "abc", "max_tokens": 4, "temperature": 0},
        timeout=30,
    )
    assert r.status_code == 200
    ids = ByteTokenizer().encode("abc")
    assert r.json()["choices"][0]["text"] == ByteTokenizer().decode(expected_continuation(ids, 4))
    health = grpc_stub.HealthCheck(pb2.HealthCheckRequest(), timeout=10)
    assert health.status == pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        ("/v1/completions", '{"model": "mock", "prompt": "a\\udcff", "max_tokens": 2}', "prompt"),
        (
            "/v1/chat/completions",
            '{"model": "mock", "messages": [{"role": "user", "content": "\\ud800"}]}',
            "messages",
        ),
        ("/v1/completions", '{"model": "mock", "prompt": "ab", "stop": ["\\udcff"]}', "stop"),
        ("/tokenize", '{"prompt": "\\udcff"}', "prompt"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_the_field(server, route, body, param):
    # legal JSON, not Unicode text: it used to reach the tokenizer and answer 500
    r = httpx.post(server.http_url + route, content=body.encode(), timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and "lone surrogate" in err["message"]


def test_a_chat_message_without_content_is_refused_unless_it_calls_tools(server):
    url = server.http_url + "/v1/chat/completions"
    for role in ("user", "system", "assistant"):
        msgs = [{"role": "user", "content": "hi"}, {"role": role}]
        r = httpx.post(url, json={"model": "mock", "messages": msgs}, timeout=30)
        assert r.status_code == 400, (role, r.text)  # was 200
        assert r.json()["error"]["param"] == "messages"
    calls = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function"}]}
    msgs = [{"role": "user", "content": "hi"}, calls, {"role": "user", "content": "go"}]
    r = httpx.post(url, json={"model": "mock", "messages": msgs, "max_tokens": 2}, timeout=30)
    # past the content check, refused for its calls: this server serves no tools (hunt 65)
    assert r.status_code == 400 and "messages[1].tool_calls is not supported" in r.text, r.text


# --- hostile clients (issue 31): huge, deep, lying and garbage requests -------------------
LIMIT = RequestLimits().max_body_bytes


def _refused_with(r: httpx.Response, status: int) -> None:
    assert r.status_code == status, (r.status_code, r.text[:300])
    err = r.json()["error"]
    assert err["message"] and "\n" not in err["message"], err


@settings(max_examples=12, deadline=None)
@given(
    depth=st.integers(33, 50_000),
    kind=st.sampled_from(["[", "{"]),
    field=st.sampled_from(["prompt", "stop", "extra", "messages"]),
    route=st.sampled_from(["/v1/completions", "/v1/chat/completions", "/tokenize"]),
)
def test_a_deep_body_is_a_400(server, depth, kind, field, route):
    open_, close = (b"[", b"]") if kind == "[" else (b'{"a":', b"}")
    nested = open_ * depth + (b"1" if kind == "{" else b"") + close * depth
    body = b'{"model": "mock", "%s": %s}' % (field.encode(), nested)
    r = httpx.post(server.http_url + route, content=body, timeout=60)
    _refused_with(r, 400)
    assert "levels deep" in r.json()["error"]["message"]


@settings(max_examples=6, deadline=None)
@given(extra=st.integers(1, LIMIT), chunked=st.booleans(), route=st.sampled_from(sorted(VALID)))
def test_a_body_beyond_the_limit_is_a_413(server, extra, chunked, route):
    body = json.dumps({"model": "mock", "prompt": "x" * (LIMIT + extra)}).encode()
    content = (body[i : i + 65536] for i in range(0, len(body), 65536)) if chunked else body
    r = httpx.post(server.http_url + route, content=content, timeout=60)
    _refused_with(r, 413)


@pytest.mark.parametrize("declared", [b"10000000000", b"-1", b"abc"])
def test_a_lying_content_length_is_answered_before_the_body(server, declared):
    import socket

    host, port = server.http_url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + declared
            + b"\r\n\r\n" + b"{" * 100
        )  # fmt: skip
        status = s.recv(64).split(b"\r\n")[0]
    assert status.split()[1] in (b"413", b"400"), status  # never a wait for 10 GB


@settings(max_examples=10, deadline=None)
@given(seed=st.one_of(st.integers(2**63, 2**80), st.integers(-(2**80), -(2**63) - 1)),
       n=st.integers(1, 4), stream=st.booleans())  # fmt: skip
def test_a_seed_beyond_64_bits_is_a_400_before_anything_streams(server, seed, n, stream):
    body = {"model": "mock", "prompt": "ab", "max_tokens": 2, "seed": seed, "n": n}
    r = httpx.post(server.http_url + "/v1/completions", json={**body, "stream": stream}, timeout=30)
    _refused_with(r, 400)
    assert r.json()["error"]["param"] == "seed"


def test_a_long_prompt_is_refused_before_it_is_tokenized(server):
    # ByteTokenizer: one byte per token, so 65 bytes cannot fit a 64-token context
    prompt = "é" * 10_000  # 20,000 UTF-8 bytes
    r = httpx.post(
        server.http_url + "/v1/completions", json={"model": "mock", "prompt": prompt}, timeout=30
    )
    _refused_with(r, 400)
    assert "20,000 bytes" in r.json()["error"]["message"]


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=200))
def test_grpc_garbage_bytes_are_invalid_argument(server, data):
    channel = grpc.insecure_channel(server.grpc_target)
    raw = channel.unary_stream(
        "/wse.inference.v1.Generation/Generate",
        request_serializer=lambda b: b,
        response_deserializer=pb2.GenerateResponse.FromString,
    )
    try:
        responses = list(raw(data, timeout=30))
        assert responses[-1].finish_reason in ("stop", "length")  # the bytes parsed as a request
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details(), data)
    finally:
        channel.close()


def test_grpc_and_http_refuse_the_same_stop_strings(server, grpc_stub):
    stops = [f"s{i}" for i in range(1000)]
    r = httpx.post(
        server.http_url + "/v1/completions",
        json={"model": "mock", "prompt": "ab", "max_tokens": 2, "stop": stops},
        timeout=30,
    )
    _refused_with(r, 400)
    req = pb2.GenerateRequest(text="ab", max_tokens=2)
    req.stop.extend(stops)
    with pytest.raises(grpc.RpcError) as e:
        list(grpc_stub.Generate(req, timeout=30))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == r.json()["error"]["message"]  # one validator, one message


class _SlowTokenizer(ByteTokenizer):
    """Encoding takes `delay_s`: a stand-in for a real tokenizer on a huge prompt."""

    max_token_bytes = None  # no bound: only the body limit stops what is encoded

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def encode(self, text: str) -> list[int]:
        import time

        time.sleep(self.delay_s)
        return super().encode(text)


def test_health_answers_while_a_request_is_tokenized():
    """Tokenization runs off the event loop: /health answers while encode() is busy."""
    import threading
    import time

    from wse_inference.mock import MockEngine
    from wse_inference.serve.app import ServeConfig, Server

    engine = MockEngine(max_context=64)
    engine.tokenizer = _SlowTokenizer(3.0)
    server = Server(engine, ServeConfig(port=0, warmup=False, drain_s=1.0)).start()
    try:
        slow = threading.Thread(
            target=httpx.post,
            args=(server.http_url + "/v1/completions",),
            kwargs={"json": {"model": "mock", "prompt": "ab", "max_tokens": 2}, "timeout": 30},
        )
        slow.start()
        time.sleep(0.5)  # the request is inside encode() now
        t0 = time.monotonic()
        assert httpx.get(server.http_url + "/health", timeout=30).status_code == 200
        assert time.monotonic() - t0 < 2.0  # not after the 3 s encode (was: after it)
        assert slow.is_alive()
        slow.join(30)
    finally:
        server.close()
