"""Session 80: the prompt pass runs the head (the final norm and the vocabulary product) once a
request, on its last position, as vLLM computes logits only at `logits_indices` (one row a
sequence, vllm/v1/worker/gpu_model_runner.py). Before, `decoding.prefill` unembedded every
position of every chunk (`wse_models.forward`) and kept one row: 37 prompt tokens in chunks
of 8 ran 40 head rows for the 1 it used (GPT-2's 50,257-word head on a 64-wide model, 512
tokens in chunks of 32: the prompt pass 4.9x and 6.5x slower than the one row's, the medians
of two side-by-side runs on a shared 2-core machine). Every position's rows are computed
only for a request that asks for prompt_logprobs (echo with logprobs on the HTTP server).

The oracle: the rows counted by hand (ceil(P / c) chunks of c rows where prompt_logprobs are
asked, else one), read as the head runs (a `jax.debug.callback` in the counted head, so a
branch not taken counts nothing), and the logits of one parallel forward over the whole
prompt (`testing.np_forward_logits`, every position's, the model-level function)."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
import wse_models
from wse_core import preset
from wse_inference import decoding
from wse_inference.engine import SamplingParams
from wse_inference.model_dir import truncated_model
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.speculative.engine import SpeculativeEngine
from wse_inference.testing import np_forward_logits, tiny_model


@pytest.fixture
def head_rows(monkeypatch):
    """The rows each head product ran on, as it runs (the prompt chunk traced afresh with a
    counted `wse_models.unembed`, and dropped after the test)."""
    rows: list[int] = []
    real = wse_models.unembed

    def counted(config, params, h):
        n = np.int32(math.prod(h.shape[:-1]))
        jax.debug.callback(lambda r: rows.append(int(r)), n, ordered=False)
        return real(config, params, h)

    monkeypatch.setattr(wse_models, "unembed", counted)
    monkeypatch.setattr(wse_models.decoder, "unembed", counted)  # `forward`'s own
    decoding._forward_chunk.clear_cache()
    yield rows
    decoding._forward_chunk.clear_cache()


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize(("n", "chunk"), [(1, 4), (4, 4), (5, 4), (13, 4), (37, 8)])
def test_the_prompt_pass_runs_the_head_on_its_last_position_only(head_rows, arch, n, chunk):
    model = tiny_model(arch, n_layers=2)
    prompt = [int(x) for x in np.random.default_rng(n).integers(0, 256, n)]
    logits, _ = decoding.prefill(model.config, model.params, prompt, 48, chunk)
    jax.effects_barrier()
    assert head_rows == [1]  # before: [chunk] * ceil(n / chunk)
    want = np_forward_logits(model, prompt)[-1]
    np.testing.assert_allclose(np.asarray(logits), want, rtol=1e-5, atol=1e-5)


def test_prompt_logprobs_run_every_row_for_that_request_only(head_rows):
    model = tiny_model("llama", n_layers=2)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    logits, _, scored = decoding.prefill_scored(model.config, model.params, prompt, 48, 4, 2)
    jax.effects_barrier()
    chunks = math.ceil(len(prompt) / 4)
    assert sorted(head_rows) == [1] + [4] * chunks  # every row, and the first token's row
    oracle = np_forward_logits(model, prompt)
    np.testing.assert_allclose(np.asarray(logits), oracle[-1], rtol=1e-5, atol=1e-5)
    z = oracle[:-1] - np.log(np.exp(oracle[:-1]).sum(-1, keepdims=True))
    got = [x.logprob for x in scored[1:]]
    np.testing.assert_allclose(got, z[np.arange(len(prompt) - 1), prompt[1:]], atol=2e-5)
    head_rows.clear()
    plain, _ = decoding.prefill(model.config, model.params, prompt, 48, 4)
    jax.effects_barrier()
    assert head_rows == [1]
    # the first token's logits: the same one-row product with or without prompt_logprobs
    assert np.array_equal(np.asarray(plain), np.asarray(logits))


def test_the_engines_prompt_pass_runs_one_head_row_a_model(head_rows):
    """The pipelined engine's prefill (the server's) and the speculative engine's, whose
    draft reads the prompt too: one row each model."""
    model = tiny_model("llama", n_layers=2)
    prompt = list(range(1, 12))
    greedy = SamplingParams(max_tokens=2, temperature=0.0)
    pipe = PipelineEngine(model, stages=2, max_context=32, prefill_chunk=4, spec=preset("wse3"))
    first = pipe.prefill(prompt_ids=prompt, sampling=greedy).first_token
    jax.effects_barrier()
    assert head_rows == [1]
    assert first == int(np.argmax(np_forward_logits(model, prompt)[-1]))
    head_rows.clear()
    spec = SpeculativeEngine(model, truncated_model(model, 1), gamma=2, max_slots=1,
                             max_context=32, prefill_chunk=4, spec=preset("wse3"))  # fmt: skip
    assert spec.prefill(prompt_ids=prompt, sampling=greedy).first_token == first
    jax.effects_barrier()
    assert head_rows == [1, 1]  # the target's and the draft's
