"""`Wafer.full` refuses a value its dtype cannot hold, as `Wafer.place` refuses it (hunt 72:
`full((), 1e300)` was inf, `full((), 2**40, int32)` 0, NaN as int32 -2147483648, 1.5 as int32
1, with at most a NumPy warning). The oracle: NumPy's own cast of the value, checked to
round-trip exactly (what is kept), and the values `place` refuses (hunt 65)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import preset
from wse_core.errors import PlacementError
from wse_core.hw.wafer import build_wafer


@pytest.fixture(scope="module")
def wafer():
    return build_wafer(preset("tiny"), grid=(4, 4))


@pytest.mark.parametrize(
    ("value", "dtype", "words"),
    [
        (1e300, jnp.float32, "past its largest 3.403e+38"),
        (-1e39, jnp.float32, "past its largest"),
        (70000.0, jnp.float16, "past its largest 6.55e+04"),
        (2**40, jnp.int32, "whole number in -2147483648..2147483647"),
        (float("nan"), jnp.int32, "whole number"),
        (float("inf"), jnp.int32, "whole number"),
        (1.5, jnp.int32, "whole number"),
        (-1, jnp.uint8, "whole number in 0..255"),
        (1 + 2j, jnp.float32, "cannot hold the complex value"),
        ("one", jnp.float32, "must be a number, got 'one'"),
    ],
)
def test_full_refuses_what_its_dtype_cannot_hold(wafer, value, dtype, words):
    with pytest.raises(PlacementError) as e:
        wafer.full((), value, dtype)
    assert words in str(e.value)


@pytest.mark.parametrize(
    ("value", "dtype"),
    [
        (2**31 - 1, jnp.int32),
        (-(2**31), jnp.int32),
        (3.0, jnp.int32),
        (255, jnp.uint8),
        (float("inf"), jnp.float32),  # fp32 holds infinities and NaN: kept as place keeps them
        (float("nan"), jnp.float32),
        (0.1, jnp.float32),  # rounded to fp32, as place rounds
        (1 + 2j, jnp.complex64),
        (7, jnp.bool_),
    ],
)
def test_full_keeps_what_its_dtype_holds(wafer, value, dtype):
    got = wafer.gather(wafer.full((2,), value, dtype))
    want = np.full((4, 4, 2), value, dtype=np.dtype(dtype))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
