"""Hunt 71, hole 4: logprobs token texts on a Llama-2 ("▁", Strip(" ", 1, 0)) tokenizer.

Broken before:
1. a lone "▁" piece (the second space of a double space) decodes alone to "" (the decoder's
   Strip eats its only space), and `token_bytes` took every token that decodes to "" for a
   special token: its logprobs text was "" and its chat `bytes` [], so with echo every
   `text_offset` after it was one character early ("hello  world": tokens 'llo ', '', 'w');
   a byte token "<0x20>" (not special in Llama-2) the same;
2. after a BOS (Llama-2's tokenizer.json adds one to every text prompt) the echoed prompt's
   first word is "hello" in the text but " hello" in `tokens`, so every offset was one
   character early even for "hello world"; a completion after a prompt of special tokens
   alone the same (text "the", token " the").

Oracle: transformers' tokenizer of the same tokenizer.json: a token's text is what it adds to
the decode (skip_special_tokens=True, vLLM's default) of the ids before it; the special tokens
are its added tokens marked special (text "", bytes []). The texts join to the answer's text
and `text_offset` indexes it.
"""

from __future__ import annotations

import json

import httpx
import pytest
from tokenizers import Tokenizer, models, processors
from wse_inference.hf_tokenizer import HFTokenizer
from wse_inference.mock import MockEngine
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.openai_response import token_text
from wse_inference.serve.token_bytes import token_bytes
from wse_inference.testing import LLAMA2_BYTES, llama2_bpe, llama2_decoder

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.timeout(120)
BYTES = LLAMA2_BYTES
LLAMA2_DECODER = llama2_decoder()  # Llama-2's own tokenizer.json decoder
BOS = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
# Ordered by hand for the mock (next id = last + 1): after "q" it generates "▁", "▁world",
# "<0x20>", "<pad>" (special), "▁the": "q  world  the". Byte tokens are plain, as in Llama-2.
NAMES = ["<unk>", "<s>", "</s>", "q", "▁", "▁world", "<0x20>", "<pad>", "▁the",
         *(b for b in BYTES if b != "<0x20>")]  # fmt: skip
Q, SPACE, WORLD, BYTE_SPACE, PAD, THE = range(3, 9)


def _table(folder) -> HFTokenizer:
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(NAMES)}, merges=[],
                               unk_token="<unk>", byte_fallback=True))  # fmt: skip
    tok.decoder = LLAMA2_DECODER
    tok.add_special_tokens(["<unk>", "<s>", "</s>", "<pad>"])
    tok.save(str(folder / "tokenizer.json"))
    return HFTokenizer(folder / "tokenizer.json")


def _trained(folder) -> HFTokenizer:
    """The hunt's tokenizer (hunt 70's mksp.py: byte tokens special), with Llama-2's BOS."""
    tok = llama2_bpe(["hello world the quick brown fox jumps over the lazy dog " * 5,
                      "héllo wörld ünïcode text " * 5])  # fmt: skip
    tok.post_processor = BOS
    tok.save(str(folder / "tokenizer.json"))
    return HFTokenizer(folder / "tokenizer.json")


def _oracle(tokenizer: HFTokenizer):
    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(tokenizer.path))


def _texts(oracle, ids: list[int], written: int = 0) -> list[str]:
    """Each token's text: what it adds to transformers' decode of the ids before it; the
    first `written` (an echoed token-id prompt's) decoded with their special tokens written
    out, as vLLM echoes such a prompt (hunt 82)."""

    def text(x, i):
        return oracle.decode(x, skip_special_tokens=i >= written)

    return [text(ids[: i + 1], i)[len(text(ids[:i], i)) :] for i in range(len(ids))]


def _serve(tokenizer: HFTokenizer, **mock):
    """A mock server over `tokenizer` (a chat template that writes the content), its oracle."""
    engine = MockEngine(max_slots=2, **mock)
    engine.tokenizer, engine.vocab_size = tokenizer, len(tokenizer.vocab())
    cfg = ServeConfig(port=0, grpc_port=0, chat_template="{{ messages[0]['content'] }}")
    server = Server(engine, cfg).start()
    try:
        yield server, tokenizer, _oracle(tokenizer)
    finally:
        server.close()


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    yield from _serve(_table(tmp_path_factory.mktemp("table")))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    yield from _serve(_trained(tmp_path_factory.mktemp("trained")))


