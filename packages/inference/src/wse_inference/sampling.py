"""Sampling: logits -> the distribution a token is drawn from -> the token.

Contract. `token_probs(logits, temperature, top_k, top_p)` is THE distribution a decoder draws
from (shape [..., vocab], rows sum to 1): temperature 0 is greedy (one-hot on the argmax, ties
to the lowest id); otherwise softmax(logits / T), then the top-k cut (k = 0: none), then the
top-p (nucleus) cut (p = 1: none), renormalised. Every decoder in this package (plain,
pipelined, speculative) draws through it, and token `i` of a sequence (i = 0: the first token
after the prompt) is drawn with `token_key(seed_key, i)`, so two decoders that compute the same
logits draw the same tokens for the same seed. The parameters may be per-row arrays, so slots
with different settings share one compiled step. `sample` is `draw(token_probs(...), key)`
with a greedy fast path (the argmax, no softmax and no random bits, when every row is greedy);
it returns exactly the same token, so decoders may use either.

Penalties (vLLM's order, before temperature): `penalize(logits, Penalties(...))` divides the
positive logits of tokens in the prompt or generated so far by repetition_penalty (multiplies
the negative ones), then subtracts frequency_penalty x each token's generated count and
presence_penalty for each token generated at least once. Decoders keep the counts per row
(`count_tokens`); `penalties_for` builds a row's state on the host. A request without
penalties passes `None` everywhere and pays nothing. vLLM's min_tokens rides in the same state
(its MinTokensLogitsProcessor): while a row has made fewer than `min_tokens` tokens (the sum
of its counts), the logits of its `held` ids (the request's stop token ids and the model's EOS
ids: vLLM's all_stop_token_ids) are -inf, so neither is drawn before the min_tokens + 1-th
token; vLLM masks before its penalties, and a penalty keeps -inf where it is.

`raw_logprobs(logits, tokens)` gives what a request with `logprobs` sees (vLLM's default
`raw_logprobs`): each token's log_softmax of the raw logits (no temperature or cuts) and the
MAX_LOGPROBS most likely tokens with theirs; `token_logprobs` turns them into `TokenLogprob`s on
the host, keeping the k alternatives the request asked for.

Host side: `validate_sampling` refuses bad settings with one readable line (`SamplingError`;
both live in `wse_inference.engine`, beside `SamplingParams`, so a command checks without JAX),
`with_eos` adds a model's end-of-sequence ids to the stop tokens (engines apply it to every
request; for a request with min_tokens it also records them, which min_tokens holds back even
under ignore_eos); stop strings are `engine.stop_index`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from wse_inference.engine import (  # the host-side check lives beside SamplingParams (no JAX)
    MAX_LOGPROBS,
    SamplingError,
    SamplingParams,
    TokenLogprob,
    validate_sampling,
)

__all__ = [
    "SamplingError",
    "validate_sampling",
    "token_probs",
    "draw",
    "sample",
    "token_key",
    "seed_key",
    "with_eos",
    "raw_logprobs",
    "token_logprobs",
    "Penalties",
    "SlotSampling",
    "slot_sampling",
    "sample_slot",
    "penalize",
    "count_tokens",
    "penalties_for",
    "neutral_penalties",
]


def with_eos(sampling: SamplingParams, eos_token_ids: Sequence[int]) -> SamplingParams:
    """`sampling` that also stops on the model's end-of-sequence tokens (finish reason
    "stop"), unless it says `ignore_eos`, as vLLM's engines do; with min_tokens, the ids are
    recorded (`SamplingParams.eos_token_ids`) to be held back until then, ignore_eos or not
    (vLLM's `update_from_generation_config` adds them to all_stop_token_ids either way)."""
    extra = tuple(t for t in eos_token_ids if t not in sampling.stop_token_ids)
    if sampling.min_tokens > 0:
        sampling = dataclasses.replace(sampling, eos_token_ids=tuple(map(int, eos_token_ids)))
    if sampling.ignore_eos or not extra:
        return sampling
    return dataclasses.replace(sampling, stop_token_ids=sampling.stop_token_ids + extra)


def token_probs(
    logits: jax.Array,
    temperature: jax.Array | float,
    top_k: jax.Array | int,
    top_p: jax.Array | float,
) -> jax.Array:
    """Probabilities [..., V] (float32) after temperature, top-k and top-p; T = 0 is greedy.

    `temperature`, `top_k`, `top_p` are scalars or arrays of the leading shape of `logits`.
    """
    logits = logits.astype(jnp.float32)
    lead = logits.shape[:-1]
    temperature = jnp.broadcast_to(jnp.asarray(temperature, jnp.float32), lead)[..., None]
    top_k = jnp.broadcast_to(jnp.asarray(top_k, jnp.int32), lead)[..., None]
    top_p = jnp.broadcast_to(jnp.asarray(top_p, jnp.float32), lead)[..., None]
    greedy = jax.nn.one_hot(jnp.argmax(logits, axis=-1), logits.shape[-1], dtype=jnp.float32)
    # Shifted by the row's max before dividing (softmax is shift-invariant): a temperature as
    # small as float32 allows (1.5e-38) then sends the others to -inf, never the max to inf
    # (inf - inf was NaN in every probability).
    top = jnp.max(logits, axis=-1, keepdims=True)
    scaled = (logits - top) / jnp.where(temperature > 0, temperature, 1.0)

    def cut(z):
        return _top_p_cut(jax.nn.softmax(_top_k_cut(z, top_k), axis=-1), top_p)

    # The cuts sort the vocabulary: skip them when no row asks for one (the common case).
    no_cut = jnp.all(top_k <= 0) & jnp.all(top_p >= 1.0)
    probs = lax.cond(no_cut, lambda z: jax.nn.softmax(z, axis=-1), cut, scaled)
    return jnp.where(temperature > 0, probs, greedy)


def _top_k_cut(scaled: jax.Array, top_k: jax.Array) -> jax.Array:
    """Keep the logits >= the k-th largest (k = 0 keeps all); the rest go to -inf."""
    ordered = jnp.sort(scaled, axis=-1)[..., ::-1]
    k = jnp.clip(top_k, 1, scaled.shape[-1])
    kth = jnp.take_along_axis(ordered, k - 1, axis=-1)
    keep = (top_k <= 0) | (scaled >= kth)
    return jnp.where(keep, scaled, -jnp.inf)


def _top_p_cut(probs: jax.Array, top_p: jax.Array) -> jax.Array:
    """Keep the smallest set of most likely tokens whose mass reaches top_p; renormalise."""
    order = jnp.argsort(-probs, axis=-1)
    ordered = jnp.take_along_axis(probs, order, axis=-1)
    before = jnp.cumsum(ordered, axis=-1) - ordered  # mass of the strictly more likely tokens
    first = jnp.arange(probs.shape[-1]) == 0  # the most likely token is always kept (vLLM's
    # rule): a top_p that is 0 in float32 (1e-300) is greedy, not a row of NaN
    keep_sorted = (before < top_p) | (top_p >= 1.0) | first
    keep = jnp.take_along_axis(keep_sorted, jnp.argsort(order, axis=-1), axis=-1)
    kept = jnp.where(keep, probs, 0.0)
    return kept / jnp.sum(kept, axis=-1, keepdims=True)


def draw(probs: jax.Array, key: jax.Array) -> jax.Array:
    """One token id (int32) from `probs` [V] with `key`; a one-hot row gives its token."""
    return jax.random.categorical(key, jnp.log(probs)).astype(jnp.int32)


def sample(
    logits: jax.Array,
    temperature: jax.Array | float,
    top_k: jax.Array | int,
    top_p: jax.Array | float,
    keys: jax.Array,
) -> jax.Array:
    """Tokens int32 [...] drawn from logits [..., V], one key per row: raw keys uint32
    [..., 2] (`seed_key`'s) or typed keys [...] (`jax.random.key`'s; hunt 78: vmap refused
    them); equal to `draw(token_probs(...), key)` row by row, the same tokens for a typed key
    and its `key_data`. When every row is greedy the argmax is taken directly (one
    `lax.cond`, so a greedy decode pays no sampling work)."""
    lead = logits.shape[:-1]
    temperature = jnp.broadcast_to(jnp.asarray(temperature, jnp.float32), lead)
    typed = jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key)  # a typed key has no [2]
    rows = keys.reshape(-1) if typed else keys.reshape(-1, keys.shape[-1])

    def drawn(logits):
        probs = token_probs(logits, temperature, top_k, top_p)
        flat = probs.reshape(-1, probs.shape[-1])
        return jax.vmap(draw)(flat, rows).reshape(lead)

    def greedy(logits):
        return jnp.argmax(logits.astype(jnp.float32), axis=-1).astype(jnp.int32)

    return lax.cond(jnp.all(temperature <= 0), greedy, drawn, logits)


