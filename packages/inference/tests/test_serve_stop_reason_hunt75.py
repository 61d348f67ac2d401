"""Hunt 75: `stop_reason` of the model's other end-of-sequence ids.

vLLM's `SamplingParams.update_from_generation_config` adds generation_config.json's
eos_token_id list, less the tokenizer's eos_token, to a request's stop_token_ids (unless it
ignores EOS); `check_stop` then reports the tokenizer's EOS as null and those ids as their
id. Llama 3.1 Instruct: the tokenizer's <|eot_id|> 128009 is null, <|eom_id|> 128008 (a
tool call pending) and <|end_of_text|> 128001 are ids. Before the fix every EOS id was null.

Oracle: vLLM's rule written out (`_vllm_check_stop`) over a tiny random Llama's greedy
tokens, with two of them made its end-of-sequence ids: the tokenizer's and another.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import httpx
import pytest
from wse_core import preset
from wse_inference.engine import SamplingParams
from wse_inference.model_dir import tokenizer_eos_id
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.request import model_eos_ids
from wse_inference.testing import one_request, tiny_model

pytestmark = pytest.mark.timeout(180)
PROMPT = [5, 6, 7]


def _vllm_check_stop(tokens, *, eos, stop_ids, ignore_eos, max_tokens):
    """(finish_reason, stop_reason) as vLLM's check_stop decides them, token by token."""
    for n, t in enumerate(tokens[:max_tokens], start=1):
        if n == max_tokens:
            return "length", None
        if not ignore_eos and t in eos:
            return "stop", None
        if t in stop_ids:
            return "stop", t
    return "length", None


@pytest.fixture(scope="module")
def llama():
    model = tiny_model(n_layers=2)
    engine = PipelineEngine(model, spec=preset("wse3"), stages=2, max_context=32)
    free, _ = one_request(engine, PROMPT, SamplingParams(max_tokens=12, temperature=0.0))
    later = [t for k, t in enumerate(free) if k >= 2 and t not in free[:k]]
    if len(later) < 2:
        pytest.skip("the greedy output repeats itself")
    other, primary = later[0], later[1]  # the other EOS comes first
    model = dataclasses.replace(model, eos_token_ids=(other, primary), eos_token_id=primary)
    engine = PipelineEngine(model, spec=preset("wse3"), stages=2, max_context=32)
    server = Server(engine, ServeConfig(port=0, drain_s=2.0, warmup=False)).start()
    yield server, free, other, primary
    server.close()


@pytest.mark.parametrize(
    "listed, ignore_eos", [((), False), (("primary",), False), (("primary",), True)]
)
def test_another_eos_id_is_reported_as_vllm_reports_it(llama, listed, ignore_eos):
    server, free, other, primary = llama
    ids = {"primary": primary}
    body = {"model": server.model_names[0], "prompt": PROMPT, "max_tokens": 12,
            "temperature": 0, "ignore_eos": ignore_eos,
            "stop_token_ids": [ids[k] for k in listed]}  # fmt: skip
    # vLLM: the generation config's other EOS ids join the stop ids unless EOS is ignored
    stop_ids = [*body["stop_token_ids"], *(() if ignore_eos else (other,))]
    want = _vllm_check_stop(free, eos={primary}, stop_ids=stop_ids, ignore_eos=ignore_eos,
                            max_tokens=12)  # fmt: skip
    c = httpx.post(f"{server.http_url}/v1/completions", json=body, timeout=60).json()
    assert (c["choices"][0]["finish_reason"], c["choices"][0]["stop_reason"]) == want


def test_the_model_eos_is_the_tokenizers():
    model = dataclasses.replace(tiny_model(n_layers=1), eos_token_ids=(3, 9), eos_token_id=9)
    assert model_eos_ids(SimpleNamespace(model=model)) == {9}
    untold = dataclasses.replace(model, eos_token_id=None)  # no tokenizer EOS: every one
    assert model_eos_ids(SimpleNamespace(model=untold)) == {3, 9}
    tok = SimpleNamespace(
        template_vars={"eos_token": "<|eot_id|>"}, vocab=lambda: {"<|eot_id|>": 7}
    )
    assert tokenizer_eos_id(tok, vocab_size=8) == 7
    assert tokenizer_eos_id(tok, vocab_size=7) is None  # outside the vocabulary
    assert tokenizer_eos_id(None, vocab_size=8) is None
