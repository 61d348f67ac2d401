"""Compression: error bounds against the dense product, save/load, bad input."""

import numpy as np
import pytest
from wse_core.errors import WseError
from wse_hpc.tlrmvm import TlrError, compress, load_operator, save_operator, tlrmvm_numpy
from wse_hpc.tlrmvm.compress import RANDOMIZED_MIN_TILE
from wse_hpc.tlrmvm.seismic import green_operator, load_matrix
from wse_hpc.tlrmvm.testing import random_vectors, smooth_kernel


@pytest.mark.parametrize("complex_", [True, False])
@pytest.mark.parametrize("eps", [1e-2, 1e-4])
def test_error_within_threshold_bound(complex_, eps):
    a = smooth_kernel(75, 61, complex_=complex_)
    op = compress(a, nb=16, threshold=eps, rule="tile")  # the rule bounding the whole by eps
    assert op.dtype == a.dtype and op.tiles == (5, 4)
    # Per-tile truncation gives ||A - A_tlr||_F <= eps ||A||_F (float32 rounding on top).
    assert np.linalg.norm(op.dense() - a) <= eps * np.linalg.norm(a) * 1.01 + 1e-5
    x = random_vectors(61, None, a.dtype)
    y, ye = tlrmvm_numpy(op, x), a @ x
    assert np.linalg.norm(y - ye) <= eps * np.linalg.norm(a) * np.linalg.norm(x) * 1.01 + 1e-5


def test_tighter_threshold_means_higher_rank_and_lower_ratio():
    a = green_operator(n=256)
    loose, tight = (compress(a, nb=32, threshold=t) for t in (1e-2, 1e-4))
    assert (tight.ranks >= loose.ranks).all() and tight.ranks.sum() > loose.ranks.sum()
    assert loose.compression_ratio > tight.compression_ratio > 1.0


def test_randomized_path_meets_bound():
    a = green_operator(n=2 * RANDOMIZED_MIN_TILE)
    op = compress(a, nb=RANDOMIZED_MIN_TILE, threshold=1e-3, rule="tile")
    assert np.linalg.norm(op.dense() - a) <= 1e-3 * np.linalg.norm(a) * 1.01
    assert op.ranks.max() < RANDOMIZED_MIN_TILE // 2  # the sketch, not a full SVD, was kept


def test_adjoint_numpy_matches_dense_adjoint():
    a = smooth_kernel(40, 50)
    op = compress(a, nb=16, threshold=1e-3)
    y = random_vectors(40, 3, a.dtype)
    np.testing.assert_allclose(
        tlrmvm_numpy(op, y, adjoint=True), op.dense().conj().T @ y, rtol=1e-4, atol=1e-4
    )


def test_save_load_round_trip(tmp_path):
    a = smooth_kernel(37, 45)
    op = compress(a, nb=8, threshold=1e-3)
    path = save_operator(op, tmp_path / "op.npz")
    back = load_operator(path)
    assert back.shape == op.shape and back.nb == op.nb and back.threshold == op.threshold
    np.testing.assert_array_equal(back.ranks, op.ranks)
    np.testing.assert_array_equal(back.dense(), op.dense())


def test_load_rejects_foreign_file(tmp_path):
    np.savez(tmp_path / "x.npz", a=np.zeros(3))
    with pytest.raises(TlrError, match="not a TLR operator"):
        load_operator(tmp_path / "x.npz")
    with pytest.raises(TlrError, match="cannot read"):
        load_operator(tmp_path / "missing.npz")


@pytest.mark.parametrize("threshold", [np.nan, np.inf, 0.0, 2.0])
def test_load_refuses_a_threshold_compress_never_writes(tmp_path, threshold):
    path = save_operator(compress(smooth_kernel(37, 45), nb=8, threshold=1e-3), tmp_path / "op.npz")
    with np.load(path) as f:
        data = dict(f)
    data["threshold"] = np.asarray(threshold)
    np.savez(path, **data)
    with pytest.raises(TlrError, match=r"is corrupt: threshold must lie in \(0, 1\)"):
        load_operator(path)


@pytest.mark.parametrize(
    "a, nb, eps, match",
    [
        (np.zeros(5), 2, 1e-3, "2-D"),
        (np.ones((4, 4)), 0, 1e-3, "nb"),
        (np.ones((4, 4)), 5, 1e-3, "nb"),
        (np.ones((4, 4)), 2, 1.0, "threshold"),
        (np.ones((4, 4)), 2, 0.0, "threshold"),
        (np.full((4, 4), np.nan), 2, 1e-3, "NaN"),
        (np.array([["a", "b"]]), 1, 1e-3, "numbers"),
    ],
)
def test_bad_input_is_a_clear_error(a, nb, eps, match):
    with pytest.raises(TlrError, match=match):
        compress(a, nb=nb, threshold=eps)


def test_load_matrix_npy(tmp_path):
    a = smooth_kernel(6, 5)
    np.save(tmp_path / "a.npy", a)
    np.testing.assert_array_equal(load_matrix(tmp_path / "a.npy"), a)
    np.save(tmp_path / "v.npy", np.zeros(3))
    with pytest.raises(TlrError, match="2-D"):
        load_matrix(tmp_path / "v.npy")


def test_reported_error_is_the_achieved_error(tmp_path):
    a = smooth_kernel(50, 44)
    op = compress(a, nb=16, threshold=1e-3)
    achieved = np.linalg.norm(op.dense() - a) / np.linalg.norm(a)
    assert op.error_fro == pytest.approx(achieved, rel=0.05, abs=1e-6)  # fp32 rounding
    assert load_operator(save_operator(op, tmp_path / "e.npz")).error_fro == op.error_fro


@pytest.mark.parametrize("b", [None, 3])
def test_numpy_baselines_match_reference(b):
    from wse_hpc.tlrmvm.baseline import padded_fn, stacked_fn

    op = compress(smooth_kernel(45, 38), nb=8, threshold=1e-3)
    x = random_vectors(38, b, np.complex64)
    ref = tlrmvm_numpy(op, x)
    for fn in (stacked_fn(op), padded_fn(op)):
        np.testing.assert_allclose(fn(x), ref, rtol=1e-4, atol=1e-5)


def _forged_member(count: int) -> bytes:
    head = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({count},), }}".ljust(117)
    raw = b"\x93NUMPY\x01\x00" + (len(head) + 1).to_bytes(2, "little") + (head + "\n").encode()
    return raw + bytes(64)


def test_load_refuses_a_forged_member_header_before_allocating(tmp_path):
    """Hunt 56 (files): an operator whose u.npy header claims 10^12 values was a NumPy
    MemoryError traceback (np.load allocates the claimed array, then reads)."""
    import io
    import zipfile

    path = save_operator(compress(smooth_kernel(24, 24), nb=8, threshold=1e-3), tmp_path / "op")
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files}
    with zipfile.ZipFile(tmp_path / "bad.npz", "w") as z:
        for k, v in arrays.items():
            buf = io.BytesIO()
            np.save(buf, v)
            z.writestr(f"{k}.npy", _forged_member(10**12) if k == "u" else buf.getvalue())
    with pytest.raises(WseError, match=r"^TLR operator .*bad.npz' \(its array headers\) needs "
                       r"3.64 TiB of host memory"):  # fmt: skip
        load_operator(tmp_path / "bad.npz")
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(TlrError, match=r"single array \(.npy\), not an .npz archive"):
        load_operator(tmp_path / "one.npy")
