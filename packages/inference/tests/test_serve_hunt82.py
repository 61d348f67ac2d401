"""Hunt 82 (serve82): `wse infer serve` and gRPC against vLLM. Before the fixes:

2. `echo: true` re-decoded the prompt's ids without special tokens: a ChatML prompt sent to
   /v1/completions came back without its markers, `text.startswith(prompt)` was false and
   `text[len(prompt):]` lost the answer; a token-id prompt lost its "<s>";
3. a prompt alone as long as the context, max_tokens left out, was told it "requested N + 1
   tokens (N in the messages, 1 in the completion)": the 1 was the server's own filler;
4. /v1/completions without max_tokens took generation_config.json's max_new_tokens (5) where
   vLLM gives its CompletionRequest default, 16;
5. (the server's side of) several served names: the answer's `model` echoed the alias asked;
6. an answer cut by max_tokens inside a UTF-8 character, or after bytes that are no UTF-8,
   ended in U+FFFD, whole, streamed, on gRPC and in the engines' tracker (`wse infer
   generate`), where vLLM's detokenizer holds text that ends in U+FFFD and drops it at the end.

Oracles: the request's own prompt string and transformers' `decode(ids)` (its
skip_special_tokens default False, as vLLM's renderer `_detokenize_prompt` calls it) for 2, the
echoed logprob texts joining to the text; vLLM's messages and rules written out here from its
source for 3 and 4 (vllm/entrypoints/openai/serving_engine.py `_validate_input`'s `max_tokens is
None` branch; vllm/entrypoints/serve/utils/api_utils.py `get_max_tokens` with
CompletionRequest's `max_tokens = 16` and ChatCompletionRequest's None); vLLM's
`OpenAIServingModels.model_name()`, `base_model_paths[0].name`, for 5; vLLM's hold (text
ending in U+FFFD is not let go; nothing flushes it) over Python's UTF-8 codec for 6.
"""

from __future__ import annotations

import json

import grpc
import httpx
import pytest
from tokenizers import AddedToken, Tokenizer, processors
from wse_inference.engine import ByteTokenizer, SamplingParams, SequenceTracker
from wse_inference.hf_tokenizer import read_tokenizer_file
from wse_inference.mock import MockEngine
from wse_inference.serve.admission import InvalidRequestError
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.openai_request import parse_request
from wse_inference.serve.proto import load_stubs
from wse_inference.testing import let_go, save_byte_bpe

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.timeout(120)
pb2, pb2_grpc = load_stubs()
SPECIALS = ("<s>", "</s>", "<|im_start|>", "<|im_end|>")  # ids 256..259 after the bytes
CHATML = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A byte BPE with <s> </s> <|im_start|> <|im_end|> (256..259) and a BOS post-processor,
    as hunt 82's `chat` model folder."""
    path = tmp_path_factory.mktemp("chat82")
    save_byte_bpe(path / "tokenizer.json", texts=("hello world",))
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIALS])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    tok.save(str(path / "tokenizer.json"))
    return path


@pytest.fixture(scope="module")
def server(folder):
    """The mock (next id = last + 1) over that tokenizer, served under two names."""
    engine = MockEngine(max_slots=2, max_context=128)
    engine.tokenizer, engine.vocab_size = read_tokenizer_file(folder / "tokenizer.json"), 260
    cfg = ServeConfig(port=0, grpc_port=0, model_names=("first", "second"),
                      chat_template="{{ messages[0]['content'] }}")  # fmt: skip
    s = Server(engine, cfg).start()
    yield s
    s.close()


def _post(server, body: dict, route: str = "completions") -> httpx.Response:
    return httpx.post(f"{server.http_url}/v1/{route}", json=body, timeout=30)


def _streamed(server, body: dict) -> tuple[str, list[str], list[int]]:
    """A streamed completion's text, logprob tokens and text_offset, its chunks joined."""
    text, tokens, starts = "", [], []
    url = f"{server.http_url}/v1/completions"
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choice = json.loads(line[6:])["choices"][0]
                text += choice["text"]
                lp = choice["logprobs"] or {"tokens": [], "text_offset": []}
                tokens, starts = tokens + lp["tokens"], starts + lp["text_offset"]
    return text, tokens, starts


# -- 2: echo is the prompt that was sent ---------------------------------------------------------
@pytest.mark.parametrize("prompt", [CHATML, "<s>he", "hello", [256, 258, 104, 259], [104, 105]])
def test_echo_starts_with_the_prompt_sent_and_then_the_answer(server, folder, prompt):
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    sent = prompt if isinstance(prompt, str) else hf.decode(prompt)  # vLLM's prompt text
    body = {"model": "first", "prompt": prompt, "max_tokens": 4, "temperature": 0}
    answer = _post(server, body).json()["choices"][0]["text"]
    for lp in (None, 1):
        echoed = {**body, "echo": True, "logprobs": lp}
        whole = _post(server, echoed).json()["choices"][0]
        text, tokens, starts = _streamed(server, echoed)
        assert whole["text"] == text == sent + answer  # before: CHATML came back "user\nhi..."
        assert text.startswith(sent) and text[len(sent) :] == answer
        if lp is not None:  # the logprob texts lie over that text: the markers written out
            assert whole["logprobs"]["tokens"] == tokens and "".join(tokens) == text
            assert starts == [len("".join(tokens[:i])) for i in range(len(tokens))]
    if prompt == CHATML:
        assert "<|im_start|>" in tokens and tokens[0] == ""  # the BOS the tokenizer added: ""


