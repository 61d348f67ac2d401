"""Hunt 75, the HTTP front end: /v1/completions' max_tokens default (vLLM's and OpenAI's 16),
a chunked body's 413 that states no size it does not know, /tokenize past the context."""

from __future__ import annotations

import httpx
import pytest
from wse_inference.mock import ByteTokenizer, expected_continuation
from wse_inference.serve.admission import RequestTooLargeError
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(60)
TOK = ByteTokenizer()


def _post(server, route: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.http_url}{route}", json=body, timeout=20)


def test_completions_without_max_tokens_make_16_tokens_and_chat_the_rest():
    """vLLM's CompletionRequest.max_tokens defaults to 16 (OpenAI's API reference too); its
    ChatCompletionRequest leaves it to the rest of the context."""
    with running_server(max_context=64) as srv:
        name = srv.model_names[0]
        r = _post(srv, "/v1/completions", {"model": name, "prompt": "ab"}).json()
        assert r["usage"]["completion_tokens"] == 16
        assert r["choices"][0]["finish_reason"] == "length"
        assert r["choices"][0]["text"] == TOK.decode(expected_continuation(TOK.encode("ab"), 16))
        chat = {"model": name, "messages": [{"role": "user", "content": "ab"}]}
        r = _post(srv, "/v1/chat/completions", chat).json()
        prompt = r["usage"]["prompt_tokens"]
        assert r["usage"]["completion_tokens"] == 64 - prompt  # the rest of the context
        # a prompt leaving fewer than 16: the rest of the context (vLLM's min)
        r = _post(srv, "/v1/completions", {"model": name, "prompt": "x" * 60}).json()
        assert r["usage"]["completion_tokens"] == 64 - 60


def test_a_body_of_unknown_size_says_more_than_the_limit():
    assert str(RequestTooLargeError(None, 1000)) == (
        "The request body is more than 1,000 bytes; this server takes at most 1,000 bytes."
    )
    said = str(RequestTooLargeError(5000, 1000, at_least=True))
    assert said.startswith("The request body is at least 5,000 bytes")  # a lower bound


def test_tokenize_counts_a_prompt_longer_than_the_context():
    """vLLM's /tokenize skips the context check: the count of every prompt (UTF-8 bytes for
    the byte tokenizer: its oracle)."""
    with running_server(max_context=32) as srv:
        name = srv.model_names[0]
        prompt = "héllo wörld " * 20  # 264 bytes, past a 32-token context
        r = _post(srv, "/tokenize", {"model": name, "prompt": prompt})
        assert r.status_code == 200, r.text
        got = r.json()
        want = list(prompt.encode("utf-8"))
        assert (got["count"], got["tokens"], got["max_model_len"]) == (len(want), want, 32)
        chat = {"model": name, "messages": [{"role": "user", "content": prompt}]}
        r = _post(srv, "/tokenize", chat)
        assert r.status_code == 200 and r.json()["count"] > len(want), r.text
        # generating on it is still refused (the context check stays where it matters)
        r = _post(srv, "/v1/completions", {"model": name, "prompt": prompt, "max_tokens": 1})
        assert r.status_code == 400
        # the body limit still bounds what is tokenized
        r = _post(srv, "/tokenize", {"model": name, "prompt": "a" * (2**21 + 10)})
        assert r.status_code == 413