class Penalties(NamedTuple):
    """Rows' penalty state: `counts` int32 [..., V] (each token's generated count), `prompt`
    bool [..., V] (the prompt's tokens) and the settings, float32 [...] or scalars; vLLM's
    min_tokens: `min_tokens` int32 [...] and the ids it holds back, `held` bool [..., V]."""

    counts: jax.Array
    prompt: jax.Array
    presence: jax.Array
    frequency: jax.Array
    repetition: jax.Array
    min_tokens: jax.Array
    held: jax.Array


class SlotSampling(NamedTuple):
    """One slot's (or rows' [...]) sampling settings on the device: the one pytree that
    `decode_step`, the decode loops, the speculative round, `prime` and `PipeState` carry.

    `penalties` is None for a sequence without penalties in the single-sequence decoders
    (the logits pass through untouched); the pipeline's state always holds rows of them and
    skips the neutral ones (`penalized`). `logprobs`: the request asked for logprobs."""

    temperature: jax.Array  # float32 [...]; 0 is greedy
    top_k: jax.Array  # int32 [...]; 0: no cut
    top_p: jax.Array  # float32 [...]; 1: no cut
    penalties: Penalties | None
    logprobs: jax.Array  # bool [...]

    def penalized(self) -> jax.Array:
        """bool [...]: the rows whose penalty settings are not neutral (0, 0, 1, min_tokens 0)."""
        p = self.penalties
        return (p.presence != 0) | (p.frequency != 0) | (p.repetition != 1) | (p.min_tokens > 0)


