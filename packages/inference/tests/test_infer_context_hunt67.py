"""Hunt 67: `PipelineEngine` and `SpeculativeDecoder` given a `max_context` above the model's
`max_seq_len`. Broken before: `PlainDecoder` refused it (a `SamplingError` naming both
numbers, as vLLM refuses a max_model_len above max_position_embeddings), but the pipelined
engine and the speculative decoder cut it down to the model's context without a word
(`min(max_context or limit, limit)`), so one setting meant three things. Now all three
refuse it in the same words when built; a speculative draft whose context is smaller than
the target's is named as the draft. None (what `wse infer serve` passes) still means the
model's context: for the speculative pair, the smaller of the two.

Oracle: the models' own `config.max_seq_len` and `PlainDecoder`'s line for the same value."""

from __future__ import annotations

import pytest
from wse_core import preset
from wse_inference.decoding import PlainDecoder
from wse_inference.engine import SamplingError, SamplingParams
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.speculative.decoder import SpeculativeDecoder
from wse_inference.testing import tiny_model


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", n_layers=1)  # max_seq_len 128 (the tiny-llama preset)


@pytest.fixture(scope="module")
def short_draft():
    return tiny_model("llama", n_layers=1, seed=1, max_seq_len=64)  # same vocabulary


def _plain_line(model, max_context: int) -> str:
    with pytest.raises(SamplingError) as err:
        PlainDecoder(model.config, model.params, max_context=max_context)
    return str(err.value)


def _too_long(top: int, whose: str = "model") -> str:
    return (
        f"max_context 1,000 is greater than the {whose}'s context of {top:,} tokens (its "
        f"config's max_seq_len); give at most {top:,}, or leave it unset"
    )


def test_the_pipeline_refuses_a_context_above_the_models_as_plain_does(model):
    top = model.config.max_seq_len
    with pytest.raises(SamplingError) as err:
        PipelineEngine(model, spec=preset("wse3"), stages=1, max_context=1000)
    assert str(err.value) == _plain_line(model, 1000) == _too_long(top)


def test_the_pipeline_takes_the_models_context_by_default_and_up_to_it(model):
    top = model.config.max_seq_len
    assert PipelineEngine(model, spec=preset("wse3"), stages=1).max_context == top
    eng = PipelineEngine(model, spec=preset("wse3"), stages=1, max_context=top)
    assert eng.max_context == eng.plan.context_len == top
    assert PipelineEngine(model, spec=preset("wse3"), stages=1, max_context=16).max_context == 16


def test_the_speculative_decoder_refuses_a_context_above_the_targets(model):
    with pytest.raises(SamplingError) as err:
        SpeculativeDecoder(model, model, gamma=2, max_context=1000)
    assert str(err.value) == _plain_line(model, 1000)


def test_the_speculative_decoder_names_a_draft_of_a_shorter_context(model, short_draft):
    with pytest.raises(SamplingError) as err:
        SpeculativeDecoder(model, short_draft, gamma=2, max_context=100)
    assert str(err.value) == (
        "max_context 100 is greater than the draft's context of 64 tokens (its config's "
        "max_seq_len); give at most 64, or leave it unset"
    )


def test_the_speculative_default_is_the_smaller_context_and_it_decodes(model, short_draft):
    assert SpeculativeDecoder(model, model, gamma=2).max_context == model.config.max_seq_len
    assert SpeculativeDecoder(model, short_draft, gamma=2).max_context == 64
    dec = SpeculativeDecoder(model, short_draft, gamma=2, max_context=64, prefill_chunk=8)
    out = dec.generate([1, 2, 3], SamplingParams(max_tokens=4, temperature=0.0))
    plain = PlainDecoder(model.config, model.params, max_context=64, prefill_chunk=8)
    assert (
        out.tokens
        == plain.generate([1, 2, 3], SamplingParams(max_tokens=4, temperature=0.0)).tokens
    )
