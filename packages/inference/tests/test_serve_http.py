"""The OpenAI-compatible HTTP server on loopback: the official client, errors, load, metrics."""

from __future__ import annotations

import asyncio
import json
import socket

import grpc
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from wse_core.errors import WseError
from wse_inference.mock import ByteTokenizer, MockEngine, expected_continuation
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.testing import running_server, wait_until
from wse_inference.testing import let_go

pytestmark = pytest.mark.timeout(60)
TOK = ByteTokenizer()


def oracle(prompt: str, n: int) -> str:
    """The mock's continuation as text: the bytes a detokenizer has let go at the end (vLLM's
    rule, `let_go`: "xyz" + 6 ends in 0x80, no UTF-8, held and dropped; hunt 82)."""
    made = [bytes([t]) for t in expected_continuation(TOK.encode(prompt), n)]
    return b"".join(made[: let_go(made)]).decode("utf-8", "replace")


def chat_oracle(messages: list[dict], n: int) -> str:
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
    return oracle(text, n)


def client(server) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.http_url + "/v1", api_key="none", timeout=10, max_retries=0
    )


@pytest.fixture(scope="module")
def server():
    with running_server(
        max_slots=4, max_context=128, step_delay_s=0.001, spec_tokens=2, spec_accepted=1
    ) as s:
        yield s


@pytest.mark.smoke
def test_openai_client_completions(server):
    c = client(server)
    r = c.completions.create(model="mock", prompt="abc", max_tokens=7, temperature=0)
    assert r.choices[0].text == oracle("abc", 7) == "defghij"
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (3, 7, 10)
    ti = r.model_extra["time_info"]
    parts = ti["queue_time"] + ti["prompt_time"] + ti["completion_time"]
    assert min(ti["queue_time"], ti["prompt_time"], ti["completion_time"]) >= 0
    assert parts == pytest.approx(ti["total_time"], abs=1e-9)
    assert ti["created"] == r.created
    r = c.completions.create(model="mock", prompt="a", max_tokens=30, stop=["ef"])
    assert (r.choices[0].text, r.choices[0].finish_reason) == ("bcd", "stop")
    assert [m.id for m in c.models.list().data] == ["mock"]


