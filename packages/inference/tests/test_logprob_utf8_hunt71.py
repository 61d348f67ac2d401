"""Hunt 71: logprobs texts of the byte tokens that split one UTF-8 character.

Broken before: Llama-2 spells an emoji it has no piece for as four byte-fallback tokens,
"<0xF0><0x9F><0x98><0x8A>"; each alone decodes to U+FFFD, so completions' `tokens` and
`top_logprobs` keys and chat's `token`s were four "\\ufffd" for one "😊" (the texts no
longer joined to the answer's text, and `text_offset` ran 3 characters past it); an
alternative that ends the same character ("<0x8B>": "😋") was "\\ufffd" too, a key that
collided with the others. vLLM fixed this (PR #28874 for the sampled tokens, #34875 for the
alternatives): a token is decoded after the sampled tokens before it (never the other
alternatives), those ahead of the character's last byte are "" and the last is the
character. A stream must carry the context across chunks.

Oracle: the texts vLLM's rule gives, written out by hand, and transformers' decode of the
same tokenizer.json for the answer's text ("😋" included); the texts join to the text,
`text_offset` indexes it, and the streamed answer is the whole one. The chat `bytes` stay
each token's own (OpenAI's), [240], [159], [152], [138].
"""

from __future__ import annotations

import codecs
import json
import math

import httpx
import pytest
from tokenizers import Tokenizer, models
from wse_inference.hf_tokenizer import HFTokenizer
from wse_inference.mock import MockEngine
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.token_bytes import unfinished_tail
from wse_inference.testing import LLAMA2_BYTES, let_go, llama2_decoder

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.timeout(120)
BYTES = LLAMA2_BYTES
LLAMA2_DECODER = llama2_decoder()  # Llama-2's own tokenizer.json decoder
# Ordered by hand for the mock (next id = last + 1, its alternatives the ids after that):
# after "q" it generates the bytes of "😊", with "<0x8B>" ("😋") as the last one's runner-up;
# after "▁hi" it generates "▁the" and the bytes of "你".
HEAD = ["<unk>", "<s>", "</s>", "q", "<0xF0>", "<0x9F>", "<0x98>", "<0x8A>", "<0x8B>", "▁hi",
        "▁the", "<0xE4>", "<0xBD>", "<0xA0>", "▁world"]  # fmt: skip
NAMES = HEAD + [b for b in BYTES if b not in HEAD]
Q, F0, X9F, X98, X8A, X8B, HI, THE, E4, BD, A0 = range(3, 14)
LN2 = math.log(2)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> HFTokenizer:
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(NAMES)}, merges=[],
                               unk_token="<unk>", byte_fallback=True))  # fmt: skip
    tok.decoder = LLAMA2_DECODER
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    path = tmp_path_factory.mktemp("utf8") / "tokenizer.json"
    tok.save(str(path))
    return HFTokenizer(path)


@pytest.fixture(scope="module")
def oracle(tokenizer):
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tokenizer.path))
    return lambda ids: fast.decode(ids, skip_special_tokens=True)


def _server(tokenizer, **mock) -> Server:
    engine = MockEngine(max_slots=2, **mock)
    engine.tokenizer, engine.vocab_size = tokenizer, len(tokenizer.vocab())
    cfg = ServeConfig(port=0, grpc_port=0, chat_template="{{ messages[0]['content'] }}")
    return Server(engine, cfg).start()


@pytest.fixture(scope="module")
def paced(tokenizer):
    """A server that steps slowly: a streamed token per chunk, so a character spans chunks."""
    server = _server(tokenizer, step_delay_s=0.05)
    yield server
    server.close()


