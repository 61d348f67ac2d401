"""Hunt 73: `wse infer serve` against a vLLM user's expectations. Before the fixes:

1. a streamed step whose token left a UTF-8 character unfinished, or whose text was held back
   for a stop string, sent no chunk: clients (`wse infer bench` too) took the first token and
   the gaps from the chunks, so TTFT was the whole request and ITL missed tokens;
2. `echo` with `max_tokens: 0` (prompt scoring, lm-eval's loglikelihood) was refused;
3. `logprobs: 0` on /v1/completions gave `top_logprobs: [null, ...]`;
4. the server's warm-up request was counted in /metrics before any user's;
5. no choice carried vLLM's `stop_reason`;
6. `"max_tokens": 2.0` (a whole-number float, which vLLM's pydantic takes) was refused;
7. GET /version was a 404, and `return_token_ids` was silently ignored.

Oracles: the mock engine's documented continuation (next token = last + 1) and distribution
(p halves per rank: logprob -(rank + 1) ln 2), written out here with `math.log`; vLLM's
documented shapes (a chunk per step that made tokens; `_create_completion_logprobs` keeps the
sampled token at k = 0; `echo_without_generation`); the same request asked another way
(max_tokens 1 for the echoed prompt's logprobs, integers for whole floats, /tokenize for a
chat's prompt ids, the whole answer for the stream); the VERSION file read directly.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import httpx
import pytest
import wse_core
from prometheus_client.parser import text_string_to_metric_families
from wse_inference.demo.load_test import LoadTestConfig, run_load_test
from wse_inference.mock import MockEngine
from wse_inference.sampling import with_eos
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.testing import running_server
from wse_inference.testing import let_go

pytestmark = pytest.mark.timeout(120)
LN2 = math.log(2)
EOS = 0x66  # "f": the model's end-of-sequence token in `_EosMock`


@pytest.fixture(scope="module")
def paced():
    """A server that steps slowly: one token a step, each step read before the next."""
    with running_server(max_slots=2, step_delay_s=0.05) as server:
        yield server


@pytest.fixture(scope="module")
def quick():
    with running_server(max_slots=4) as server:
        yield server


def _post(server, route: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.http_url}/v1/{route}", json={"model": "mock", **body}, timeout=30)


def _whole(server, route: str, body: dict) -> dict:
    r = _post(server, route, body)
    assert r.status_code == 200, r.text
    return r.json()


def _chunks(server, route: str, body: dict) -> list[dict]:
    """The stream's chunks with a choice (no usage chunk, no [DONE])."""
    out = []
    url = f"{server.http_url}/v1/{route}"
    with httpx.stream("POST", url, json={"model": "mock", "stream": True, **body}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {") and (d := json.loads(line[6:]))["choices"]:
                out.append(d)
    return out


def _refusal(server, route: str, body: dict) -> str:
    r = _post(server, route, body)
    assert r.status_code == 400, r.text
    return r.json()["error"]["message"]


# -- hole 1: a chunk for every step that made tokens --------------------------------------------
def _answer_text(prompt_ids: list[int], made: list[int], stop: str | None) -> str:
    """The answer's text by Python's own UTF-8 decoder (the mock's tokens are bytes): the
    whole decode past the prompt's, cut before the stop string; what the detokenizer still
    holds at the end (text ending in U+FFFD) is not text, as vLLM's (`testing.let_go`; hunt
    82: its U+FFFDs ended the answer)."""
    made = made[: let_go([bytes([t]) for t in made])]
    text = bytes(prompt_ids + made).decode("utf-8", "replace")
    text = text[len(bytes(prompt_ids).decode("utf-8", "replace")) :]
    return text if stop is None else text[: text.index(stop)]


@pytest.mark.parametrize(
    "prompt_ids, extra, steps",
    [
        # 0xE3 then 0xE4...: each a 3-byte character's first byte, never finished: held
        ([0xE3], {"max_tokens": 6}, 6),
        # "abc" -> d e f g h: the last two characters held while they may begin "fgh"
        (list(b"abc"), {"max_tokens": 10, "stop": ["fgh"]}, 5),
    ],
)
def test_every_step_is_a_chunk_even_with_no_text(paced, prompt_ids, extra, steps):
    body = {"prompt": prompt_ids, "return_token_ids": True, **extra}
    choices = [c["choices"][0] for c in _chunks(paced, "completions", body)]
    made = [prompt_ids[-1] + 1 + i for i in range(steps)]  # the mock's: last + 1, ...
    assert [c["token_ids"] for c in choices] == [[t] for t in made]  # a chunk a step (vLLM's)
    assert any(c["text"] == "" for c in choices[:-1])  # the case: chunks with no text
    text = _answer_text(prompt_ids, made, extra.get("stop", [None])[0])
    assert "".join(c["text"] for c in choices) == text
    whole = _whole(paced, "completions", body)["choices"][0]
    assert (whole["text"], whole["token_ids"]) == (text, made)


def test_a_chat_stream_sends_a_chunk_a_step_too(paced):
    chunks = _chunks(paced, "chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                 "max_tokens": 4, "stop": ["<=>"]})  # fmt: skip
    # the prompt ends "assistant:" (0x3A): the role chunk, then a chunk for each of ";<=>"
    # (the last two characters held while they may begin "<=>"; ">" completes it)
    assert len(chunks) == 1 + 4
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == ";"


def test_the_bench_times_every_token(paced):
    """`wse infer bench`'s tally: ITL has one gap a token after the first (vLLM's), TTFT is
    the first token's, not the last's: "é" is C3 A9, and the mock continues with AA AB ...,
    bytes no UTF-8 character starts with, held back while they may still join one."""
    n, max_tokens = 2, 8
    cfg = LoadTestConfig(url=paced.http_url, prompt="é", max_tokens=max_tokens,
                         num_requests=n, concurrency=1)  # fmt: skip
    summary = run_load_test(cfg)
    assert summary["completed"] == n and summary["output_tokens"] == n * max_tokens
    assert summary["itl_s"]["n"] == n * max_tokens - n
    # the first token comes with the prefill, the last 7 steps (at least 50 ms each) later
    assert summary["e2e_s"]["mean"] - summary["ttft_s"]["mean"] >= 7 * 0.05


# -- hole 2: echo with max_tokens 0 scores the prompt alone -------------------------------------
def test_echo_with_no_tokens_returns_the_prompt_scored(quick):
    prompt, k = "abd", 2
    body = {"prompt": prompt, "echo": True, "logprobs": k}
    alone = _whole(quick, "completions", {**body, "max_tokens": 0})
    one = _whole(quick, "completions", {**body, "max_tokens": 1})
    c = alone["choices"][0]
    assert c["text"] == prompt and c["finish_reason"] == "length" and c["stop_reason"] is None
    assert alone["usage"] == {"prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3}
    lp, lp1 = c["logprobs"], one["choices"][0]["logprobs"]
    assert {key: v[:3] for key, v in lp1.items()} == lp  # the oracle: max_tokens 1's first 3
    # the mock's by hand: "b" after "a" ranks first (-ln 2), "d" after "b" second (-2 ln 2)
    assert lp["tokens"] == ["a", "b", "d"] and lp["token_logprobs"][0] is None
    assert lp["token_logprobs"][1:] == pytest.approx([-LN2, -2 * LN2])
    streamed = _chunks(quick, "completions", {**body, "max_tokens": 0})
    assert [ch["choices"][0]["text"] for ch in streamed] == [prompt]
    assert streamed[0]["choices"][0]["logprobs"] == lp


def test_echo_with_no_tokens_and_no_logprobs(quick):
    r = _whole(quick, "completions", {"prompt": "hi", "echo": True, "max_tokens": 0})
    assert r["choices"][0]["text"] == "hi" and r["choices"][0]["logprobs"] is None
    assert r["usage"]["completion_tokens"] == 0


@pytest.mark.parametrize(
    "route, body",
    [
        ("completions", {"prompt": "hi", "max_tokens": 0}),
        ("completions", {"prompt": "hi", "max_tokens": -1, "echo": True}),
        ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}),
    ],
)
def test_no_tokens_without_echo_is_refused_naming_echo(quick, route, body):
    message = _refusal(quick, route, body)
    assert "max_tokens must be at least 1" in message and "echo" in message
    assert "\n" not in message


# -- hole 3: logprobs 0 keeps the sampled token -------------------------------------------------
def test_logprobs_zero_gives_the_sampled_token_alone(quick):
    lp = _whole(quick, "completions", {"prompt": "abc", "max_tokens": 3, "logprobs": 0,
                                       "echo": True})["choices"][0]["logprobs"]  # fmt: skip
    assert lp["tokens"] == list("abcdef")
    assert lp["top_logprobs"][0] is None  # the prompt's first token: no logprob (vLLM's)
    for token, value, top in zip(lp["tokens"][1:], lp["token_logprobs"][1:],
                                 lp["top_logprobs"][1:], strict=True):  # fmt: skip
        assert top == {token: pytest.approx(-LN2)} and value == pytest.approx(-LN2)


# -- hole 4: the warm-up is not counted ---------------------------------------------------------
def _samples(server) -> dict[str, float]:
    text = httpx.get(f"{server.http_url}/metrics", timeout=10).text
    families = text_string_to_metric_families(text)  # every series has model_name (hunt 75)
    return {s.name: s.value for f in families for s in f.samples if set(s.labels) <= {"model_name"}}


def test_metrics_start_at_zero_after_the_warm_up():
    server = Server(MockEngine(), ServeConfig(port=0, drain_s=2.0)).start()
    try:
        server.warmup()
        before = _samples(server)
        assert before["wse_time_to_first_token_seconds_count"] == 0
        assert before["wse_e2e_request_latency_seconds_count"] == 0
        assert before["wse_generation_tokens_total"] == 0
        text = httpx.get(f"{server.http_url}/metrics", timeout=10).text
        assert "wse_request_success_total{" not in text  # no finished request of any reason
        _whole(server, "completions", {"prompt": "a", "max_tokens": 3})
        after = _samples(server)
        assert after["wse_time_to_first_token_seconds_count"] == 1
        assert after["wse_generation_tokens_total"] == 3
        assert after["wse_inter_token_latency_seconds_count"] == 2  # a gap a token after one
    finally:
        server.close()


# -- hole 5: stop_reason --------------------------------------------------------------------------
class _EosMock(MockEngine):
    """The mock with a model EOS (`EOS`), added to each request's stop ids as engines do."""

    def prefill(self, *, prompt_ids, sampling):
        prefix = super().prefill(prompt_ids=prompt_ids, sampling=sampling)
        return dataclasses.replace(prefix, sampling=with_eos(prefix.sampling, (EOS,)))


@pytest.fixture(scope="module")
def eos_server():
    server = Server(_EosMock(), ServeConfig(port=0, drain_s=2.0)).start()
    yield server
    server.close()


@pytest.mark.parametrize(
    "extra, finish, why",
    [
        ({"stop": ["ef", "e"]}, "stop", "e"),  # "abc" -> "de...": "e" is completed first
        ({"stop_token_ids": [0x65]}, "stop", 0x65),  # "e": a request's stop token, its id
        ({}, "stop", None),  # the model's EOS ("f"): null, as vLLM's
        ({"max_tokens": 2}, "length", None),
    ],
)
def test_stop_reason_names_what_stopped_it(eos_server, extra, finish, why):
    body = {"prompt": "abc", "max_tokens": 10, **extra}
    c = _whole(eos_server, "completions", body)["choices"][0]
    assert (c["finish_reason"], c["stop_reason"]) == (finish, why)
    last = _chunks(eos_server, "completions", body)[-1]["choices"][0]
    assert (last["finish_reason"], last["stop_reason"]) == (finish, why)


def test_a_chat_choice_carries_stop_reason(quick):
    # the default chat prompt ends "assistant:" (":" is 0x3A): the mock goes on ";<=>"
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 10, "stop": ["="]}
    c = _whole(quick, "chat/completions", body)["choices"][0]
    assert (c["message"]["content"], c["finish_reason"], c["stop_reason"]) == (";<", "stop", "=")
    chunks = _chunks(quick, "chat/completions", body)
    assert all(ch["choices"][0]["stop_reason"] is None for ch in chunks[:-1])
    assert chunks[-1]["choices"][0]["stop_reason"] == "="


# -- hole 6: whole-number floats are integers -----------------------------------------------------
def test_whole_number_floats_read_as_integers(quick):
    body = {"prompt": "abc", "temperature": 1.0}
    ints = _whole(quick, "completions", {**body, "max_tokens": 2, "n": 2, "seed": 3})
    floats = _whole(quick, "completions", {**body, "max_tokens": 2.0, "n": 2.0, "seed": 3.0})
    assert [c["text"] for c in floats["choices"]] == [c["text"] for c in ints["choices"]]
    assert floats["usage"] == ints["usage"] == {"prompt_tokens": 3, "completion_tokens": 4,
                                                "total_tokens": 7}  # fmt: skip
    lp = _whole(quick, "completions", {**body, "max_tokens": 1, "logprobs": 2.0})
    assert len(lp["choices"][0]["logprobs"]["top_logprobs"][0]) == 2


@pytest.mark.parametrize("value", [2.5, True, "2", 1e300])
def test_other_values_stay_refused(quick, value):
    message = _refusal(quick, "completions", {"prompt": "abc", "max_tokens": value})
    assert message.startswith("max_tokens must be")


# -- hole 7: GET /version, return_token_ids -------------------------------------------------------
def test_version_is_the_stacks(quick):
    r = httpx.get(f"{quick.http_url}/version", timeout=10)
    version = (Path(wse_core.__file__).with_name("VERSION")).read_text().strip()
    assert r.status_code == 200 and r.json() == {"version": version}


def test_return_token_ids_on_completions(quick):
    c = _whole(quick, "completions", {"prompt": "abc", "max_tokens": 3,
                                      "return_token_ids": True})["choices"][0]  # fmt: skip
    assert c["prompt_token_ids"] == list(b"abc") and c["token_ids"] == list(b"def")
    plain = _whole(quick, "completions", {"prompt": "abc", "max_tokens": 3})["choices"][0]
    assert "token_ids" not in plain and "prompt_token_ids" not in plain


def test_return_token_ids_on_chat(quick):
    messages = [{"role": "user", "content": "hi"}]
    r = _whole(quick, "chat/completions", {"messages": messages, "max_tokens": 3,
                                           "return_token_ids": True})  # fmt: skip
    tokenized = httpx.post(f"{quick.http_url}/tokenize", json={"model": "mock",
                           "messages": messages}, timeout=10).json()  # fmt: skip
    assert r["prompt_token_ids"] == tokenized["tokens"]
    last = tokenized["tokens"][-1]
    assert r["choices"][0]["token_ids"] == [last + 1, last + 2, last + 3]
    chunks = _chunks(quick, "chat/completions", {"messages": messages, "max_tokens": 3,
                                                 "return_token_ids": True})  # fmt: skip
    assert chunks[0]["prompt_token_ids"] == tokenized["tokens"]
    assert sum((ch["choices"][0]["token_ids"] for ch in chunks), []) == [last + 1, last + 2,
                                                                         last + 3]  # fmt: skip


def test_return_token_ids_must_be_a_flag(quick):
    body = {"prompt": "abc", "max_tokens": 1, "return_token_ids": "yes"}
    assert _refusal(quick, "completions", body).startswith("return_token_ids must be true or")
