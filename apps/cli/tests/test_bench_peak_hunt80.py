"""Hunt 80 (serve80, hole 5): `wse infer bench`'s "peak output tokens/s" counted chunks (vLLM's
max_output_tokens_per_s, one token a chunk), so a speculative server, whose chunks carry
several tokens, showed a peak of 54 below its mean of 823 output tokens/s.

Oracle: streams whose chunks and tokens are counted by hand (all within the run's first
second): 2 requests of 3 chunks of one token each (usage 3) peak at 6 tokens, 6 chunks; 2
requests of 2 chunks carrying 6 tokens (usage 6) peak at 4 chunks, their tokens' seconds not
known.
"""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_inference.testing import fake_openai_server

pytestmark = pytest.mark.timeout(60)
ROOT = typer.main.get_command(app)
ENV = {"OPENAI_API_KEY": None, "COLUMNS": "200"}
MODELS = b'{"object": "list", "data": [{"id": "org/m"}]}'


def _stream(texts: list[str], usage: int) -> bytes:
    chunks = [{"choices": [{"text": t}]} for t in texts]
    chunks[-1]["choices"][0]["finish_reason"] = "length"
    chunks.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": usage}})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + (
        b"data: [DONE]\n\n"
    )


def _bench(stream: bytes, tmp_path) -> tuple[dict, str]:
    out = tmp_path / "b.json"
    with fake_openai_server(MODELS, stream) as url:
        code, text = invoke(ROOT, ["infer", "bench", "--url", url, "-n", "2", "-c", "2",
                                   "--max-tokens", "6", "--out", str(out)], ENV)  # fmt: skip
    assert code == 0, text
    return json.loads(out.read_text()), text


def test_one_token_a_chunk_peaks_in_tokens(tmp_path):
    d, text = _bench(_stream(["a", "b", "c"], 3), tmp_path)
    assert d["max_output_tokens_per_s"] == 6.0  # vLLM's: chunks
    assert d["peak_output_tokens_per_s"] == 6 and d["several_tokens_a_chunk"] == 0
    assert "peak output tokens/s" in text and "peak output chunks/s" not in text


def test_chunks_of_several_tokens_peak_in_chunks_said_as_chunks(tmp_path):
    d, text = _bench(_stream(["abc", "def"], 6), tmp_path)
    assert d["max_output_tokens_per_s"] == 4.0  # vLLM's key, its count: one a chunk
    assert d["peak_output_tokens_per_s"] is None and d["several_tokens_a_chunk"] == 2
    assert "peak output tokens/s" not in text
    line = next(x for x in text.splitlines() if "peak output chunks/s" in x)
    assert "4 (vLLM's max_output_tokens_per_s; 2 of 2 requests streamed several tokens a " \
        "chunk)" in line  # fmt: skip