def _whole(server, route: str, body: dict) -> dict:
    r = httpx.post(f"{server.http_url}/v1/{route}", json={"model": "mock", **body}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def _streamed(server, route: str, body: dict) -> tuple[dict, int]:
    """The streamed choice, its chunks joined as `_whole`'s, and how many chunks had tokens."""
    chat = route.startswith("chat")
    text, chunks = "", 0
    lp: dict = {"content": []} if chat else {"tokens": [], "top_logprobs": [], "text_offset": []}
    url = f"{server.http_url}/v1/{route}"
    with httpx.stream("POST", url, json={"model": "mock", "stream": True, **body}) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            choice = json.loads(line[6:])["choices"][0]
            text += (choice["delta"].get("content") or "") if chat else choice["text"]
            if choice["logprobs"]:
                chunks += 1
                for key in lp:
                    lp[key] += choice["logprobs"][key]
    if chat:
        return {"message": {"content": text}, "logprobs": lp}, chunks
    return {"text": text, "logprobs": lp}, chunks


def _answers(server, route: str, body: dict) -> list[dict]:
    """The whole answer and the streamed one, which must carry the context across chunks."""
    streamed, chunks = _streamed(server, route, body)
    assert chunks > 1  # the character's bytes did arrive in several chunks
    return [_whole(server, route, body), streamed]


def _check_offsets(text: str, lp: dict) -> None:
    tokens, starts = lp["tokens"], lp["text_offset"]
    assert "".join(tokens) == text
    assert starts == [len("".join(tokens[:i])) for i in range(len(tokens))]


def test_an_emojis_byte_tokens_are_empty_then_the_emoji(paced, oracle):
    body = {"prompt": [Q], "max_tokens": 4, "logprobs": 2}
    for choice in _answers(paced, "completions", body):
        lp = choice["logprobs"]
        assert choice["text"] == oracle([Q, F0, X9F, X98, X8A])[1:] == "😊"
        assert lp["tokens"] == ["", "", "", "😊"]  # before: four "\ufffd"
        _check_offsets(choice["text"], lp)  # before: [0, 1, 2, 3], past the 1-character text
        # the runner-up ends the same character: its own, after the sampled F0 9F 98
        assert oracle([F0, X9F, X98, X8B]) == "😋"
        assert lp["top_logprobs"][3] == {"😊": -LN2, "😋": -2 * LN2}  # before: {"\ufffd": ..}
        # at the first byte, the runner-up 0x9F can begin no character: U+FFFD for good, held
        # as the detokenizer holds it (no text yet: "", vLLM's), so the two keys are one
        # (hunt 82: "\ufffd", the text the detokenizer had not let go)
        assert lp["top_logprobs"][0] == {"": -LN2}


def test_chat_tokens_are_the_same_and_bytes_stay_each_tokens_own(paced):
    body = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 4}
    body |= {"logprobs": True, "top_logprobs": 2}
    for choice in _answers(paced, "chat/completions", body):
        content = choice["logprobs"]["content"]
        assert choice["message"]["content"] == "😊"
        assert [c["token"] for c in content] == ["", "", "", "😊"]  # before: four "\ufffd"
        assert [c["bytes"] for c in content] == [[0xF0], [0x9F], [0x98], [0x8A]]
        top = [(a["token"], a["bytes"]) for a in content[3]["top_logprobs"]]
        assert top == [("😊", [0x8A]), ("😋", [0x8B])]
        assert "".join(c["token"] for c in content) == choice["message"]["content"]


def test_an_echoed_prompt_holding_an_emoji_joins_to_the_text(paced, oracle, tokenizer):
    """The prompt "<s> q😊 hi" as ids, then the mock's " the" and the 3 bytes of "你". The
    echo is the ids decoded with "<s>" written out, as vLLM's (transformers' decode default;
    hunt 82: left out), and so is its token's text."""
    prompt = [1, Q, F0, X9F, X98, X8A, HI]
    body = {"prompt": prompt, "max_tokens": 4, "logprobs": 1, "echo": True}
    want = ["<s>", "q", "", "", "", "😊", " hi", " the", "", "", "你"]
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tokenizer.path))
    for choice in _answers(paced, "completions", body):
        text, lp = choice["text"], choice["logprobs"]
        answer = oracle([*prompt, THE, E4, BD, A0])[len(oracle(prompt)) :]
        assert text == fast.decode(prompt) + answer == "<s>q😊 hi the你"
        assert lp["tokens"] == want  # before: "\ufffd" for each of the 7 byte tokens
        _check_offsets(text, lp)
        assert lp["top_logprobs"][-1] == {"你": -LN2}


