"""Hunt 72: logprobs texts and answer text of characters spelled in byte-fallback tokens.

Broken before, with a Llama-2 / Mistral tokenizer (byte fallback, "<0xXX>" tokens):
1. the second and later byte-spelled characters in a row: '中国😊 the' gave tokens "", "",
   "中", "", "", "国", "", "", "", "����", " the" (`text_offset` put " the" at 6, not 3) and
   Korean '안녕하세요' joined to '안녕���������': a token's text was decoded after a window
   of 4 tokens that began inside the character before, and HF's ByteFallback decoder reads a
   run of "<0xXX>" that is no UTF-8 as one U+FFFD per byte, head and all. A prompt ending in
   Korean bytes turned a Chinese answer's text into U+FFFDs the same way (`TextStream`);
2. an answer cut at "length" inside a character after byte-spelled text: '안녕' + "<0xEC>"
   was '안녕���', a prompt's "中" then "<0xE4>" '���', and the tokens no longer joined to it
   (hunt 82: the unfinished character is now dropped, '안녕', as vLLM's detokenizer drops it).

Oracle: Python's UTF-8 codec. vLLM's rule (PRs #28874, #34875) makes a token's text what it
completes: exactly what `codecs`' incremental decoder returns for its own bytes, fed in order
(the tokens of a split character "" until the last, which is the character); at "length" the
bytes it still holds are dropped, from the text and the last tokens' texts alike (vLLM's
detokenizer emits nothing while its text ends in U+FFFD and flushes nothing at the finish;
its logprobs' `_correct_decoded_token` is "" for a sequence "genuinely incomplete"); the
decoder's `Strip(" ", 1, 0)` drops the answer's first space when no text
precedes it. The texts join to the answer's text (transformers' decode too where no character
is cut); streamed chunks (random chunkings) give the whole answer's tokens, offsets and text.
"""

from __future__ import annotations

import codecs
import json
import random
import re
import types

import httpx
import pytest
from tokenizers import Tokenizer, models
from wse_inference.engine import TokenLogprob
from wse_inference.hf_tokenizer import HFTokenizer
from wse_inference.mock import MockEngine
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.openai_response import logprobs_and_end
from wse_inference.serve.text_stream import TextStream
from wse_inference.testing import LLAMA2_BYTES, llama2_decoder

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.timeout(240)
# Ordered by hand for the mock (next id = last + 1): after "q" it generates the bytes of
# "中国😊" and "▁the", as the hunt's server did.
SEQ = ["<0xE4>", "<0xB8>", "<0xAD>", "<0xE5>", "<0x9B>", "<0xBD>", "<0xF0>", "<0x9F>",
       "<0x98>", "<0x8A>", "▁the"]  # fmt: skip
NAMES = ["<unk>", "<s>", "</s>", "q", *SEQ, "<pad>", "▁hello", "world", "▁",
         *(b for b in LLAMA2_BYTES if b not in SEQ)]  # fmt: skip
ID = {name: i for i, name in enumerate(NAMES)}
Q, BOS, PAD = ID["q"], ID["<s>"], ID["<pad>"]
BYTE = re.compile(r"<0x([0-9A-F]{2})>")
# Characters of one to four UTF-8 bytes, spelled in bytes, and pieces of the vocabulary
CHARS = ["안", "녕", "하", "세", "요", "中", "国", "😊", "😋", "é", "A", " "]
PIECES = ["▁the", "▁hello", "world", "▁"]


