"""Sampling and speculative rejection sampling against NumPy oracles and known distributions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from wse_inference.engine import SamplingParams, stop_index
from wse_inference.sampling import (
    SamplingError,
    draw,
    sample,
    seed_key,
    token_key,
    token_probs,
    validate_sampling,
)
from wse_inference.speculative.verify import AcceptanceStats, expected_speedup, verify
from wse_inference.testing import markov_joint, markov_speculative, np_token_probs

# A p-value below this fails a distribution test. The seeds are fixed, so each test is
# deterministic; 1e-4 keeps the chance that a correct sampler fails on a new seed negligible
# while the negative controls below (wrong distributions) give p-values < 1e-30.
P_MIN = 1e-4


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [
        (1.0, 0, 1.0),
        (0.7, 0, 1.0),
        (1.3, 3, 1.0),
        (1.0, 0, 0.6),
        (0.8, 4, 0.9),
        (0.0, 0, 1.0),
        (1.0, 1, 1.0),
        (1.0, 0, 1e-6),
    ],
)
def test_token_probs_matches_numpy(temperature, top_k, top_p):
    logits = np.random.default_rng(1).normal(size=(3, 11)) * 2
    got = np.asarray(token_probs(jnp.asarray(logits, jnp.float32), temperature, top_k, top_p))
    for row, g in zip(logits, got, strict=True):
        np.testing.assert_allclose(g, np_token_probs(row, temperature, top_k, top_p), atol=2e-6)


def test_token_probs_per_row_settings():
    logits = np.random.default_rng(2).normal(size=(4, 9))
    temps, ks, ps = [0.0, 1.0, 0.5, 2.0], [0, 2, 0, 5], [1.0, 1.0, 0.5, 0.8]
    got = np.asarray(
        token_probs(
            jnp.asarray(logits, jnp.float32), jnp.array(temps), jnp.array(ks), jnp.array(ps)
        )
    )
    for i in range(4):
        np.testing.assert_allclose(
            got[i], np_token_probs(logits[i], temps[i], ks[i], ps[i]), atol=2e-6
        )


def test_draw_follows_probs():
    probs = jnp.array([0.1, 0.5, 0.05, 0.35])
    keys = jax.vmap(lambda i: token_key(seed_key(3), i))(jnp.arange(20000))
    tokens = np.asarray(jax.vmap(draw, in_axes=(None, 0))(probs, keys))
    counts = np.bincount(tokens, minlength=4)
    expected = np.asarray(probs, np.float64)
    assert stats.chisquare(counts, expected / expected.sum() * tokens.size).pvalue > P_MIN


@pytest.mark.smoke
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_sample_equals_draw_of_token_probs(temperature):
    """`sample` (greedy fast path: argmax, no random bits) draws the same token as
    `draw(token_probs(...))` for every row and key; ties go to the lowest id either way."""
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(6, 50)), jnp.float32).at[0, 7].set(9.0).at[0, 3].set(9.0)
    keys = jax.vmap(lambda i: token_key(seed_key(4), i))(jnp.arange(6))
    got = sample(logits, temperature, 0, 1.0, keys)
    want = jax.vmap(lambda lg, k: draw(token_probs(lg, temperature, 0, 1.0), k))(logits, keys)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    if temperature == 0:
        assert int(got[0]) == 3


def test_validate_sampling_errors():
    ok = SamplingParams(max_tokens=4)
    validate_sampling(ok, vocab_size=10, max_context=8, prompt_len=4)
    bad = [
        (SamplingParams(max_tokens=0), 2, "max_tokens"),
        (SamplingParams(temperature=-0.1), 2, "temperature"),
        (SamplingParams(top_p=0.0), 2, "top_p"),
        (SamplingParams(top_p=1.5), 2, "top_p"),
        (SamplingParams(max_tokens=5), 4, "exceeds the context"),
        (SamplingParams(max_tokens=2, stop_token_ids=(10,)), 2, "outside the vocabulary"),
    ]
    for params, prompt_len, words in bad:
        with pytest.raises(SamplingError, match=words):
            validate_sampling(params, vocab_size=10, max_context=8, prompt_len=prompt_len)


def test_stop_index():
    assert stop_index("hello world. bye", ["bye", "."]) == 11
    assert stop_index("hello", ["x"]) is None


def _markov(vocab, seed, concentration=1.0):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(vocab, concentration), size=vocab)


def test_verify_single_round_first_token_is_target():
    """Context-free p and q: the first emitted token of a round is distributed as p_1."""
    vocab, gamma, n = 5, 3, 40000
    rng = np.random.default_rng(4)
    p = jnp.asarray(rng.dirichlet(np.ones(vocab), size=gamma + 1), jnp.float32)
    q = jnp.asarray(rng.dirichlet(np.ones(vocab), size=gamma), jnp.float32)

    def round_(key):
        kd, kv = jax.random.split(key)
        drafts = jax.vmap(draw)(q, jax.random.split(kd, gamma))
        n_acc, nxt, _ = verify(drafts, q, p, kv)
        return jnp.where(n_acc > 0, drafts[0], nxt), n_acc

    first, n_acc = jax.vmap(round_)(jax.random.split(jax.random.PRNGKey(0), n))
    counts = np.bincount(np.asarray(first), minlength=vocab)
    p1 = np.asarray(p[0], np.float64)
    assert stats.chisquare(counts, p1 / p1.sum() * n).pvalue > P_MIN
    # Acceptance of position 1 happens with probability sum_x min(p_1, q_1) (Leviathan beta).
    beta = float(jnp.minimum(p[0], q[0]).sum())
    assert abs(float((np.asarray(n_acc) > 0).mean()) - beta) < 4 * np.sqrt(beta / n)


@pytest.mark.parametrize("gamma", [1, 3])
def test_speculative_markov_chain_is_exact(gamma):
    """Three tokens from speculative rounds on Markov chains follow the target chain's law."""
    vocab, length, n = 4, 3, 30000
    p, q = _markov(vocab, 5), _markov(vocab, 6)
    keys = jax.random.split(jax.random.PRNGKey(gamma), n)
    run = jax.jit(
        jax.vmap(
            lambda k: markov_speculative(
                jnp.asarray(p, jnp.float32), jnp.asarray(q, jnp.float32), 0, gamma, length, k
            )
        )
    )
    seqs = np.asarray(run(keys))[:, :length]
    joint = markov_joint(p, 0, length)
    cells = list(joint)
    index = {c: i for i, c in enumerate(cells)}
    counts = np.bincount([index[tuple(s)] for s in seqs], minlength=len(cells))
    expected = np.array([joint[c] for c in cells]) * n
    assert stats.chisquare(counts, expected).pvalue > P_MIN
    # Negative control: the draft chain's law is rejected by the same test.
    wrong = np.array([markov_joint(q, 0, length)[c] for c in cells]) * n
    assert stats.chisquare(counts, wrong).pvalue < 1e-10