@pytest.mark.parametrize(
    "prompt, n, text, tokens",
    [([Q], 2, "", ["", ""]),  # F0 9F: the emoji's first two bytes
     ([Q], 3, "", ["", "", ""]),  # F0 9F 98: its first three
     ([HI], 3, " the", [" the", "", ""])],  # " the", then E4 BD of "你"
)  # fmt: skip
def test_an_answer_cut_inside_a_character_ends_before_it(paced, oracle, prompt, n, text, tokens):
    """At "length" inside a character the text ends before it, as vLLM's (its detokenizer
    emits nothing while the text ends in U+FFFD, and nothing at the finish; hunt 82: the
    decoder's U+FFFDs for the held bytes ended it), and so do the tokens' texts ("": vLLM's
    for a character "genuinely incomplete"), which join to it; the text is transformers'
    decode of the tokens before the character's, which Python's UTF-8 codec finds."""
    body = {"prompt": prompt, "max_tokens": n, "logprobs": 0}
    for choice in _answers(paced, "completions", body):
        assert choice["text"] == text
        assert choice["logprobs"]["tokens"] == tokens
        _check_offsets(choice["text"], choice["logprobs"])
    out = [prompt[0] + 1 + i for i in range(n)]  # the mock's continuation: one byte a token
    own = [bytes([int(NAMES[t][3:5], 16)]) if NAMES[t].startswith("<0x") else
           NAMES[t].replace("▁", " ").encode() for t in out]  # fmt: skip
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    decoder.decode(b"".join(own))
    kept = out[: len(out) - len(decoder.getstate()[0])]  # the bytes it holds: a token each
    assert oracle([*prompt, *kept])[len(oracle(prompt)) :] == text


def test_bytes_that_are_no_utf8_stay_replacement_characters_in_both_answers():
    """The mock's byte tokenizer after E3 generates the lead bytes E4..E9: each leaves the
    one before it unfinished for good (Python's decode: one U+FFFD each), so the text keeps
    ending in U+FFFD and the detokenizer holds it, as vLLM's does, until a run of more than
    4 (hunt 62's bound; vLLM holds it all): from the 5th token on, all but the character
    still arriving is let go (E4..E7's four U+FFFD, then E8's), and what is held at the end
    (E9) is dropped, as vLLM's drops it (hunt 82: the text ended in its U+FFFD, each token
    showing its own). vLLM gives "" to every token and to the text."""
    engine, cfg = MockEngine(max_slots=2, step_delay_s=0.05), ServeConfig(port=0, grpc_port=0)
    server = Server(engine, cfg).start()
    try:
        body = {"prompt": [0xE3], "max_tokens": 6, "logprobs": 0}
        for choice in _answers(server, "completions", body):
            made = [bytes([b]) for b in range(0xE4, 0xEA)]
            assert choice["text"] == b"".join(made[: let_go(made)]).decode(errors="replace")
            assert choice["text"] == "\ufffd" * 5
            assert choice["logprobs"]["tokens"] == ["", "", "", "", "\ufffd" * 4, "\ufffd"]
            _check_offsets(choice["text"], choice["logprobs"])
    finally:
        server.close()


def test_unfinished_tail_counts_the_tokens_of_a_character_still_arriving():
    assert unfinished_tail([b"q", b"\xf0", b"\x9f", b"\x98"]) == 3
    assert unfinished_tail([b"\xf0", b"\x9f", b"\x98", b"\x8a"]) == 0  # "😊", whole
    assert unfinished_tail([b"a\xf0"]) == 1 and unfinished_tail([b"\xe4", b"", b"\xbd"]) == 3
    assert unfinished_tail([b"\x80"]) == unfinished_tail([b"\xf0", b"A"]) == 0  # no UTF-8
    assert unfinished_tail([b"\xf0", b"\xf0"]) == 1  # the first F0 is U+FFFD for good
