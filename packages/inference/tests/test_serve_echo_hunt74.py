"""Hunt 74, hole 3: `echo: true` with `max_tokens: 0` on /v1/completions, with a tokenizer
that adds a BOS. vLLM answers the prompt as the text, `usage` with completion_tokens 0 and
prompt_tokens the prompt's ids (its BOS counted), total = prompt; with `logprobs`, the
prompt's tokens scored, the first with none. Found already right (hunt 73 fixed it, tested on
the mock's byte tokenizer, which adds no BOS); this pins it on a model folder whose tokenizer
adds one, whole and streamed.

Oracles: HF `tokenizers`' own encoding of the prompt (`Tokenizer.encode`, its post-processor
adding "<s>") for the count; the prompt string as sent for the text; NumPy's log-softmax of
one parallel forward of the model (`testing.np_logprobs`) for the scores.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer, processors
from wse_core import preset
from wse_inference.load import load_engine
from wse_inference.model_dir import load_model
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.testing import np_logprobs, save_byte_bpe, save_tiny_model

pytestmark = pytest.mark.timeout(180)
PROMPT = "hello world, the wafer"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A tiny Llama folder whose tokenizer.json adds "<s>" to a text; its server, the
    tokenizer and the model."""
    folder = tmp_path_factory.mktemp("bos")
    save_byte_bpe(folder / "bpe.json", vocab_size=300, texts=("hello world", "the wafer"))
    save_tiny_model(folder, n_layers=1, vocab_size=304)
    tok = Tokenizer.from_file(str(folder / "bpe.json"))
    tok.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", bos)])  # fmt: skip
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>"}))
    engine = load_engine(str(folder), spec=preset("wse3"), max_slots=1, max_context=64)
    server = Server(engine, ServeConfig(port=0, drain_s=2.0, warmup=False)).start()
    yield server, tok, load_model(folder)
    server.close()


def _post(server, body: dict) -> dict:
    body = {"model": server.model_names[0], "echo": True, "max_tokens": 0, **body}
    r = httpx.post(f"{server.http_url}/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_echo_alone_counts_the_prompt_with_its_bos(served):
    server, tok, _ = served
    ids = tok.encode(PROMPT).ids
    assert ids[0] == tok.token_to_id("<s>")  # the oracle adds it
    r = _post(server, {"prompt": PROMPT})
    c = r["choices"][0]
    assert (c["text"], c["finish_reason"], c["stop_reason"]) == (PROMPT, "length", None)
    assert r["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 0,
                          "total_tokens": len(ids)}  # fmt: skip
    as_ids = _post(server, {"prompt": ids})  # the same prompt as ids: the same count
    assert as_ids["usage"] == r["usage"]


def test_echo_alone_scores_the_prompt(served):
    server, tok, model = served
    ids = tok.encode(PROMPT).ids
    lp = _post(server, {"prompt": PROMPT, "logprobs": 1})["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(ids)
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    want = np_logprobs(model, ids[:1], ids[1:])[np.arange(len(ids) - 1), ids[1:]]
    np.testing.assert_allclose(lp["token_logprobs"][1:], want, rtol=1e-4, atol=1e-4)


def test_echo_alone_streamed_with_usage(served):
    server, tok, _ = served
    n = len(tok.encode(PROMPT).ids)
    body = {"model": server.model_names[0], "prompt": PROMPT, "echo": True, "max_tokens": 0,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    with httpx.stream("POST", f"{server.http_url}/v1/completions", json=body, timeout=60) as r:
        chunks = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == PROMPT
    assert chunks[-1]["usage"] == {"prompt_tokens": n, "completion_tokens": 0, "total_tokens": n}
