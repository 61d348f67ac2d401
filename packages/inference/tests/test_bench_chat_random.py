"""`wse infer bench --dataset-name random --backend openai-chat` (session 80). Before, it was
refused ("--dataset-name random sends token ids, which /v1/chat/completions cannot take"),
where vLLM's `vllm bench serve` runs it: its RandomDataset decodes each prompt's ids to text
and encodes it again, cut or filled to its length (`gen_prompt_decode_to_target_len`), and its
openai-chat backend sends that text as one user message.

Oracles: vLLM's ids by hand (`np.random.default_rng(seed)` in vLLM's order: input lengths,
output lengths, offsets; ids (offset + i + k) % V); over an ASCII vocabulary (V = 128) the
byte tokenizer's text is those bytes and its count their number, so every prompt is known by
hand; over all 256 bytes, each prompt's count is its text's UTF-8 bytes (the mock's tokens),
and the mismatch the counts less the targets; the mock server, which makes exactly max_tokens
with ignore_eos, and whose prefilled prompt tokens (/metrics) are those of the expected chats
(its /tokenize of each text as one user message).
"""

from __future__ import annotations

import asyncio
import json

import httpx
import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_inference.demo.bench_data import (
    MAX_TEXT_TOKENS,
    DatasetError,
    RandomSpec,
    random_sample,
    random_text_sample,
)
from wse_inference.demo.bench_tokens import draw, text_codec
from wse_inference.demo.load_test import LoadTestConfig
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)


def _drawn(url: str, cfg: LoadTestConfig):
    async def go():
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            return await draw(cfg, client, "mock")

    return asyncio.run(go())


def _vllm_ids(spec: RandomSpec, n: int, seed: int, vocab: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    (ilo, ihi), (olo, ohi) = spec.input_bounds, spec.output_bounds
    ins, _ = rng.integers(ilo, ihi + 1, n), rng.integers(olo, ohi + 1, n)
    offsets = rng.integers(0, vocab, n)
    return [[int((offsets[i] + i + k) % vocab) for k in range(ins[i])] for i in range(n)]


def test_over_an_ascii_vocabulary_the_prompts_are_vllms_ids_as_text():
    spec = RandomSpec(input_len=12, output_len=4, range_ratio=0.5, vocab_size=128)
    with running_server(max_slots=4) as s:
        cfg = LoadTestConfig(url=s.http_url, backend="openai-chat", dataset=spec,
                             num_requests=6, seed=3)  # fmt: skip
        sample = _drawn(s.http_url, cfg)
    for i, ids in enumerate(_vllm_ids(spec, 6, 3, 128)):
        req = sample.request(i)
        assert (req.prompt, req.prompt_len) == (bytes(ids).decode("ascii"), len(ids))
    assert sample.params["token_mismatch"] == 0


def test_over_every_byte_counts_are_the_texts_and_the_mismatch_is_said():
    """Bytes 128-255 alone are no UTF-8: decoded, each becomes U+FFFD (3 bytes), so texts
    re-encode to other counts; vLLM's loop cuts or fills, and what is left is the mismatch."""
    spec = RandomSpec(input_len=12, output_len=4, range_ratio=0.5, vocab_size=256)
    with running_server(max_slots=4) as s:
        cfg = LoadTestConfig(url=s.http_url, backend="openai-chat", dataset=spec,
                             num_requests=8, seed=5, concurrency=3)  # fmt: skip
        sample = _drawn(s.http_url, cfg)
        again = _drawn(s.http_url, cfg)
    targets = [len(ids) for ids in _vllm_ids(spec, 8, 5, 256)]
    reqs = [sample.request(i) for i in range(8)]
    assert [r.prompt_len for r in reqs] == [len(r.prompt.encode()) for r in reqs]
    assert sample.params["token_mismatch"] == sum(r.prompt_len for r in reqs) - sum(targets)
    assert [again.request(i) for i in range(8)] == reqs  # seeded: the same prompts each run
    assert sum(r.prompt_len == t for r, t in zip(reqs, targets, strict=True)) >= 1


def test_the_chat_random_run_completes_on_a_mock_server_from_the_command_line(tmp_path):
    out = tmp_path / "b.json"
    with running_server(max_slots=4) as s:
        args = ["infer", "bench", "--url", s.http_url, "--backend", "openai-chat",
                "--dataset-name", "random", "--random-input-len", "10", "--random-output-len",
                "3", "--random-vocab-size", "128", "-n", "5", "-c", "2", "--out", out]  # fmt: skip
        code, text = invoke(ROOT, args, {"OPENAI_API_KEY": None, "COLUMNS": "200"})
        assert code == 0, text
        msgs = [
            {"role": "user", "content": bytes(ids).decode("ascii")}
            for ids in _vllm_ids(RandomSpec(input_len=10, output_len=3), 5, 0, 128)
        ]
        counted = [httpx.post(s.http_url + "/tokenize", json={"model": "mock", "messages": [m]},
                              timeout=30).json()["count"] for m in msgs]  # fmt: skip
        metrics = httpx.get(s.http_url + "/metrics", timeout=30).text
    served = next(float(line.split()[-1]) for line in metrics.splitlines()
                  if line.startswith("wse_prompt_tokens_total"))  # fmt: skip
    # the server prefilled exactly these chats: each text as one user message
    assert served == sum(counted) and all(c > 10 for c in counted)
    d = json.loads(out.read_text())
    assert (d["completed"], d["failed"]) == (5, 0)
    assert d["output_tokens"] == 5 * 3  # ignore_eos, as vLLM's random: exactly its length
    assert d["input_tokens"] == 5 * 10  # the texts' own tokens, as vLLM counts them
    assert (d["backend"], d["endpoint"]) == ("openai-chat", "/v1/chat/completions")


def test_texts_past_what_the_client_holds_are_refused_before_any_is_made():
    spec = RandomSpec(input_len=1 << 20, output_len=1, vocab_size=128)
    n = MAX_TEXT_TOKENS // (1 << 20) + 1

    async def never(_):
        raise AssertionError("nothing is decoded")

    with pytest.raises(DatasetError, match="lower -n or --random-input-len"):
        asyncio.run(random_text_sample(random_sample(spec, n, 0, 128), never, never, num=n))


def test_a_server_without_detokenize_is_said(tmp_path):
    """A server refusing /detokenize (a 404): the draw stops with what was asked and why."""
    with running_server(max_slots=1) as s:

        async def go():
            async with httpx.AsyncClient(base_url=s.http_url, timeout=30) as client:
                decode, _ = text_codec(client, "nope", 10)
                await decode([97])

        with pytest.raises(DatasetError, match=r"POST /detokenize answered 404 Not Found"):
            asyncio.run(go())
