"""Test fixtures for TLR-MVM: small operators with known structure, shared by the tests.

`smooth_kernel(m, n, complex_=...)` is a 1/(1 + |s - t|) kernel between two point sets on a
line (low-rank off the diagonal, full rank on it), optionally with an oscillating phase;
`random_vectors` draws seeded vectors of the operator's dtype.
"""

from __future__ import annotations

import numpy as np

__all__ = ["smooth_kernel", "random_vectors"]


def smooth_kernel(m: int, n: int, *, complex_: bool = True, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    s = np.sort(rng.uniform(0, 10, m))
    t = np.sort(rng.uniform(0, 10, n))
    d = np.abs(s[:, None] - t[None, :])
    a = 1.0 / (1.0 + 3.0 * d)
    if complex_:
        return (a * np.exp(-1j * 2.0 * d)).astype(np.complex64)
    return a.astype(np.float32)


def random_vectors(n: int, b: int | None, dtype, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (n,) if b is None else (n, b)
    x = rng.standard_normal(shape)
    if np.issubdtype(np.dtype(dtype), np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)
