"""Review 82, hole 10: `wse_hpc.tlrmvm.testing.ecrc_ranks` (public API of wse_hpc) kept rank 1
for every tile at acc = 0, where saveUV keeps the full rank, and dropped the ragged edge tiles
of a shape nb does not divide. The oracle: saveUV's own search (zero padding to nb x nb, the
least k in 0..nb whose rebuilt tile misses by < acc ||A||_F, 0 kept as 1) on NumPy's SVD,
with the error measured on the rebuilt tile rather than summed from the singular values."""

from __future__ import annotations

import numpy as np
import pytest
from wse_hpc.tlrmvm.testing import ecrc_ranks, smooth_kernel


def _save_uv_ranks(a: np.ndarray, nb: int, acc: float) -> np.ndarray:
    """saveUV's rank table, by its bisection on a zero-padded copy (rankmodule 1)."""
    a = a.astype(np.result_type(a.dtype, np.float64))
    mt, nt = -(-a.shape[0] // nb), -(-a.shape[1] // nb)
    padded = np.zeros((mt * nb, nt * nb), a.dtype)
    padded[: a.shape[0], : a.shape[1]] = a
    bound = acc * np.linalg.norm(a)
    ranks = np.zeros((mt, nt), np.int64)
    for i, j in np.ndindex(mt, nt):
        tile = padded[i * nb : (i + 1) * nb, j * nb : (j + 1) * nb]
        u, s, vh = np.linalg.svd(tile)
        lo, hi = 0, nb
        while lo != hi:
            mid = (lo + hi) // 2
            miss = np.linalg.norm(tile - (u[:, :mid] * s[:mid]) @ vh[:mid])
            lo, hi = (lo, mid) if miss < bound else (mid + 1, hi)
        ranks[i, j] = max(lo, 1)
    return ranks


def test_acc_zero_keeps_the_full_rank():
    a = np.random.default_rng(0).random((8, 8))
    got = ecrc_ranks(a, 4, 0.0)
    np.testing.assert_array_equal(got, _save_uv_ranks(a, 4, 0.0))
    tiles = [a[i : i + 4, j : j + 4] for i in (0, 4) for j in (0, 4)]
    assert got.ravel().tolist() == [np.linalg.matrix_rank(t) for t in tiles] == [4] * 4


def test_acc_zero_on_a_rank_one_matrix_keeps_nb_as_save_uv_does():
    x = np.arange(1.0, 9.0)
    a = np.outer(x, x[::-1])
    np.testing.assert_array_equal(ecrc_ranks(a, 4, 0.0), _save_uv_ranks(a, 4, 0.0))
    np.testing.assert_array_equal(ecrc_ranks(a, 4, 1e-12), np.ones((2, 2), np.int64))


@pytest.mark.parametrize("acc", [1e-1, 1e-2, 1e-3, 1e-5])
def test_ragged_edge_tiles_are_ranked(acc):
    a = smooth_kernel(70, 45, complex_=False, seed=3)
    got = ecrc_ranks(a, 16, acc)
    assert got.shape == (5, 3)  # 70 = 4 x 16 + 6, 45 = 2 x 16 + 13
    np.testing.assert_array_equal(got, _save_uv_ranks(a, 16, acc))


def test_ragged_edge_tile_at_acc_zero_is_its_own_full_rank():
    a = np.random.default_rng(1).random((10, 10))
    got = ecrc_ranks(a, 4, 0.0)
    np.testing.assert_array_equal(got, [[4, 4, 2], [4, 4, 2], [2, 2, 2]])


@pytest.mark.parametrize("nb, acc", [(0, 1e-3), (2.5, 1e-3), (4, -1e-3), (4, float("nan"))])
def test_bad_arguments_are_refused(nb, acc):
    with pytest.raises(ValueError):
        ecrc_ranks(np.eye(8), nb, acc)


def test_compress_ranks_ragged_tiles_as_the_oracle_does():
    from wse_hpc.tlrmvm.compress import compress

    a = smooth_kernel(300, 500)  # 300 = 4 x 64 + 44, 500 = 7 x 64 + 52
    op = compress(a, nb=64, threshold=1e-3, rule="matrix")
    np.testing.assert_array_equal(op.ranks, ecrc_ranks(a, 64, 1e-3))
    np.testing.assert_array_equal(op.ranks, _save_uv_ranks(a, 64, 1e-3))
