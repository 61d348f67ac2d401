"""Log probabilities over HTTP (vLLM/OpenAI shapes) and gRPC, against the mock engine's
hand-computed distribution (`mock.expected_logprob`: p(last + 1 + j) = 2^-(j + 1))."""

from __future__ import annotations

import json
import math

import grpc
import httpx
import openai
import pytest
from wse_inference.mock import ByteTokenizer, expected_continuation
from wse_inference.serve.grpc_server import sampling_from_request
from wse_inference.serve.proto import load_stubs
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(60)
TOK = ByteTokenizer()
LN2 = math.log(2)


@pytest.fixture(scope="module")
def server():
    with running_server(
        grpc=True, max_slots=2, max_context=64, step_delay_s=0.03, spec_tokens=2, spec_accepted=1
    ) as s:
        yield s


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.http_url + "/v1", api_key="none", timeout=10, max_retries=0
    )


def _completion_oracle(prompt: str, n: int, k: int) -> dict:
    ids = TOK.encode(prompt)
    out = expected_continuation(ids, n)
    before = [ids[-1], *out[:-1]]
    word = lambda t: TOK.decode([t % 256])  # noqa: E731
    return {
        "tokens": [word(t) for t in out],
        "token_logprobs": [-LN2] * n,
        "top_logprobs": [
            {word(b + 1 + j): -(j + 1) * LN2 for j in range(k)} | {word(b + 1): -LN2}
            for b in before
        ],
        "text_offset": list(range(n)),
    }


@pytest.mark.parametrize("k", [0, 3])
def test_completions_logprobs_whole_and_streamed(server, k):
    c = _client(server)
    r = c.completions.create(model="mock", prompt="abc", max_tokens=7, logprobs=k)
    want = _completion_oracle("abc", 7, k)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == "defghij"
    assert lp.tokens == want["tokens"] and lp.text_offset == want["text_offset"]
    assert lp.token_logprobs == pytest.approx(want["token_logprobs"])
    for got, exp in zip(lp.top_logprobs, want["top_logprobs"], strict=True):
        assert got == exp if exp is None else got == pytest.approx(exp)
    chunks = [
        ch.choices[0].logprobs
        for ch in c.completions.create(
            model="mock", prompt="abc", max_tokens=7, logprobs=k, stream=True
        )
        if ch.choices and ch.choices[0].logprobs is not None
    ]
    assert len(chunks) > 1  # several engine steps, each chunk with its own tokens
    assert sum((ch.tokens for ch in chunks), []) == want["tokens"]
    assert sum((ch.text_offset for ch in chunks), []) == want["text_offset"]
    # without the field, no logprobs
    r = c.completions.create(model="mock", prompt="abc", max_tokens=3)
    assert r.choices[0].logprobs is None


def test_chat_logprobs_whole_and_streamed(server):
    c = _client(server)
    msgs = [{"role": "user", "content": "Hi"}]
    prompt = TOK.encode("user: Hi\nassistant:")
    out = expected_continuation(prompt, 5)
    r = c.chat.completions.create(
        model="mock", messages=msgs, max_tokens=5, logprobs=True, top_logprobs=2
    )
    content = r.choices[0].logprobs.content
    assert [e.token for e in content] == [TOK.decode([t]) for t in out]
    assert [e.bytes for e in content] == [[t] for t in out]
    assert [e.logprob for e in content] == pytest.approx([-LN2] * 5)
    for e, t in zip(content, out, strict=True):
        assert [a.token for a in e.top_logprobs] == [TOK.decode([t]), TOK.decode([t + 1])]
        assert [a.logprob for a in e.top_logprobs] == pytest.approx([-LN2, -2 * LN2])
    r = c.chat.completions.create(model="mock", messages=msgs, max_tokens=3, logprobs=True)
    assert [e.top_logprobs for e in r.choices[0].logprobs.content] == [[], [], []]
    stream = c.chat.completions.create(
        model="mock", messages=msgs, max_tokens=5, logprobs=True, top_logprobs=1, stream=True
    )
    entries = [
        e
        for ch in stream
        if ch.choices and ch.choices[0].logprobs
        for e in ch.choices[0].logprobs.content
    ]
    assert [e.token for e in entries] == [TOK.decode([t]) for t in out]
    r = c.chat.completions.create(model="mock", messages=msgs, max_tokens=2)
    assert r.choices[0].logprobs is None