def _post(server, route: str, body: dict) -> dict:
    r = httpx.post(f"{server.http_url}/v1/{route}", json={"model": "mock", **body}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _streamed(server, body: dict) -> tuple[str, list[str], list[int]]:
    """(text, tokens, text_offset) of a streamed completion, its chunks joined."""
    text, tokens, starts = "", [], []
    url = f"{server.http_url}/v1/completions"
    with httpx.stream("POST", url, json={"model": "mock", "stream": True, **body}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choice = json.loads(line[6:])["choices"][0]
                text += choice["text"]
                lp = choice["logprobs"] or {"tokens": [], "text_offset": []}
                tokens, starts = tokens + lp["tokens"], starts + lp["text_offset"]
    return text, tokens, starts


def _answer(server, body: dict, *, stream: bool) -> tuple[str, list[str], list[int]]:
    """(text, tokens, text_offset) of a completion, whole or streamed."""
    if stream:
        return _streamed(server, body)
    choice = _post(server, "completions", body)["choices"][0]
    return choice["text"], choice["logprobs"]["tokens"], choice["logprobs"]["text_offset"]


def _ids(server, body: dict) -> list[int]:
    """The completion's ids (vLLM's return_tokens_as_token_ids), after the prompt's if echoed."""
    lp = _post(server, "completions", {**body, "return_tokens_as_token_ids": True})
    return [int(t.split(":")[1]) for t in lp["choices"][0]["logprobs"]["tokens"]]


def _check(oracle, choice_text: str, tokens: list[str], starts: list[int], ids: list[int],
           written: int = 0):  # fmt: skip
    assert tokens == _texts(oracle, ids, written)
    assert "".join(tokens) == choice_text
    assert [choice_text[a : a + len(t)] for t, a in zip(tokens, starts, strict=True)] == tokens
    assert starts == [len("".join(tokens[:i])) for i in range(len(tokens))]


def test_a_lone_space_piece_is_a_space_and_only_special_tokens_are_empty(tmp_path):
    tokenizer = _table(tmp_path)
    oracle = _oracle(tokenizer)
    special = {i for i, t in oracle.added_tokens_decoder.items() if t.special}
    for token in range(len(NAMES)):
        want = "" if token in special else oracle.decode([Q, token])[1:]  # after a plain "q"
        assert token_text(tokenizer, token) == want, NAMES[token]  # before: "▁" was ""
        name = NAMES[token]  # a byte token's bytes are its byte (hunt 65), not U+FFFD's
        own = bytes([BYTES.index(name)]) if name in BYTES else want.encode("utf-8")
        got = token_bytes(tokenizer, token, tokenizer.decode([token]))
        assert got == own, name  # before: b"" for "▁" and "<0x20>"
    assert token_text(tokenizer, SPACE) == " " and token_bytes(tokenizer, SPACE, "") == b" "


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("kind", ["table", "trained"])
def test_echoed_tokens_join_to_the_text_and_offsets_index_it(request, kind, stream):
    """The hunt's case: "hello  world" with its BOS, then the mock's tokens (with the table:
    the prompt "<s> ▁world ▁ q" as ids, then "▁", "▁world", "<0x20>", "<pad>", "▁the"). The
    echo is the request's string, or a token-id prompt decoded with "<s>" written out, as
    vLLM's (hunt 82: both were the ids decoded without it)."""
    server, _, oracle = request.getfixturevalue(kind)
    prompt = "hello  world" if kind == "trained" else [1, WORLD, SPACE, Q]
    body = {"prompt": prompt, "max_tokens": 5, "logprobs": 0, "echo": True}
    text, tokens, starts = _answer(server, body, stream=stream)
    ids = _ids(server, body)
    plain = lambda x: oracle.decode(x, skip_special_tokens=True)  # noqa: E731
    echoed, answer = (prompt, ids[-5:]) if kind == "trained" else (oracle.decode(prompt), ids[4:])
    assert text == echoed + plain(ids)[len(plain(ids[: len(ids) - len(answer)])) :]
    assert ids[0] == 1 and "▁" in oracle.convert_ids_to_tokens(ids)  # the case: BOS, a lone "▁"
    written = 0 if kind == "trained" else len(prompt)  # a text prompt's BOS is not in its text
    _check(oracle, text, tokens, starts, ids, written)  # before: " h" / "" for "▁"; offsets


def test_a_completion_after_special_tokens_alone_has_its_first_word_as_the_text_has_it(table):
    """The decoder strips the first word's space when only special tokens precede it."""
    server, _, oracle = table
    prompt = [PAD]  # then "▁the": text "the"
    body = {"prompt": prompt, "max_tokens": 4, "logprobs": 1}
    for stream in (False, True):
        text, tokens, starts = _answer(server, body, stream=stream)
        ids = _ids(server, body)
        answer = oracle.decode(prompt + ids, skip_special_tokens=True)
        assert text == answer[len(oracle.decode(prompt, skip_special_tokens=True)) :]
        assert tokens == _texts(oracle, prompt + ids)[len(prompt) :]  # before: " the" for "the"
        assert "".join(tokens) == text and starts == [len("".join(tokens[:i])) for i in range(4)]
    top = _post(server, "completions", body)["choices"][0]["logprobs"]["top_logprobs"]
    assert [list(t) for t in top] == [[t] for t in tokens]  # the chosen one keyed as its token


def test_chat_tokens_and_bytes_are_the_tokens_texts(table):
    server, _, oracle = table
    body = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 5, "logprobs": True}
    r = _post(server, "chat/completions", {**body, "top_logprobs": 1})
    content = r["choices"][0]["logprobs"]["content"]
    want = _texts(oracle, [Q, SPACE, WORLD, BYTE_SPACE, PAD, THE])[1:]
    assert r["choices"][0]["message"]["content"] == "".join(want) == "  world  the"
    assert [c["token"] for c in content] == want  # before: "" for "▁" and "<0x20>"
    assert [c["bytes"] for c in content] == [list(w.encode()) for w in want]  # before: [] there
    assert [[a["token"] for a in c["top_logprobs"]] for c in content] == [[w] for w in want]


@pytest.mark.parametrize("kind", ["table", "trained"])
def test_streamed_offsets_with_token_ids_are_the_whole_answers(request, kind):
    """Before, a stream advanced text_offset by the shown token's length: with
    return_tokens_as_token_ids, 12 a token ("token_id:N"), [0, 12, 24, ...]."""
    _, tokenizer, _ = request.getfixturevalue(kind)
    server, _, _ = next(paced := _serve(tokenizer, step_delay_s=0.02))  # a chunk a token
    prompt = "hello  world" if kind == "trained" else [1, WORLD, SPACE, Q]
    for echo in (False, True):
        body = {"prompt": prompt, "max_tokens": 5, "logprobs": 0, "echo": echo,
                "return_tokens_as_token_ids": True}  # fmt: skip
        _, names, starts = _streamed(server, body)
        whole = _post(server, "completions", body)["choices"][0]["logprobs"]
        assert names == whole["tokens"] and all(n.startswith("token_id:") for n in names)
        assert starts == whole["text_offset"]
    paced.close()
