"""presence / frequency / repetition penalties (vLLM's) in every decoder: greedy output equals
a NumPy oracle that re-runs one parallel forward per token and penalises in float64
(`testing.np_penalized_greedy`); sampled output of the pipelined engine equals the plain
decoder's draw for draw, and the speculative engine equals the speculative decoder's."""

from __future__ import annotations

import numpy as np
import pytest
from wse_core import preset
from wse_inference.decoding import PlainDecoder
from wse_inference.engine import SamplingParams
from wse_inference.model_dir import truncated_model
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.sampling import SamplingError, validate_sampling
from wse_inference.speculative.decoder import SpeculativeDecoder
from wse_inference.speculative.engine import SpeculativeEngine
from wse_inference.testing import (
    np_forward_logits,
    np_penalize,
    np_penalized_greedy,
    tiny_model,
)

LOOPING = [5, 9, 5, 9, 5, 9, 5]  # the 3-layer tiny model's greedy output loops after it
SETTINGS = [(0.7, 0.0, 1.0), (0.0, 0.5, 1.0), (0.0, 0.0, 1.6), (0.7, 0.3, 1.5)]


def _greedy(pres, freq, rep, n=14):
    return SamplingParams(
        max_tokens=n,
        temperature=0.0,
        presence_penalty=pres,
        frequency_penalty=freq,
        repetition_penalty=rep,
    )


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", n_layers=3)


def _engine_tokens(eng, prompt, s, slot=0):
    state = eng.init_decode_state()
    state = eng.insert(prefix=eng.prefill(prompt_ids=prompt, sampling=s), state=state, slot=slot)
    done = False
    while not done:
        state, outs = eng.generate(state=state)
        done = any(o.finished for o in outs if o.slot == slot)
    seqs = getattr(state, "seqs", None) or {i: x.tracker for i, x in state.slots.items()}
    return seqs[slot].tokens


@pytest.mark.parametrize(("pres", "freq", "rep"), SETTINGS)
def test_greedy_with_penalties_equals_the_oracle_in_every_decoder(model, pres, freq, rep):
    s = _greedy(pres, freq, rep)
    want = np_penalized_greedy(model, LOOPING, 14, pres, freq, rep)
    plain = PlainDecoder(model.config, model.params, max_context=64, prefill_chunk=4)
    assert plain.generate(LOOPING, s).tokens == want
    assert plain.generate(LOOPING, _greedy(0.0, 0.0, 1.0)).tokens != want  # they act
    draft = truncated_model(model, 1)
    spec = SpeculativeDecoder(model, draft, gamma=3, max_context=64, prefill_chunk=4)
    assert spec.generate(LOOPING, s).tokens == want
    eng = SpeculativeEngine(
        model, draft, spec=preset("wse3"), gamma=3, max_slots=2, max_context=64, prefill_chunk=4
    )
    assert _engine_tokens(eng, LOOPING, s, slot=1) == want


@pytest.mark.parametrize("mesh_rows", [1, 2])
def test_pipeline_with_penalties_equals_plain(model, mesh_rows):
    """Two users on 3 stages, one penalised greedy, one penalised sampled, next to one
    without penalties (its row stays neutral)."""
    eng = PipelineEngine(
        model, spec=preset("wse3"), stages=3, max_context=48, prefill_chunk=4, mesh_rows=mesh_rows
    )
    prompts = [LOOPING, [1, 2, 3], [7, 7, 7, 7]]
    samplings = [
        _greedy(0.7, 0.3, 1.5, n=10),
        SamplingParams(
            max_tokens=9, temperature=1.0, seed=4, frequency_penalty=2.0, repetition_penalty=2.0
        ),  # fmt: skip
        SamplingParams(max_tokens=8, temperature=0.0),
    ]
    got = eng.generate_all(prompts, samplings, steps_per_call=2)
    plain = PlainDecoder(model.config, model.params, max_context=48, prefill_chunk=4)
    for p, s, g in zip(prompts, samplings, got, strict=True):
        assert g == plain.generate(p, s).tokens
    assert got[0] == np_penalized_greedy(model, LOOPING, 10, 0.7, 0.3, 1.5)


def test_speculative_engine_sampled_with_penalties_equals_decoder(model):
    draft = truncated_model(model, 1)
    s = SamplingParams(max_tokens=16, temperature=1.0, seed=3, presence_penalty=1.0,
                       repetition_penalty=1.3)  # fmt: skip
    dec = SpeculativeDecoder(model, draft, gamma=2, max_context=64)
    eng = SpeculativeEngine(model, draft, spec=preset("wse3"), gamma=2, max_slots=1, max_context=64)
    assert _engine_tokens(eng, [4, 4, 4], s) == dec.generate([4, 4, 4], s).tokens


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("presence_penalty", 2.5, "presence_penalty must be in [-2, 2]"),
        ("frequency_penalty", -2.01, "frequency_penalty must be in [-2, 2]"),
        ("repetition_penalty", 0.0, "repetition_penalty must be > 0"),
        ("repetition_penalty", float("nan"), "repetition_penalty must be > 0"),
    ],
)
def test_penalties_out_of_range_refused(field, value, words):
    s = SamplingParams(max_tokens=2, **{field: value})
    with pytest.raises(SamplingError, match=words.replace("[", r"\[").replace("]", r"\]")):
        validate_sampling(s, vocab_size=10, max_context=10, prompt_len=1)