BAD = [
    ({"prompt": "a", "logprobs": 21}, "/v1/completions", "logprobs"),
    ({"prompt": "a", "logprobs": -1}, "/v1/completions", "logprobs"),
    ({"prompt": "a", "logprobs": True}, "/v1/completions", "logprobs"),
    (
        {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
        "/v1/chat/completions",
        "top_logprobs",
    ),
    (
        {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21},
        "/v1/chat/completions",
        "top_logprobs",
    ),
    (
        {"messages": [{"role": "user", "content": "x"}], "logprobs": 1},
        "/v1/chat/completions",
        "logprobs",
    ),
    ({"prompt": "a", "presence_penalty": 2.5}, "/v1/completions", "presence_penalty"),
    ({"prompt": "a", "frequency_penalty": -3}, "/v1/completions", "frequency_penalty"),
    ({"prompt": "a", "frequency_penalty": "x"}, "/v1/completions", "frequency_penalty"),
    ({"prompt": "a", "repetition_penalty": 0}, "/v1/completions", "repetition_penalty"),
    ({"prompt": "a", "logit_bias": {"5": 1}}, "/v1/completions", "logit_bias"),
]


@pytest.mark.parametrize(("body", "route", "param"), BAD)
def test_bad_logprobs_and_penalties_are_400(server, body, route, param):
    r = httpx.post(server.http_url + route, json={"model": "mock", **body}, timeout=10)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "BadRequestError", err


def test_penalties_in_range_are_accepted(server):
    body = {
        "model": "mock",
        "prompt": "a",
        "max_tokens": 2,
        "presence_penalty": 0.5,
        "frequency_penalty": -2,
        "repetition_penalty": 1.2,
        "logit_bias": {},
    }
    r = httpx.post(
        server.http_url + "/v1/completions",
        content=json.dumps(body),
        timeout=10,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "bc"


def test_grpc_logprobs_and_ignore_eos(server):
    pb2, pb2_grpc = load_stubs()
    s = sampling_from_request(
        pb2.GenerateRequest(ignore_eos=True, logprobs=0), prompt_len=1, max_context=8
    )
    assert (s.ignore_eos, s.logprobs) == (True, 0)
    s = sampling_from_request(pb2.GenerateRequest(), prompt_len=1, max_context=8)
    assert (s.ignore_eos, s.logprobs) == (False, None)
    assert (s.presence_penalty, s.frequency_penalty, s.repetition_penalty) == (0, 0, 1)
    req = pb2.GenerateRequest(presence_penalty=0.5, frequency_penalty=-1, repetition_penalty=1.5)
    s = sampling_from_request(req, prompt_len=1, max_context=8)
    assert (s.presence_penalty, s.frequency_penalty, s.repetition_penalty) == (0.5, -1, 1.5)
    with grpc.insecure_channel(server.grpc_target) as ch:
        stub = pb2_grpc.GenerationStub(ch)
        req = pb2.GenerateRequest(text="abc", max_tokens=6, logprobs=2)
        rs = list(stub.Generate(req, timeout=10))
        ids = [t for r in rs for t in r.token_ids]
        lps = [x for r in rs for x in r.logprobs]
        assert all(len(r.logprobs) == len(r.token_ids) for r in rs)
        assert ids == expected_continuation(TOK.encode("abc"), 6)
        assert [x.token_id for x in lps] == ids
        assert [x.logprob for x in lps] == pytest.approx([-LN2] * 6)
        assert [[(a.token_id, a.logprob) for a in x.top] for x in lps] == [
            [(t, pytest.approx(-LN2)), (t + 1, pytest.approx(-2 * LN2))] for t in ids
        ]
        rs = list(stub.Generate(pb2.GenerateRequest(text="abc", max_tokens=3), timeout=10))
        assert all(len(r.logprobs) == 0 for r in rs)
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Generate(pb2.GenerateRequest(text="abc", logprobs=21), timeout=10))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "logprobs must be in 0..20" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            req = pb2.GenerateRequest(text="abc", repetition_penalty=0)
            list(stub.Generate(req, timeout=10))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "repetition_penalty must be > 0" in e.value.details()


def _echo_oracle(prompt: str, n: int, k: int) -> dict:
    """echo: the prompt's tokens first (the first one unscored), then the completion's."""
    ids = TOK.encode(prompt)
    gen = _completion_oracle(prompt, n, k)
    word = lambda t: TOK.decode([t])  # noqa: E731
    # prompt token b after a: j = (b - a - 1) % 256 steps down the mock's halving ladder
    lps = [-(((b - a - 1) % 256) + 1) * LN2 for a, b in zip(ids, ids[1:], strict=False)]
    tops = [
        {word(a + 1 + j): -(j + 1) * LN2 for j in range(k)} | {word(b): lp}
        for a, b, lp in zip(ids, ids[1:], lps, strict=False)
    ]
    return {
        "tokens": [word(t) for t in ids] + gen["tokens"],
        "token_logprobs": [None, *lps, *gen["token_logprobs"]],
        "top_logprobs": [None, *tops, *gen["top_logprobs"]],
        "text_offset": list(range(len(ids) + n)),
    }


def _same(got: dict, want: dict) -> None:
    assert got["tokens"] == want["tokens"] and got["text_offset"] == want["text_offset"]
    assert got["token_logprobs"][0] is None and want["token_logprobs"][0] is None
    assert got["token_logprobs"][1:] == pytest.approx(want["token_logprobs"][1:])
    for g, w in zip(got["top_logprobs"], want["top_logprobs"], strict=True):
        assert g == w if w is None else g == pytest.approx(w)


@pytest.mark.parametrize("k", [0, 2])
def test_echo_with_logprobs_scores_the_prompt(server, k):
    """lm-evaluation-harness' loglikelihood request: echo, max_tokens 1, logprobs."""
    body = {"model": "mock", "prompt": "acb", "max_tokens": 3, "echo": True, "logprobs": k}
    r = httpx.post(server.http_url + "/v1/completions", json=body, timeout=10)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["text"] == "acbcde"
    want = _echo_oracle("acb", 3, k)
    _same(choice["logprobs"], want)
    with httpx.stream(
        "POST", server.http_url + "/v1/completions", json={**body, "stream": True}, timeout=10
    ) as r:
        events = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
    texts = "".join(e["choices"][0]["text"] for e in events)
    parts = [e["choices"][0]["logprobs"] for e in events if e["choices"][0]["logprobs"]]
    merged = {key: sum((part[key] for part in parts), []) for key in want}
    assert texts == "acbcde"
    _same(merged, want)
    # echo alone: the prompt comes back, no logprobs
    body = {"model": "mock", "prompt": [97, 98], "max_tokens": 2, "echo": True}
    choice = httpx.post(server.http_url + "/v1/completions", json=body, timeout=10).json()
    assert (choice["choices"][0]["text"], choice["choices"][0]["logprobs"]) == ("abcd", None)


def test_echo_refused_for_chat_and_non_bool(server):
    msgs = [{"role": "user", "content": "x"}]
    for route, body in [
        ("/v1/chat/completions", {"messages": msgs, "echo": True}),
        ("/v1/completions", {"prompt": "a", "echo": "yes"}),
    ]:
        r = httpx.post(server.http_url + route, json={"model": "mock", **body}, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["param"] == "echo", r.text