def test_openai_client_streaming_with_usage(server):
    c = client(server)
    chunks = list(
        c.completions.create(
            model="mock",
            prompt="xyz",
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == oracle("xyz", 6)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    stream = c.chat.completions.create(model="mock", messages=msgs, max_tokens=5, stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == chat_oracle(msgs, 5)
    assert chunks[-1].usage is None  # no include_usage: no usage chunk
    r = c.chat.completions.create(model="mock", messages=msgs, max_tokens=5)
    assert r.choices[0].message.content == chat_oracle(msgs, 5)
    assert r.choices[0].message.role == "assistant"


def test_raw_sse_ends_with_done(server):
    body = {"model": "mock", "prompt": "k", "max_tokens": 3, "stream": True}
    with httpx.stream("POST", server.http_url + "/v1/completions", json=body, timeout=10) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    final = json.loads(lines[-2][6:])
    assert final["choices"][0]["finish_reason"] == "length"
    assert set(final["time_info"]) == {
        "queue_time",
        "prompt_time",
        "completion_time",
        "total_time",
        "created",
    }


BAD = [
    (b"{not json", "/v1/completions", None),
    ({"prompt": "a", "model": 5}, "/v1/completions", "model"),  # a missing one is served (hunt 79)
    ({"model": "mock", "prompt": ""}, "/v1/completions", "prompt"),
    ({"model": "mock", "prompt": []}, "/v1/completions", "prompt"),
    ({"model": "mock", "prompt": "a", "max_tokens": 0}, "/v1/completions", "max_tokens"),
    ({"model": "mock", "prompt": "a", "max_tokens": -3}, "/v1/completions", "max_tokens"),
    ({"model": "mock", "prompt": "a", "max_tokens": 128}, "/v1/completions", "max_tokens"),
    ({"model": "mock", "prompt": "a", "max_tokens": "9"}, "/v1/completions", "max_tokens"),
    ({"model": "mock", "prompt": "a", "temperature": -0.1}, "/v1/completions", "temperature"),
    ({"model": "mock", "prompt": "a", "top_p": 0}, "/v1/completions", "top_p"),
    ({"model": "mock", "prompt": "a", "top_p": 1.01}, "/v1/completions", "top_p"),
    ({"model": "mock", "prompt": "a", "n": 0}, "/v1/completions", "n"),
    ({"model": "mock", "prompt": "a", "n": 17}, "/v1/completions", "n"),
    ({"model": "mock", "messages": []}, "/v1/chat/completions", "messages"),
    ({"model": "mock"}, "/v1/chat/completions", "messages"),
    (
        {"model": "mock", "messages": [{"role": "robot", "content": "x"}]},
        "/v1/chat/completions",
        "messages",
    ),
    ([1, 2], "/v1/chat/completions", None),
    (
        {"model": "mock", "prompt": "a", "stop_token_ids": [256]},
        "/v1/completions",
        "stop_token_ids",
    ),
]


@pytest.mark.parametrize(("body", "route", "param"), BAD)
def test_bad_requests_get_400_with_openai_error_body(server, body, route, param):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(
        server.http_url + route,
        content=content,
        timeout=10,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code", "reason"}
    assert err["type"] == "BadRequestError" and err["param"] == param and err["message"]


def test_a_model_not_served_is_a_404_model_not_found(server):
    # hunt 56: OpenAI's code model_not_found; hunt 77: with OpenAI's and vLLM's status, 404
    # (openai.NotFoundError); retrieving /v1/models/{id} of a model not served is a 404 too
    for route, body in [("/v1/completions", {"model": "nope", "prompt": "a"}),
                        ("/v1/chat/completions", {"model": "gpt-4", "messages": [
                            {"role": "user", "content": "hi"}]})]:  # fmt: skip
        r = httpx.post(server.http_url + route, json=body, timeout=10)
        err = r.json()["error"]
        assert r.status_code == 404 and err["reason"] == "model_not_found", r.text
        assert err["param"] == "model" and "['mock']" in err["message"]
    r = httpx.get(server.http_url + "/v1/models/nope", timeout=10)
    assert r.status_code == 404 and r.json()["error"]["reason"] == "model_not_found"
    assert httpx.get(server.http_url + "/v1/models/mock", timeout=10).json()["id"] == "mock"


def test_context_length_wording_and_client_error(server):
    with pytest.raises(openai.BadRequestError) as info:
        client(server).completions.create(model="mock", prompt="a" * 100, max_tokens=50)
    assert info.value.body["message"] == (
        "This model's maximum context length is 128 tokens. However, you requested 150 tokens "
        "(100 in the messages, 50 in the completion). Please reduce the length of the messages "
        "or completion."
    )
    assert info.value.body["reason"] == "context_length_exceeded"


def test_queue_full_gives_429_with_retry_after():
    with running_server(max_slots=1, max_queued=1, step_delay_s=0.01) as s:
        body = {"model": "mock", "prompt": "a", "max_tokens": 100, "stream": True}
        with (
            httpx.Client(base_url=s.http_url, timeout=10) as a,
            httpx.Client(base_url=s.http_url, timeout=10) as b,
        ):
            with a.stream("POST", "/v1/completions", json=body) as ra:
                assert wait_until(lambda: s.scheduler.stats().running == 1)
                with b.stream("POST", "/v1/completions", json=body) as rb:
                    assert ra.status_code == rb.status_code == 200
                    assert wait_until(lambda: s.scheduler.stats().waiting == 1)
                    r = httpx.post(s.http_url + "/v1/completions", json=body, timeout=10)
                assert r.status_code == 429
                assert int(r.headers["Retry-After"]) >= 1
                assert r.json()["error"]["reason"] == "queue_full"
        assert wait_until(lambda: s.engine.metrics()["slots_in_use"] == 0, 5)


def test_disconnect_frees_slot_and_kv_cache():
    with running_server(max_slots=2, step_delay_s=0.005) as s:
        body = {"model": "mock", "prompt": "a", "max_tokens": 200, "stream": True}
        with httpx.Client(base_url=s.http_url, timeout=10) as c:
            with c.stream("POST", "/v1/completions", json=body) as r:
                it = r.iter_lines()
                for _ in range(3):
                    next(it)
                assert s.engine.metrics()["slots_in_use"] == 1
        # the stream is closed: freed long before the 200 tokens (~1 s) would have finished
        assert wait_until(lambda: s.engine.metrics()["kv_cache_tokens"] == 0, 0.5)
        assert s.scheduler.stats().running == 0
        # a non-streaming client that hangs up
        raw = json.dumps({**body, "stream": False}).encode()
        sock = socket.create_connection(
            (s.http_url.split("//")[1].split(":")[0], int(s.http_url.rsplit(":", 1)[1])), timeout=5
        )
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
            b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(raw), raw)
        )
        assert wait_until(lambda: s.engine.metrics()["slots_in_use"] == 1, 2)
        sock.close()
        assert wait_until(lambda: s.engine.metrics()["kv_cache_tokens"] == 0, 0.5)
        assert len(s.engine.release_steps) == 2


def test_32_concurrent_streaming_clients_complete_correctly():
    n_clients, max_tokens = 32, 24
    with running_server(max_slots=8, max_queued=64, step_delay_s=0.001) as s:

        async def one(c: openai.AsyncOpenAI, i: int) -> tuple[str, int]:
            stream = await c.completions.create(
                model="mock",
                prompt=f"client {i:02d}:",
                max_tokens=max_tokens,
                stream=True,
                stream_options={"include_usage": True},
            )
            parts, usage = [], None
            async for ch in stream:
                parts += [x.text for x in ch.choices]
                usage = ch.usage or usage
            return "".join(parts), usage.completion_tokens

        async def main() -> list[tuple[str, int]]:
            c = openai.AsyncOpenAI(
                base_url=s.http_url + "/v1", api_key="none", timeout=30, max_retries=0
            )
            async with c:
                return await asyncio.gather(*(one(c, i) for i in range(n_clients)))

        results = asyncio.run(asyncio.wait_for(main(), 45))
        for i, (text, n) in enumerate(results):
            assert text == oracle(f"client {i:02d}:", max_tokens)
            assert n == max_tokens
        assert wait_until(lambda: s.scheduler.idle, 2)
        m = s.engine.metrics()
        assert m["slots_in_use"] == 0 and m["kv_cache_tokens"] == 0
        assert m["prefills"] == n_clients


def test_metrics_health_and_errors_in_openai_shape(server):
    c = client(server)
    for i in range(3):
        c.completions.create(model="mock", prompt=f"m{i}", max_tokens=4)
    text = httpx.get(server.http_url + "/metrics", timeout=10).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    ttft = {s.name: s.value for s in fams["wse_time_to_first_token_seconds"].samples}
    assert ttft["wse_time_to_first_token_seconds_count"] >= 3
    assert fams["wse_inter_token_latency_seconds"].samples
    assert fams["wse_num_requests_running"].samples[0].value == 0
    assert fams["wse_num_requests_waiting"].samples[0].value == 0
    acc = fams["wse_spec_decode_draft_acceptance_rate"].samples[0].value
    assert acc == pytest.approx(1 / 2)  # the mock drafts 2 and accepts 1 per step
    h = httpx.get(server.http_url + "/health", timeout=10)
    assert h.status_code == 200 and h.json()["status"] == "ok"
    r = httpx.get(server.http_url + "/v1/nothing", timeout=10)
    assert r.status_code == 404 and set(r.json()["error"]) == {
        "message",
        "type",
        "param",
        "code",
        "reason",
    }


def test_disconnect_while_waiting_leaves_the_queue():
    with running_server(max_slots=1, step_delay_s=0.005) as s:
        body = {"model": "mock", "prompt": "a", "max_tokens": 150, "stream": True}
        with (
            httpx.Client(base_url=s.http_url, timeout=10) as a,
            a.stream("POST", "/v1/completions", json=body),
        ):
            assert wait_until(lambda: s.scheduler.stats().running == 1)
            with (
                httpx.Client(base_url=s.http_url, timeout=10) as b,
                b.stream("POST", "/v1/completions", json=body),
            ):
                assert wait_until(lambda: s.scheduler.stats().waiting == 1)
            assert wait_until(lambda: s.scheduler.stats().waiting == 0, 1.0)
            assert s.scheduler.stats().running == 1
            assert s.engine.metrics()["prefills"] == 1  # the one that left was never prefilled


class _PickyEngine(MockEngine):
    """Refuses prompts containing 'X' at prefill, as a real engine may (a WseError)."""

    def prefill(self, *, prompt_ids, sampling):
        if ord("X") in prompt_ids:
            raise WseError("this engine refuses the letter X")
        return super().prefill(prompt_ids=prompt_ids, sampling=sampling)


def test_a_request_the_engine_refuses_is_a_400_and_invalid_argument():
    server = Server(_PickyEngine(max_slots=1), ServeConfig(port=0, grpc_port=0, drain_s=1))
    server.start()
    try:
        body = {"model": "mock", "prompt": "aXb", "max_tokens": 3}
        r = httpx.post(server.http_url + "/v1/completions", json=body, timeout=10)
        assert r.status_code == 400 and "letter X" in r.json()["error"]["message"]
        from wse_inference.serve.proto import load_stubs

        pb2, pb2_grpc = load_stubs()
        with grpc.insecure_channel(server.grpc_target) as ch:
            with pytest.raises(grpc.RpcError) as info:
                list(
                    pb2_grpc.GenerationStub(ch).Generate(
                        pb2.GenerateRequest(text="X", max_tokens=2), timeout=10
                    )
                )
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        r = httpx.post(
            server.http_url + "/v1/completions", json={**body, "prompt": "ab"}, timeout=10
        )
        assert r.json()["choices"][0]["text"] == "cde"
    finally:
        server.close()


def test_acceptance_rate_from_engine_counters():
    from wse_inference.serve.metrics import _acceptance_rate

    assert _acceptance_rate({"acceptance_rate": 0.5, "accepted": 1, "proposed": 4}) == 0.5
    assert _acceptance_rate({"accepted": 3.0, "proposed": 4.0}) == 0.75
    assert _acceptance_rate({"spec_accepted_tokens": 2.0, "spec_draft_tokens": 8.0}) == 0.25
    assert _acceptance_rate({"steps": 3.0}) is None
