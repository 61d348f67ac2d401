"""plan.host_bytes counts arrays the trainer really allocates: the fp32 masters and AdamW
state (optax on the tiny model's parameters) and the fp32 logits of a forward pass."""

import jax
import jax.numpy as jnp
import optax
import wse_models
from wse_systems.training.plan import host_bytes


def _nbytes(tree) -> int:  # the float arrays (AdamW's step count is a scalar int)
    return sum(x.nbytes for x in jax.tree.leaves(tree) if x.dtype == jnp.float32)


def test_host_bytes_matches_masters_optimizer_state_and_logits():
    config = wse_models.preset_config("tiny-gpt2")
    params = jax.tree.map(
        lambda x: x.astype(jnp.float32), wse_models.init_params(config, jax.random.PRNGKey(0))
    )
    state = optax.adamw(1e-3).init(params)
    items = host_bytes(config, micro_batch=3, seq_len=16, replicas=2)
    # masters + two moment slots + the held gradients, all fp32 like the masters
    masters = _nbytes(params)
    assert masters == 4 * config.num_params()
    assert items["MemoryX: masters, optimizer state, gradients"] == 2 * masters + _nbytes(state)
    tokens = jnp.zeros((3, 16), jnp.int32)
    logits = wse_models.forward(config, params, tokens)[0]
    assert items["logits, softmax and gradient (fp32)"] == 2 * 3 * logits.nbytes
