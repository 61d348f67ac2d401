"""Plain single-device KV-cache decoding: the reference the pipelined engine must equal.

Contract. `prefill(config, params, prompt_ids, max_len, chunk)` runs the prompt through the
model in chunks of `chunk` tokens (all tokens of a chunk in parallel; the last chunk padded
with position -1, which is not written) into a batch-1 `wse_models.KVCache` of `max_len`
positions and returns the last prompt token's logits; `prefill_scored` also scores the
prompt's own tokens (vLLM's prompt_logprobs). `first_token` draws token 0 from them.
The head (final norm and vocabulary product) runs once a prompt, on its last position only
(vLLM's `logits_indices`: one row a request), as the wafer's prompt is priced
(`wse_systems.serving.blocks`): the other chunks skip it, and every prompt position's logits
are computed only for a request that asks for prompt_logprobs. Session 80: every position's
were (`wse_models.forward`), one kept; the one row's product rounds as a decode token's head
does, within 3e-7 of the whole chunk's (same tokens on 438 requests of every engine).
`decode_step` advances a batch of rows by one token: the token in flight at `pos` is written
into the cache and token `count` of each row is drawn with `sampling.token_key(key, count)`.
`PlainDecoder.generate` is the shell: prompt -> tokens, finish reason, TTFT and tokens/s.
Every prefill (every engine's) first refuses a prompt id outside the vocabulary
(`engine.validate_prompt`): inside `jit` such an id would give NaN logits; decoders check
their settings when built (`check_decoder_settings`): each of them (`PlainDecoder`, the
pipelined `PipelineEngine`, the `SpeculativeDecoder`, which also checks the draft's context
and `gamma`) refuses a `max_context` above its model's `max_seq_len` in the same words.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from wse_core.errors import is_int, shown

from wse_inference.engine import (
    SamplingError,
    SamplingParams,
    SequenceTracker,
    TokenLogprob,
    validate_prompt,
)
from wse_inference.sampling import (
    SlotSampling,
    count_tokens,
    penalties_for,
    raw_logprobs,
    sample_slot,
    seed_key,
    slot_sampling,
    token_key,
    token_logprobs,
)

__all__ = [
    "GenerationResult",
    "prefill",
    "first_token",
    "first_logprob",
    "prefill_scored",
    "decode_step",
    "decode_loop",
    "decode_start",
    "DecodeState",
    "PlainDecoder",
    "sequence_key",
    "check_decoder_settings",
]


@dataclasses.dataclass
class GenerationResult:
    tokens: list[int]
    text: str
    finish_reason: str | None
    ttft_s: float
    decode_s: float
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        """Decode rate after the first token (tokens 2..n over the decode time)."""
        n = len(self.tokens) - 1
        return n / self.decode_s if n > 0 and self.decode_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "token_ids": self.tokens,
            "text": self.text,
            "finish_reason": self.finish_reason,
            "ttft_s": self.ttft_s,
            "decode_s": self.decode_s,
            "tokens_per_s": self.tokens_per_s,
            **self.metrics,
        }


def sequence_key(seed: int | None) -> jax.Array:
    """The sequence's key: from its seed, or from fresh OS entropy when seed is None."""
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    return seed_key(seed)


@functools.partial(
    jax.jit, static_argnums=0, static_argnames=("every", "count_zeros"), donate_argnums=4
)
def _forward_chunk(config, params, tokens, positions, cache, last, *, every=False,
                   count_zeros=False):  # fmt: skip
    """One prompt chunk [1, chunk] into `cache` -> (logits float32 [V] of row `last`, cache,
    every row's logits [chunk, V] with `every` (prompt_logprobs) else None, the MLP zeros per
    layer with `count_zeros` else None). The head runs on row `last` alone, and not at all
    where `last` < 0 (a chunk before the prompt's last: zeros), in one program either way."""
    import wse_models

    h = wse_models.embed(config, params, tokens, positions)
    out = wse_models.apply_layers(
        config, params["layers"], h, positions, cache, count_zeros=count_zeros
    )
    h = out[0]
    row = lax.dynamic_slice_in_dim(h, jnp.maximum(last, 0), 1, axis=1)  # [1, 1, d]
    logits = lax.cond(
        last >= 0,
        lambda x: wse_models.unembed(config, params, x)[0, 0],
        lambda x: jnp.zeros((config.vocab_size,), jnp.float32),
        row,
    )
    rows = wse_models.unembed(config, params, h)[0] if every else None
    return logits, out[1], rows, out[2] if count_zeros else None


def prefill(
    config: Any, params: Any, prompt_ids: Sequence[int], max_len: int, chunk: int = 32
) -> tuple[jax.Array, Any]:
    """Chunked parallel prefill -> (logits [V] of the last prompt token, batch-1 KVCache)."""
    logits, cache, _ = _prefill(config, params, prompt_ids, max_len, chunk, None)
    return logits, cache


