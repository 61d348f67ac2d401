"""`wse infer bench`'s datasets (`demo.bench_data`, `demo.sharegpt_file`), vLLM's `vllm bench
serve --dataset-name random | sharegpt`. Before, the bench sent one fixed `--prompt` N times:

- no random dataset: no varied prompt or output lengths, no token-id prompts, no ignore_eos
  (vLLM's bench sets it for random, so each request generates exactly its output length);
- no ShareGPT dataset: no conversations read, no vLLM filter, no seeded sampling;
- the summary had no input tokens, no input / total token throughput, no record of the
  dataset, its settings or its seed (the project prices serving by prompt + output).

Oracles: vLLM's formulas (floor / ceil bounds, `np.random.default_rng(seed)` drawn in vLLM's
order, `random.Random(seed).shuffle` and `.choice`, `is_valid_sequence`) applied by hand; a
recording server's view of the bodies sent; the mock engine's real server, whose tokens are
UTF-8 bytes (vocab 256) and which generates exactly max_tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import random
import threading

import numpy as np
import pytest
from wse_inference.demo.bench_data import (
    MAX_LEN,
    DatasetError,
    RandomSpec,
    ShareGPTSpec,
    random_sample,
    sharegpt,
    sharegpt_sample,
)
from wse_inference.demo.load_test import LoadTestConfig, run_load_test
from wse_inference.demo.sharegpt_file import MAX_SHAREGPT_BYTES
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(60)


@contextlib.contextmanager
def recording_server(vocab_size: int | None = 50):
    """GET: one model "m" (with `vocab_size` unless None); POST /tokenize: {"count": words,
    400 for a text holding REFUSE}; POST /v1/completions: its body recorded, then exactly
    max_tokens chunks and their usage. Yields (base URL, bodies)."""
    bodies: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            entry = {"id": "m"} | ({} if vocab_size is None else {"vocab_size": vocab_size})
            self._send(200, json.dumps({"data": [entry]}).encode())

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if self.path == "/tokenize":
                text = body["prompt"]
                refused = "REFUSE" in text
                reply = {"error": {"message": "no"}} if refused else {"count": len(text.split())}
                return self._send(400 if refused else 200, json.dumps(reply).encode())
            bodies.append(body)
            n = body["max_tokens"]
            chunks = [b'data: {"choices": [{"text": "a"}]}\n\n'] * n + [
                b'data: {"choices": [], "usage": {"completion_tokens": %d}}\n\n' % n,
                b"data: [DONE]\n\n",
            ]
            self._send(200, b"".join(chunks), "text/event-stream")

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", bodies
    finally:
        srv.shutdown()
        srv.server_close()


# -- random: vLLM's lengths and ids -------------------------------------------------------------
def test_random_lengths_are_uniform_over_vllms_bounds():
    spec, n, seed, vocab = RandomSpec(input_len=100, output_len=40, range_ratio=0.5), 5000, 7, 50
    reqs = [random_sample(spec, n, seed, vocab).request(i) for i in range(n)]
    ins = np.array([r.prompt_len for r in reqs])
    outs = np.array([r.max_tokens for r in reqs])
    assert (ins.min(), ins.max(), outs.min(), outs.max()) == (50, 150, 20, 60)  # [L(1-r), L(1+r)]
    # uniform means (50+150)/2 and (20+60)/2; std of a mean of 5,000 draws: 0.41 and 0.17
    assert abs(ins.mean() - 100) < 2.0 and abs(outs.mean() - 40) < 1.0
    rng = np.random.default_rng(seed)  # vLLM's draws, in its order: inputs, outputs, offsets
    assert np.array_equal(ins, rng.integers(50, 151, n))
    assert np.array_equal(outs, rng.integers(20, 61, n))
    offsets = rng.integers(0, vocab, n)
    for i in (0, 1, n - 1):  # vLLM's ids: (offset + i + k) % V
        assert reqs[i].prompt == [(offsets[i] + i + k) % vocab for k in range(ins[i])]


def test_random_bounds_are_vllms_floor_and_ceil_and_a_prefix_is_shared():
    assert RandomSpec(range_ratio=0.1).input_bounds == (921, 1127)  # 921.6, 1126.4
    assert RandomSpec(output_len=1, range_ratio=0.9).output_bounds == (1, 2)  # at least 1
    assert RandomSpec().input_bounds == (1024, 1024) and RandomSpec().output_bounds == (128, 128)
    s = random_sample(RandomSpec(input_len=8, output_len=4, prefix_len=5), 20, 3, 1000)
    prefixes = {tuple(s.request(i).prompt[:5]) for i in range(20)}
    assert len(prefixes) == 1 and all(s.request(i).prompt_len == 13 for i in range(20))


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"range_ratio": 1.0}, "--random-range-ratio must be in [0, 1), got 1.0"),
        ({"input_len": 0}, "--random-input-len must be in [1, 1048576], got 0"),
        ({"output_len": MAX_LEN + 1}, "--random-output-len must be in [1, 1048576]"),
        ({"prefix_len": -1}, "--random-prefix-len must be in [0, 1048576], got -1"),
        ({"input_len": 1, "range_ratio": 0.5}, "may draw an empty prompt"),  # vLLM's check
    ],
)
def test_a_random_spec_vllm_refuses_is_refused(kw, message):
    with pytest.raises(DatasetError) as e:
        RandomSpec(**kw)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_random_requests_are_token_ids_with_their_lengths_and_ignore_eos():
    spec, seed = RandomSpec(input_len=16, output_len=8, range_ratio=0.5, prefix_len=3), 11
    with recording_server(vocab_size=50) as (url, bodies):
        s = run_load_test(LoadTestConfig(url=url, num_requests=12, concurrency=3, seed=seed,
                                         dataset=spec, timeout_s=10))  # fmt: skip
    drawn = random_sample(spec, 12, seed, 50)  # the vocabulary of GET /v1/models
    want = sorted((drawn.request(i).prompt, drawn.request(i).max_tokens) for i in range(12))
    assert sorted((b["prompt"], b["max_tokens"]) for b in bodies) == want
    assert all(b["ignore_eos"] is True for b in bodies)
    assert s["input_tokens"] == sum(len(b["prompt"]) for b in bodies)
    assert s["output_tokens"] == sum(b["max_tokens"] for b in bodies)
    assert s["input_tokens_per_s"] == pytest.approx(s["input_tokens"] / s["wall_s"])
    assert s["total_tokens_per_s"] == pytest.approx(
        (s["input_tokens"] + s["output_tokens"]) / s["wall_s"]
    )
    d = s["dataset"]
    assert (d["name"], d["random_vocab_size"], d["seed"], d["random_prefix_len"]) == (
        "random", 50, 11, 3)  # fmt: skip
    assert (d["input_lens"], d["output_lens"], s["ignore_eos"]) == ([11, 27], [4, 12], True)
    json.dumps(s, allow_nan=False)


def test_the_fixed_prompt_sends_text_without_ignore_eos_unless_asked():
    with recording_server() as (url, bodies):
        s = run_load_test(LoadTestConfig(url=url, num_requests=2, max_tokens=3, timeout_s=10))
        run_load_test(LoadTestConfig(url=url, num_requests=1, ignore_eos=True, timeout_s=10))
    assert [("ignore_eos" in b, b["prompt"]) for b in bodies[:2]] == [
        (False, "The wafer-scale engine")] * 2  # fmt: skip
    assert bodies[2]["ignore_eos"] is True
    assert (s["input_tokens"], s["input_tokens_per_s"], s["output_tokens"]) == (None, None, 6)
    assert s["dataset"] == {"name": "prompt", "max_tokens": 3} and s["max_tokens"] == 3


def test_random_against_the_real_server_generates_exactly_each_length():
    spec = RandomSpec(input_len=20, output_len=10, range_ratio=0.5)  # vocab: the server's 256
    with running_server(max_slots=4) as srv:
        s = run_load_test(LoadTestConfig(url=srv.http_url, num_requests=16, concurrency=4,
                                         seed=5, dataset=spec, timeout_s=20))  # fmt: skip
    drawn = random_sample(spec, 16, 5, 256)
    assert s["completed"] == 16 and s["dataset"]["random_vocab_size"] == 256
    assert s["input_tokens"] == sum(drawn.request(i).prompt_len for i in range(16))
    assert s["output_tokens"] == sum(drawn.request(i).max_tokens for i in range(16))


def test_the_fixed_prompt_counts_its_input_tokens_by_the_servers_usage():
    """Before, the fixed prompt's input tokens were "- (not counted)" though the server's
    usage chunk gives them; the mock's tokens are the prompt's UTF-8 bytes (the oracle)."""
    prompt = "héllo wafer"
    with running_server(max_slots=2) as srv:
        s = run_load_test(LoadTestConfig(url=srv.http_url, num_requests=3, max_tokens=4,
                                         prompt=prompt, timeout_s=20))  # fmt: skip
    assert s["completed"] == 3
    assert s["input_tokens"] == 3 * len(prompt.encode())
    assert s["total_tokens_per_s"] == pytest.approx((s["input_tokens"] + 12) / s["wall_s"])


def test_a_server_that_lists_no_vocabulary_asks_for_random_vocab_size():
    with recording_server(vocab_size=None) as (url, bodies):
        cfg = LoadTestConfig(url=url, num_requests=2, dataset=RandomSpec(), timeout_s=10)
        with pytest.raises(DatasetError, match="lists no vocab_size for 'm'.*--random-vocab-size"):
            run_load_test(cfg)
        given = RandomSpec(input_len=4, vocab_size=9)
        ok = run_load_test(LoadTestConfig(url=url, num_requests=2, timeout_s=10, dataset=given))
    assert ok["completed"] == 2 and all(max(b["prompt"]) < 9 for b in bodies)


# -- ShareGPT: vLLM's filter, order and oversampling --------------------------------------------
def _words(n: int, tag: str = "w") -> str:
    return " ".join([tag] * n)


# (prompt words, reply words) -> kept by vLLM's filter? (prompt 4..1024, output >= 4, sum <= 2048)
CASES = [(5, 6, True), (3, 9, False), (9, 3, False), (1025, 5, False), (1000, 1049, False),
         (1000, 1048, True), (4, 4, True)]  # fmt: skip


def _conversations(tmp_path):
    entries = [{"conversations": [{"from": "human", "value": _words(p, f"p{i}")},
                                  {"from": "gpt", "value": _words(o)}]}
               for i, (p, o, _) in enumerate(CASES)]  # fmt: skip
    refused = {"conversations": [{"value": "REFUSE " + _words(8)}, {"value": _words(8)}]}
    entries += [{"id": "no conversations"}, {"conversations": [{"value": "x"}]}, refused]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(entries))
    return path


async def _count(text: str) -> int | None:  # the recording server's /tokenize
    return None if "REFUSE" in text else len(text.split())


def test_sharegpt_keeps_what_vllms_filter_keeps_in_vllms_order(tmp_path):
    spec, seed = sharegpt(_conversations(tmp_path)), 4
    assert len(spec.conversations) == 8  # two turns or more; a REFUSEd one among them
    s = asyncio.run(sharegpt_sample(spec, _count, num=5, seed=seed, width=3))
    order = list(range(8))
    random.Random(seed).shuffle(order)  # vLLM: random.seed(seed); random.shuffle(data)
    kept = [k for k in order if k < len(CASES) and CASES[k][2]]
    extra = random.Random(seed)  # vLLM: random.seed(seed); random.choice(requests), then
    want = kept + [kept[extra.randrange(len(kept))] for _ in range(5 - len(kept))]
    got = [s.request(i) for i in range(5)]
    assert [r.prompt for r in got] == [spec.conversations[k][0] for k in want]
    assert [(r.prompt_len, r.max_tokens) for r in got] == [CASES[k][:2] for k in want]
    assert s.params | {"dataset_path": None} == {
        "name": "sharegpt", "dataset_path": None, "sharegpt_output_len": None,
        "conversations": 8, "tokenized": 8, "kept": 3, "oversampled": 2, "seed": 4}  # fmt: skip


def test_a_fixed_sharegpt_output_len_has_no_minimum_but_the_total_bound(tmp_path):
    spec = sharegpt(_conversations(tmp_path), output_len=2)
    s = asyncio.run(sharegpt_sample(spec, _count, num=100, seed=0))
    prompts = {len(s.request(i).prompt.split()) for i in range(100)}
    assert prompts == {5, 9, 1000, 4} and {s.request(i).max_tokens for i in range(100)} == {2}


def test_sharegpt_through_the_server_sends_its_texts_and_reply_lengths(tmp_path):
    path = _conversations(tmp_path)
    with recording_server() as (url, bodies):
        s = run_load_test(LoadTestConfig(url=url, num_requests=3, concurrency=2, seed=1,
                                         dataset=sharegpt(path), timeout_s=10))  # fmt: skip
    sent = sorted((len(b["prompt"].split()), b["max_tokens"]) for b in bodies)
    assert sent == sorted((p, o) for p, o, keep in CASES if keep)  # 3 kept: each once
    assert "ignore_eos" not in bodies[0] and s["input_tokens"] == 5 + 1000 + 4
    assert (s["output_tokens"], s["dataset"]["dataset_path"]) == (6 + 1048 + 4, str(path))


def test_sharegpt_counts_with_the_real_servers_tokenize(tmp_path):
    texts = [("a" * 3, "b" * 9), ("a" * 10, "b" * 20), ("a" * 1025, "b" * 9), ("é" * 6, "b" * 5)]
    path = tmp_path / "s.json"
    path.write_text(json.dumps([{"conversations": [{"value": p}, {"value": r}]} for p, r in texts]))
    with running_server(max_context=4096) as srv:  # tokens: UTF-8 bytes ("é" is 2)
        s = run_load_test(LoadTestConfig(url=srv.http_url, num_requests=2, seed=0,
                                         dataset=sharegpt(path), timeout_s=20))  # fmt: skip
    assert s["completed"] == 2 and (s["input_tokens"], s["output_tokens"]) == (10 + 12, 20 + 5)


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"conversations": []}', "is not a JSON list"),
        (b'[{"conversations": [1, 2]}]', 'turn 0 of entry 0 has no text "value"'),
        (b'["text"]', "entry 0 is a string"),
        (b'[{"conversations": {"a": 1}}]', '"conversations" is an object, not a list'),
        (b'[{"conversations": [{"value": "a"}, {"value": "b"}]}, ]', "(Expecting value at"),
        (b"[{}, ", "is not JSON (Expecting value at line 1, character 5)"),
        (b"[{} {}]", "the list is not closed after entry 0"),
        (b"[] []", "holds more after its list"),
        (b"[" * 100_000, "nests deeper than Python's JSON reader goes"),
        (b'["\xff"]', "is not UTF-8 text (byte 2)"),
        (b'[{"conversations": [{"value": "x"}]}]', "holds no conversation of two turns"),
    ],
)
def test_a_file_that_is_not_sharegpt_is_one_line_naming_the_shape(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(DatasetError) as e:
        sharegpt(path)
    line = str(e.value)
    assert message in line and "\n" not in line and line.startswith(f"--dataset-path {str(path)!r}")
    assert line.endswith('"value": "..."}]} (ShareGPT, as vLLM reads it)')  # the shape expected


def test_a_missing_folder_or_oversized_file_is_refused_before_reading(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        sharegpt(tmp_path / "none.json")
    with pytest.raises(DatasetError, match="is a folder, not a regular file"):
        sharegpt(tmp_path)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: no byte is written, none read
        f.truncate(MAX_SHAREGPT_BYTES + 1)
    with pytest.raises(DatasetError, match=f"is {MAX_SHAREGPT_BYTES + 1:,} bytes, over the"):
        sharegpt(big)


def test_no_conversation_passing_the_filter_is_one_line(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps([{"conversations": [{"value": "a b"}, {"value": "c d e f"}]}]))
    spec = sharegpt(path)
    with pytest.raises(DatasetError, match="no conversation of .* passes vLLM's filter"):
        asyncio.run(sharegpt_sample(spec, _count, num=3, seed=0))
    assert isinstance(spec, ShareGPTSpec) and "conversations" not in repr(spec)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 24])
def test_the_file_read_a_window_at_a_time_is_what_json_load_reads(tmp_path, monkeypatch, chunk):
    import wse_inference.demo.sharegpt_file as sf

    entries = [{"id": i, "n": 12345678, "conversations": [
        {"from": "human", "value": f"é{i} 😀 \\" + "x" * (i * 13 % 50)},
        {"from": "gpt", "value": "日本" * i}, {"from": "human", "value": "more"}]}
        for i in range(30)]  # fmt: skip
    entries[3] = {"conversations": [{"value": "one turn"}]}  # skipped, as vLLM skips it
    entries[5] = {"other": [1, 2.5e3, None, True]}  # no conversations: skipped
    path = tmp_path / "s.json"
    path.write_bytes(b"\xef\xbb\xbf \n" + json.dumps(entries, indent=1).encode() + b"\n ")
    monkeypatch.setattr(sf, "_CHUNK_BYTES", chunk)  # entries, characters cut between windows
    want = [(e["conversations"][0]["value"], e["conversations"][1]["value"])
            for e in json.loads(path.read_text("utf-8-sig"))
            if len(e.get("conversations", [])) >= 2]  # fmt: skip
    assert list(sf.read_sharegpt(path)) == want
