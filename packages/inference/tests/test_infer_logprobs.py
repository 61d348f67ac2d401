"""Log probabilities from the real engines equal an independent oracle: the raw next-token
log_softmax of one parallel forward over prompt + generated tokens (`testing.np_logprobs`)."""

from __future__ import annotations

import numpy as np
import pytest
from wse_core import preset
from wse_inference.engine import MAX_LOGPROBS, SamplingParams
from wse_inference.model_dir import truncated_model
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.sampling import SamplingError
from wse_inference.speculative.engine import SpeculativeEngine
from wse_inference.testing import np_logprobs, tiny_model

PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9]]


def _run(engine, prompts, samplings, *, fused: int = 0):
    """Prefill, insert and generate to the end -> per slot (tokens, TokenLogprobs or None)."""
    state = engine.init_decode_state()
    got = {}
    for slot, (ids, s) in enumerate(zip(prompts, samplings, strict=True)):
        pre = engine.prefill(prompt_ids=ids, sampling=s)
        state = engine.insert(prefix=pre, state=state, slot=slot)
        lps = None if pre.first_logprob is None else [pre.first_logprob]
        got[slot] = ([pre.first_token], lps)
    done: set[int] = set()
    while len(done) < len(prompts):
        if fused:
            state, outs = engine.generate_steps(state=state, steps=fused)
        else:
            state, outs = engine.generate(state=state)
        for o in outs:
            toks, lps = got[o.slot]
            toks += o.tokens
            if o.logprobs is None:
                assert lps is None
            else:
                assert len(o.logprobs) == len(o.tokens)
                lps += o.logprobs
            if o.finished:
                done.add(o.slot)
    return [got[i] for i in range(len(prompts))]


def _check(model, prompt, tokens, lps, k):
    ref = np_logprobs(model, prompt, tokens)
    assert [x.token for x in lps] == tokens
    np.testing.assert_allclose(
        [x.logprob for x in lps], ref[np.arange(len(tokens)), tokens], atol=2e-5
    )
    for x, row in zip(lps, ref, strict=True):
        assert len(x.top) == k
        want = np.argsort(-row, kind="stable")[:k]
        assert [t for t, _ in x.top] == want.tolist()
        np.testing.assert_allclose([lp for _, lp in x.top], row[want], atol=2e-5)


@pytest.mark.parametrize("mesh_rows", [1, 2])
def test_pipeline_logprobs_match_one_forward(mesh_rows):
    """Two users in flight on 2 stages (rows on one device, and vmapped over two): a greedy
    one with 3 alternatives, a sampled one with MAX_LOGPROBS; fused steps on one mesh."""
    model = tiny_model("llama", n_layers=2)
    eng = PipelineEngine(
        model, spec=preset("wse3"), stages=2, max_context=48, prefill_chunk=4, mesh_rows=mesh_rows
    )
    samplings = [
        SamplingParams(max_tokens=7, temperature=0.0, logprobs=3),
        SamplingParams(max_tokens=6, temperature=1.0, seed=3, logprobs=MAX_LOGPROBS),
    ]
    got = _run(eng, PROMPTS, samplings, fused=3 if mesh_rows == 1 else 0)
    for prompt, s, (tokens, lps) in zip(PROMPTS, samplings, got, strict=True):
        assert len(tokens) == s.max_tokens
        _check(model, prompt, tokens, lps, s.logprobs)
    # greedy: the chosen token is the most likely one
    assert all(x.top[0] == (x.token, x.logprob) for x in got[0][1])


def test_pipeline_logprobs_only_for_the_slot_that_asks():
    model = tiny_model("llama", n_layers=2)
    eng = PipelineEngine(model, spec=preset("wse3"), stages=2, max_context=48, prefill_chunk=4)
    samplings = [
        SamplingParams(max_tokens=5, temperature=1.0, seed=1),
        SamplingParams(max_tokens=5, temperature=1.0, seed=2, logprobs=0),
    ]
    (t0, lp0), (t1, lp1) = _run(eng, PROMPTS, samplings)
    assert lp0 is None
    _check(model, PROMPTS[1], t1, lp1, 0)
    # asking for logprobs does not change the draws
    plain = _run(eng, PROMPTS[1:], [SamplingParams(max_tokens=5, temperature=1.0, seed=2)])
    assert plain[0][0] == t1


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_speculative_engine_logprobs_match_one_forward(temperature):
    """Each round emits 1..gamma + 1 tokens; each has the target's raw logprob at its place."""
    model = tiny_model("llama", n_layers=3)
    eng = SpeculativeEngine(
        model, truncated_model(model, 1), spec=preset("wse3"), gamma=3, max_slots=2, max_context=64
    )
    s = SamplingParams(max_tokens=14, temperature=temperature, seed=4, logprobs=4)
    ((tokens, lps),) = _run(eng, PROMPTS[:1], [s])
    assert len(tokens) == 14
    _check(model, PROMPTS[0], tokens, lps, 4)
    assert eng.stats.rounds < 13  # several tokens per round at least once


def test_logprobs_outside_range_refused():
    model = tiny_model("llama", n_layers=1)
    eng = PipelineEngine(model, spec=preset("wse3"), stages=1, max_context=32)
    for k in (-1, MAX_LOGPROBS + 1):
        with pytest.raises(SamplingError, match=f"logprobs must be in 0..{MAX_LOGPROBS}"):
            eng.prefill(prompt_ids=[1, 2], sampling=SamplingParams(max_tokens=2, logprobs=k))


@pytest.mark.parametrize("speculative", [False, True])
def test_prompt_logprobs_match_one_forward(speculative):
    """The prompt's own tokens scored in the chunked prefill (a 10-token prompt in chunks of
    4: rows that cross chunk edges and a padded last chunk): token i by the logits at i - 1,
    None for token 0; the generated tokens are unchanged."""
    model = tiny_model("llama", n_layers=2)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    if speculative:
        draft = truncated_model(model, 1)
        eng = SpeculativeEngine(
            model, draft, spec=preset("wse3"), gamma=2, max_slots=1, max_context=48, prefill_chunk=4
        )
    else:
        eng = PipelineEngine(model, spec=preset("wse3"), stages=1, max_context=48, prefill_chunk=4)
    s = SamplingParams(max_tokens=3, temperature=1.0, seed=2, prompt_logprobs=5)
    pre = eng.prefill(prompt_ids=prompt, sampling=s)
    assert pre.prompt_logprobs[0] is None and len(pre.prompt_logprobs) == len(prompt)
    _check(model, prompt[:1], prompt[1:], pre.prompt_logprobs[1:], 5)
    plain = eng.prefill(prompt_ids=prompt, sampling=SamplingParams(max_tokens=3, seed=2))
    assert plain.prompt_logprobs is None and plain.first_token == pre.first_token
