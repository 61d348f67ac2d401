"""Tile low-rank (TLR) compression of a dense operator, and the NumPy TLR-MVM.

Contract: `compress(a, nb=..., threshold=eps)` cuts a real fp32 or complex64 matrix `a`
(M x N) into nb x nb tiles (edge tiles smaller) and replaces tile (i, j) by U_ij V_ij^H of
the smallest rank k_ij with ||A_ij - U_ij V_ij^H||_F <= eps * ||A_ij||_F (truncated SVD;
a randomized range finder first for tiles of at least `RANDOMIZED_MIN_TILE` rows). Summed
over tiles this gives ||A - A_tlr||_F <= eps * ||A||_F, hence for any x
||A x - A_tlr x|| <= eps * ||A||_F * ||x|| (the bound the tests check). Each tile is
compressed scaled to norm 1, so any fp32 entries compress alike; a tile whose norm is past
fp32's range, or a result that misses `eps`, is a TlrError. `eps` is relative to the norm,
as ecrc/tlrmvm's acc, so it means the same at any scale: a matrix all below fp32's normal
range (1.2e-38) is refused, no rank meets it there (hunt 64: 1e-44 entries reached 0.17).
The result is a `compressed.TlrOperator` (its stacked bases and `.npz` file are there;
`TlrError`, `load_operator` and `save_operator` are re-exported here). `tlrmvm_numpy` is
the plain NumPy TLR-MVM over those stacks (phase 1 GEMVs, reshuffle, phase 3 GEMVs): the
baseline and the oracle of the wafer kernel.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
from threadpoolctl import threadpool_limits

from wse_hpc.tlrmvm.compressed import (
    TlrError,
    TlrOperator,
    check_args,
    load_operator,
    save_operator,
)
from wse_hpc.tlrmvm.fp32 import FP32_MAX, FP32_TINY, largest, shown, to_fp32

__all__ = [
    "RANDOMIZED_MIN_TILE",
    "LazyMatrix",
    "TlrError",
    "TlrOperator",
    "check_matrix",
    "compress",
    "load_operator",
    "save_operator",
    "tlrmvm_numpy",
]

RANDOMIZED_MIN_TILE = 128  # tiles with at least this many rows and columns try randomized SVD


@runtime_checkable
class LazyMatrix(Protocol):
    """A matrix made tile by tile: `shape`, and `m[r0:r1, c0:c1]` gives a NumPy block."""

    shape: tuple[int, int]

    def __getitem__(self, key: tuple[slice, slice]) -> np.ndarray: ...


# -- validation ---------------------------------------------------------------------------
def check_matrix(a: np.ndarray, *, normal: bool = True) -> np.ndarray:
    """`a` as fp32 or complex64, or TlrError: 2-D, non-empty, finite, not zero and, with
    `normal` (a whole matrix, not one tile of it), not all below fp32's normal range."""
    a = np.asarray(a)
    if a.ndim != 2 or a.size == 0:
        raise TlrError(f"the operator must be a non-empty 2-D matrix, got shape {a.shape}")
    wide = a if normal and a.dtype.kind in "fc" else None  # its largest, before rounding
    a = to_fp32(a, "the operator", TlrError)
    if not np.isfinite(a).all():
        raise TlrError("the operator holds NaN or infinite values; clean it before compressing")
    big = largest(a if wide is None else wide)
    if not big:  # hunt 61: its relative error was 0/0 (NaN, a warning)
        raise TlrError(
            "the operator is zero: there is nothing to compress; give a matrix with non-zero "
            "entries"
        )
    if normal and big < FP32_TINY:  # a subnormal of 2^(k - 150) keeps k bits
        bits = max(0, int(np.floor(np.log2(big))) + 150)
        raise TlrError(
            f"the operator's entries (largest {shown(big)}) lie below fp32's normal range "
            f"(1.2e-38), where fp32 keeps {bits} of its 24 bits: scale the matrix up (entries "
            "within about 1e-30 .. 1e30)"
        )
    return a


# -- one tile -----------------------------------------------------------------------------
def _rank_for(s: np.ndarray, tol_sq: float) -> int:
    """Smallest k with sum(s[k:]**2) <= tol_sq (at least 1 unless s is all zero)."""
    tail = np.concatenate([np.cumsum((s**2)[::-1])[::-1], [0.0]])
    k = int(np.argmax(tail <= tol_sq))
    return max(k, 1) if s.size and s[0] > 0 else 0


def _svd_truncate(t: np.ndarray, tol_sq: float) -> tuple[np.ndarray, np.ndarray, float]:
    """(U with singular values folded in, V, squared Frobenius error dropped)."""
    u, s, vh = np.linalg.svd(t, full_matrices=False)
    s64 = s.astype(np.float64)
    k = _rank_for(s64, tol_sq)
    tail = float((s64[k:] ** 2).sum())
    return (u[:, :k] * s[:k]).astype(t.dtype), vh[:k].conj().T.astype(t.dtype), tail


def _randomized(t: np.ndarray, tol_sq: float, rng: np.random.Generator):
    """Adaptive randomized range finder (one power iteration) then an SVD of Q^H t; None
    when the sketch would not be much smaller than the tile."""
    m, n = t.shape
    ell = 32
    while 2 * ell <= min(m, n):
        g = rng.standard_normal((n, ell)).astype(t.real.dtype)
        if np.iscomplexobj(t):
            g = g + 1j * rng.standard_normal((n, ell)).astype(t.real.dtype)
        q, _ = np.linalg.qr(t @ g)
        q, _ = np.linalg.qr(t @ (t.conj().T @ q))
        b = q.conj().T @ t
        resid_sq = _norm(t - q @ b) ** 2
        if resid_sq <= 0.25 * tol_sq:  # leave most of the budget to the truncation below
            ub, vb, tail = _svd_truncate(b, tol_sq - resid_sq)
            return (q @ ub).astype(t.dtype), vb, tail + resid_sq
        ell *= 2
    return None


