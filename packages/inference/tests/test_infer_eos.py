"""End-of-sequence: ids read where transformers and vLLM read them; every engine stops on the
first one with finish reason "stop" (ignore_eos runs on), and the oracle is the same decoder
run without an EOS, cut after that token's first occurrence."""

from __future__ import annotations

import dataclasses
import json

import httpx
import pytest
from wse_core import preset
from wse_inference.engine import SamplingParams
from wse_inference.load import load_engine
from wse_inference.model_dir import eos_token_ids, load_model, truncated_model
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.sampling import with_eos
from wse_inference.serve.openai_request import parse_request
from wse_inference.speculative.decoder import SpeculativeDecoder
from wse_inference.speculative.engine import SpeculativeEngine
from wse_inference.testing import one_request, save_tiny_model, tiny_model

PROMPT = [5, 6, 7]
GREEDY = SamplingParams(max_tokens=12, temperature=0.0)


def _engine_tokens(engine, sampling):
    return one_request(engine, PROMPT, sampling)


def _eos_from(tokens):
    """A token first generated at position k >= 2: (k, token)."""
    for k in range(2, len(tokens)):
        if tokens[k] not in tokens[:k]:
            return k, tokens[k]
    pytest.skip("the greedy output repeats one token")


def test_eos_ids_from_the_model_folder(tmp_path):
    model = save_tiny_model(tmp_path, n_layers=1)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "eos_token_id": 3}))
    gen = {"eos_token_id": [9, 3, 4000]}  # 4000 is outside the 256-id vocabulary
    (tmp_path / "generation_config.json").write_text(json.dumps(gen))
    assert load_model(tmp_path).eos_token_ids == (3, 9)
    assert eos_token_ids(tmp_path / "none", model.tokenizer, 256) == ()

    class Tok:  # an HF tokenizer's eos_token (tokenizer_config.json) is looked up by text
        template_vars = {"eos_token": "</s>"}

        def vocab(self):
            return {"</s>": 2}

    assert eos_token_ids(tmp_path, Tok(), 256) == (3, 9, 2)


def test_with_eos_and_ignore_eos():
    s = SamplingParams(stop_token_ids=(4,))
    assert with_eos(s, (4, 7)).stop_token_ids == (4, 7)
    assert with_eos(dataclasses.replace(s, ignore_eos=True), (7,)).stop_token_ids == (4,)
    body = {"model": "m", "prompt": "ab", "ignore_eos": True}
    p = parse_request(
        body, kind="completion", tokenizer=tiny_model().tokenizer, model_names=["m"], max_context=64
    )
    assert p.sampling.ignore_eos
    with pytest.raises(ValueError, match="ignore_eos must be true or false"):
        parse_request(
            {**body, "ignore_eos": "yes"},
            kind="completion",
            tokenizer=tiny_model().tokenizer,
            model_names=["m"],
            max_context=64,
        )


def test_pipelined_engine_stops_at_eos():
    model = tiny_model(n_layers=2)
    engine = PipelineEngine(model, spec=preset("wse3"), stages=2, max_context=32)
    free, reason = _engine_tokens(engine, GREEDY)
    assert reason == "length" and len(free) == 12
    k, eos = _eos_from(free)
    engine = PipelineEngine(
        dataclasses.replace(model, eos_token_ids=(eos,)),
        spec=preset("wse3"),
        stages=2,
        max_context=32,
    )
    assert _engine_tokens(engine, GREEDY) == (free[: k + 1], "stop")
    ignored = dataclasses.replace(GREEDY, ignore_eos=True)
    assert _engine_tokens(engine, ignored) == (free, "length")


def test_speculative_decoder_and_engine_stop_at_eos():
    model = tiny_model(n_layers=2)
    draft = truncated_model(model, 1)
    sampled = SamplingParams(max_tokens=12, temperature=1.0, seed=3)
    free = SpeculativeDecoder(model, draft, gamma=3, max_context=32).generate(PROMPT, sampled)
    k, eos = _eos_from(free.tokens)
    with_stop = dataclasses.replace(model, eos_token_ids=(eos,))
    draft = truncated_model(with_stop, 1)
    out = SpeculativeDecoder(with_stop, draft, gamma=3, max_context=32).generate(PROMPT, sampled)
    assert (out.tokens, out.finish_reason) == (free.tokens[: k + 1], "stop")
    engine = SpeculativeEngine(
        with_stop, draft, spec=preset("wse3"), gamma=3, max_slots=1, max_context=32
    )
    assert _engine_tokens(engine, sampled) == (free.tokens[: k + 1], "stop")


@pytest.mark.timeout(120)
def test_the_server_stops_at_the_folders_eos(tmp_path):
    from wse_inference.serve.app import ServeConfig, Server

    save_tiny_model(tmp_path, n_layers=1)
    engine = load_engine(str(tmp_path), spec=preset("wse3"), max_slots=1, max_context=32)
    free, _ = _engine_tokens(engine, GREEDY)
    k, eos = _eos_from(free)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    engine = load_engine(str(tmp_path), spec=preset("wse3"), max_slots=1, max_context=32)
    server = Server(engine, ServeConfig(port=0, warmup=False)).start()
    try:
        body = {"model": engine.model_name, "prompt": bytes(PROMPT).decode(), "max_tokens": 12}
        body["temperature"] = 0
        r = httpx.post(server.http_url + "/v1/completions", json=body, timeout=60).json()
        r2 = httpx.post(
            server.http_url + "/v1/completions", json={**body, "ignore_eos": True}, timeout=60
        ).json()
    finally:
        server.close()
    assert r["choices"][0]["finish_reason"] == "stop"
    assert r["usage"]["completion_tokens"] == k + 1
    assert (r2["choices"][0]["finish_reason"], r2["usage"]["completion_tokens"]) == ("length", 12)
