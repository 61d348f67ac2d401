"""Request fields of the wrong JSON type or with values this server cannot honour (hostile
input, issue 54): each is a 400 naming the field, with one line that says what is allowed.
Before, "stream": "false" streamed, a negative max_completion_tokens beside max_tokens, a
negative top_logprobs without logprobs, and suffix / tools / response_format were ignored
(an answer that is not what was asked for)."""

from __future__ import annotations

import httpx
import pytest
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(120)

C, CHAT = "/v1/completions", "/v1/chat/completions"
BASE = {
    C: {"model": "mock", "prompt": "abc", "max_tokens": 3},
    CHAT: {"model": "mock", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
}


@pytest.fixture(scope="module")
def server():
    with running_server(grpc=False, max_slots=2, max_context=64) as s:
        yield s


@pytest.mark.parametrize(
    "route, field, value, words",
    [
        (C, "stream", "false", "true or false"),
        (C, "stream", "yes", "true or false"),
        (C, "stream", 1, "true or false"),
        (CHAT, "stream", "true", "true or false"),
        (C, "stream_options", [], "an object"),
        (C, "stream_options", {"include_usage": "yes"}, "true or false"),
        (C, "echo", 0, "true or false"),
        (C, "ignore_eos", "true", "true or false"),
        (C, "max_completion_tokens", -5, "at least 1"),
        (CHAT, "top_logprobs", -1, "0..20"),
        (CHAT, "top_logprobs", 99, "0..20"),
        (C, "suffix", "tail", "not supported"),
        (C, "min_tokens", 2, "not supported"),
        (CHAT, "tools", [{"type": "function", "function": {"name": "f"}}], "not supported"),
        (CHAT, "response_format", {"type": "json_object"}, "not supported"),
        (CHAT, "response_format", "json", "not supported"),
    ],
)
def test_a_bad_field_is_a_400_naming_it(server, route, field, value, words):
    body = {**BASE[route], field: value}
    r = httpx.post(server.http_url + route, json=body, timeout=30)
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"].split(".")[0] == field and words in err["message"], err
    assert "\n" not in err["message"]


@pytest.mark.parametrize(
    "field, value",
    [("stream", None), ("stream", False), ("stream_options", None), ("echo", None),
     ("response_format", {"type": "text"}), ("tools", []), ("suffix", "")],
)  # fmt: skip
def test_null_and_neutral_values_are_still_accepted(server, field, value):
    body = {**BASE[C], field: value}
    r = httpx.post(server.http_url + C, json=body, timeout=30)
    assert r.status_code == 200, r.text[:300]


def test_a_number_of_5000_digits_is_refused_without_python_advice(server):
    raw = '{"model": "mock", "prompt": "a", "max_tokens": ' + "9" * 5000 + "}"
    r = httpx.post(server.http_url + C, content=raw.encode(), timeout=30)
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    assert "4300 digits" in msg and "sys." not in msg, msg