def slot_sampling(sampling: SamplingParams, pen: Penalties | None = None) -> SlotSampling:
    """A request's settings as device scalars, with its penalty state `pen`
    (`penalties_for`)."""
    return SlotSampling(
        jnp.float32(sampling.temperature),
        jnp.int32(sampling.top_k),
        jnp.float32(sampling.top_p),
        pen,
        jnp.bool_(sampling.logprobs is not None),
    )


def sample_slot(logits: jax.Array, s: SlotSampling, keys: jax.Array) -> jax.Array:
    """`sample` of the logits after `s`'s penalties, with `s`'s settings."""
    return sample(penalize(logits, s.penalties), s.temperature, s.top_k, s.top_p, keys)


def penalize(logits: jax.Array, pen: Penalties | None) -> jax.Array:
    """logits [..., V] after the rows' penalties (float32); `None` returns them unchanged."""
    if pen is None:
        return logits
    z = logits.astype(jnp.float32)
    c = pen.counts.astype(jnp.float32)
    col = lambda x: jnp.asarray(x, jnp.float32)[..., None]  # noqa: E731
    rep = col(pen.repetition)
    seen = pen.prompt | (pen.counts > 0)
    z = jnp.where(seen, jnp.where(z > 0, z / rep, jnp.where(z < 0, z * rep, z)), z)
    z = z - col(pen.frequency) * c - col(pen.presence) * (c > 0)
    # A penalty past float32 (1e300 is inf, 1e-300 is 0) pushes logits to +-inf (0 * inf was
    # NaN): held at float32's largest, the row keeps its order and softmax stays finite.
    big = jnp.finfo(jnp.float32).max
    z = jnp.clip(z, -big, big)
    least = jnp.asarray(pen.min_tokens, jnp.int32)[..., None]
    early = jnp.sum(pen.counts, axis=-1, keepdims=True) < least  # tokens made so far
    return jnp.where(early & pen.held, -jnp.inf, z)


def count_tokens(pen: Penalties | None, tokens: jax.Array, weight=1) -> Penalties | None:
    """`pen` with `tokens` [...] (one per row of counts [..., V]) counted `weight` times."""
    if pen is None:
        return None
    hot = jax.nn.one_hot(tokens, pen.counts.shape[-1], dtype=jnp.int32)
    return pen._replace(counts=pen.counts + hot * jnp.asarray(weight, jnp.int32)[..., None])


