"""Samples from a trained model with the KV cache: greedy or with a temperature.

`pick(logits, key, temperature)` is the pure choice of the next token; `generate(...)` is
the shell: it prefills the prompt in one jitted pass and then decodes one token per jitted
call. At temperature 0 the argmax is taken; otherwise a categorical draw from
logits / temperature with an explicit PRNG key. A temperature below 0 or NaN is refused on
the host (`ConfigError`): inside `pick` it would silently be greedy.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import wse_models

from wse_trainer.config import ConfigError

__all__ = ["pick", "generate"]


def pick(logits: jax.Array, key: jax.Array, temperature: jax.Array) -> jax.Array:
    """Next token of logits [b, vocab]: argmax at temperature 0, else a sample."""
    greedy = jnp.argmax(logits, axis=-1)
    drawn = jax.random.categorical(key, logits / jnp.maximum(temperature, 1e-6), axis=-1)
    return jnp.where(temperature > 0, drawn, greedy).astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=0)
def _step(model, params, cache, tokens, positions, key, temperature):
    logits, cache = wse_models.forward(model, params, tokens, positions, cache)
    return pick(logits[:, -1], key, temperature), cache


def generate(
    model: Any,
    params: Any,
    prompt: Sequence[int],
    n_tokens: int,
    *,
    temperature: float = 0.0,
    seed: int = 0,
) -> list[int]:
    """`n_tokens` new token ids after `prompt` (capped by the model's max_seq_len)."""
    number = isinstance(temperature, numbers.Real) and not isinstance(temperature, bool)
    if not (number and math.isfinite(temperature) and temperature >= 0):  # as vLLM's
        raise ConfigError(
            f"temperature must be a finite number >= 0 (0 is greedy), got {temperature!r}"
        )
    max_len = min(int(model.max_seq_len), len(prompt) + n_tokens)
    n_tokens = max_len - len(prompt)
    if n_tokens <= 0 or not prompt:
        return []
    cache = wse_models.init_cache(model, 1, max_len)
    key = jax.random.key(seed)
    temp = jnp.float32(temperature)
    tokens = jnp.asarray([list(prompt)], jnp.int32)
    positions = jnp.arange(len(prompt), dtype=jnp.int32)[None]
    out: list[jax.Array] = []
    for i in range(n_tokens):
        key, sub = jax.random.split(key)
        nxt, cache = _step(model, params, cache, tokens, positions, sub, temp)
        out.append(nxt[0])
        tokens, positions = nxt[:, None], jnp.full((1, 1), len(prompt) + i, jnp.int32)
    return [int(t) for t in jax.device_get(out)]