def _np_penalized_probs(model, seq, generated, pres, freq, rep, prompt):
    """The target's penalised next-token law after `seq` (NumPy float64, one forward)."""
    z = np_penalize(np_forward_logits(model, seq)[-1], generated, prompt, pres, freq, rep)
    e = np.exp(z - z.max())
    return e / e.sum()


@pytest.mark.parametrize("gamma", [1, 3])
def test_penalised_speculative_sampling_is_exact(gamma):
    """Two tokens after the first, drawn by the real speculative loop (tiny Llama target,
    its first layer as the draft, vocabulary 8, strong penalties, 20000 keys vmapped) follow
    the target's penalised law p(t1) p(t2 | t1) (chi-square); the unpenalised law is
    rejected by the same test (the penalties act)."""
    import jax
    import jax.numpy as jnp
    from scipy import stats
    from wse_inference.decoding import prefill
    from wse_inference.sampling import penalties_for, slot_sampling
    from wse_inference.speculative.decoder import Pair, spec_loop_start, speculative_loop

    target = tiny_model("llama", n_layers=2, vocab_size=8, seed=5)
    draft = truncated_model(target, 1)
    prompt, t0, n = [1, 2, 1, 2, 1], 3, 20000
    pres, freq, rep = 1.0, 0.5, 1.5
    s = SamplingParams(temperature=1.0, presence_penalty=pres, frequency_penalty=freq,
                       repetition_penalty=rep)  # fmt: skip
    _, tcache = prefill(target.config, target.params, prompt, 16)
    _, dcache = prefill(draft.config, draft.params, prompt, 16)
    pen = jax.tree.map(jnp.asarray, penalties_for(s, prompt, 8, [t0]))

    last2 = jnp.asarray([prompt[-1], t0], jnp.int32)
    start = spec_loop_start(Pair(tcache, dcache), last2, 4, gamma, slot_sampling(s, pen))
    configs, params = Pair(target.config, draft.config), Pair(target.params, draft.params)

    def two(key):
        end = speculative_loop(
            configs, gamma, params, start, jnp.int32(len(prompt) + 1), key, jnp.int32(2),
            jnp.asarray([-2], jnp.int32),
        )  # fmt: skip
        return end.buf[:2]

    keys = jax.random.split(jax.random.PRNGKey(gamma), n)
    seqs = np.asarray(jax.jit(jax.vmap(two))(keys))
    cells = np.bincount(seqs[:, 0] * 8 + seqs[:, 1], minlength=64)

    def law(pres, freq, rep):
        seq = [*prompt, t0]
        p1 = _np_penalized_probs(target, seq, [t0], pres, freq, rep, prompt)
        rows = [_np_penalized_probs(target, [*seq, a], [t0, a], pres, freq, rep, prompt)
                for a in range(8)]  # fmt: skip
        return (p1[:, None] * np.stack(rows)).ravel() * n

    assert stats.chisquare(cells, law(pres, freq, rep)).pvalue > 1e-4
    assert stats.chisquare(cells, law(0.0, 0.0, 1.0)).pvalue < 1e-10


@pytest.mark.parametrize("huge, large", [(1e300, 1e20), (1e-300, 1e-20)])
def test_a_repetition_penalty_past_float32_acts_as_its_extreme(huge, large):
    """Hunt 58: repetition_penalty 1e300 (inf in float32) made a seen logit of 0 NaN (0 x inf)
    and 1e-300 (0 in float32) sent a positive one to inf (inf - inf in softmax): NaN rows, and
    token 0 drawn every time, with an overflow warning. Now the logits are held finite and the
    token drawn is the one a large representable penalty gives."""
    import warnings

    import jax.numpy as jnp
    from wse_inference.sampling import penalize, penalties_for

    z = np.array([3.0, 0.0, -2.0, 1.0, 2.5, -0.5], np.float32)
    seen = [0, 1, 2, 5]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the float32 cast of 1e300 warned on stderr
        got = {
            rep: np.asarray(penalize(jnp.asarray(z), penalties_for(_greedy(0, 0, rep), seen, 6)))
            for rep in (huge, large)
        }
    assert np.isfinite(got[huge]).all(), got[huge]
    want = np_penalize(z.astype(np.float64), [], seen, repetition=large)
    assert np.argmax(got[huge]) == np.argmax(got[large]) == np.argmax(want)
