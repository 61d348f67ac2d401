"""Hunt 67 (API, hole 6): the `SpeculativeDecoder`'s `gamma` and every decoder's `ignore_eos`.

Broken before:
- `SpeculativeDecoder(gamma=...)` refused only `gamma < 1`: 2.5 and True failed inside JAX at
  the first `generate` ("expected a sequence of integers"), "4" failed comparing a str with
  an int, and 10**9 was accepted, then tried to allocate 256 GB. `--speculative-config`
  already refused all of them (`num_speculative_tokens must be an integer in [1, 64]`, the
  limit `gamma` of `wse_core.host.limits`); the Python API now refuses them when the decoder
  is built, in the same words, the argument named as both.
- `SamplingParams(ignore_eos="no")` was taken, and counted as true (EOS ignored), by every
  decoder; now `validate_sampling` refuses anything but a bool.
- A NumPy integer `gamma` or `max_context` was kept as NumPy's in the speculative decoder
  (PlainDecoder's `max_context` is an int); both are Python ints now.

(`_check_draft_context`, named by the hunt as never called, was removed with the max_context
fix: its check, the draft's context against `max_context`, is made in `__init__`, and
`test_infer_context_hunt67.py` covers it.)

Oracles: the limit table's own value and override name, the config's refusal for the same
value, and `PlainDecoder`'s greedy tokens (the speculative decoder's greedy output equals its
target's)."""

from __future__ import annotations

import numpy as np
import pytest
from wse_core.host.limits import LIMITS, limit
from wse_inference.decoding import PlainDecoder
from wse_inference.engine import SamplingError, SamplingParams
from wse_inference.speculative.config import SpeculativeConfig
from wse_inference.speculative.decoder import SpeculativeDecoder
from wse_inference.testing import tiny_model

GREEDY = SamplingParams(max_tokens=5, temperature=0.0)


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", n_layers=1)


@pytest.fixture(scope="module")
def draft():
    return tiny_model("llama", n_layers=1, seed=1)  # same vocabulary, other weights


def _refusal(fn) -> str:
    with pytest.raises(SamplingError) as err:
        fn()
    return str(err.value)


@pytest.mark.parametrize(
    "gamma, got",
    [(2.5, "2.5"), (True, "True"), ("4", "'4'"), (0, "0"), (-3, "-3"), (None, "None")],
)
def test_a_gamma_that_is_no_count_in_range_is_refused_when_built(model, draft, gamma, got):
    top = limit("gamma")
    line = _refusal(lambda: SpeculativeDecoder(model, draft, gamma=gamma, max_context=32))
    assert line == f"gamma (num_speculative_tokens) must be an integer in [1, {top}], got {got}"
    # the config's words for the same value, with its own key's name
    config_line = _refusal(lambda: SpeculativeConfig(num_speculative_tokens=gamma))
    assert line == config_line.replace(
        "num_speculative_tokens", "gamma (num_speculative_tokens)", 1
    )


def test_a_gamma_past_the_limit_is_refused_naming_its_override(model, draft):
    top, env = limit("gamma"), LIMITS["gamma"].env
    assert (top, env) == (64, "WSE_LIMIT_GAMMA")
    line = _refusal(lambda: SpeculativeDecoder(model, draft, gamma=10**9, max_context=32))
    assert line == (
        "gamma (num_speculative_tokens) must be an integer in [1, 64], got 1000000000; "
        "set WSE_LIMIT_GAMMA to lift it"
    )
    assert SpeculativeDecoder(model, draft, gamma=top, max_context=32).gamma == top


def test_the_override_lifts_the_decoders_bound_as_the_configs(model, draft, monkeypatch):
    monkeypatch.setenv("WSE_LIMIT_GAMMA", "100")
    assert SpeculativeDecoder(model, draft, gamma=65, max_context=32).gamma == 65
    assert SpeculativeConfig(num_speculative_tokens=65).num_speculative_tokens == 65
    assert "in [1, 100], got 101" in _refusal(
        lambda: SpeculativeDecoder(model, draft, gamma=101, max_context=32)
    )


def test_numpy_integers_are_taken_as_ints_and_decode_as_the_target(model, draft):
    dec = SpeculativeDecoder(model, draft, gamma=np.int64(3), max_context=np.int64(32))
    assert (type(dec.gamma), type(dec.max_context)) == (int, int)
    assert (dec.gamma, dec.max_context, dec.stats.gamma) == (3, 32, 3)
    plain = PlainDecoder(model.config, model.params, max_context=32)
    assert dec.generate([1, 2, 3], GREEDY).tokens == plain.generate([1, 2, 3], GREEDY).tokens


@pytest.mark.parametrize("flag, got", [("no", "str 'no'"), (1, "int 1"), (None, "NoneType None")])
def test_ignore_eos_must_be_a_bool_for_every_decoder(model, draft, flag, got):
    bad = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=flag)
    want = f"ignore_eos must be true or false, got {got}"
    plain = PlainDecoder(model.config, model.params, max_context=32)
    assert _refusal(lambda: plain.generate([1, 2, 3], bad)) == want
    spec = SpeculativeDecoder(model, draft, gamma=2, max_context=32)
    assert _refusal(lambda: spec.generate([1, 2, 3], bad)) == want


def test_ignore_eos_true_and_false_still_decode(model):
    plain = PlainDecoder(model.config, model.params, max_context=32)
    for flag in (True, False):
        sampling = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=flag)
        assert len(plain.generate([1, 2, 3], sampling).tokens) == 3
