"""MemoryX clips with optax's `clip_by_global_norm` over every group at once.

Four groups of norm 8 give a whole-model norm of exactly 16, so `(g / 16) * max_norm` (the
order the trainer's clip has always used) is exact in fp32 whichever way XLA divides. SGD
with learning rate 1 makes the parameter change the clipped update itself: compared to the
bit, no tolerance.
"""

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from wse_trainer.memoryx import MemoryX

GRADS = {
    "embed": np.array([8.0, 0.0], np.float32),
    "layer_0": np.array([0.0, -8.0], np.float32),
    "layer_1": np.array([0.0, 8.0], np.float32),
    "final": np.array([8.0], np.float32),
}


def _change(max_norm: float) -> dict[str, np.ndarray]:
    params = {"embed": jnp.zeros(2), "layers": jnp.zeros((2, 2)), "final": jnp.zeros(1)}
    memx = MemoryX(params, 2, optax.sgd(1.0), max_gradient_norm=max_norm)
    for name in ("final", "layer_1", "layer_0", "embed"):  # backward order
        memx.receive(name, GRADS[name])
        assert memx.updates_applied == 0  # held until the norm is known
    memx.finish_step()
    assert memx.updates_applied == 4
    return {k: np.asarray(v) for k, v in memx.params.items()}


@pytest.mark.parametrize("max_norm, scale", [(12.0, 0.75), (4.0, 0.25), (16.5, 1.0)])
def test_update_is_clipped_by_the_whole_models_norm(max_norm, scale):
    # Clipping group by group (each norm 8) would leave every group unclipped at 12.
    change = _change(max_norm)
    for name, g in GRADS.items():
        np.testing.assert_array_equal(change[name], -scale * g)
