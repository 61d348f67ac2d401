"""Hunt 81 (serve81): `wse infer serve` and gRPC against vLLM. Before the fixes:

A. `seed: -1` was a fixed seed (the same "random" answer every time; with n = 2 the choices
   were seeded -1 and 0), on HTTP and gRPC;
B. `chat_template_kwargs` (Qwen3's {"enable_thinking": false}) was a 400 on chat and /tokenize;
C. content parts vLLM reads as text (input_text, output_text, refusal, thinking) were a 400
   "this model takes text only", and a "function" message was told it "needs a role";
D. /detokenize dropped special tokens ("<s><|im_start|>hi<|im_end|>" came back "hi");
E. n > 1 with greedy sampling was served as n identical copies;
F. gRPC answered an unknown model INVALID_ARGUMENT, where HTTP says 404;
G. stop_token_ids was capped at 64 ids counting repeats, with no variable to lift it;
H. `--api-key` did not exist: no way to require a key (here the server; the CLI's side is
   apps/cli/tests/test_serve_bench_hunt81.py).

Oracles: vLLM's own rules, written out here from its source (vllm/sampling_params.py:
`seed == -1` is None, `list(dict.fromkeys(stop_token_ids))`, `_verify_greedy_sampling` below
`_SAMPLING_EPS` = 1e-5; vllm/entrypoints/chat_utils.py: the parts read as text and the two
skipped when null; vllm/entrypoints/serve/utils/server_utils.py: the public endpoints and the
guarded prefixes of `AuthenticationMiddleware`); transformers (a declared test dependency) on
the same tokenizer folder for B and D: `apply_chat_template(..., enable_thinking=False)` and
`decode(ids)`, whose skip_special_tokens default is False, as vLLM calls them; gRPC's mapping
of HTTP 404 to NOT_FOUND (grpc/doc/http-grpc-status-mapping.md).
"""

from __future__ import annotations

import json

import grpc
import httpx
import pytest
from tokenizers import AddedToken, Tokenizer, processors
from wse_inference.hf_tokenizer import read_tokenizer_file
from wse_inference.mock import MockEngine
from wse_inference.serve.admission import InvalidRequestError, RequestLimits
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.chat_template import chat_text
from wse_inference.serve.grpc_server import sampling_from_request
from wse_inference.serve.openai_request import (
    choice_sampling,
    detokenize_request,
    parse_request,
    tokenize_request,
)
from wse_inference.serve.proto import load_stubs
from wse_inference.serve.testing import running_server
from wse_inference.testing import save_byte_bpe

pytestmark = pytest.mark.timeout(120)
pb2, pb2_grpc = load_stubs()
BYTES = MockEngine().tokenizer  # the mock's byte tokenizer
SPECIALS = ("<s>", "</s>", "<|im_start|>", "<|im_end|>")  # ids 256..259 after the bytes
# a Qwen3-like ChatML template: with enable_thinking false the assistant turn opens with an
# empty think block (Qwen3's own rule, reduced to it)
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)
HI = [{"role": "user", "content": "hi"}]


def _parse(body: dict, kind: str = "completion", **kw):
    return parse_request(body, kind=kind, tokenizer=BYTES, model_names=["mock"],
                         max_context=256, **kw)  # fmt: skip


# -- A: seed -1 is no seed ------------------------------------------------------------------------
def _vllm_seed(seed: int | None) -> int | None:
    """vLLM's SamplingParams.__post_init__: `if self.seed == -1: self.seed = None`."""
    return None if seed == -1 else seed


@pytest.mark.parametrize("seed", [-1, 0, 7, -2])
def test_seed_minus_one_is_no_seed_on_http_as_vllms(seed):
    body = {"prompt": "hi", "max_tokens": 2, "temperature": 1.0, "seed": seed, "n": 2}
    p = _parse(body)
    assert p.sampling.seed == _vllm_seed(seed)
    # choice 1: seed + 1 where there is a seed (the house's rule), a fresh draw where not
    expected = None if _vllm_seed(seed) is None else seed + 1
    assert choice_sampling(p.sampling, 1).seed == expected


@pytest.mark.parametrize("seed", [-1, 0, 7])
def test_seed_minus_one_is_no_seed_on_grpc_as_vllms(seed):
    req = pb2.GenerateRequest(text="hi", max_tokens=2, seed=seed)
    assert sampling_from_request(req, prompt_len=2, max_context=64).seed == _vllm_seed(seed)


