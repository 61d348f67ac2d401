"""Serving the real pipelined engine: served tokens equal the plain single-device decoder's.

Slow (the tiny model's pipeline compiles in ~10-20 s on 2 cores), so marked `slow`.
"""

from __future__ import annotations

import threading

import grpc
import openai
import pytest
from wse_core import preset
from wse_inference.engine import SamplingParams
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.proto import load_stubs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_served_pipeline_engine_matches_plain_decoding():
    from wse_inference.decoding import PlainDecoder
    from wse_inference.pipeline.engine import PipelineEngine
    from wse_inference.testing import np_logprobs, tiny_model

    model = tiny_model()
    engine = PipelineEngine(model, spec=preset("wse3"), stages=2, max_context=64)
    plain = PlainDecoder(model.config, model.params, tokenizer=model.tokenizer, max_context=64)
    prompts = ["hello wafer", "pipelined"]
    greedy = SamplingParams(max_tokens=6, temperature=0.0)
    want = [plain.generate(model.tokenizer.encode(p), greedy).tokens for p in prompts]
    pb2, pb2_grpc = load_stubs()
    server = Server(engine, ServeConfig(port=0, grpc_port=0, drain_s=5)).start()
    try:
        server.warmup()
        got: dict[int, list[int]] = {}

        def call(i: int) -> None:  # both prompts in flight together: two pipeline slots
            with grpc.insecure_channel(server.grpc_target) as ch:
                req = pb2.GenerateRequest(text=prompts[i], max_tokens=6, temperature=0.0)
                stream = pb2_grpc.GenerationStub(ch).Generate(req, timeout=120)
                got[i] = [t for r in stream for t in r.token_ids]

        threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(150)
        assert [got[0], got[1]] == want
        client = openai.OpenAI(
            base_url=server.http_url + "/v1", api_key="none", timeout=120, max_retries=0
        )
        r = client.completions.create(
            model=engine.model_name, prompt=prompts[0], max_tokens=6, temperature=0
        )
        assert r.usage.completion_tokens == 6
        full = model.tokenizer.decode(want[0])
        if "\ufffd" not in full:  # random weights may emit half a UTF-8 character
            assert r.choices[0].text == full
        # logprobs: the raw log_softmax of one forward over prompt + tokens (the oracle)
        r = client.completions.create(
            model=engine.model_name, prompt=prompts[1], max_tokens=6, temperature=0, logprobs=2
        )
        ref = np_logprobs(model, model.tokenizer.encode(prompts[1]), want[1])
        lp = r.choices[0].logprobs
        assert lp.token_logprobs == pytest.approx(ref[range(6), want[1]].tolist(), abs=2e-5)
        assert all(len(d) <= 3 for d in lp.top_logprobs)  # 2 most likely + the chosen one
        # n = 2 sampled choices: choice i is the single request seeded seed + i, compared by
        # id (vLLM's return_tokens_as_token_ids): a token's text follows vLLM's rule for a
        # split UTF-8 character, not its lone decode (test_logprob_tokens_hunt71 checks texts)
        as_ids = {"return_tokens_as_token_ids": True}
        r = client.completions.create(model=engine.model_name, prompt=prompts[0], max_tokens=6,
                                      seed=11, n=2, logprobs=0, extra_body=as_ids)  # fmt: skip
        for i, choice in enumerate(r.choices):
            s = SamplingParams(max_tokens=6, temperature=1.0, seed=11 + i)
            ids = plain.generate(model.tokenizer.encode(prompts[0]), s).tokens
            assert choice.logprobs.tokens == [f"token_id:{t}" for t in ids]
            if "\ufffd" not in (full := model.tokenizer.decode(ids)):
                assert choice.text == full
        assert r.choices[0].logprobs.tokens != r.choices[1].logprobs.tokens
        # penalties (OpenAI's presence_penalty, vLLM's repetition_penalty) as the plain decoder
        r = client.completions.create(
            model=engine.model_name,
            prompt=prompts[1],
            max_tokens=6,
            temperature=0,
            presence_penalty=1.0,
            logprobs=0,
            extra_body={"repetition_penalty": 1.5, **as_ids},
        )
        s = SamplingParams(max_tokens=6, temperature=0.0, presence_penalty=1.0,
                           repetition_penalty=1.5)  # fmt: skip
        ids = plain.generate(model.tokenizer.encode(prompts[1]), s).tokens
        assert r.choices[0].logprobs.tokens == [f"token_id:{t}" for t in ids]
    finally:
        server.close()
    assert engine.metrics()["steps"] > 0
