"""Test fixtures for TLR-MVM: small operators with known structure, shared by the tests.

`smooth_kernel(m, n, complex_=...)` is a 1/(1 + |s - t|) kernel between two point sets on a
line (low-rank off the diagonal, full rank on it), optionally with an oscillating phase;
`random_vectors` draws seeded vectors of the operator's dtype; `ecrc_ranks(a, nb, acc)` each
tile's rank as ecrc/tlrmvm's saveUV keeps it, from NumPy's SVD (the tests' oracle).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ecrc_ranks", "smooth_kernel", "random_vectors"]


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


def ecrc_ranks(a: np.ndarray, nb: int, acc: float) -> np.ndarray:
    """ecrc/tlrmvm's saveUV: per tile the least k >= 1 with ||A_ij - A_ij,k||_F < acc ||A||_F
    (in float64, or complex128 for a complex `a`), an (ceil(M/nb), ceil(N/nb)) table.

    Where no k meets the bound (acc = 0: the strict bound 0 is never met) the tile keeps its
    full rank, as saveUV's search over k in 0..nb ends at nb. Edge tiles are ragged (the rows
    and columns left past the last whole nb), as `compress` cuts them; saveUV pads them with
    zeros to nb x nb, which adds only zero singular values, so their ranks agree except at
    acc = 0, where saveUV keeps nb and this keeps the ragged tile's full rank min(h, w).
    ValueError for nb < 1 or acc < 0 (or not a number).
    """
    if not isinstance(nb, int | np.integer) or nb < 1:
        raise ValueError(f"tile size nb must be an integer >= 1, got {nb!r}")
    if not float(acc) >= 0.0:
        raise ValueError(f"acc must be a number >= 0 (a relative accuracy), got {acc!r}")
    a = a.astype(np.result_type(a.dtype, np.float64))
    bound = float(acc) * np.linalg.norm(a)
    ranks = np.zeros((-(-a.shape[0] // nb), -(-a.shape[1] // nb)), np.int64)
    for i, j in np.ndindex(*ranks.shape):
        s = np.linalg.svd(a[i * nb : (i + 1) * nb, j * nb : (j + 1) * nb], compute_uv=False)
        tail = np.sqrt(np.r_[np.cumsum((s**2)[::-1])[::-1], 0.0])
        met = np.flatnonzero(tail < bound)
        ranks[i, j] = max(int(met[0]) if met.size else s.size, 1)
    return ranks