class _Recording(MockEngine):
    """A mock that records the seed of each request it prefills."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.seeds: list[int | None] = []

    def prefill(self, **kw):  # type: ignore[override]
        self.seeds.append(kw["sampling"].seed)
        return super().prefill(**kw)


def test_the_engine_runs_seed_minus_one_unseeded_on_both_front_ends():
    engine = _Recording()
    server = Server(engine, ServeConfig(port=0, grpc_port=0, warmup=False, drain_s=2.0)).start()
    try:
        body = {"prompt": "hi", "max_tokens": 2, "temperature": 1.0, "seed": -1, "n": 2}
        assert httpx.post(server.http_url + "/v1/completions", json=body).status_code == 200
        with grpc.insecure_channel(server.grpc_target) as channel:
            req = pb2.GenerateRequest(text="hi", max_tokens=2, temperature=1.0, seed=-1)
            list(pb2_grpc.GenerationStub(channel).Generate(req, timeout=10))
    finally:
        server.close()
    assert engine.seeds == [None, None, None]  # vLLM's: no seed; before: [-1, 0, -1]


# -- G: stop_token_ids, each id once, the bound a limit variable ---------------------------------
@pytest.mark.parametrize("ids", [[5] * 65, [3, 1, 3, 2, 1], list(range(64)) * 3])
def test_stop_token_ids_repeats_are_dropped_as_vllm_drops_them(ids):
    p = _parse({"prompt": "hi", "max_tokens": 2, "stop_token_ids": ids})
    assert list(p.sampling.stop_token_ids) == list(dict.fromkeys(ids))  # vLLM's __post_init__
    req = pb2.GenerateRequest(text="hi", max_tokens=2, stop_token_ids=ids)
    grpc_ids = sampling_from_request(req, prompt_len=2, max_context=64).stop_token_ids
    assert list(grpc_ids) == list(dict.fromkeys(ids))


def test_more_distinct_stop_token_ids_than_the_limit_name_its_variable(monkeypatch):
    body = {"prompt": "hi", "max_tokens": 2, "stop_token_ids": list(range(65))}
    with pytest.raises(InvalidRequestError) as info:
        _parse(body, limits=RequestLimits())
    said = str(info.value)
    assert "at most 64 distinct token ids, got 65" in said and "\n" not in said
    assert "WSE_LIMIT_SERVE_STOP_TOKEN_IDS" in said
    monkeypatch.setenv("WSE_LIMIT_SERVE_STOP_TOKEN_IDS", "100")  # read as the limits are built
    assert len(_parse(body, limits=RequestLimits()).sampling.stop_token_ids) == 65
    with pytest.raises(InvalidRequestError) as info:  # a caller's own count: no variable named
        _parse(body, limits=RequestLimits(max_stop_token_ids=3))
    assert "at most 3 distinct" in str(info.value) and "WSE_LIMIT" not in str(info.value)


# -- E: n > 1 with greedy sampling ---------------------------------------------------------------
VLLM_SAMPLING_EPS = 1e-5  # vllm/sampling_params.py's _SAMPLING_EPS: below it, greedy


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("temperature", [0.0, 1e-6, 1e-5, 0.5])
def test_n_with_greedy_sampling_is_refused_as_vllm_refuses_it(n, temperature):
    body = {"prompt": "hi", "max_tokens": 2, "n": n, "temperature": temperature}
    vllm_refuses = temperature < VLLM_SAMPLING_EPS and n > 1  # _verify_greedy_sampling
    if not vllm_refuses:
        assert _parse(body).n == n
        return
    with pytest.raises(InvalidRequestError) as info:
        _parse(body)
    assert str(info.value).startswith(f"n must be 1 when using greedy sampling, got {n}")
    assert info.value.param == "n" and "\n" not in str(info.value)


def test_n_with_greedy_sampling_is_a_400_in_one_line_over_http():
    with running_server() as s:
        body = {"prompt": "hi", "max_tokens": 3, "n": 3, "temperature": 0}
        r = httpx.post(s.http_url + "/v1/completions", json=body, timeout=10)
        assert r.status_code == 400, r.text  # before: 200, three copies of 'jkl', 9 tokens
        error = r.json()["error"]
        assert error["param"] == "n" and "greedy" in error["message"]
        assert "\n" not in error["message"]


# -- F: gRPC's unknown model ---------------------------------------------------------------------
def test_grpc_answers_an_unknown_model_not_found_as_http_answers_404():
    with running_server(grpc=True) as s, grpc.insecure_channel(s.grpc_target) as channel:
        req = pb2.GenerateRequest(text="hi", max_tokens=2, model="nope")
        with pytest.raises(grpc.RpcError) as info:
            list(pb2_grpc.GenerationStub(channel).Generate(req, timeout=10))
        http = httpx.post(s.http_url + "/v1/completions", json={"prompt": "hi", "model": "nope"})
    assert http.status_code == 404  # OpenAI's and vLLM's
    assert info.value.code() == grpc.StatusCode.NOT_FOUND  # gRPC's mapping of HTTP 404
    assert info.value.details() == http.json()["error"]["message"]


# -- C: the parts vLLM reads as text; a function message -----------------------------------------
# vLLM's MM_PARSER_MAP: each kind's text field; each becomes a text part
VLLM_TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal",
                   "thinking": "thinking"}  # fmt: skip
LOOPING = "{% for m in messages %}{{ m.role }}:{% for c in m.content %}[{{ c.text }}]{% endfor %}|{% endfor %}"  # noqa: E501


@pytest.mark.parametrize("kind", sorted(VLLM_TEXT_PARTS))
@pytest.mark.parametrize("template", [None, LOOPING])  # the plain lines; a template over parts
def test_text_bearing_parts_are_read_as_text_parts(kind, template):
    part = {"type": kind, VLLM_TEXT_PARTS[kind]: "no"}
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}, part]}]
    as_text = [{"role": "user", "content": [{"type": "text", "text": t} for t in ("a", "no")]}]
    assert chat_text(msgs, BYTES, template) == chat_text(as_text, BYTES, template)


def test_a_text_or_refusal_part_without_its_text_is_skipped_as_vllm_skips_it():
    msgs = [
        {
            "role": "assistant",
            "content": [
                {"type": "refusal", "refusal": None},
                {"type": "text"},
                {"type": "text", "text": "b"},
            ],
        }
    ]
    assert chat_text(msgs, BYTES) == chat_text([{"role": "assistant", "content": "b"}], BYTES)


@pytest.mark.parametrize(
    "part, words",
    [
        ({"type": "input_image", "image_url": "http://x"}, "'input_image' part; this model takes"),
        ({"type": "output_text", "text": 5}, "its 'text' must be a string, got 5"),
        ({"type": "thinking"}, "its 'thinking' must be a string, got null"),
    ],
)
def test_parts_that_are_not_text_are_refused_in_one_line(part, words):
    body = {"messages": [{"role": "user", "content": [part]}], "max_tokens": 1}
    with pytest.raises(InvalidRequestError) as info:
        _parse(body, kind="chat")
    assert words in str(info.value) and "\n" not in str(info.value)


def test_the_hunts_parts_are_served_over_http():
    msgs = [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
            {"role": "user", "content": "ok"}]  # fmt: skip
    with running_server() as s:
        r = httpx.post(s.http_url + "/v1/chat/completions",
                       json={"messages": msgs, "max_tokens": 2}, timeout=10)  # fmt: skip
    assert r.status_code == 200, r.text


def test_a_function_message_is_refused_for_its_real_reason():
    msgs = [*HI, {"role": "function", "name": "get_time", "content": "12:00"}]
    with pytest.raises(InvalidRequestError) as info:
        _parse({"messages": msgs, "max_tokens": 1}, kind="chat")
    said = str(info.value)
    assert said.startswith("messages[1] is a function message (OpenAI's deprecated form of a")
    assert "'get_time'" in said and "serves no tools" in said and "needs a role" not in said


# -- B and D: a tokenizer folder with special tokens and a template ------------------------------
@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A byte BPE with <s> </s> <|im_start|> <|im_end|> (256..259), a BOS post-processor and
    TEMPLATE, saved as transformers saves a tokenizer."""
    path = tmp_path_factory.mktemp("chat")
    save_byte_bpe(path / "tokenizer.json", texts=("hello world",))
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIALS])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    tok.save(str(path / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "<|im_end|>", "chat_template": TEMPLATE,
              "tokenizer_class": "PreTrainedTokenizerFast"}  # fmt: skip
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def _transformers(folder):
    transformers = pytest.importorskip("transformers")
    return transformers.PreTrainedTokenizerFast.from_pretrained(str(folder))


def _oracle_chat_ids(hf, messages, **kwargs) -> list[int]:
    """vLLM's chat prompt: the template rendered by transformers' apply_chat_template with the
    request's chat_template_kwargs, tokenized without special tokens added."""
    text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    return list(hf(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("kwargs", [{}, {"enable_thinking": False}, {"enable_thinking": True},
                                    {"bos_token": "</s>", "unread": [1, {"x": 2}]}])  # fmt: skip
def test_chat_template_kwargs_reach_the_template_as_transformers_passes_them(folder, kwargs):
    hf, tok = _transformers(folder), read_tokenizer_file(folder / "tokenizer.json")
    expected = _oracle_chat_ids(hf, HI, **kwargs)
    body = {"messages": HI, "max_tokens": 1, "chat_template_kwargs": kwargs}
    ids = parse_request(body, kind="chat", tokenizer=tok, model_names=["m"], max_context=256)
    assert ids.prompt_ids == expected
    counted = tokenize_request(body, tokenizer=tok, model_names=["m"], chat_template=None,
                               max_context=256)  # fmt: skip
    assert counted["tokens"] == expected
    if kwargs.get("enable_thinking") is False:  # the empty think block is there
        assert "<think>\n\n</think>" in hf.decode(expected)


@pytest.mark.parametrize(
    "value, words",
    [
        ([1], "chat_template_kwargs must be an object of template variables"),
        ("x", "chat_template_kwargs must be an object of template variables"),
        ({"tokenize": False}, "cannot set 'tokenize'"),  # vLLM refuses it too
        ({"chat_template": "x"}, "cannot set 'chat_template'"),  # so does vLLM
        ({"messages": []}, "cannot set 'messages'"),
        ({"add_generation_prompt": False}, "cannot set 'add_generation_prompt'"),
        ({"tools": [{"type": "function"}]}, "this server serves no tools"),
    ],
)
def test_chat_template_kwargs_the_server_sets_itself_are_refused(folder, value, words):
    tok = read_tokenizer_file(folder / "tokenizer.json")
    body = {"messages": HI, "max_tokens": 1, "chat_template_kwargs": value}
    for call in (
        lambda: parse_request(
            body, kind="chat", tokenizer=tok, model_names=["m"], max_context=256
        ),  # fmt: skip
        lambda: tokenize_request(
            body, tokenizer=tok, model_names=["m"], chat_template=None, max_context=256
        ),  # fmt: skip
    ):
        with pytest.raises(InvalidRequestError) as info:
            call()
        assert words in str(info.value) and info.value.param == "chat_template_kwargs"


def test_chat_template_kwargs_are_served_over_http():
    template = "{% if enable_thinking is false %}no-think {% endif %}{{ messages[0].content }}"
    with running_server(chat_template=template) as s:
        body = {"messages": HI, "chat_template_kwargs": {"enable_thinking": False}}
        r = httpx.post(s.http_url + "/tokenize", json=body, timeout=10)
        assert r.status_code == 200, r.text  # before: 400 "not supported"
        assert bytes(r.json()["tokens"]).decode() == "no-think hi"
        chat = {**body, "max_tokens": 1}
        r = httpx.post(s.http_url + "/v1/chat/completions", json=chat, timeout=10)
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == len("no-think hi")


@pytest.mark.parametrize("ids", [[256, 258, 104, 105, 259], [104, 105], [257, 256]])
def test_detokenize_writes_special_tokens_as_transformers_decode(folder, ids):
    hf, tok = _transformers(folder), read_tokenizer_file(folder / "tokenizer.json")
    got = detokenize_request({"tokens": ids}, tokenizer=tok, model_names=["m"], vocab_size=260)
    assert got == {"prompt": hf.decode(ids)}  # vLLM's: tokenizer.decode(ids), the default


def test_a_rendered_chat_round_trips_through_tokenize_and_detokenize(folder):
    hf, tok = _transformers(folder), read_tokenizer_file(folder / "tokenizer.json")
    body = {"messages": HI, "add_generation_prompt": False}
    ids = tokenize_request(body, tokenizer=tok, model_names=["m"], chat_template=None,
                           max_context=256)["tokens"]  # fmt: skip
    text = detokenize_request({"tokens": ids}, tokenizer=tok, model_names=["m"], vocab_size=260)
    assert text["prompt"] == hf.apply_chat_template(HI, tokenize=False)
    assert text["prompt"] == "<s><|im_start|>user\nhi<|im_end|>\n"  # by hand, from TEMPLATE


# -- H: the server's API keys ---------------------------------------------------------------------
VLLM_PUBLIC = ("/health", "/ping", "/load", "/version", "/metrics", "/docs", "/redoc")
PATHS = [("GET", "/v1/models"), ("GET", "/v1/models/mock"), ("POST", "/v1/completions"),
         ("POST", "/v1/chat/completions"), ("POST", "/tokenize"), ("POST", "/detokenize"),
         ("GET", "/health"), ("GET", "/metrics"), ("GET", "/version"),
         ("GET", "/v1/nowhere")]  # fmt: skip
BODIES = {"/v1/completions": {"prompt": "hi", "max_tokens": 2},
          "/v1/chat/completions": {"messages": HI, "max_tokens": 2},
          "/tokenize": {"prompt": "hi"}, "/detokenize": {"tokens": [104]}}  # fmt: skip


def _vllm_guards(path: str, routes: list[str]) -> bool:
    """vLLM's AuthenticationMiddleware: a path under a guarded prefix (its MIN_GUARDED_PREFIXES'
    /v1, and each registered route not public, up to its first path parameter) and not public
    needs a key."""

    def public(p: str) -> bool:
        return any(p == q or p.startswith(q + "/") for q in VLLM_PUBLIC)

    guarded = ["/v1"] + [r.split("{")[0] for r in routes if not public(r)]
    return not public(path) and path.startswith(tuple(guarded))


@pytest.fixture(scope="module")
def keyed():
    config = ServeConfig(port=0, grpc_port=0, warmup=False, drain_s=2.0, api_keys=("k1", "k2"))
    server = Server(MockEngine(), config).start()
    try:
        yield server
    finally:
        server.close()


def _call(server, method, path, headers):
    return httpx.request(method, server.http_url + path, json=BODIES.get(path), headers=headers,
                         timeout=10)  # fmt: skip


@pytest.mark.parametrize("method, path", PATHS)
def test_api_keys_guard_the_routes_vllm_guards(keyed, method, path):
    routes = [r.path for r in keyed.app.routes]
    needs_key = _vllm_guards(path, routes)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic k1"}):
        r = _call(keyed, method, path, headers)
        assert (r.status_code == 401) == needs_key, (path, headers, r.status_code)
        if needs_key:
            error = r.json()["error"]
            assert error["code"] == 401 and error["reason"] == "invalid_api_key"
            assert "k1" not in r.text and r.headers["www-authenticate"] == "Bearer"
    for key in ("Bearer k1", "bearer k2"):  # either key; the scheme in any case (RFC 6750)
        r = _call(keyed, method, path, {"Authorization": key})
        assert r.status_code != 401, (path, r.text)
        assert r.status_code in (200, 404), r.text  # /v1/nowhere: a 404 once the key is right


def test_a_cors_preflight_needs_no_key(keyed):
    preflight = {"Origin": "http://a", "Access-Control-Request-Method": "POST"}
    r = httpx.options(keyed.http_url + "/v1/completions", headers=preflight)
    assert r.status_code == 200


def test_grpc_generate_needs_the_key_as_metadata_and_health_does_not(keyed):
    with grpc.insecure_channel(keyed.grpc_target) as channel:
        st = pb2_grpc.GenerationStub(channel)
        req = pb2.GenerateRequest(text="hi", max_tokens=2)
        for metadata in ((), (("authorization", "Bearer nope"),)):
            with pytest.raises(grpc.RpcError) as info:
                list(st.Generate(req, timeout=10, metadata=metadata))
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert info.value.details().startswith("Unauthorized: ")
        out = list(st.Generate(req, timeout=10, metadata=(("authorization", "Bearer k2"),)))
        assert out[-1].finish_reason == "length"
        assert st.HealthCheck(pb2.HealthCheckRequest(), timeout=5).models == ["mock"]


def test_no_keys_require_nothing():
    with running_server() as s:
        assert httpx.get(s.http_url + "/v1/models").status_code == 200
