"""Hunt 67: `PlainDecoder(max_context=N)` above the model's `max_seq_len`. Broken before: a
Llama was run past the positions its config says it has (a 199-token prompt into a model of
128, without a word), where vLLM refuses a max_model_len above max_position_embeddings and
`wse infer generate --max-context` refuses it too. Now a `SamplingError` naming both
numbers, when the decoder is built."""

from __future__ import annotations

import pytest
from wse_inference.decoding import PlainDecoder
from wse_inference.engine import SamplingError, SamplingParams
from wse_inference.testing import tiny_model


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", n_layers=1)  # RoPE: no position table to overflow


def test_a_context_above_the_models_is_refused_naming_both(model):
    top = model.config.max_seq_len
    with pytest.raises(SamplingError) as err:
        PlainDecoder(model.config, model.params, max_context=1000)
    assert str(err.value) == (
        f"max_context 1,000 is greater than the model's context of {top:,} tokens (its "
        f"config's max_seq_len); give at most {top:,}, or leave it unset"
    )


def test_the_models_own_context_is_taken(model):
    top = model.config.max_seq_len
    assert PlainDecoder(model.config, model.params, max_context=top).max_context == top
    assert PlainDecoder(model.config, model.params).max_context == top
    small = PlainDecoder(model.config, model.params, max_context=16)
    out = small.generate([1, 2, 3], SamplingParams(max_tokens=2, temperature=0.0))
    assert len(out.tokens) == 2
