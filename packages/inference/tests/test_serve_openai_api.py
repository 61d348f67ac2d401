"""OpenAI request parsing: chat templates, defaults, and a fuzz test that never sees a 500."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wse_inference.mock import ByteTokenizer
from wse_inference.serve.admission import InvalidRequestError
from wse_inference.serve.openai_request import chat_prompt, parse_request
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(90)
TOK = ByteTokenizer()


class _TemplateTokenizer(ByteTokenizer):
    chat_template = (
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )


class _HFStyleTokenizer(ByteTokenizer):
    def apply_chat_template(self, messages, *, tokenize, add_generation_prompt):
        # rendered to text, as vLLM renders it (review 82: tokenize=True returns a
        # BatchEncoding in transformers 5), then tokenized by the server
        assert not tokenize and add_generation_prompt
        return f"<{len(messages)} messages>"


def test_chat_templates_plain_jinja_and_tokenizer_method():
    msgs = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}],
        },
    ]
    # text parts joined with "\n", as vLLM joins them (hunt 68: they were joined with "")
    assert TOK.decode(chat_prompt(msgs, TOK)) == "system: Be brief.\nuser: Hi\n!\nassistant:"
    jinja = _TemplateTokenizer()
    want = "<|system|>Be brief.<|user|>Hi\n!<|assistant|>"
    assert jinja.decode(chat_prompt(msgs, jinja)) == want
    assert chat_prompt(msgs, _HFStyleTokenizer()) == list(b"<2 messages>")
    with pytest.raises(InvalidRequestError):
        chat_prompt([{"role": "user", "content": [{"type": "image_url"}]}], TOK)


def test_defaults_follow_vllm_and_openai():
    p = parse_request(
        {"model": "m", "prompt": "abcd"},
        kind="completion",
        tokenizer=TOK,
        model_names=["m"],
        max_context=100,
    )
    assert p.sampling.max_tokens == 16  # vLLM's CompletionRequest and OpenAI's (hunt 75)
    assert (p.sampling.temperature, p.sampling.top_p, p.stream, p.include_usage) == (
        1.0,
        1.0,
        False,
        False,
    )
    p = parse_request(
        {
            "model": "m",
            "prompt": [5, 6],
            "max_completion_tokens": 3,
            "top_k": -1,
            "stop": "x",
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        kind="completion",
        tokenizer=TOK,
        model_names=["m"],
        max_context=100,
    )
    assert (p.prompt_ids, p.sampling.max_tokens, p.sampling.top_k) == ([5, 6], 3, 0)
    assert (p.sampling.stop, p.include_usage) == (("x",), True)


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 300),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.lists(st.integers(-3, 300), max_size=4),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.lists(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user", "bot"]),
                "content": st.one_of(st.text(max_size=6), st.integers()),
            }
        ),
        max_size=2,
    ),
)
_KEYS = [
    "model",
    "prompt",
    "messages",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "n",
    "stop",
    "stream",
    "stream_options",
    "seed",
    "logprobs",
    "top_logprobs",
    "presence_penalty",
    "stop_token_ids",
]


@pytest.fixture(scope="module")
def fast_server():
    with (
        running_server(max_slots=4, max_context=64) as s,
        httpx.Client(base_url=s.http_url, timeout=10) as client,
    ):
        yield client


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=7),
    model_ok=st.booleans(),
    chat=st.booleans(),
)
def test_random_requests_get_200_or_400_never_500(fast_server, body, model_ok, chat):
    if model_ok:
        body["model"] = "mock"
    route = "/v1/chat/completions" if chat else "/v1/completions"
    content = json.dumps(body, allow_nan=True).encode()
    r = fast_server.post(
        route,
        content=content,
        timeout=10,
        headers={"content-type": "application/json"},
    )
    assert r.status_code in (200, 400, 404), r.text  # 404: a model not served (hunt 77)
    if r.status_code in (400, 404):
        assert r.status_code == 400 or r.json()["error"]["reason"] == "model_not_found"
        assert set(r.json()["error"]) == {"message", "type", "param", "code", "reason"}
    elif body.get("stream") and r.text:
        assert r.text.rstrip().endswith("data: [DONE]")