def test_greedy_one_hot_verification_is_target_argmax():
    vocab, gamma = 7, 4
    rng = np.random.default_rng(8)
    p_logits = rng.normal(size=(gamma + 1, vocab))
    q_logits = p_logits[:gamma] + rng.normal(size=(gamma, vocab)) * 0.3
    p = token_probs(jnp.asarray(p_logits, jnp.float32), 0.0, 0, 1.0)
    q = token_probs(jnp.asarray(q_logits, jnp.float32), 0.0, 0, 1.0)
    drafts = jnp.argmax(q, -1).astype(jnp.int32)
    target = np.argmax(p_logits, -1)
    n, nxt, _ = verify(drafts, q, p, jax.random.PRNGKey(0))
    n = int(n)
    agree = np.asarray(drafts) == target[:gamma]
    expect_n = int(np.argmin(np.append(agree, False)))
    assert n == expect_n and int(nxt) == target[n]


def test_acceptance_stats_and_formula():
    s = AcceptanceStats(gamma=4)
    for k in (4, 0, 2):
        s.record(k, np.full(4, 0.5))
    assert s.proposed == 12 and s.accepted == 6
    assert s.mean_tokens_per_pass == pytest.approx(3.0)
    assert s.position_acceptance == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 3])
    assert s.alpha == pytest.approx(0.5)
    rng = np.random.default_rng(1)  # record_rounds is record, vectorised
    acc, beta = rng.integers(0, 5, 9), rng.uniform(size=(9, 4))
    one, many = AcceptanceStats(gamma=4), AcceptanceStats(gamma=4)
    for a, b in zip(acc, beta, strict=True):
        one.record(int(a), b)
    many.record_rounds(acc, beta)
    got, want = many.to_dict(), one.to_dict()  # approx does not nest dicts (pytest >= 9.2)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k]), k
    # (1 - a^(g+1)) / ((1 - a)(g c + 1)) at a = 0.8, g = 4, c = 0: 3.3616
    assert expected_speedup(0.8, 4, 0.0) == pytest.approx((1 - 0.8**5) / 0.2)
    assert expected_speedup(0.8, 4, 0.25) == pytest.approx((1 - 0.8**5) / 0.2 / 2)


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [(1.5e-38, 0, 1.0), (1.5e-38, 3, 0.9), (1.0, 0, 1e-300), (0.7, 4, 1e-46), (2e-38, 0, 1e-300)],
)
def test_settings_past_float32_are_greedy_not_nan(temperature, top_k, top_p):
    """Hunt 58: a temperature whose logits / T overflow float32, or a top_p that is 0 in
    float32 (both pass the request checks, which read doubles), gave rows of NaN, and every
    token drawn was id 0. Both are the limit of greedy: one-hot on the argmax."""
    logits = np.random.default_rng(5).normal(size=(4, 17)) * 10
    got = np.asarray(token_probs(jnp.asarray(logits, jnp.float32), temperature, top_k, top_p))
    assert np.isfinite(got).all(), got
    np.testing.assert_array_equal(got, np.eye(17)[np.argmax(logits, axis=-1)])
    keys = jax.vmap(lambda i: token_key(seed_key(6), i))(jnp.arange(4))
    drawn = sample(jnp.asarray(logits, jnp.float32), temperature, top_k, top_p, keys)
    np.testing.assert_array_equal(np.asarray(drawn), np.argmax(logits, axis=-1))
