"""Speculative decoding of real models: greedy equals the target's greedy; errors at start-up."""

import pytest
from wse_inference.decoding import PlainDecoder
from wse_inference.engine import SamplingParams
from wse_inference.model_dir import ModelLoadError, truncated_model
from wse_inference.sampling import SamplingError
from wse_inference.speculative.config import SpeculativeConfig, parse_speculative_config
from wse_inference.speculative.decoder import SpeculativeDecoder
from wse_inference.testing import tiny_model


@pytest.mark.parametrize(
    "gamma, draft_kind",
    [(4, "truncated"), pytest.param(2, "independent", marks=pytest.mark.slow)],
)
def test_speculative_greedy_equals_target_greedy(gamma, draft_kind):
    target = tiny_model("llama", n_layers=3)
    draft = (
        truncated_model(target, 1)
        if draft_kind == "truncated"
        else tiny_model("llama", n_layers=1, seed=7)
    )
    spec = SpeculativeDecoder(target, draft, gamma=gamma, max_context=64, prefill_chunk=8)
    plain = PlainDecoder(target.config, target.params, max_context=64, prefill_chunk=8)
    greedy = SamplingParams(max_tokens=14, temperature=0.0)
    for prompt in ([3, 1, 4, 1, 5, 9, 2, 6], [42]):
        got = spec.generate(prompt, greedy)
        assert got.tokens == plain.generate(prompt, greedy).tokens
        m = got.metrics["speculative"]
        assert m["rounds"] >= 1 and 0 <= m["acceptance_rate"] <= 1
        assert m["proposed"] == gamma * m["rounds"]
        # Tokens per pass = accepted + 1 per round, less any cut by max_tokens.
        assert len(got.tokens) - 1 <= m["accepted"] + m["rounds"]


@pytest.mark.slow
def test_speculative_sampled_is_reproducible_and_stops():
    target = tiny_model("gpt2", n_layers=2)
    spec = SpeculativeDecoder(target, truncated_model(target, 1), gamma=3, max_context=64)
    s = SamplingParams(max_tokens=10, temperature=1.0, top_p=0.9, seed=11)
    a, b = spec.generate([5, 6, 7], s), spec.generate([5, 6, 7], s)
    assert a.tokens == b.tokens and len(a.tokens) == 10 and a.finish_reason == "length"
    stop = SamplingParams(
        max_tokens=10, temperature=1.0, top_p=0.9, seed=11, stop_token_ids=(a.tokens[4],)
    )
    c = spec.generate([5, 6, 7], stop)
    cut = a.tokens.index(a.tokens[4]) + 1
    assert c.tokens == a.tokens[:cut] and c.finish_reason == "stop"


def test_vocabulary_mismatch_and_bad_config_are_errors():
    target = tiny_model("llama", n_layers=1)
    other = tiny_model("llama", n_layers=1, vocab_size=300)
    with pytest.raises(ModelLoadError, match="vocabulary mismatch.*300"):
        SpeculativeDecoder(target, other, gamma=2)
    got = parse_speculative_config('{"model": "/m", "num_speculative_tokens": 3}')
    assert got == SpeculativeConfig(model="/m", num_speculative_tokens=3)
    assert (got.draft_dir(), got.accepted_tokens) == ("/m", 3)
    with pytest.raises(SamplingError, match="needs"):  # a draft is needed to run one
        parse_speculative_config('{"num_speculative_tokens": 3}').draft_dir()
    for bad in (
        "{",
        "[1]",
        '{"model": "m", "x": 1}',
        '{"model": "m", "num_speculative_tokens": 0}',
        '{"model": "m", "num_speculative_tokens": true}',
        '{"model": "m", "num_speculative_tokens": 2, "mock_accepted_tokens": 3}',
    ):
        with pytest.raises(SamplingError):
            parse_speculative_config(bad)