def prefill_scored(
    config: Any,
    params: Any,
    prompt_ids: Sequence[int],
    max_len: int,
    chunk: int,
    prompt_logprobs: int | None,
    zeros: Any = None,
) -> tuple[jax.Array, Any, tuple[TokenLogprob | None, ...] | None]:
    """`prefill`, and with `prompt_logprobs` = k the prompt's own `TokenLogprob`s (vLLM's
    prompt_logprobs: token i scored by the logits at i - 1, k alternatives; None for token 0),
    from the same chunked forward passes. `zeros`: a `wse_models.sparsity.ZeroTally` that
    adds the prompt's MLP zeros per layer (engines pass one for ReLU-like models only)."""
    return _prefill(config, params, prompt_ids, max_len, chunk, prompt_logprobs, zeros)


def _prefill(config, params, prompt_ids, max_len, chunk, k, zeros=None):
    import wse_models

    validate_prompt(prompt_ids, vocab_size=config.vocab_size)  # every engine's prompt passes here
    cache = wse_models.init_cache(config, 1, max_len)
    ids = np.asarray(prompt_ids, np.int32)
    n = ids.size
    logits = None
    scored: list[TokenLogprob | None] = [None]
    for start in range(0, n, chunk):
        part = ids[start : start + chunk]
        tokens = np.zeros((1, chunk), np.int32)
        positions = np.full((1, chunk), -1, np.int32)
        tokens[0, : part.size] = part
        positions[0, : part.size] = np.arange(start, start + part.size)
        last = np.int32(part.size - 1 if start + chunk >= n else -1)  # the head's row, if any
        logits, cache, rows, counts = _forward_chunk(
            config, params, jnp.asarray(tokens), jnp.asarray(positions), cache, last,
            every=k is not None, count_zeros=zeros is not None,
        )  # fmt: skip
        if zeros is not None:
            zeros.add(counts, part.size)
        if k is not None:  # row j predicts token start + j + 1 (the prompt's, if any)
            nxt = ids[start + 1 : start + 1 + chunk]
            padded = np.zeros(chunk, np.int32)
            padded[: nxt.size] = nxt
            lps = _raw_logprobs(rows, jnp.asarray(padded))
            scored += token_logprobs(nxt, *(np.asarray(x)[: nxt.size] for x in lps), k)
    return logits, cache, None if k is None else tuple(scored)


@jax.jit
def _first(logits, key, sampling: SlotSampling):
    return sample_slot(logits, sampling, token_key(key, 0))


def first_token(
    logits: jax.Array, sampling: SamplingParams, key: jax.Array, prompt_ids: Sequence[int] = ()
) -> int:
    """Token 0 of the sequence, drawn from the prompt's last logits (with the request's
    penalties: only repetition_penalty acts yet, on the prompt's tokens)."""
    pen = penalties_for(sampling, prompt_ids, logits.shape[-1])
    return int(_first(logits, key, slot_sampling(sampling, pen)))


_raw_logprobs = jax.jit(raw_logprobs)


def first_logprob(logits: jax.Array, token: int, sampling: SamplingParams) -> TokenLogprob | None:
    """Token 0's `TokenLogprob` from the prompt's last logits, if the request asked for it."""
    if sampling.logprobs is None:
        return None
    out = _raw_logprobs(logits[None], jnp.asarray([token], jnp.int32))
    return token_logprobs([token], *out, sampling.logprobs)[0]


def decode_step(config, params, cache, tokens, pos, count, keys, sampling: SlotSampling):
    """Rows [b]: write `tokens` at `pos`, draw token `count` of each row -> (next, cache);
    `sampling`: the rows' settings (its `penalties`, if any, apply to the logits first)."""
    import wse_models

    logits, cache = wse_models.forward(config, params, tokens[:, None], pos[:, None], cache)
    keys = jax.vmap(token_key)(keys, count)
    return sample_slot(logits[:, 0], sampling, keys), cache


class DecodeState(NamedTuple):
    """The plain decode loop's carry (`decode_start` builds it)."""

    i: jax.Array  # int32: tokens made so far
    token: jax.Array  # int32: the token in flight
    pos: jax.Array  # int32: its position
    cache: Any  # batch-1 KVCache
    out: jax.Array  # int32 [size]: the tokens made
    done: jax.Array  # bool: a stop token was drawn
    sampling: SlotSampling  # its penalty counts grow with every token


def decode_start(cache, token, pos, size: int, sampling: SlotSampling) -> DecodeState:
    """The carry before the first loop step: `token` (int32) in flight at `pos`; `sampling`'s
    penalties count the sequence's tokens so far, `token` included."""
    zero = jnp.zeros((size,), jnp.int32)
    return DecodeState(jnp.int32(0), token, pos, cache, zero, jnp.bool_(False), sampling)


