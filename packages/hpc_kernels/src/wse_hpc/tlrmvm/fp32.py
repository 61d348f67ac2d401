"""What an fp32 TLR operator can hold: the cast of a matrix or a basis to the wafer's dtype.

The wafer stores and multiplies a TLR operator in fp32 (complex64 when complex), whatever
dtype the input held. `to_fp32(a, what, error)` is that cast, or `error(line)` with one line
naming why there can be none: a dtype that holds no real or complex numbers (bool,
timedelta64, datetime64, strings, records), or a finite value past fp32's range, found in
`a`'s own precision (hunt 64: a long double of 1e4000 was inf as a Python float, so the
range check was skipped, and the cast printed NumPy's overflow warning before the error).
The cast never warns. NaN and inf pass through: the caller's finiteness check names them.
ml_dtypes' floats (bfloat16, the float8s: NumPy's kind 'V') are real numbers that fp32
holds exactly, taken as float16 is (hunt 78: bfloat16 was refused as "no numbers").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["FP32_MAX", "FP32_TINY", "largest", "shown", "to_fp32"]

FP32_MAX = float(np.finfo(np.float32).max)  # 3.4e38
FP32_TINY = float(np.finfo(np.float32).tiny)  # 1.2e-38: below it fp32 keeps fewer than 24 bits
_BLOCK_VALUES = 1 << 20  # `largest` reads this many values at a time


def largest(a: np.ndarray) -> np.floating:
    """The largest |real| or |imag| part of `a` in `a`'s own precision (0 when empty), a
    block of rows at a time (hunt 69: |a| of a whole complex128 matrix was 8 bytes a value
    beside it)."""
    parts = (a.real, a.imag) if np.iscomplexobj(a) else (a,)
    if a.ndim == 0 or len(a) == 0:
        return max(np.abs(p).max(initial=0) for p in parts)
    rows = max(1, _BLOCK_VALUES // max(1, a[0].size))
    blocks = (p[r : r + rows] for p in parts for r in range(0, len(p), rows))
    return max(np.abs(b).max(initial=0) for b in blocks)


def shown(x: np.floating | float) -> str:
    """A magnitude of any float width as text: 1e+300, 1e+4000, 1e-44, 3.4e+38."""
    return np.format_float_scientific(x, precision=2, trim="-", exp_digits=2)


def _ml_float(dtype: np.dtype) -> bool:
    """An ml_dtypes float (bfloat16, float8_*): kind 'V' to NumPy; `ml_dtypes.finfo` knows
    it (and refuses records, raw bytes and ml_dtypes' ints)."""
    try:
        import ml_dtypes  # JAX's own dependency: present wherever a bfloat16 array is

        ml_dtypes.finfo(dtype)
    except (ImportError, ValueError, TypeError):
        return False
    return True


def to_fp32(a: np.ndarray, what: str, error: Callable[[str], Exception]) -> np.ndarray:
    """`a` as float32, or complex64 when complex (no copy when it already is); raises
    `error(line)`, the line starting with `what`, where there is no such cast (module doc)."""
    # hunt 64: timedelta64 is an np.number (a Traceback); hunt 78: bfloat16 is kind 'V'
    if a.dtype.kind not in "iufc" and not _ml_float(a.dtype):
        raise error(f"{what} must hold real or complex numbers, got dtype {a.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is found below
        out = a.astype(np.complex64 if np.iscomplexobj(a) else np.float32, copy=False)
    if a.dtype.itemsize <= out.dtype.itemsize or np.isfinite(out).all():
        return out
    lost = a[~np.isfinite(out)]  # the few values that became inf or NaN
    lost = lost[np.isfinite(lost)]  # ... from finite ones: overflow
    if lost.size:
        raise error(f"{what} holds {shown(largest(lost))}, beyond fp32's range (+-3.4e38)")
    return out
