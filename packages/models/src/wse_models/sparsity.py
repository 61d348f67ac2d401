"""Activation sparsity: how many of each layer's MLP hidden activations are exactly zero.

A ReLU-like MLP (`ModelConfig.relu_like`: "relu", "relu2") leaves a fraction s of its hidden
activation [tokens, d_ff] at exactly 0. The down projection multiplies that activation by
w_down [d_ff, d]: a zero operand contributes nothing, and the wafer's dataflow cores fire an
FMAC only on a nonzero incoming wavelet (Cerebras states that its hardware skips zeros), so
on the wafer the down projection costs (1 - s) of its dense multiplies. A GPU's dense matmul
gains nothing from such unstructured sparsity.

- `zero_counts(config, params, tokens, positions=None, segment_ids=None)` -> int32
  [n_layers]: the zeros per layer of one forward pass (pure; the caller jits).
- `zero_fraction(params, config, tokens)` -> float64 [n_layers]: the measured fraction of a
  checkpoint on some tokens (the cost model's input), batched and jitted here.
  The wafer cost model prices the skipped multiplies from it (`wse_systems.decoder`'s
  `mlp_zero_fraction` for decoding, `wse_systems.training.performance.predict_step`'s for training).
- `ZeroTally(config)`: host-side running totals for a shell (the inference server's prefills).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from wse_models.config import ModelConfig
from wse_models.decoder import forward
from wse_models.params import Params

__all__ = ["ZeroTally", "zero_counts", "zero_fraction"]


def zero_counts(
    config: ModelConfig,
    params: Params,
    tokens: jax.Array,
    positions: jax.Array | None = None,
    segment_ids: jax.Array | None = None,
) -> jax.Array:
    """Exact zeros of each layer's MLP hidden activation in a forward pass over tokens int32
    [b, s] (tokens with a negative position are padding and left out) -> int32 [n_layers]."""
    return forward(config, params, tokens, positions, segment_ids=segment_ids, count_zeros=True)[2]


@functools.lru_cache(maxsize=8)
def _jit_counts(config: ModelConfig):
    return jax.jit(functools.partial(zero_counts, config))


def zero_fraction(
    params: Params, config: ModelConfig, tokens: np.ndarray, *, rows_per_call: int = 8
) -> np.ndarray:
    """Measured zero fraction per layer of a (trained) model on tokens int [b, s] (or [s]):
    zeros / (b * s * d_ff) per layer, float64 [n_layers]. Counted for any activation (a
    dense model gives ~0); rows go `rows_per_call` at a time (the last call padded with
    rows at position -1, which are not counted)."""
    tokens = np.atleast_2d(np.asarray(tokens, np.int32))
    b, s = tokens.shape
    fn, total = _jit_counts(config), np.zeros(config.n_layers, np.int64)
    for start in range(0, b, rows_per_call):
        part = np.zeros((rows_per_call, s), np.int32)
        pos = np.full((rows_per_call, s), -1, np.int32)
        n = min(rows_per_call, b - start)
        part[:n], pos[:n] = tokens[start : start + n], np.arange(s, dtype=np.int32)
        total += np.asarray(fn(params, jnp.asarray(part), jnp.asarray(pos)), np.int64)
    return total / float(b * s * config.d_ff)


class ZeroTally:
    """Running per-layer totals of MLP zeros on the host (a shell's counter: a server adds
    each prefill's `count_zeros` output; `metrics()` gives the fractions so far)."""

    def __init__(self, config: ModelConfig) -> None:
        self.zeros = np.zeros(config.n_layers, np.int64)
        self.tokens, self.d_ff = 0, config.d_ff

    def add(self, counts: jax.Array | np.ndarray, tokens: int) -> None:
        """counts int [n_layers] over `tokens` real (non-padding) tokens."""
        self.zeros += np.asarray(counts, np.int64)
        self.tokens += int(tokens)

    def fraction(self) -> np.ndarray:
        """Zeros / hidden activations per layer so far (zeros before any token)."""
        return self.zeros / max(self.tokens * self.d_ff, 1)

    def metrics(self) -> dict[str, float]:
        """{"mlp_zero_fraction_layer_<i>": ..., "mlp_zero_fraction_mean": ...}."""
        frac = self.fraction()
        out = {f"mlp_zero_fraction_layer_{i}": float(f) for i, f in enumerate(frac)}
        return {**out, "mlp_zero_fraction_mean": float(frac.mean())}
