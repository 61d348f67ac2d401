"""The one dtype table (wse_core.hw.spec): every name and alias of a dtype gives the same short
name, bytes and jax.numpy dtype; other NumPy dtypes fall back to their itemsize."""

import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import SpecError
from wse_core.hw.spec import DTYPE_ALIASES, DTYPE_BYTES, DTYPES, dtype_bytes, dtype_name, to_jnp


@pytest.mark.parametrize(
    "names, short, size, jnp_dtype",
    [
        (("fp16", "float16", np.float16, jnp.dtype("float16")), "fp16", 2, jnp.float16),
        (("bf16", "bfloat16", jnp.bfloat16, jnp.dtype("bfloat16")), "bf16", 2, jnp.bfloat16),
        (("fp32", "float32", np.float32, np.dtype("float32")), "fp32", 4, jnp.float32),
        (("int8", np.int8), "int8", 1, jnp.int8),
        (("fp8", "float8"), "fp8", 1, jnp.float8_e4m3fn),
    ],
)
def test_every_alias_means_the_same_dtype(names, short, size, jnp_dtype):
    for name in names:
        assert dtype_name(name) == short
        assert dtype_bytes(name) == size
        assert to_jnp(name) == jnp.dtype(jnp_dtype)


def test_the_table_covers_the_priced_dtypes_and_only_known_names():
    assert set(DTYPES) <= set(DTYPE_BYTES)
    assert set(DTYPE_ALIASES.values()) == set(DTYPE_BYTES)


def test_other_numpy_dtypes_by_itemsize_and_unknown_names_refused():
    assert dtype_name("int32") is None
    assert (dtype_bytes("int32"), dtype_bytes(np.int64)) == (4, 8)
    assert to_jnp("int32") == jnp.int32
    with pytest.raises(SpecError, match="unknown dtype 'fp17'"):
        dtype_bytes("fp17")
