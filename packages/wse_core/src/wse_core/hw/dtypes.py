"""The one dtype table of the stack: bytes per element and every name a dtype goes by.

`DTYPE_BYTES` (bytes per element by short name) and `DTYPE_ALIASES` (every name a dtype goes
by, "float16", "bfloat16", ..., to its short name); `DTYPES` are those the SIMD table prices
(`wse_core.hw.simd`). `dtype_name(d)` gives the short name of a name, alias or NumPy/JAX dtype,
`dtype_bytes(d)` its size (any other NumPy dtype by its itemsize; an unknown one is a
SpecError), `to_jnp(d)` the `jax.numpy` dtype (JAX is imported there, never when wse_core
is). Re-exported by `wse_core.hw.spec`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import numpy as np

from wse_core.errors import SpecError

__all__ = ["DTYPES", "DTYPE_BYTES", "DTYPE_ALIASES", "dtype_name", "dtype_bytes", "to_jnp"]

DTYPES = ("fp16", "bf16", "fp32")  # the dtypes the SIMD table prices
DTYPE_BYTES = MappingProxyType({"fp16": 2, "bf16": 2, "fp32": 4, "int8": 1, "fp8": 1})
DTYPE_ALIASES = MappingProxyType(
    {name: name for name in DTYPE_BYTES}
    | {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
    | {"float8": "fp8", "float8_e4m3fn": "fp8"}
)
_JNP_NAMES = MappingProxyType(
    {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "int8": "int8"}
    | {"fp8": "float8_e4m3fn"}
)


def dtype_name(dtype: object) -> str | None:
    """The short name ("fp16", "bf16", ...) of a name, alias or dtype object; None if the
    table does not know it."""
    key = dtype if isinstance(dtype, str) else getattr(dtype, "name", None)
    if key is None and isinstance(dtype, type):
        key = dtype.__name__  # a scalar type: jnp.float16, np.float32
    return DTYPE_ALIASES.get(str(key)) if key is not None else None


def dtype_bytes(dtype: object) -> int:
    """Bytes per element: the table's, else NumPy's itemsize ("int32", np.int64, ...)."""
    name = dtype_name(dtype)
    if name is not None:
        return DTYPE_BYTES[name]
    try:
        return int(np.dtype(dtype).itemsize)  # type: ignore[call-overload]
    except TypeError:
        raise SpecError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPE_ALIASES)}") from None


def to_jnp(dtype: Any) -> Any:
    """The `jax.numpy` dtype of a name or alias ("fp16" -> float16); others through jnp.dtype."""
    import jax.numpy as jnp

    name = dtype_name(dtype)
    return jnp.dtype(_JNP_NAMES[name] if name is not None else dtype)
