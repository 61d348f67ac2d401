"""vLLM's min_tokens in every decoder (session 80; before, the server refused it with a 400 and
`SamplingParams` had no such setting): until min_tokens tokens are made, the request's stop
token ids and the model's EOS ids are held back (logit -inf, vLLM's MinTokensLogitsProcessor),
then they stop the sequence again.

Oracle: greedy decoding in NumPy, each step one parallel forward over the whole sequence
(`testing.np_held_greedy`, not the decoders' KV-cache path), the held ids' logits set to
-inf for the first min_tokens steps, stopping on a stop id from then on. The plain, pipelined
and speculative decoders (and the speculative engine) must give its tokens; sampled, the
pipelined engine must draw what the plain decoder draws, and no held id comes before
min_tokens whatever the seed.
"""

from __future__ import annotations

import pytest
from wse_core import preset
from wse_inference.decoding import PlainDecoder
from wse_inference.engine import SamplingError, SamplingParams, validate_sampling
from wse_inference.model_dir import truncated_model
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.speculative.decoder import SpeculativeDecoder
from wse_inference.speculative.engine import SpeculativeEngine
from wse_inference.testing import np_held_greedy, one_request, tiny_model

pytestmark = pytest.mark.timeout(600)
PROMPT = [5, 9, 5, 9, 5, 9, 5]
MIN_TOKENS = 4
N = 14


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", n_layers=3)


@pytest.fixture(scope="module")
def case(model):
    """(stop ids, the oracle's tokens): the free run's first token held back, and a token the
    held-back run makes at step MIN_TOKENS (new there), so that it stops right after."""
    free = np_held_greedy(model, PROMPT, N, (), 0, ())
    first = free[0]
    held_run = np_held_greedy(model, PROMPT, N, {first}, MIN_TOKENS, ())
    later = held_run[MIN_TOKENS]
    if later in held_run[:MIN_TOKENS] or later == first:
        pytest.skip("the held-back run repeats its token at step MIN_TOKENS")
    stops = (first, later)
    want = np_held_greedy(model, PROMPT, N, set(stops), MIN_TOKENS, set(stops))
    # the case: without min_tokens the first token stops at once; with it, the sequence runs
    # to min_tokens and the stop id ends it after
    assert free[0] == first and len(want) == MIN_TOKENS + 1 and want[-1] == later
    assert first not in want
    return stops, want


def _sampling(stops, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=N, temperature=0.0, stop_token_ids=stops,
                          min_tokens=MIN_TOKENS, **kw)  # fmt: skip


def test_greedy_with_min_tokens_equals_the_oracle_in_every_decoder(model, case):
    stops, want = case
    s = _sampling(stops)
    plain = PlainDecoder(model.config, model.params, max_context=64, prefill_chunk=4)
    got = plain.generate(PROMPT, s)
    assert (got.tokens, got.finish_reason) == (want, "stop")
    unheld = plain.generate(PROMPT, SamplingParams(max_tokens=N, temperature=0.0,
                                                   stop_token_ids=stops))  # fmt: skip
    assert unheld.tokens == [stops[0]]  # before: min_tokens did not exist; the first id stops
    draft = truncated_model(model, 1)
    spec = SpeculativeDecoder(model, draft, gamma=3, max_context=64, prefill_chunk=4)
    assert spec.generate(PROMPT, s).tokens == want
    eng = SpeculativeEngine(
        model, draft, spec=preset("wse3"), gamma=3, max_slots=1, max_context=64, prefill_chunk=4
    )
    assert one_request(eng, PROMPT, s) == (want, "stop")
    pipe = PipelineEngine(model, spec=preset("wse3"), stages=3, max_context=48, prefill_chunk=4)
    assert one_request(pipe, PROMPT, s) == (want, "stop")


def test_min_tokens_beside_penalties_equals_the_oracle(model, case):
    """vLLM masks before its penalties; a penalty keeps -inf where it is (the oracle masks
    the penalised logits: the same tokens either way)."""
    stops, _ = case
    pen = (1.5, 0.5, 1.3)
    want = np_held_greedy(model, PROMPT, N, set(stops), MIN_TOKENS, set(stops), pen)
    s = _sampling(stops, presence_penalty=pen[0], frequency_penalty=pen[1],
                  repetition_penalty=pen[2])  # fmt: skip
    plain = PlainDecoder(model.config, model.params, max_context=64, prefill_chunk=4)
    assert plain.generate(PROMPT, s).tokens == want
    pipe = PipelineEngine(model, spec=preset("wse3"), stages=3, max_context=48, prefill_chunk=4)
    assert one_request(pipe, PROMPT, s)[0] == want
    assert not set(want[:MIN_TOKENS]) & set(stops)


@pytest.mark.parametrize("mesh_rows", [1, 2])
def test_sampled_with_min_tokens_the_pipeline_draws_the_plain_decoders_tokens(
    model, case, mesh_rows
):
    stops, _ = case
    eng = PipelineEngine(
        model, spec=preset("wse3"), stages=3, max_context=48, prefill_chunk=4, mesh_rows=mesh_rows
    )
    plain = PlainDecoder(model.config, model.params, max_context=48, prefill_chunk=4)
    samplings = [SamplingParams(max_tokens=10, temperature=1.0, seed=seed, stop_token_ids=stops,
                                min_tokens=MIN_TOKENS) for seed in range(3)]  # fmt: skip
    got = eng.generate_all([PROMPT] * 3, samplings, steps_per_call=2)
    for s, g in zip(samplings, got, strict=True):
        assert g == plain.generate(PROMPT, s).tokens
        assert not set(g[:MIN_TOKENS]) & set(stops)  # held back, whatever is drawn


def test_min_tokens_is_checked_in_vllms_words():
    def check(**kw):
        s = SamplingParams(max_tokens=3, **kw)
        validate_sampling(s, vocab_size=256, max_context=64, prompt_len=2)

    with pytest.raises(SamplingError, match=r"^min_tokens must be less than or equal to "
                       r"max_tokens=3, got 4\.$"):  # fmt: skip
        check(min_tokens=4)
    with pytest.raises(SamplingError, match=r"^min_tokens must be greater than or equal to 0"):
        check(min_tokens=-1)
    with pytest.raises(SamplingError, match="min_tokens must be a whole number"):
        check(min_tokens=2.5)
    with pytest.raises(SamplingError, match="include_stop_str_in_output must be true or false"):
        check(include_stop_str_in_output="no")
    check(min_tokens=3)  # up to max_tokens, as vLLM's
