"""Hunt 65: the decoders' Python API as a notebook calls it. Broken before: a prompt id past
the vocabulary gave NaN logits, decoded silently as token 0 ([1, 2, 261] -> [0, 0, 0, 0]), -1
was the last token (255) and 2.7 was cut to 2; `SamplingParams(max_tokens=2.5)` made 2
tokens, top_k=2.5 / logprobs=1.5 were cut, temperature=inf was taken, seed=2**70 was an
OverflowError inside JAX, stop="abc" stopped at any of "a", "b", "c", stop_token_ids=(2.5,)
passed; `PlainDecoder(max_context=0)` silently meant the model's 128, -5 refused every prompt
as "shorten it to at most -6 tokens", prefill_chunk 0 / -1 failed inside range() or the first
chunk. Each is now a `SamplingError` naming the setting, before anything compiles."""

from __future__ import annotations

import numpy as np
import pytest
from wse_core import preset
from wse_inference import decoding
from wse_inference.decoding import PlainDecoder
from wse_inference.engine import SamplingError, SamplingParams, validate_prompt, validate_sampling
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.speculative.decoder import SpeculativeDecoder
from wse_inference.speculative.engine import SpeculativeEngine
from wse_inference.testing import tiny_model

GREEDY = SamplingParams(max_tokens=3, temperature=0.0)


@pytest.fixture(scope="module")
def model():
    return tiny_model("gpt2", n_layers=2)  # vocab 256, max_seq_len 128


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([1, 2, 261], "prompt token id 261 at index 2 is outside the vocabulary 0..255"),
        ([1, 2, -1], "prompt token id -1 at index 2 is outside the vocabulary 0..255"),
        ([7, 10**30], "prompt token id 1.000e+30 at index 1 is outside the vocabulary 0..255"),
        (
            [1, 2, 2.7],
            "prompt token id float 2.7 at index 2 is not a whole number; token ids "
            "are integers in 0..255",
        ),  # fmt: skip
        (np.array([1.0, 2.0]), "prompt token id float64 1.0 at index 0 is not a whole number"),
        ([1, True], "prompt token id bool True at index 1 is not a whole number"),
        ("abc", "prompt ids must be a sequence of token ids, got str 'abc'"),
    ],
)
def test_a_prompt_id_outside_the_vocabulary_is_refused_before_compiling(model, ids, message):
    compiled = decoding._forward_chunk._cache_size()
    dec = PlainDecoder(model.config, model.params, max_context=64)
    with pytest.raises(SamplingError) as err:
        dec.generate(ids, GREEDY)
    assert str(err.value).startswith(message), str(err.value)
    assert decoding._forward_chunk._cache_size() == compiled  # refused before the prefill