def _norm(t: np.ndarray) -> float:
    """||t||_F as a float64, t scaled by its largest magnitude first (hunt 62: fp32 squares
    of 1e20 entries overflowed, tol_sq was inf and every tile rank 1 at error 0.47)."""
    big = float(np.abs(t).max(initial=0))
    return big * float(np.linalg.norm(t / big)) if big > 0 else 0.0


def _compress_tile(t: np.ndarray, eps: float, rng: np.random.Generator, norm: float):
    """`_svd_truncate`'s triple for the tile `t` of Frobenius norm `norm`, found on the tile
    scaled to norm 1 (hunt 62: the sketch's t t^H q squares the entries, and 1e20 overflowed
    fp32 into a failed SVD), then scaled back."""
    if norm == 0:
        return _svd_truncate(t, 0.0)
    unit = t / np.float32(norm)
    got = _randomized(unit, eps**2, rng) if min(t.shape) >= RANDOMIZED_MIN_TILE else None
    u, v, tail = got if got is not None else _svd_truncate(unit, eps**2)
    return (u * np.float32(norm)).astype(t.dtype), v, tail * norm**2


# -- the operator -------------------------------------------------------------------------
def compress(
    a: np.ndarray | LazyMatrix,
    *,
    nb: int,
    threshold: float,
    seed: int = 0,
    blas_threads: int = 1,
) -> TlrOperator:
    """Compress `a` (M x N, real or complex) into nb x nb low-rank tiles at `threshold`.

    `a` is an array or a `LazyMatrix` whose tiles are made on demand (a large operator never
    held whole). BLAS runs with `blas_threads` threads per SVD (one is steadiest,
    shared/PLATFORM.md).
    """
    lazy = not isinstance(a, np.ndarray) and isinstance(a, LazyMatrix)
    if not lazy:
        a = check_matrix(a)
    check_args(a.shape, nb, threshold)
    m, n = a.shape
    mt, nt = -(-m // nb), -(-n // nb)
    rng = np.random.default_rng(seed)
    us = [[None] * nt for _ in range(mt)]
    vs = [[None] * nt for _ in range(mt)]
    dropped_sq = norm_sq = 0.0
    with threadpool_limits(limits=blas_threads):
        for i in range(mt):
            for j in range(nt):
                tile = a[i * nb : (i + 1) * nb, j * nb : (j + 1) * nb]
                if lazy:  # a far tile may be tiny beside the whole: not refused
                    tile = check_matrix(tile, normal=False)
                norm = _norm(tile)
                if norm > FP32_MAX:  # hunt 62: its singular values were inf, its bases NaN
                    raise TlrError(
                        f"tile ({i}, {j}) has norm {norm:.3g}, past fp32's largest value "
                        f"({FP32_MAX:.3g}): its singular values overflow; scale the matrix down"
                    )
                us[i][j], vs[i][j], tail = _compress_tile(tile, float(threshold), rng, norm)
                dropped_sq += tail
                norm_sq += norm**2
    ranks = np.array([[us[i][j].shape[1] for j in range(nt)] for i in range(mt)], np.int64)
    u_rows = tuple(np.ascontiguousarray(np.concatenate(us[i], axis=1)) for i in range(mt))
    v_cols = tuple(
        np.ascontiguousarray(np.concatenate([vs[i][j] for i in range(mt)], axis=1))
        for j in range(nt)
    )
    norm = float(np.sqrt(norm_sq))
    err = float(np.sqrt(dropped_sq)) / norm if norm > 0 else 0.0
    # hunt 62: never an operator that misses its threshold (the SVDs' figure: each tile drops
    # at most eps^2 of its squared norm, so only broken arithmetic misses it; the dense
    # check of `wse hpc tlrmvm compress` adds fp32 rounding, ~1e-7, that no rank removes)
    if not err <= float(threshold) * (1 + 1e-6):  # NaN included
        raise TlrError(
            f"compression reached ||A - A_tlr||_F / ||A||_F = {err:.3g}, above the threshold "
            f"{float(threshold):g}: the matrix's values defeat fp32 arithmetic; scale it "
            "(entries within about 1e-30 .. 1e30)"
        )
    return TlrOperator((m, n), int(nb), float(threshold), ranks, u_rows, v_cols, err)


def tlrmvm_numpy(op: TlrOperator, x: np.ndarray, *, adjoint: bool = False) -> np.ndarray:
    """y = A_tlr @ x (or A_tlr^H @ x) with plain NumPy GEMVs over the stacked bases.

    x: (N,) or (N, b) for the product, (M,) or (M, b) for the adjoint; same dtype family.
    """
    first, second = (op.u_rows, op.v_cols) if adjoint else (op.v_cols, op.u_rows)
    ranks = op.ranks.T if adjoint else op.ranks
    nb = op.nb
    # Phase 1: per tile column (rows for the adjoint), yv_j = V_j^H x_j.
    yv = [first[j].conj().T @ x[j * nb : (j + 1) * nb] for j in range(len(first))]
    # Phase 2: reshuffle into tile-row order; phase 3: y_i = U_i yu_i.
    out = []
    for i in range(len(second)):
        parts = [
            yv[j][int(ranks[:i, j].sum()) : int(ranks[: i + 1, j].sum())] for j in range(len(first))
        ]
        out.append(second[i] @ np.concatenate(parts, axis=0))
    return np.concatenate(out, axis=0)
