"""`Wafer.full` inside jit (hunt 73, left: a traced value was "must be a number, got
JitTracer"). A traced 0-d value fills the field as `jnp.full` does, placed with the wafer's
sharding; a traced array is refused in one line. Oracle: NumPy's `np.full` and the
sharding `Wafer.sharding` names."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_core.errors import WseError
from wse_core.hw.presets import preset
from wse_core.hw.wafer import build_wafer


@pytest.fixture(scope="module")
def wafer():
    return build_wafer(preset("wse3"), grid=(4, 6))


@pytest.mark.parametrize(
    "dtype,value", [(jnp.float32, 2.75), (jnp.int32, 3.0), (jnp.bfloat16, 2.75)]
)
@pytest.mark.parametrize("per_pe", [(), (3,)])
def test_a_traced_value_fills_as_numpy(wafer, dtype, value, per_pe):
    got = jax.jit(lambda v: wafer.full(per_pe, v, dtype))(jnp.float32(value))
    want = np.full((*wafer.padded_shape, *per_pe), value).astype(jnp.dtype(dtype))
    np.testing.assert_array_equal(np.asarray(got), want)
    assert got.dtype == jnp.dtype(dtype)
    assert got.sharding.is_equivalent_to(wafer.sharding(len(per_pe)), got.ndim)
    # the same field as the untraced call, where the value is known
    np.testing.assert_array_equal(np.asarray(got), np.asarray(wafer.full(per_pe, value, dtype)))


def test_a_traced_array_is_refused_in_one_line(wafer):
    with pytest.raises(WseError, match=r"must be one number, got a traced array of shape \(2,\)"):
        jax.jit(lambda v: wafer.full((), v))(jnp.ones(2))