def decode_loop(config, params, state: DecodeState, key, n, stop) -> DecodeState:
    """Up to `n` more tokens (index state.i + 1..n) in one `lax.while_loop`, stopping early on
    a token in `stop` [m]; the tokens are `out[:i]` of the final state."""

    def cond(c: DecodeState):
        return (c.i < n) & ~c.done

    def body(c: DecodeState):
        row = lambda x: jnp.reshape(x, (1,))  # noqa: E731
        s = c.sampling
        rows = s._replace(penalties=jax.tree.map(lambda x: jnp.asarray(x)[None], s.penalties))
        rows = rows._replace(temperature=row(s.temperature), top_k=row(s.top_k))
        rows = rows._replace(top_p=row(s.top_p))
        args = (row(c.token), row(c.pos), row(c.i + 1), key[None], rows)
        nxt, cache = decode_step(config, params, c.cache, *args)
        tok = nxt[0]
        s = s._replace(penalties=count_tokens(s.penalties, tok))
        out = c.out.at[c.i].set(tok)
        return DecodeState(c.i + 1, tok, c.pos + 1, cache, out, jnp.any(tok == stop), s)

    return jax.lax.while_loop(cond, body, state)


_decode_loop = jax.jit(decode_loop, static_argnums=(0,))


def check_decoder_settings(
    max_context: Any, prefill_chunk: Any, *, model_context: int | None = None
) -> None:
    """Raise `SamplingError` unless `max_context` is None (the model's) or a whole number >= 1
    and `prefill_chunk` a whole number >= 1: a decoder's settings, checked when it is built
    (hunt 65: max_context=0 silently meant the model's, -5 refused every prompt as "at most
    -6 tokens", prefill_chunk 0 or -1 failed inside range() or the first chunk). With
    `model_context` (the model's `max_seq_len`), a `max_context` above it is refused, as
    vLLM refuses a max_model_len above max_position_embeddings (hunt 67: PlainDecoder ran a
    Llama past the positions it was trained on, without a word)."""
    for name, v in (("max_context", max_context), ("prefill_chunk", prefill_chunk)):
        if v is None and name == "max_context":
            continue
        if not is_int(v) or v < 1:  # a bool is no count
            got = f"{type(v).__name__} {shown(repr(v), quote=False)}"
            raise SamplingError(f"{name} must be a whole number >= 1, got {got}")
    if model_context is not None and max_context is not None and max_context > model_context:
        raise SamplingError(
            f"max_context {max_context:,} is greater than the model's context of "
            f"{model_context:,} tokens (its config's max_seq_len); give at most "
            f"{model_context:,}, or leave it unset"
        )


class PlainDecoder:
    """One sequence at a time on one device: prefill, then the decode loop in one jitted
    `lax.while_loop` (stop strings are applied on the host afterwards)."""

    def __init__(
        self,
        config: Any,
        params: Any,
        *,
        tokenizer: Any = None,
        max_context: int | None = None,
        prefill_chunk: int = 32,
    ):
        check_decoder_settings(max_context, prefill_chunk, model_context=config.max_seq_len)
        self.config, self.params, self.tokenizer = config, params, tokenizer
        self.max_context = config.max_seq_len if max_context is None else int(max_context)
        self.prefill_chunk = prefill_chunk

    def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> GenerationResult:
        from wse_inference.sampling import validate_sampling

        validate_sampling(
            sampling,
            vocab_size=self.config.vocab_size,
            max_context=self.max_context,
            prompt_len=len(prompt_ids),
        )
        t0 = time.perf_counter()
        key = sequence_key(sampling.seed)
        logits, cache = prefill(
            self.config, self.params, prompt_ids, self.max_context, self.prefill_chunk
        )
        tracker = SequenceTracker(sampling, self.tokenizer, prompt_ids=prompt_ids)
        tracker.add(first_token(logits, sampling, key, prompt_ids))
        ttft = time.perf_counter() - t0
        pen = penalties_for(sampling, prompt_ids, self.config.vocab_size, tracker.tokens)
        if tracker.finish_reason is None:
            stop = jnp.asarray([*sampling.stop_token_ids, -1], jnp.int32)
            start = decode_start(
                cache,
                jnp.int32(tracker.tokens[-1]),
                jnp.int32(len(prompt_ids)),
                self.max_context,
                slot_sampling(sampling, pen),
            )
            end = _decode_loop(
                self.config, self.params, start, key, jnp.int32(sampling.max_tokens - 1), stop
            )
            out, made = end.out, end.i
            for tok in np.asarray(out)[: int(made)].tolist():
                if tracker.add(tok) is not None:
                    break
        decode = time.perf_counter() - t0 - ttft
        return GenerationResult(
            tracker.tokens, tracker.visible_text(), tracker.finish_reason, ttft, decode
        )