# -- 3 and 4: max_tokens left out ----------------------------------------------------------------
def _vllm_too_long(context: int, prompt: int) -> str:
    """vLLM's `_validate_input` when the request's max_tokens is None and the prompt alone
    reaches the context (`token_num >= self.max_model_len`), its comma kept."""
    return (f"This model's maximum context length is {context} tokens. However, you "
            f"requested {prompt} tokens in the messages, Please reduce the length of the "
            "messages.")  # fmt: skip


@pytest.mark.parametrize("length", [128, 129, 300])
def test_a_prompt_alone_too_long_is_told_in_vllms_words_for_no_max_tokens(server, length):
    chat = {"messages": [{"role": "user", "content": "h" * length}]}
    for route, body in (("completions", {"prompt": "h" * length}), ("chat/completions", chat)):
        prompt = length + (route == "completions")  # the BOS the tokenizer adds to a text
        r = _post(server, body, route)
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["message"] == _vllm_too_long(128, prompt)  # before: "(N in the messages, 1 ..."
        assert err["reason"] == "context_length_exceeded"
    with grpc.insecure_channel(server.grpc_target) as ch:
        req = pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=[104] * length))
        with pytest.raises(grpc.RpcError) as info:
            list(pb2_grpc.GenerationStub(ch).Generate(req, timeout=30))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == _vllm_too_long(128, length)
    # one token of room: served, that one token (the rest of the context)
    r = _post(server, {"prompt": [104] * 127})
    assert (r.status_code, r.json()["usage"]["completion_tokens"]) == (200, 1)


def _vllm_max_tokens(kind: str, context: int, prompt: int, file: int | None) -> int:
    """vLLM's `get_max_tokens(max_model_len, request.max_tokens, input_length, defaults)`:
    min(the rest of the context, the request's max_tokens if not None else the file's
    max_new_tokens); the request's is CompletionRequest's 16 on completions, None on chat."""
    request = 16 if kind == "completion" else None
    fallback = request if request is not None else file
    return min(v for v in (context - prompt, fallback) if v is not None)


@pytest.mark.parametrize("file", [None, 5, 40])
@pytest.mark.parametrize("prompt", [3, 60, 120])
def test_max_tokens_left_out_is_vllms_on_each_route(file, prompt):
    tok, defaults = ByteTokenizer(), ({} if file is None else {"max_tokens": file})
    chat = {"messages": [{"role": "user", "content": "a" * prompt}]}
    for kind, body in (("completion", {"prompt": "a" * prompt}), ("chat", chat)):
        p = parse_request(body, kind=kind, tokenizer=tok, model_names=["m"], max_context=128,
                          chat_template="{{ messages[0]['content'] }}",
                          sampling_defaults=defaults)  # fmt: skip
        assert len(p.prompt_ids) == prompt
        # before: min(5, 16) = 5 on completions with the file's 5
        assert p.sampling.max_tokens == _vllm_max_tokens(kind, 128, prompt, file), (kind, file)


# -- 5: several served names ---------------------------------------------------------------------
def test_any_served_name_is_taken_and_the_first_is_reported(server):
    listed = httpx.get(f"{server.http_url}/v1/models", timeout=10).json()["data"]
    assert [m["id"] for m in listed] == ["first", "second"]
    for name in ("first", "second", None):
        body = {"prompt": "hi", "max_tokens": 2, **({"model": name} if name else {})}
        assert _post(server, body).json()["model"] == "first"  # vLLM's model_name()
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "model": name}
        assert _post(server, chat, "chat/completions").json()["model"] == "first"
    assert _post(server, {"prompt": "hi", "model": "third"}).status_code == 404
    with pytest.raises(InvalidRequestError):  # the parser's own check, the same names
        parse_request({"prompt": "hi", "model": 3}, kind="completion", tokenizer=ByteTokenizer(),
                      model_names=["first", "second"], max_context=64)  # fmt: skip


# -- 6: an answer that ends in U+FFFD (a character cut by max_tokens, bytes no UTF-8) ------------
def _vllm_text(made: bytes) -> str:
    """The answer's text from these bytes (one a token, the mock's) as vLLM's detokenizer
    lets it go (`testing.let_go`, with this server's bound on a held run: vLLM holds it
    whole); what is held at the end is dropped."""
    return made[: let_go([bytes([b]) for b in made])].decode("utf-8", "replace")