@pytest.fixture(scope="module")
def fast(tokenizer):
    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(tokenizer.path))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> HFTokenizer:
    tok = Tokenizer(models.BPE(vocab=ID, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.decoder = llama2_decoder()  # Llama-2's own: "▁" as spaces, bytes, the first space cut
    tok.add_special_tokens(["<unk>", "<s>", "</s>", "<pad>"])
    path = tmp_path_factory.mktemp("bytes72") / "tokenizer.json"
    tok.save(str(path))
    return HFTokenizer(path)


def own(token: int) -> bytes:
    """A token's bytes read off its name (no code under test): "<0xE4>" is 0xE4."""
    name = NAMES[token]
    if name in ("<unk>", "<s>", "</s>", "<pad>"):
        return b""
    m = BYTE.fullmatch(name)
    return bytes([int(m.group(1), 16)]) if m else name.replace("▁", " ").encode()


def spell(text: str) -> list[int]:
    return [ID[f"<0x{b:02X}>"] for b in text.encode()]


def expected(prompt: list[int], ids: list[int]) -> tuple[list[str], str]:
    """vLLM's texts from Python's incremental UTF-8 decoder (the bytes it still holds at the
    end: no text), and the answer's text."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    texts = [decoder.decode(own(t)) for t in ids]
    if not b"".join(map(own, prompt)):  # no text before it: the decoder's Strip(" ", 1, 0)
        first = next((i for i, x in enumerate(texts) if x), None)
        if first is not None and texts[first].startswith(" "):
            texts[first] = texts[first][1:]
    return texts, "".join(texts)


def request(prompt: list[int]):
    sampling = types.SimpleNamespace(logprobs=1)
    return types.SimpleNamespace(
        sampling=sampling, prompt_ids=prompt, tokens_as_ids=False, kind="completion"
    )


def answer(tokenizer, prompt, ids, chunks):
    """(tokens, text_offset, text) of the whole answer, and of the answer streamed in
    `chunks` as `serve.generation` streams it (`previous`, the offset carried on)."""
    lps = [TokenLogprob(t, -1.0, ((t, -1.0),)) for t in ids]
    p = request(prompt)
    whole, _ = logprobs_and_end(p, lps, tokenizer)
    stream = TextStream(tokenizer, prompt_ids=prompt)
    text = stream.push(ids)[0] + stream.flush()
    pieces = TextStream(tokenizer, prompt_ids=prompt)
    tokens, offsets, streamed, at, offset = [], [], "", 0, 0
    for size in chunks:
        part = lps[at : at + size]
        body, offset = logprobs_and_end(p, part, tokenizer, text_offset=offset, previous=ids[:at])
        tokens += body["tokens"]
        offsets += body["text_offset"]
        streamed += pieces.push([x.token for x in part])[0]
        at += size
    streamed += pieces.flush()
    return (whole["tokens"], whole["text_offset"], text), (tokens, offsets, streamed)


def check(tokenizer, prompt, ids, chunks):
    texts, text = expected(prompt, ids)
    whole, streamed = answer(tokenizer, prompt, ids, chunks)
    assert whole == (texts, [len("".join(texts[:i])) for i in range(len(texts))], text)
    assert streamed == whole


@pytest.mark.parametrize(
    "prompt, text",
    [([BOS, ID["▁hello"]], "中国😊"), ([BOS], "안녕하세요"), ([BOS, Q], "😊😊😋😊"),
     ([BOS, *spell("안녕")], "中国"), ([BOS, *spell("中")], "안녕하세요")],
)  # fmt: skip
def test_characters_in_a_row_are_empty_then_the_character(tokenizer, fast, prompt, text):
    ids = spell(text)
    check(tokenizer, prompt, ids, [len(ids)])
    check(tokenizer, prompt, ids, [1] * len(ids))
    assert fast.decode(prompt + ids, skip_special_tokens=True).endswith(text)


@pytest.mark.parametrize(
    "prompt, ids, text",
    [([BOS], [*spell("안녕"), ID["<0xEC>"]], "안녕"),
     ([BOS, *spell("中")], [ID["<0xE4>"]], ""),
     ([BOS, ID["▁hello"]], [*spell("😊"), *spell("😊")[:3]], "😊"),
     ([PAD], [ID["<0x20>"], ID["<0xC3>"]], "")],  # the first space: Strip(" ", 1, 0)
)  # fmt: skip
def test_an_answer_cut_inside_a_character_ends_before_it(tokenizer, fast, prompt, ids, text):
    """The held bytes dropped, as vLLM's (hunt 82: one U+FFFD per byte, ByteFallback's, ended
    the text), never the characters before them turned into U+FFFDs ('안녕' + "<0xEC>" was
    '안녕���'); the text is transformers' decode of the tokens before the character's."""
    assert expected(prompt, ids)[1] == text
    whole = [i for i, t in enumerate(ids) if own(t)[0] < 0x80 or own(t)[0] >= 0xC0][-1]
    cut = prompt + ids[:whole]  # the tokens before the unfinished character's lead byte
    plain = lambda ids: fast.decode(ids, skip_special_tokens=True)  # noqa: E731
    assert plain(cut)[len(plain(prompt)) :] == text
    check(tokenizer, prompt, ids, [len(ids)])
    check(tokenizer, prompt, ids, [1] * len(ids))


@pytest.mark.parametrize(
    "ids", [[ID["<0x98>"], *spell("í")], [ID["<0xAD>"], ID["<0x8A>"], *spell("é")]]
)
def test_a_stray_byte_stays_in_the_window_of_the_character_after_it(tokenizer, fast, ids):
    """A byte no UTF-8 (0x98 with no lead) is a character of its own: the window starts at
    it, so the texts still join to the text, which is transformers' decode (ByteFallback's
    one U+FFFD per byte of the run, 'í' too); a window that skipped it would show 'í'."""
    prompt = [BOS, ID["▁hello"]]
    text = fast.decode(prompt + ids)[len(fast.decode(prompt)) :]
    assert text == "\ufffd" * len(ids)
    for chunks in ([len(ids)], [1] * len(ids)):
        whole, streamed = answer(tokenizer, prompt, ids, chunks)
        assert "".join(whole[0]) == whole[2] == text and streamed == whole


def test_random_valid_text_whole_and_streamed(tokenizer, fast):
    """Valid UTF-8 spelled in bytes and pieces, cut or not, in random chunkings."""
    rng = random.Random(72)
    prompts = [[BOS], [BOS, ID["▁hello"]], [BOS, *spell("안녕")], [PAD], [BOS, *spell("😊")]]
    for _ in range(300):
        ids: list[int] = []
        for _ in range(rng.randint(1, 7)):
            if rng.random() < 0.25:
                ids.append(ID[rng.choice(PIECES)])
            else:
                ids += spell(rng.choice(CHARS))
        cut = rng.random() < 0.3  # "length" inside a character: its first 1..n-1 bytes
        if cut:
            ids += spell(c := rng.choice([c for c in CHARS if len(c.encode()) > 1]))[
                : rng.randint(1, len(c.encode()) - 1)
            ]
        chunks, left = [], len(ids)
        while left:
            chunks.append(rng.randint(1, left))
            left -= chunks[-1]
        check(tokenizer, rng.choice(prompts), ids, chunks)


@pytest.fixture(scope="module")
def paced(tokenizer):
    """The mock on the server, a streamed token per chunk (a character spans chunks)."""
    engine = MockEngine(max_slots=2, step_delay_s=0.05)
    engine.tokenizer, engine.vocab_size = tokenizer, len(tokenizer.vocab())
    cfg = ServeConfig(port=0, grpc_port=0, chat_template="{{ messages[0]['content'] }}")
    server = Server(engine, cfg).start()
    yield server
    server.close()


def test_the_served_answer_whole_and_streamed(paced, fast):
    body = {"model": "mock", "prompt": [BOS, Q], "max_tokens": 11, "logprobs": 1}
    texts, text = expected([BOS, Q], [ID[n] for n in SEQ])
    url = f"{paced.http_url}/v1/completions"
    whole = httpx.post(url, json=body, timeout=30).json()["choices"][0]
    assert whole["text"] == text == "中国😊 the"
    assert whole["logprobs"]["tokens"] == texts
    assert whole["logprobs"]["text_offset"] == [len("".join(texts[:i])) for i in range(11)]
    streamed, tokens, offsets = "", [], []
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choice = json.loads(line[6:])["choices"][0]
                streamed += choice["text"]
                tokens += (choice["logprobs"] or {}).get("tokens", [])
                offsets += (choice["logprobs"] or {}).get("text_offset", [])
    assert (streamed, tokens, offsets) == (text, texts, whole["logprobs"]["text_offset"])
