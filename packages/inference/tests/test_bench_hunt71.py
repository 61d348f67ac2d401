"""`wse infer bench --dataset-name sharegpt`'s file and draw (`demo.sharegpt_file`,
`demo.bench_data`, `demo.bench_tokens`), hunt 71. Before:

- a lone UTF-16 surrogate (`\\ud800`, half an emoji) in a used "value" was read, then httpx
  failed to encode the /tokenize body: a 99-line UnicodeEncodeError traceback;
- an integer of more than 4,300 digits anywhere in the file was Python's plain ValueError from
  inside `raw_decode`, uncaught: a 76-line traceback;
- a 100 MB prompt was sent to /tokenize; the server closed that request and the httpx error
  ended the whole bench as "cannot reach" a server that was up;
- `--model nope`: each /tokenize 400 model_not_found was taken as a text refused, the whole
  file was tokenized, then vLLM's filter was blamed;
- memory grew ~4x the file (a tuple of two str a conversation, a list for the order: a 184 MB
  file of 3 million short conversations peaked at 701 MB read, 788 MB drawn);
- `--sharegpt-output-len` 2,045 or more was refused only after every conversation was
  tokenized (no prompt of 4 tokens fits vLLM's 2,048 in all), naming no option.

Oracles: `json.loads` of the same file (what vLLM's `json.load` reads), the exact one-line
refusal, vLLM's filter written out here, tracemalloc's peak, requests counted by the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import threading
import tracemalloc

import httpx
import pytest
from wse_inference.demo import sharegpt_file as sf
from wse_inference.demo.bench_data import DatasetError, ShareGPTSpec, sharegpt, sharegpt_sample
from wse_inference.demo.bench_tokens import tokenize_count
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(60)
SHAPE = '; expected a JSON list of {"conversations": [{"from": "human", "value": "..."}, ' \
        '{"from": "gpt", "value": "..."}]} (ShareGPT, as vLLM reads it)'  # fmt: skip
TEXT_CHARS = 1 << 20  # the longest text sent to /tokenize: 2,044 tokens of 513 characters


def _file(tmp_path, text: str):
    path = tmp_path / "s.json"
    path.write_text(text)
    return path


def _refusal(path, **kw) -> str:
    with pytest.raises(DatasetError) as e:
        sharegpt(path, **kw)
    assert "\n" not in str(e.value)
    return str(e.value)


# -- hole 1: a lone surrogate ------------------------------------------------------------------
@pytest.mark.parametrize(
    "turns, where",
    [
        ('{"value": "hello there \\ud800 friend"}, {"value": "r"}', "turn 0 of entry 1 "
         "holds a lone UTF-16 surrogate (\\ud800 at character 12)"),
        ('{"value": "p"}, {"value": "\\udfffx"}', "turn 1 of entry 1 holds a lone UTF-16 "
         "surrogate (\\udfff at character 0)"),
    ],
)  # fmt: skip
def test_a_lone_surrogate_in_a_used_text_is_refused_naming_where(tmp_path, turns, where):
    path = _file(tmp_path, '[{"conversations": [{"value": "a"}, {"value": "b"}]}, '
                 f'{{"conversations": [{turns}]}}]')  # fmt: skip
    assert _refusal(path) == (
        f"--dataset-path {str(path)!r}: {where}, half of a character, not text; mend or drop "
        "the entry (a character past U+FFFF is a pair, e.g. \\ud83d\\ude00)"
    )


def test_a_surrogate_pair_and_an_unused_lone_one_are_read_as_json_reads_them(tmp_path):
    text = ('[{"conversations": [{"value": "emoji \\ud83d\\ude00"}, {"value": "r"}, '
            '{"value": "3rd \\ud800"}]}, {"conversations": [{"value": "\\ud800"}]}]')  # fmt: skip
    spec = sharegpt(_file(tmp_path, text))
    entry = json.loads(text)[0]["conversations"]
    assert list(spec.conversations) == [(entry[0]["value"], "r")] == [("emoji 😀", "r")]


# -- hole 2: an integer past Python's digits ---------------------------------------------------
def _long(digits: int) -> str:
    return "7" * digits


L4301, L5000 = _long(4301), _long(5000)


@pytest.mark.parametrize(
    "text",
    [
        f'[{{"conversations": [{{"value": "a"}}, {{"value": "b"}}], "id": {L4301}}}]',
        f"[{L4301}]",
        f'[{{"x": "{L5000}", "y": 1.{L5000}, "z": [2e{L5000}, -{L4301}]}}]',
    ],
    ids=["id", "top-level", "after-a-string-a-float-an-exponent"],
)
def test_an_integer_past_pythons_digits_is_refused_at_its_place(tmp_path, text):
    path = _file(tmp_path, text)
    start = text.rindex(_long(4301))  # the integer's digits, with its sign
    at = start - (text[start - 1] == "-")
    assert _refusal(path) == (
        f"--dataset-path {str(path)!r}: entry 0 holds an integer of 4,301 digits (at character "
        f"{at:,}), past the 4,300 Python's JSON reader makes{SHAPE}"
    )


def test_an_integer_of_4300_digits_is_read_as_json_reads_it(tmp_path):
    text = f'[{{"id": {_long(4300)}, "conversations": [{{"value": "a"}}, {{"value": "b"}}]}}]'
    assert json.loads(text)[0]["id"] == int(_long(4300))
    assert list(sharegpt(_file(tmp_path, text)).conversations) == [("a", "b")]


# -- hole 12: a fixed output length no prompt fits beside --------------------------------------
def _vllm_valid(prompt_len: int, output_len: int) -> bool:  # is_valid_sequence, fixed output
    return 4 <= prompt_len <= 1024 and prompt_len + output_len <= 2048


def test_an_output_len_past_2044_is_refused_before_the_file_is_read(tmp_path):
    line = _refusal(tmp_path / "never_read.json", output_len=2045)  # not "does not exist"
    assert line == (
        "--sharegpt-output-len 2045 leaves no room for a prompt of at least 4 tokens within "
        "vLLM's 2,048 in all; give 1 to 2044"
    )
    assert not any(_vllm_valid(p, 2045) for p in range(0, 5000))  # the oracle agrees


def test_an_output_len_of_2044_keeps_exactly_the_4_token_prompts(tmp_path):
    entries = [{"conversations": [{"value": " ".join(["w"] * n)}, {"value": "r"}]} for n in (4, 5)]
    spec = sharegpt(_file(tmp_path, json.dumps(entries)), output_len=2044)

    async def words(text: str) -> int:
        return len(text.split())

    s = asyncio.run(sharegpt_sample(spec, words, num=3, seed=0))
    assert [_vllm_valid(n, 2044) for n in (4, 5)] == [True, False]
    assert {s.request(i)[1:] for i in range(3)} == {(4, 2044)} and s.params["kept"] == 1


# -- hole 9: memory a small multiple of what is kept -------------------------------------------
def test_reading_holds_the_texts_bytes_not_objects(tmp_path, monkeypatch):
    n = 100_000
    path = tmp_path / "many.json"
    path.write_text("[" + ",".join(f'{{"conversations":[{{"value":"p{i}"}},{{"value":"r{i}"}}]}}'
                                   for i in range(n)) + "]")  # fmt: skip
    monkeypatch.setattr(sf, "_CHUNK_BYTES", 1 << 20)  # a window of 1 MiB: the kept texts show
    tracemalloc.start()
    try:
        kept = sf.read_sharegpt(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    text_bytes = sum(len(f"p{i}r{i}") for i in range(n))  # 12 a conversation
    # the texts, 8 bytes of offsets, their arrays' slack (1/8), and the 1 MiB window (its bytes,
    # its text, the text added: ~4.5 MiB measured); a tuple of two str was ~230 a conversation
    assert peak < 1.25 * (text_bytes + 8 * n) + 6 * 2**20, peak
    assert len(kept) == n and kept[0] == ("p0", "r0") and kept[-1] == (f"p{n - 1}", f"r{n - 1}")
    assert kept[12345] == tuple(c["value"] for c in json.loads(path.read_text())[12345]
                                ["conversations"])  # fmt: skip


def test_drawing_holds_4_bytes_a_conversation_in_vllms_order():
    n = 300_000
    texts = [(f"p{i} a b c", f"r{i} a b c") for i in range(n)]
    spec = ShareGPTSpec(path="x", conversations=texts)

    async def words(text: str) -> int:
        return len(text.split())

    tracemalloc.start()
    try:
        s = asyncio.run(sharegpt_sample(spec, words, num=5, seed=9))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    import random

    order = list(range(n))
    random.Random(9).shuffle(order)  # vLLM's order: random.seed(seed); random.shuffle
    assert [s.request(i).prompt for i in range(5)] == [texts[k][0] for k in order[:5]]
    assert peak < 4 * n + 2**20, peak  # a list of the order took 36 bytes a conversation


# -- holes 7 and 8: what /tokenize is sent, and what its refusals mean ------------------------
@contextlib.contextmanager
def tokenize_server(status: int = 200, reply: bytes = b"", close_over: int | None = None):
    """POST /tokenize: `status` and `reply` (200: {"count": words}); a body over `close_over`
    bytes is closed unanswered. Yields (base URL, the bodies' sizes, as they came)."""
    sizes: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            size = int(self.headers["content-length"])
            sizes.append(size)
            if close_over is not None and size > close_over:
                self.close_connection = True  # unread, unanswered: a body cap's reset
                return
            words = len(json.loads(self.rfile.read(size))["prompt"].split())
            body = reply or json.dumps({"count": words}).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", sizes
    finally:
        srv.shutdown()
        srv.server_close()


def _counts(url: str, texts: list[str], model: str = "m") -> list[int | None]:
    async def go() -> list[int | None]:
        async with httpx.AsyncClient(base_url=url) as client:
            count = tokenize_count(client, model, 10.0)
            return [await count(t) for t in texts]

    return asyncio.run(go())


def test_a_text_past_the_bound_is_dropped_unsent_and_a_closed_request_is_a_refusal():
    with tokenize_server() as (url, sizes):
        got = _counts(url, ["a " * (TEXT_CHARS // 2), "a " * (TEXT_CHARS // 2) + "b"])
    assert got == [TEXT_CHARS // 2, None] and len(sizes) == 1  # the second never sent
    with tokenize_server(close_over=50_000) as (url, sizes):
        assert _counts(url, ["one two", "x " * 100_000, "three four five"]) == [2, None, 3]
    assert len(sizes) == 3


def test_model_not_found_stops_the_draw_at_its_first_answer(tmp_path):
    entries = [{"conversations": [{"value": f"hello there number {i}"}, {"value": "a b c d e"}]}
               for i in range(2000)]  # fmt: skip
    spec, calls = sharegpt(_file(tmp_path, json.dumps(entries))), []
    with running_server(max_slots=2) as srv:

        async def go() -> None:
            async with httpx.AsyncClient(base_url=srv.http_url) as client:
                count = tokenize_count(client, "nope", 10.0)

                async def counted(text: str) -> int | None:
                    calls.append(text)
                    return await count(text)

                await sharegpt_sample(spec, counted, num=1, seed=0, width=8)

        with pytest.raises(DatasetError) as e:
            asyncio.run(go())
    assert str(e.value) == (
        "POST /tokenize answered 404 Not Found (The model 'nope' does not exist; this server "
        "serves ['mock'].); give --model as the server's GET /v1/models lists it, or leave "
        "--model out (its first model)"
    )
    assert len(calls) <= 8  # one window of texts, not 2,000


def test_vllms_404_for_a_model_is_the_same_refusal_and_a_texts_400_a_drop():
    vllm = b'{"error": {"message": "The model `nope` does not exist.", "type": ' \
           b'"NotFoundError", "param": null, "code": 404}}'  # fmt: skip
    with tokenize_server(404, vllm) as (url, _), pytest.raises(DatasetError) as e:
        _counts(url, ["a b c d"], model="nope")
    assert str(e.value).startswith("POST /tokenize answered 404 Not Found (The model `nope` "
                                   "does not exist.); give --model as")  # fmt: skip
    too_long = b'{"error": {"message": "past the context", "code": "context_length_exceeded"}}'
    with tokenize_server(400, too_long) as (url, sizes):
        assert _counts(url, ["a b c d", "e f g h"]) == [None, None] and len(sizes) == 2
