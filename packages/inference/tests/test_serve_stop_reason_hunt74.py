"""Hunt 74, hole 2: `stop_reason` when a request's `stop_token_ids` lists the model's EOS.

vLLM's `check_stop` (vllm/v1/core/sched/utils.py) tests the model's EOS before the request's
stop ids: EOS, unless `ignore_eos`, finishes "stop" with `stop_reason` null; else a token in
`stop_token_ids` finishes "stop" with `stop_reason` that id; a stop string gives the string,
max_tokens "length" and null. Before the fix a request listing the EOS id in
`stop_token_ids` got that id back where vLLM says null.

Oracle: `_vllm_check_stop`, vLLM's rule written out here, run over the tokens the engine
makes: the mock's (next = last + 1, by hand) and a tiny random Llama's (its greedy tokens
without any EOS, the EOS then chosen among them, as `test_infer_eos` does).
"""

from __future__ import annotations

import dataclasses
import json

import httpx
import pytest
from wse_core import preset
from wse_inference.engine import SamplingParams
from wse_inference.mock import MockEngine
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.sampling import with_eos
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.request import model_eos_ids
from wse_inference.speculative.engine import SpeculativeEngine
from wse_inference.testing import one_request, tiny_model

pytestmark = pytest.mark.timeout(180)
EOS = 0x66  # "f": the mock's end-of-sequence token below; "abc" continues "defgh..."


def _vllm_check_stop(tokens, *, eos, stop_ids=(), ignore_eos=False, max_tokens):
    """(finish_reason, stop_reason, tokens made) as vLLM's check_stop decides them, token by
    token: length first, then EOS unless ignored, then the request's stop ids."""
    for n, t in enumerate(tokens[:max_tokens], start=1):
        if n == max_tokens:
            return "length", None, n
        if not ignore_eos and t in eos:
            return "stop", None, n
        if t in stop_ids:
            return "stop", t, n
    return "length", None, max_tokens


class _EosMock(MockEngine):
    """The mock with a model EOS (`EOS`), applied as the real engines apply theirs."""

    eos_token_ids = (EOS,)

    def prefill(self, *, prompt_ids, sampling):
        prefix = super().prefill(prompt_ids=prompt_ids, sampling=sampling)
        return dataclasses.replace(prefix, sampling=with_eos(prefix.sampling, self.eos_token_ids))


@pytest.fixture(scope="module")
def eos_server():
    server = Server(_EosMock(), ServeConfig(port=0, drain_s=2.0, warmup=False)).start()
    yield server
    server.close()


def _ask(server, body: dict, *, stream: bool = False) -> tuple[str, object, int]:
    """(finish_reason, stop_reason, completion tokens) of a completion, whole or streamed."""
    url = f"{server.http_url}/v1/completions"
    body = {"model": server.model_names[0], **body}
    if not stream:
        r = httpx.post(url, json=body, timeout=60).json()
        c = r["choices"][0]
        return c["finish_reason"], c["stop_reason"], r["usage"]["completion_tokens"]
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url, json=body, timeout=60) as r:
        chunks = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
    last = [c for c in chunks if c["choices"]][-1]["choices"][0]
    return last["finish_reason"], last["stop_reason"], chunks[-1]["usage"]["completion_tokens"]


@pytest.mark.parametrize(
    "extra",
    [
        {},  # the model's EOS alone
        {"stop_token_ids": [EOS]},  # the case: EOS listed, EOS first: null
        {"stop_token_ids": [EOS], "ignore_eos": True},  # EOS ignored: the request's id
        {"stop_token_ids": [0x65]},  # "e", before the EOS
        {"stop_token_ids": [0x65, EOS]},
        {"stop_token_ids": [0x68], "ignore_eos": True},  # "h", past the ignored EOS
        {"ignore_eos": True},  # to max_tokens
        {"stop_token_ids": [0x67]},  # "g", after the EOS: never reached
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_stop_reason_is_vllms_with_the_mock(eos_server, extra, stream):
    max_tokens = 8
    made = [ord("d") + i for i in range(max_tokens)]  # the mock's continuation of "abc"
    stop_ids, ignore_eos = extra.get("stop_token_ids", ()), extra.get("ignore_eos", False)
    want = _vllm_check_stop(made, eos={EOS}, stop_ids=stop_ids, ignore_eos=ignore_eos,
                            max_tokens=max_tokens)  # fmt: skip
    got = _ask(eos_server, {"prompt": "abc", "max_tokens": max_tokens, **extra}, stream=stream)
    assert got == want


PROMPT = [5, 6, 7]


@pytest.fixture(scope="module")
def llama():
    """A tiny random Llama's greedy tokens with no EOS, an EOS among them, and a server whose
    model stops on it."""
    model = tiny_model(n_layers=2)
    engine = PipelineEngine(model, spec=preset("wse3"), stages=2, max_context=32)
    free, _ = one_request(engine, PROMPT, SamplingParams(max_tokens=12, temperature=0.0))
    later = [t for k, t in enumerate(free) if k >= 2 and t not in free[:k]]
    if not later:
        pytest.skip("the greedy output repeats one token")
    eos = later[0]
    model = dataclasses.replace(model, eos_token_ids=(eos,))
    engine = PipelineEngine(model, spec=preset("wse3"), stages=2, max_context=32)
    server = Server(engine, ServeConfig(port=0, drain_s=2.0, warmup=False)).start()
    yield server, free, eos
    server.close()


@pytest.mark.parametrize("listed, ignore_eos", [(False, False), (True, False), (True, True)])
def test_stop_reason_is_vllms_with_a_real_model(llama, listed, ignore_eos):
    server, free, eos = llama
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "ignore_eos": ignore_eos}
    if listed:
        body["stop_token_ids"] = [eos]
    want = _vllm_check_stop(free, eos={eos}, stop_ids=body.get("stop_token_ids", ()),
                            ignore_eos=ignore_eos, max_tokens=12)  # fmt: skip
    assert want[0] == "stop"
    assert _ask(server, body) == want


def test_every_engine_names_its_models_eos():
    model = dataclasses.replace(tiny_model(n_layers=2), eos_token_ids=(3, 9))
    pipelined = PipelineEngine(model, spec=preset("wse3"), stages=2, max_context=32)
    speculative = SpeculativeEngine(model, tiny_model(n_layers=1), spec=preset("wse3"), gamma=2,
                                    max_slots=1, max_context=32)  # fmt: skip
    assert model_eos_ids(pipelined) == model_eos_ids(speculative) == {3, 9}
    assert model_eos_ids(MockEngine()) == frozenset()  # the mock has no EOS
