"""`Transformer`: the flax NNX face of the functional decoder.

The module holds a `ModelConfig` (static) and the parameter pytree as `nnx.Param` leaves, so
`nnx.split`, `nnx.Optimizer(model, tx, wrt=nnx.Param)` and `nnx.jit` work as usual, while
`model.params()` hands the plain pytree to the functional core (`wse_models.decoder`) for
weight streaming and pipelining. `model(tokens)` maps int32 [b, s] to float32 logits
[b, s, vocab] through one jitted forward per config.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx

from wse_models.cache import KVCache
from wse_models.config import ModelConfig
from wse_models.decoder import check_inputs, forward
from wse_models.params import Params, init_params

__all__ = ["Transformer"]


def _is_var(x: object) -> bool:
    return isinstance(x, nnx.Variable)


@partial(jax.jit, static_argnums=0)
def _jit_forward(config, params, tokens, positions, cache):
    return forward(config, params, tokens, positions, cache)


class Transformer(nnx.Module):
    """A decoder-only transformer: `model(tokens)` -> logits; `model.params()` -> pytree."""

    def __init__(
        self, config: ModelConfig, *, rngs: nnx.Rngs | None = None, params: Params | None = None
    ) -> None:
        if params is None:
            key = rngs.params() if rngs is not None else jax.random.key(0)
            params = init_params(config, key)
        self.config = config
        self.weights = nnx.data(jax.tree.map(nnx.Param, params))

    def params(self) -> Params:
        """The functional parameter pytree (plain arrays) for `wse_models.decoder`."""
        return jax.tree.map(lambda p: p[...], self.weights, is_leaf=_is_var)

    def __call__(self, tokens: jax.Array, positions: jax.Array | None = None) -> jax.Array:
        """Int32 tokens [b, s] (positions [b, s], default 0..s-1) -> float32 logits."""
        return self.step(tokens, positions)[0]

    def step(
        self, tokens: jax.Array, positions: jax.Array | None = None, cache: KVCache | None = None
    ) -> tuple[jax.Array, KVCache | None]:
        """One forward with an optional KV cache: -> (logits, updated cache)."""
        tokens = jnp.asarray(tokens)
        if positions is not None:
            positions = jnp.asarray(positions, jnp.int32)
        check_inputs(self.config, tokens, positions, cache)  # values: on the host, before jit
        return _jit_forward(self.config, self.params(), tokens, positions, cache)

    def num_params(self) -> int:
        """Number of parameters actually held (equals config.num_params())."""
        return sum(x.size for x in jax.tree.leaves(self.params()))
