"""vLLM's /tokenize and /detokenize: the ids a request runs on (its usage.prompt_tokens),
a round trip through the byte tokenizer, and 400s for bad bodies."""

from __future__ import annotations

import httpx
import pytest
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def url():
    with running_server(max_slots=1, max_context=64) as s:
        yield s.http_url


def test_tokenize_matches_what_requests_run_on(url):
    r = httpx.post(url + "/tokenize", json={"model": "mock", "prompt": "héllo"}, timeout=10)
    assert r.json() == {
        "count": 6,
        "max_model_len": 64,
        "tokens": list("héllo".encode()),
        "token_strs": None,
    }
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    ids = httpx.post(url + "/tokenize", json={"messages": msgs}, timeout=10).json()["tokens"]
    assert bytes(ids).decode() == "system: Be brief.\nuser: Hi\nassistant:"
    chat = {"model": "mock", "messages": msgs, "max_tokens": 1}
    usage = httpx.post(url + "/v1/chat/completions", json=chat, timeout=10).json()["usage"]
    assert usage["prompt_tokens"] == len(ids)
    back = httpx.post(url + "/detokenize", json={"model": "mock", "tokens": ids}, timeout=10)
    assert back.json() == {"prompt": "system: Be brief.\nuser: Hi\nassistant:"}


@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        ("/tokenize", {"model": 5, "prompt": "a"}, "model"),
        ("/tokenize", {"prompt": 5}, "prompt"),
        ("/tokenize", {"messages": []}, "messages"),
        ("/detokenize", {"tokens": [1, 256]}, "tokens"),
        ("/detokenize", {"tokens": "abc"}, "tokens"),
        ("/detokenize", [1, 2], None),
    ],
)
def test_bad_bodies_are_400(url, route, body, param):
    r = httpx.post(url + route, json=body, timeout=10)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    r = httpx.post(url + route, content=b"{no", timeout=10)
    assert r.status_code == 400 and "Malformed JSON" in r.json()["error"]["message"]


def test_a_model_not_served_is_a_404_model_not_found(url):
    # hunt 56: OpenAI's code model_not_found; hunt 77: with OpenAI's and vLLM's status, 404
    r = httpx.post(url + "/tokenize", json={"model": "nope", "prompt": "a"}, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["reason"] == "model_not_found", r.text


@pytest.mark.parametrize(
    "body, param, words",
    [({"prompt": "a", "add_special_tokens": "x"}, "add_special_tokens", "true or false"),
     ({"prompt": "a", "return_token_strs": True}, "return_token_strs", "not supported"),
     ({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, "prompt", "not both")],
)  # fmt: skip
def test_tokenize_fields_it_cannot_honour_are_400s(url, body, param, words):
    # hunt 58: each was a 200 (the flag ignored, token_strs null, the prompt dropped)
    r = httpx.post(url + "/tokenize", json=body, timeout=10)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"], err