def test_every_engine_refuses_the_id(model):
    """The pipelined and speculative engines (the server's) share the plain decoder's check."""
    draft = tiny_model("gpt2", n_layers=1, seed=3)
    engines = [
        PipelineEngine(model, stages=2, max_context=32, spec=preset("wse3")),
        SpeculativeEngine(model, draft, gamma=2, max_slots=1, max_context=32, spec=preset("wse3")),
    ]
    for engine in engines:
        with pytest.raises(SamplingError, match="prompt token id 256 at index 1 is outside"):
            engine.prefill(prompt_ids=[5, 256], sampling=GREEDY)
    with pytest.raises(SamplingError, match="prompt token id -3 at index 0 is outside"):
        SpeculativeDecoder(model, draft, gamma=2, max_context=32).generate([-3], GREEDY)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (dict(max_tokens=2.5), "max_tokens must be a whole number, got float 2.5"),
        (dict(max_tokens=True), "max_tokens must be a whole number, got bool True"),
        (dict(top_k=2.5), "top_k must be a whole number, got float 2.5"),
        (dict(top_k=2**40), "top_k must be in 0..2147483647 (0 disables it), got 1099511627776"),
        (dict(logprobs=1.5), "logprobs must be a whole number, got float 1.5"),
        (dict(prompt_logprobs="2"), "prompt_logprobs must be a whole number, got str '2'"),
        (
            dict(temperature=float("inf")),
            "temperature must be a finite number >= 0 (0 is greedy), got inf",
        ),
        (dict(temperature="1"), "temperature must be a number, got str '1'"),
        (dict(top_p=None), "top_p must be a number, got NoneType None"),
        (
            dict(seed=2**70),
            "seed must be an integer in [-9223372036854775808, "
            "9223372036854775807] (64 bits), got 1.181e+21",
        ),
        (dict(seed=1.5), "seed must be a whole number, got float 1.5"),
        (dict(stop="abc"), "stop must be a tuple of strings, got str 'abc'"),
        (dict(stop=("a", 3)), "stop must be a tuple of strings, got tuple ('a', 3)"),
        (dict(stop_token_ids=(2.5,)), "stop token id float 2.5 is not a whole number"),
        (dict(stop_token_ids=7), "stop_token_ids must be a tuple of token ids, got int 7"),
        (
            dict(max_tokens=10**5000),
            "prompt (2 tokens) + max_tokens (an integer of about "
            "5,001 digits) = an integer of about 5,001 digits",
        ),
    ],  # fmt: skip
)
def test_sampling_settings_of_the_wrong_kind_are_refused_by_name(setting, message):
    s = SamplingParams(**{"max_tokens": 2, "temperature": 0.0, **setting})
    with pytest.raises(SamplingError) as err:
        validate_sampling(s, vocab_size=256, max_context=64, prompt_len=2)
    assert str(err.value).startswith(message), str(err.value)


def test_the_decoder_refuses_a_fractional_max_tokens_instead_of_cutting_it(model):
    dec = PlainDecoder(model.config, model.params, max_context=64)
    with pytest.raises(SamplingError, match="max_tokens must be a whole number, got float 2.5"):
        dec.generate([1, 2], SamplingParams(max_tokens=2.5, temperature=0.0))
    # NumPy's integer types and a negative seed (vLLM's range) still run; the oracle: the
    # same tokens as the plain Python values
    as_list = dec.generate([5, 6, 7], GREEDY).tokens
    assert dec.generate(np.array([5, 6, 7], np.int64), GREEDY).tokens == as_list
    ok = SamplingParams(max_tokens=np.int64(3), top_k=np.int32(5), seed=-1)
    assert dec.generate([5, 6, 7], ok).tokens == dec.generate([5, 6, 7], SamplingParams(
        max_tokens=3, top_k=5, seed=-1)).tokens  # fmt: skip


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (dict(max_context=0), "max_context must be a whole number >= 1, got int 0"),
        (dict(max_context=-5), "max_context must be a whole number >= 1, got int -5"),
        (dict(max_context=64.0), "max_context must be a whole number >= 1, got float 64.0"),
        (dict(prefill_chunk=0), "prefill_chunk must be a whole number >= 1, got int 0"),
        (dict(prefill_chunk=-1), "prefill_chunk must be a whole number >= 1, got int -1"),
        (dict(prefill_chunk=None), "prefill_chunk must be a whole number >= 1, got NoneType"),
    ],
)
def test_decoder_settings_are_checked_when_the_decoder_is_built(model, setting, message):
    draft = tiny_model("gpt2", n_layers=1, seed=3)
    builds = [
        lambda: PlainDecoder(model.config, model.params, **setting),
        lambda: SpeculativeDecoder(model, draft, gamma=2, **setting),
        lambda: PipelineEngine(model, stages=2, spec=preset("wse3"), **setting),
    ]
    for build in builds:
        with pytest.raises(SamplingError) as err:
            build()
        assert str(err.value).startswith(message), str(err.value)


def test_max_context_none_is_the_models_and_one_is_honoured(model):
    assert PlainDecoder(model.config, model.params).max_context == model.config.max_seq_len
    dec = PlainDecoder(model.config, model.params, max_context=4, prefill_chunk=1)
    with pytest.raises(SamplingError, match="exceeds the context of 4 tokens"):
        dec.generate([1, 2], SamplingParams(max_tokens=3, temperature=0.0))
    validate_prompt(range(256), vocab_size=256)  # every id of the vocabulary passes
