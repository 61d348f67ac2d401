"""SwarmX's batched copy on JAX 0.12 (hunt 74): `jax.sharding.SingleDeviceSharding(device)`
is deprecated there, so every streamed copy warned; the copy now asks for the sharding by
`jax.sharding.make_single_device_sharding`, public on JAX 0.10 and 0.12 alike."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
from wse_trainer import swarmx


def test_a_tree_copied_to_another_device_is_the_same_values_there_without_a_deprecation():
    src, dst = jax.devices()[:2]
    want = {"w": np.arange(12.0, dtype=np.float32).reshape(3, 4), "b": np.float32([1.5, -2.0])}
    tree = {k: jax.device_put(jnp.asarray(v), src) for k, v in want.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        out = swarmx.to_device(tree, dst)
    for k, v in want.items():
        assert out[k].sharding.device_set == {dst}
        np.testing.assert_array_equal(np.asarray(out[k]), v)  # a copy: bit for bit