# the mock's bytes after each prompt: "hi" + CF -> D0 (a 2-byte lead: unfinished), D1 ...;
# DF -> E0, E1, E2 (3-byte leads); 7E -> 7F (a character), 80, 81, ... (no UTF-8: the hunt's
# case, its tiny model's "\x17" then 0xFE, was "\x17\ufffd"); past a run of 4 held tokens
# the server lets go of all but a character still arriving (hunt 62's bound; vLLM holds all)
CUTS = [(b"hi\xcf", 1, ""), (b"hi\xcf", 2, ""), (b"\xdf", 3, ""), (b"\x7e", 2, "\x7f"),
        (b"\x7e", 7, "\x7f" + "\ufffd" * 6), (b"ab", 3, "cde")]  # fmt: skip


@pytest.mark.parametrize("prompt, n, want", CUTS)
def test_an_answer_ending_in_fffd_ends_before_it_everywhere(prompt, n, want):
    made = bytes(prompt[-1] + 1 + i for i in range(n))
    assert _vllm_text(made) == want  # before: every case but the last ended in U+FFFD
    engine = MockEngine(max_slots=2)
    server = Server(engine, ServeConfig(port=0, grpc_port=0)).start()
    try:
        body = {"prompt": list(prompt), "max_tokens": n, "logprobs": 0}
        whole = _post(server, body).json()["choices"][0]
        streamed = _streamed(server, body)
        with grpc.insecure_channel(server.grpc_target) as ch:
            req = pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=list(prompt)), max_tokens=n)
            answers = list(pb2_grpc.GenerationStub(ch).Generate(req, timeout=30))
    finally:
        server.close()
    assert whole["text"] == streamed[0] == "".join(a.text for a in answers) == want
    assert whole["finish_reason"] == answers[-1].finish_reason == "length"
    # the tokens' texts join to it, whole and streamed (those held at the end: "")
    assert "".join(whole["logprobs"]["tokens"]) == "".join(streamed[1]) == want
    tracker = SequenceTracker(SamplingParams(max_tokens=n), ByteTokenizer(), prompt_ids=prompt)
    for t in made:  # the engines' tracker: `wse infer generate`'s text
        tracker.add(t)
    assert (tracker.finish_reason, tracker.visible_text()) == ("length", want)


# pieces of every kind: ASCII, whole characters of 2-4 bytes, their first bytes alone, lone
# continuation bytes, bytes that are never UTF-8, U+FFFD itself
KINDS = [b"a", b" ", b"\xc3\xa9", "中".encode(), "😊".encode(), b"\xe4", b"\xe4\xbd", b"\xf0\x9f",
         b"\x80", b"\xbf", b"\xfe", b"\xff", "\ufffd".encode()]  # fmt: skip


@pytest.mark.parametrize("make", ["bytes", "byte-level"])
def test_text_and_logprob_texts_hold_alike_for_any_bytes(tmp_path, make):
    """Whole and streamed in random chunks, the text (`TextStream`) and the logprob tokens'
    texts hold and drop the same (`token_bytes.Hold` in both); on the byte tokenizer the
    text is the `testing.let_go` oracle's (vLLM's hold, from whole decodes)."""
    import random
    import types

    from wse_inference.engine import TokenLogprob
    from wse_inference.serve.openai_logprobs import logprobs_and_end
    from wse_inference.serve.text_stream import TextStream

    if make == "bytes":
        tok = ByteTokenizer()
    else:
        save_byte_bpe(tmp_path / "tokenizer.json", texts=("hello world",))
        tok = read_tokenizer_file(tmp_path / "tokenizer.json")
    p = types.SimpleNamespace(sampling=types.SimpleNamespace(logprobs=0), prompt_ids=[],
                              tokens_as_ids=False, kind="completion")  # fmt: skip
    rng = random.Random(82)
    for case in range(300):
        data = b"".join(rng.choice(KINDS) for _ in range(rng.randint(1, 12)))
        ids = tok.encode(data.decode("latin-1")) if make != "bytes" else list(data)
        if make != "bytes":  # a byte-level BPE spells each byte as its own symbol's token
            ids = [t for b in data for t in tok.encode(bytes([b]).decode("latin-1"))]
        prompt = list(tok.encode("ok "))
        lps = [TokenLogprob(t, -1.0, ((t, -1.0),)) for t in ids]
        whole, _ = logprobs_and_end(p, lps, tok)
        stream = TextStream(tok, prompt_ids=prompt)
        text = stream.push(ids)[0] + stream.flush()
        pieces, tokens, at, offset = TextStream(tok, prompt_ids=prompt), [], 0, 0
        streamed = ""
        while at < len(ids):
            size = rng.randint(1, len(ids) - at)
            body, offset = logprobs_and_end(p, lps[at : at + size], tok, text_offset=offset,
                                            previous=ids[:at])  # fmt: skip
            tokens += body["tokens"]
            streamed += pieces.push(ids[at : at + size])[0]
            at += size
        streamed += pieces.flush()
        assert "".join(whole["tokens"]) == "".join(tokens) == text == streamed, (case, data)
        if make == "bytes":
            own = [bytes([b]) for b in data]
            assert text == data[: let_go(own)].decode("utf-8", "replace"), (case, data)
