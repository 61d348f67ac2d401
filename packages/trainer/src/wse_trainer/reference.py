"""The plain baseline: one fused, jitted full-model train step with `jax.grad`.

`fused_step(model, tx)` returns a pure `step(params, opt_state, batch) -> (params, opt_state,
loss)` over the whole params pytree with the same loss as the replicas (mean next-token
cross-entropy over the batch) and the whole-model optax transform. It is the oracle of the
streaming tests and the baseline of the benchmark; the caller jits it. `eval_sums` is an
evaluation's loss and top-1 hits of a batch (`session.evaluate` jits it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
import wse_models

from wse_trainer.replica import token_loss
from wse_trainer.step_inputs import check_targets

__all__ = ["loss_fn", "eval_sums", "fused_step"]


def loss_fn(model: Any, params: Any, batch: jax.Array, segments: Any = None) -> jax.Array:
    """Mean next-token cross-entropy of `batch` rows (B, S + 1); `segments`: packed
    documents of the inputs (`data.Segments`), or None. Ids outside the vocabulary, inputs
    or targets, are a `ModelError` where their values are known (not under `jit`)."""
    targets = batch[:, 1:]
    return token_loss(_logits(model, params, batch, segments), targets) / targets.size


def eval_sums(
    model: Any, params: Any, batch: jax.Array, segments: Any = None
) -> tuple[jax.Array, jax.Array]:
    """(`loss_fn` of `batch`, the number of its targets whose top-1 logit is the target): an
    evaluation's loss and next-token accuracy, ModelZoo's `eval/accuracy` (argmax of the
    logits against the labels). Every target counts, as in the loss: packed rows
    (`data.pack`) hold no padding."""
    targets = batch[:, 1:]
    logits = _logits(model, params, batch, segments)
    hits = jnp.sum(jnp.argmax(logits, axis=-1) == targets)
    return token_loss(logits, targets) / targets.size, hits


def _logits(model: Any, params: Any, batch: jax.Array, segments: Any) -> jax.Array:
    """The logits (B, S, V) of `batch`'s inputs, its ids checked (`loss_fn`)."""
    check_targets(model, batch)  # hunt 78: a bad target id gave a NaN loss (`forward`
    # checks the inputs)
    tokens = batch[:, :-1]
    if segments is None:
        return wse_models.forward(model, params, tokens)[0]
    seg, pos = segments
    return wse_models.forward(model, params, tokens, pos, segment_ids=seg)[0]


def fused_step(model: Any, tx: optax.GradientTransformation) -> Callable[..., Any]:
    def step(params, opt_state, batch, segments=None):
        loss, grads = jax.value_and_grad(lambda p: loss_fn(model, p, batch, segments))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
