"""`Wafer.full` refuses in one line what its dtype cannot hold and takes a 0-d array as its
value (hunt 73: `full((), 10**400)` was an OverflowError, `full((), "1")` "data type ''
not understood", `full((), 1+0j)` float()'s TypeError, `full((), jnp.array(3.0))` an
unhashable TypeError of the cache). Oracles: NumPy's own cast of the value (refused where it
overflows a finite value or cannot convert it; kept bit for bit where it holds), its
ComplexWarning for a complex value cast to a real type, and `place` on the same values."""

from __future__ import annotations

import math
import warnings

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from wse_core import preset
from wse_core.errors import PlacementError
from wse_core.hw import wafer as wafer_module
from wse_core.hw.wafer import build_wafer

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn]
VALUES = [1.0, -0.0, 1e-50, 1e300, -1e39, 3.4028235e38, 3.40282357e38, 3.4028236e38, 65504.0,
          65519.0, 65520.0, -65520.0, 448.0, 464.0, 1000.0, 2**127, 2**128, -(2**128),
          10**400, -(10**400), float("inf"), float("nan")]  # fmt: skip


@pytest.fixture(scope="module")
def wafer():
    return build_wafer(preset("tiny"), grid=(4, 4))


def _numpy_cast(value, dtype) -> np.ndarray | None:
    """NumPy's cast of `value` to `dtype`, or None where it does not hold it: an integer
    past float64 (its OverflowError) or a finite value cast to inf or NaN."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            y = np.array(value).astype(dtype)
    except OverflowError:
        return None
    finite = not isinstance(value, float) or math.isfinite(value)
    return None if finite and not np.isfinite(y.astype(np.float64)) else y


def _one_line(call, *args) -> str:
    with pytest.raises(PlacementError) as e:
        call(*args)
    assert "\n" not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("value", VALUES, ids=lambda v: repr(v)[:20])
def test_full_refuses_or_keeps_a_value_as_numpys_cast(wafer, value, dtype):
    want = _numpy_cast(value, dtype)
    if want is None:  # before: 10**400 an OverflowError
        line = _one_line(wafer.full, (), value, dtype)
        largest = float(ml_dtypes.finfo(dtype).max)
        assert line.endswith(f"past its largest {largest:.4g}"), line
        return
    got = wafer.gather(wafer.full((2,), value, dtype))
    assert got.dtype == np.dtype(dtype)
    assert got.tobytes() == np.full((4, 4, 2), want, np.dtype(dtype)).tobytes()  # -0.0 too


@pytest.mark.parametrize("value", [v for v in VALUES if abs(v) < 1e308], ids=lambda v: repr(v)[:20])
def test_full_refuses_a_float32_value_as_place_refuses_it(wafer, value):
    host = np.full((4, 4), float(value))  # float64 on the host, kept in fp32 by place
    try:
        placed = wafer.gather(wafer.place(host))
    except PlacementError:
        _one_line(wafer.full, (), value, jnp.float32)
    else:
        assert wafer.gather(wafer.full((), value)).tobytes() == placed.tobytes()


@pytest.mark.parametrize("value", ["1", "abc", b"1", None, [1.0], np.array([1.0, 2.0])],
                         ids=repr)  # fmt: skip
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.int32, jnp.bool_])
def test_a_value_that_is_no_number_is_one_line(wafer, value, dtype):
    line = _one_line(wafer.full, (), value, dtype)  # before: "data type '' not understood"
    assert line.startswith(f"a {np.dtype(dtype)} field's value must be a number, got ")


@pytest.mark.parametrize("text", ["1", "abc"])
def test_place_refuses_text_in_one_line_too(wafer, text):
    line = _one_line(wafer.place, np.full((4, 4), text))  # before: JAX's TypeError
    assert line == f"a wafer field must hold numbers, got an array of <U{len(text)}"


@pytest.mark.parametrize("value", [1 + 0j, 1 + 2j, np.complex64(1), np.array(2 + 0j)], ids=repr)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.int32])
def test_a_complex_value_is_refused_by_a_real_field(wafer, value, dtype):
    with pytest.warns(np.exceptions.ComplexWarning):  # NumPy's cast drops the imaginary part
        np.array(value).astype(dtype)
    line = _one_line(wafer.full, (), value, dtype)  # before: float()'s TypeError
    assert line.startswith(f"a real {np.dtype(dtype)} field cannot hold the complex value")
    got = wafer.gather(wafer.full((), value, jnp.complex64))
    np.testing.assert_array_equal(got, np.full((4, 4), np.asarray(value), np.complex64))


@pytest.mark.parametrize(
    ("value", "dtype"),
    [(jnp.array(3.0), jnp.float32), (jnp.array(1.5, jnp.bfloat16), jnp.bfloat16),
     (jnp.array(7), jnp.int32), (np.array(5), jnp.int32), (np.float32(2.5), jnp.float32),
     (np.int64(7), jnp.float32), (np.bool_(True), jnp.bool_), (jnp.array(-0.0), jnp.float32)],
    ids=repr,
)  # fmt: skip
def test_a_0d_array_or_numpy_scalar_is_its_value(wafer, value, dtype):
    got = wafer.gather(wafer.full((), value, dtype))  # before: jnp's unhashable TypeError
    host = np.full((4, 4), np.asarray(value)).astype(dtype)  # NumPy's value, as place holds it
    assert got.tobytes() == wafer.gather(wafer.place(host)).tobytes()
    again = wafer_module._filler.cache_info().hits
    wafer.full((), value, dtype)
    assert wafer_module._filler.cache_info().hits == again + 1  # one program per value


@pytest.mark.parametrize(("value", "dtype"), [(np.int64(2**40), jnp.int32),
                                             (np.float64(1e300), jnp.float32)])  # fmt: skip
def test_a_numpy_scalar_is_refused_as_place_refuses_its_array(wafer, value, dtype):
    _one_line(wafer.place, np.full((4, 4), value))
    _one_line(wafer.full, (), value, dtype)


def test_a_signed_zero_after_zero_keeps_its_sign(wafer):
    """The cache is keyed by the value's bytes: 0.0 == -0.0 in Python's dict."""
    assert not np.signbit(wafer.gather(wafer.full((), 0.0))).any()
    assert np.signbit(wafer.gather(wafer.full((), -0.0))).all()


@pytest.mark.parametrize(
    "value", [complex(1e300, 0), complex(0, -1e39), complex(float("inf"), 1e300), 1 + 2j,
              complex(1, float("nan")), complex(float("inf"), 0)], ids=repr,
)  # fmt: skip
def test_a_complex_field_refuses_a_part_numpys_cast_overflows(wafer, value):
    with np.errstate(all="ignore"):
        y = np.array(value).astype(np.complex64)
    lost = any(math.isfinite(f(value)) and not np.isfinite(f(y)) for f in (np.real, np.imag))
    if lost:
        assert _one_line(wafer.full, (), value, jnp.complex64).endswith(
            "past its largest 3.403e+38"
        )
    else:
        assert (
            wafer.gather(wafer.full((), value, jnp.complex64)).tobytes()
            == np.full((4, 4), y).tobytes()
        )