def penalties_for(
    sampling: SamplingParams, prompt_ids: Sequence[int], vocab_size: int, generated=()
) -> Penalties | None:
    """A row's state on the host (NumPy): the prompt's tokens and the `generated` ones
    counted, the ids min_tokens holds back (the stop token ids and `sampling.eos_token_ids`,
    `with_eos`'s); None for a request without penalties or min_tokens."""
    if not sampling.penalized:
        return None
    prompt = np.zeros(vocab_size, bool)
    prompt[np.asarray(prompt_ids, np.int64)] = True
    counts = np.bincount(np.asarray(generated, np.int64), minlength=vocab_size).astype(np.int32)
    big = float(np.finfo(np.float32).max)  # 1e300 saturates (no overflow warning); see penalize
    f32 = lambda x: np.float32(min(max(x, -big), big))  # noqa: E731
    held = np.zeros(vocab_size, bool)
    if sampling.min_tokens > 0:
        held[np.asarray([*sampling.stop_token_ids, *sampling.eos_token_ids], np.int64)] = True
    return Penalties(
        counts,
        prompt,
        f32(sampling.presence_penalty),
        f32(sampling.frequency_penalty),
        f32(sampling.repetition_penalty),
        np.int32(sampling.min_tokens),  # at most max_tokens (validate_sampling)
        held,
    )


def neutral_penalties(vocab_size: int) -> Penalties:
    """A row without penalties or min_tokens (NumPy), of the dtypes `penalties_for` gives."""
    f32, zeros = np.float32, np.zeros
    return Penalties(zeros(vocab_size, np.int32), zeros(vocab_size, bool), f32(0), f32(0),
                     f32(1), np.int32(0), zeros(vocab_size, bool))  # fmt: skip


def raw_logprobs(logits: jax.Array, tokens: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """logits [..., V], tokens int [...] -> (each token's log probability [...], the
    MAX_LOGPROBS most likely ids [..., K] and their log probabilities [..., K]), from the raw
    logits (log_softmax in float32; no temperature, top-k or top-p)."""
    lsm = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    chosen = jnp.take_along_axis(lsm, tokens[..., None].astype(jnp.int32), axis=-1)[..., 0]
    top_lp, top_id = lax.top_k(lsm, min(MAX_LOGPROBS, lsm.shape[-1]))
    return chosen, top_id.astype(jnp.int32), top_lp


def token_logprobs(tokens, chosen, top_ids, top_lps, k: int) -> tuple[TokenLogprob, ...]:
    """`TokenLogprob`s of `tokens` [n] from `raw_logprobs`' arrays (host), k alternatives."""
    chosen, top_ids, top_lps = np.asarray(chosen), np.asarray(top_ids), np.asarray(top_lps)
    return tuple(
        TokenLogprob(
            int(t),
            float(chosen[i]),
            tuple(zip(top_ids[i, :k].tolist(), top_lps[i, :k].tolist(), strict=True)),
        )
        for i, t in enumerate(tokens)
    )


def seed_key(seed: int) -> jax.Array:
    """The per-sequence key of a 64-bit `seed` (a raw uint32[2] key, so it stacks into slot
    arrays). Seeds in [0, 2**32) keep `PRNGKey(seed)` (the streams seeded runs already had);
    any other seed, a negative one read as its 64-bit two's complement, folds its high 32 bits
    into the key of its low 32, so every int64 seed is its own stream (hunt 65: with x64 off
    `PRNGKey` kept the low 32 bits only, and 5, 5 + 2**32 and 5 - 2**32 drew the same tokens)."""
    bits = int(seed) & 0xFFFF_FFFF_FFFF_FFFF
    low, high = bits & 0xFFFF_FFFF, bits >> 32
    key = jax.random.PRNGKey(np.uint32(low))
    return key if high == 0 else jax.random.fold_in(key, np.uint32(high))


def token_key(key: jax.Array, index: jax.Array | int) -> jax.Array:
    """The key that draws token `index` (0 = first token after the prompt) of a sequence."""
    return jax.random.fold_in(key, index)
