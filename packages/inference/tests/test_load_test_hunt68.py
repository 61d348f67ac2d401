"""`wse infer bench`'s client (`demo.load_test`) against a server whose usage counts cannot be
true. Before hunt 68:

- a usage of 10^400 completion tokens crashed the summary (`tokens / wall_s`: OverflowError,
  a traceback and no JSON), and one past Python's 4,300-digit limit failed the request with
  Python's advice to lift an interpreter limit;
- a usage of 10^9 tokens for a request of max_tokens 32 that streamed "hi" was taken as it
  came: 154 billion tokens/s and a TPOT of 0 ms, saved to the JSON;
- a usage below the chunks that carried text (each is at least one token) was taken too;
- the same failure of every request was listed once per request (up to five lines).

Now each such request is failed and counted, with one line naming what the server sent; the
oracle for honest servers is `wse infer serve`'s own mock engine, whose counts are exact.
"""

from __future__ import annotations

import json

import pytest
from wse_inference.demo.load_test import LoadTestConfig, run_load_test
from wse_inference.testing import fake_openai_server

pytestmark = pytest.mark.timeout(60)

MODELS = b'{"object": "list", "data": [{"id": "m"}]}'


def _stream(texts: list[str], usage: str | None) -> bytes:
    """The SSE bytes of chunks carrying `texts`, then a usage chunk (`usage` written as the
    JSON number it is, None: none), then `data: [DONE]`."""
    out = b"".join(b"data: %s\n\n" % json.dumps({"choices": [{"text": t}]}).encode() for t in texts)
    if usage is not None:
        out += b'data: {"choices": [], "usage": {"completion_tokens": %s}}\n\n' % usage.encode()
    return out + b"data: [DONE]\n\n"


def _bench(stream: bytes, n: int = 3, max_tokens: int = 32) -> dict:
    with fake_openai_server(MODELS, stream) as url:
        cfg = LoadTestConfig(url=url, num_requests=n, concurrency=1, max_tokens=max_tokens)
        summary = run_load_test(cfg)
    json.dumps(summary, allow_nan=False)  # what `wse infer bench` saves: strict JSON
    return summary


def _failed_with(summary: dict, n: int, line: str) -> None:
    """All `n` requests failed, counted, with the one line `line` and no tokens reported."""
    assert (summary["completed"], summary["failed"]) == (0, n)
    assert summary["errors"] == [line]
    assert summary["output_tokens"] == 0 and summary["output_tokens_per_s"] == 0.0
    assert summary["tpot_s"]["mean"] is None


def test_a_usage_of_401_digits_fails_the_request_instead_of_crashing():
    usage = "1" + "0" * 400
    summary = _bench(_stream(["hi"], usage))
    data = '{"choices": [], "usage": {"completion_tokens": ' + usage
    _failed_with(
        summary,
        3,
        f"a chunk holding an integer of 401 digits (a count has at most 20 digits): {data[:80]!r}",
    )


def test_a_usage_past_pythons_digit_limit_names_its_digits_not_an_interpreter_limit():
    summary = _bench(_stream(["hi"], "9" * 5000), n=1)
    (line,) = summary["errors"]
    assert summary["failed"] == 1 and "5,000 digits" in line
    assert "set_int_max_str_digits" not in line


def test_a_usage_past_max_tokens_is_a_failed_request_not_a_throughput():
    summary = _bench(_stream(["hi"], "1000000000"), n=4)
    _failed_with(
        summary,
        4,
        "the server's usage says 1000000000 completion tokens, past the max_tokens 32 "
        "the bench asked for",
    )


def test_a_usage_below_the_chunks_that_carried_text_is_a_failed_request():
    summary = _bench(_stream(["a", "", "b", "c"], "2"))
    _failed_with(
        summary,
        3,
        "the server's usage says 2 completion tokens, but 3 chunks carried text "
        "(each is at least one token)",
    )
    one = _bench(_stream(["a"], "0"), n=1)
    assert one["errors"] == [
        "the server's usage says 0 completion tokens, but 1 chunk carried text "
        "(each is at least one token)"
    ]


@pytest.mark.parametrize(
    "texts, usage, tokens",
    [
        (["a", "", "b", "c"], "3", 3),  # one chunk per token
        (["abc"], "32", 32),  # several tokens in one chunk, up to max_tokens exactly
        (["a", "b"], None, 2),  # no usage: the chunks that carried text
        ([], "0", 0),  # nothing generated
    ],
)
def test_counts_an_honest_server_could_send_are_taken(texts, usage, tokens):
    summary = _bench(_stream(texts, usage))
    assert (summary["completed"], summary["failed"]) == (3, 0)
    assert summary["output_tokens"] == 3 * tokens


def test_wse_infer_serve_counts_pass_the_checks_exactly():
    """The mock engine's byte tokens after "x" run past 0x7f (bytes that are no UTF-8 text
    alone), stepped slowly enough to stream in many chunks, and with speculation several
    tokens share a chunk: usage is exact, so nothing fails."""
    from wse_inference.serve.testing import running_server

    for spec in ({}, {"spec_tokens": 3, "spec_accepted": 2}):
        with running_server(step_delay_s=0.002, **spec) as server:
            cfg = LoadTestConfig(
                url=server.http_url, prompt="x", num_requests=4, concurrency=2, max_tokens=120
            )
            summary = run_load_test(cfg)
        assert (summary["completed"], summary["failed"]) == (4, 0), summary["errors"]
        assert summary["output_tokens"] == 4 * 120


def test_a_reason_shared_by_every_failed_request_is_listed_once():
    summary = _bench(b'data: {"error": {"message": "overloaded"}}\n\n', n=5)
    assert summary["failed"] == 5 and summary["errors"] == ["overloaded"]
