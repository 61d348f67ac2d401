"""n > 1 choices over HTTP: every choice is its own sequence (the mock's by hand), usage counts
the prompt once and every completion, streams interleave choices by index, and a request that
does not fit the queue leaves nothing running."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from wse_inference.engine import SamplingParams
from wse_inference.mock import ByteTokenizer, expected_continuation
from wse_inference.serve.openai_request import choice_sampling
from wse_inference.serve.testing import running_server, wait_until

pytestmark = pytest.mark.timeout(60)
TOK = ByteTokenizer()


def oracle(prompt: str, n: int) -> str:
    return TOK.decode(expected_continuation(TOK.encode(prompt), n))


@pytest.fixture(scope="module")
def server():
    with running_server(max_slots=2, max_context=64, step_delay_s=0.002) as s:
        yield s


def test_n_choices_whole_and_streamed(server):
    c = openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", timeout=10, max_retries=0)
    r = c.completions.create(model="mock", prompt="abc", max_tokens=5, n=3, logprobs=1)
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    assert all(ch.text == oracle("abc", 5) and ch.finish_reason == "length" for ch in r.choices)
    assert all(len(ch.logprobs.tokens) == 5 for ch in r.choices)
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (3, 15)
    texts: dict[int, str] = {}
    finished = []
    chunks = list(
        c.completions.create(
            model="mock",
            prompt="abc",
            max_tokens=6,
            n=3,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    for ch in chunks[:-1]:
        (choice,) = ch.choices
        texts[choice.index] = texts.get(choice.index, "") + choice.text
        if choice.finish_reason:
            finished.append(choice.index)
    assert texts == {i: oracle("abc", 6) for i in range(3)}
    assert sorted(finished) == [0, 1, 2]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 18
    msgs = [{"role": "user", "content": "Hi"}]
    stream = c.chat.completions.create(model="mock", messages=msgs, max_tokens=3, n=2, stream=True)
    roles = [ch.choices[0].index for ch in stream if ch.choices[0].delta.role == "assistant"]
    assert roles == [0, 1]
    r = c.chat.completions.create(model="mock", messages=msgs, max_tokens=3, n=2)
    assert [ch.message.content for ch in r.choices] == [oracle("user: Hi\nassistant:", 3)] * 2


def test_choice_seeds():
    s = SamplingParams(seed=7)
    assert [choice_sampling(s, i).seed for i in range(3)] == [7, 8, 9]
    assert choice_sampling(SamplingParams(), 2).seed is None


def test_n_that_overflows_a_busy_queue_is_429_and_runs_nothing():
    with running_server(max_slots=1, max_queued=2, step_delay_s=0.01) as s:
        body = {"model": "mock", "prompt": "a", "max_tokens": 50, "n": 4}
        r = httpx.post(s.http_url + "/v1/completions", content=json.dumps(body), timeout=10)
        assert r.status_code == 400 and r.json()["error"]["param"] == "n"  # never fits: no 429
        busy = s.scheduler.submit(
            prompt_ids=[1], sampling=SamplingParams(max_tokens=200), sink=lambda ev: None
        )
        assert wait_until(lambda: s.scheduler.stats().running == 1, 5)
        body["n"] = 3  # fits an idle server (one running, two waiting), not this busy one
        r = httpx.post(s.http_url + "/v1/completions", content=json.dumps(body), timeout=10)
        assert r.status_code == 429 and r.json()["error"]["reason"] == "queue_full"
        assert s.scheduler.stats().waiting == 0 and s.scheduler.stats().running == 1
        busy.cancel()
        assert wait_until(lambda: s.engine.metrics()["slots_in_use"] == 0, 5)
        r = httpx.post(s.http_url + "/v1/completions", content=json.dumps(body), timeout=20)
        assert r.status_code == 200 and len(r.json()["choices"]) == 3
