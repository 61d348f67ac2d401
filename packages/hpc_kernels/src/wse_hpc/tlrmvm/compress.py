"""Tile low-rank (TLR) compression of a dense operator, and the NumPy TLR-MVM.

Contract: `compress(a, nb=..., threshold=eps, rule=...)` cuts a real fp32 or complex64
matrix `a` (M x N) into nb x nb tiles (edge tiles smaller) and replaces tile (i, j) by
U_ij V_ij^H of the smallest rank k_ij (at least 1 for a tile that is not zero) with
||A_ij - U_ij V_ij^H||_F <= eps * ||A||_F under `rule="matrix"` (the default: ecrc/tlrmvm's
acc, `TLRMVM_Util.saveUV`, whose bound is the whole matrix's norm, so a small far tile keeps
few ranks), or <= eps * ||A_ij||_F under `rule="tile"` (stricter: 1.45-2.2x the ranks of
the synthetic slices, n 1024-9801, nb 64-256; hunt 71: it was the only rule, though the
words said ecrc's). A nonzero tile that rank 0 would meet keeps rank 1, as ecrc's `saveUV`
keeps it (it writes rank 0 as rank 1 with zero bases, so its rank file and compression
rate count 1); here that rank 1 is the tile's leading singular pair, the same storage and
work and a smaller error (hunt 80: 19 such tiles of 40 on a 300 x 500 matrix, nb 64,
threshold 1e-3; the printed compression is ecrc's). Truncated SVD; a randomized range
finder first for tiles of at least `RANDOMIZED_MIN_TILE` rows.
Summed over the T tiles, ||A - A_tlr||_F / ||A||_F is at most
eps ("tile") or eps * sqrt(T) ("matrix"): `TlrOperator.error_bound`, and for any x
||A x - A_tlr x|| <= error_bound * ||A||_F * ||x||. The tile's bound is certified on what is
stored: each tile's U V^H is rebuilt in fp32 and measured against the tile, and a tile whose
fp32 rounding pushes it past the bound gets the next ranks of a full SVD until it does not;
the operator's `error_fro` is that achieved error (`achieved_error` measures any operator
against its matrix the same way; hunt 69: the SVDs' dropped tail was recorded, 0 at full
rank where fp32 gives ~1e-7). `eps` is at least `compressed.LEAST_THRESHOLD`: below it
rounding, not rank, decides the error. Each tile is compressed scaled to norm 1, so any fp32
entries compress alike; a tile whose norm is past fp32's range, or a result that misses its
bound, is a TlrError. Under either rule `eps` is relative to a norm, so it means the same at
any scale: a matrix all below fp32's normal range (1.2e-38) is refused, no rank meets it
there (hunt 64: 1e-44 entries reached 0.17).
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
    FP32_ROUNDING,
    LEAST_THRESHOLD,
    RULES,
    TlrError,
    TlrOperator,
    check_args,
    least_nb,
    load_operator,
    save_operator,
    threshold_problem,
    tiles_problem,
)
from wse_hpc.tlrmvm.fp32 import FP32_MAX, FP32_TINY, largest, shown, to_fp32

__all__ = [
    "FP32_ROUNDING",
    "HEAP_SLACK",
    "LEAST_THRESHOLD",
    "RANDOMIZED_MIN_TILE",
    "RULES",
    "SVD_WORK_TILES",
    "LazyMatrix",
    "TlrError",
    "TlrOperator",
    "achieved_error",
    "bound_words",
    "check_form",
    "check_length",
    "check_matrix",
    "compress",
    "compress_host_bytes",
    "least_nb",
    "load_operator",
    "save_operator",
    "threshold_problem",
    "tiles_problem",
    "tlrmvm_numpy",
]

RANDOMIZED_MIN_TILE = 128  # tiles with at least this many rows and columns try randomized SVD


@runtime_checkable
class LazyMatrix(Protocol):
    """A matrix made tile by tile: `shape`, and `m[r0:r1, c0:c1]` gives a NumPy block."""

    shape: tuple[int, int]

    def __getitem__(self, key: tuple[slice, slice]) -> np.ndarray: ...


# -- validation ---------------------------------------------------------------------------
def check_form(a: np.ndarray) -> None:
    """TlrError unless `a` (an array or a file's mapped array: its header alone is read) is
    a non-empty 2-D matrix."""
    if a.ndim != 2 or a.size == 0:
        raise TlrError(f"the operator must be a non-empty 2-D matrix, got shape {a.shape}")


def check_matrix(a: np.ndarray, *, normal: bool = True) -> np.ndarray:
    """`a` as fp32 or complex64, or TlrError: 2-D, non-empty, finite, not zero and, with
    `normal` (a whole matrix, not one tile of it), not all below fp32's normal range."""
    a = np.asarray(a)
    check_form(a)
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


def _tile_error(u: np.ndarray, v: np.ndarray, t: np.ndarray) -> float:
    """||t - U V^H||_F, U V^H rebuilt in fp32 as `TlrOperator.dense` rebuilds it (contiguous
    U and V: the same BLAS call wherever it is measured), the norm in float64."""
    return _norm(np.ascontiguousarray(u) @ np.ascontiguousarray(v).conj().T - t)


def _certified(t: np.ndarray, eps: float, rng: np.random.Generator, norm: float):
    """(U, V, error) of the tile `t` of norm `norm`: the truncation's rank, or where the fp32
    rebuild misses eps * norm by no more than its rounding (FP32_ROUNDING) on top of the
    dropped tail, the least rank of the full SVD that meets it (the full rank if none does).
    A larger miss is broken arithmetic, kept for `compress` to refuse, not patched."""
    u, v, _ = _compress_tile(t, eps, rng, norm)
    err = _tile_error(u, v, t)
    if err <= eps * norm or err > (eps + FP32_ROUNDING) * norm:
        return u, v, err
    uu, s, vh = np.linalg.svd(t / np.float32(norm), full_matrices=False)

    def at(k: int):
        uk = ((uu[:, :k] * s[:k]).astype(t.dtype) * np.float32(norm)).astype(t.dtype)
        vk = vh[:k].conj().T.astype(t.dtype)
        return uk, vk, _tile_error(uk, vk, t)

    lo, hi = u.shape[1] + 1, s.size
    best = at(hi)
    while lo < hi:  # the least passing rank; the error falls as the rank grows
        mid = (lo + hi) // 2
        got = at(mid)
        lo, hi, best = (lo, mid, got) if got[2] <= eps * norm else (mid + 1, hi, best)
    return best


# -- the operator -------------------------------------------------------------------------
def _tiles(a: np.ndarray | LazyMatrix, nb: int, lazy: bool):
    """((i, j), tile) in row-major order; a lazy matrix's tiles checked as they are made."""
    mt, nt = -(-a.shape[0] // nb), -(-a.shape[1] // nb)
    for i, j in np.ndindex(mt, nt):
        tile = a[i * nb : (i + 1) * nb, j * nb : (j + 1) * nb]
        # a far tile may be tiny beside the whole: not refused
        yield (i, j), check_matrix(tile, normal=False) if lazy else tile


def _matrix_norm(a: np.ndarray | LazyMatrix, nb: int, lazy: bool) -> float:
    """||A||_F in float64, summed over the tiles as `compress` sums them (no whole copy of
    `a`; a lazy matrix's tiles are made here once more: the rule needs it before any tile)."""
    return float(np.sqrt(sum(_norm(t) ** 2 for _, t in _tiles(a, nb, lazy))))


def compress(
    a: np.ndarray | LazyMatrix,
    *,
    nb: int,
    threshold: float,
    rule: str = "matrix",
    seed: int = 0,
    blas_threads: int = 1,
) -> TlrOperator:
    """Compress `a` (M x N, real or complex) into nb x nb low-rank tiles at `threshold`,
    relative to ||A||_F for every tile (`rule="matrix"`, ecrc/tlrmvm's acc) or to each tile's
    own norm (`rule="tile"`); see the module docstring.

    `a` is an array or a `LazyMatrix` whose tiles are made on demand (a large operator never
    held whole). BLAS runs with `blas_threads` threads per SVD (one is steadiest,
    shared/PLATFORM.md). Host memory: `compress_host_bytes`.
    """
    if rule not in RULES:
        raise TlrError(f"unknown threshold rule {rule!r}; use one of {', '.join(RULES)}")
    lazy = not isinstance(a, np.ndarray) and isinstance(a, LazyMatrix)
    if not lazy:
        a = check_matrix(a)
    check_args(a.shape, nb, threshold)
    m, n = a.shape
    mt, nt = -(-m // nb), -(-n // nb)
    whole = _matrix_norm(a, nb, lazy) if rule == "matrix" else None
    rng = np.random.default_rng(seed)
    ranks = np.zeros((mt, nt), np.int64)
    u_rows, vs = [], [[None] * nt for _ in range(mt)]
    err_sq = norm_sq = 0.0
    us = []
    with threadpool_limits(limits=blas_threads):
        for (i, j), tile in _tiles(a, nb, lazy):
            norm = _norm(tile)
            if norm > FP32_MAX:  # hunt 62: its singular values were inf, its bases NaN
                raise TlrError(
                    f"tile ({i}, {j}) has norm {norm:.3g}, past fp32's largest value "
                    f"({FP32_MAX:.3g}): its singular values overflow; scale the matrix down"
                )
            # the tile's bound as a share of its own norm (`_certified` works on the tile
            # scaled to norm 1); under "matrix" it may pass 1: rank 1 then does
            eps = float(threshold) * (whole / norm if whole is not None and norm > 0 else 1.0)
            u, vs[i][j], err = _certified(tile, eps, rng, norm)
            us.append(u)
            ranks[i, j] = u.shape[1]
            err_sq += err**2
            norm_sq += norm**2
            if j == nt - 1:  # a row's U stacked as soon as it is done (hunt 69: every
                # tile's U and V held beside their stacks was twice the bases, the peak)
                u_rows.append(np.ascontiguousarray(np.concatenate(us, axis=1)))
                us = []
    v_cols = tuple(_stack_column(vs, j) for j in range(nt))
    err = float(np.sqrt(err_sq)) / float(np.sqrt(norm_sq)) if norm_sq > 0 else 0.0
    op = TlrOperator((m, n), int(nb), float(threshold), ranks, tuple(u_rows), v_cols, err, rule)
    # hunt 62: never an operator that misses its bound; each tile met its own, so only
    # broken arithmetic (NaN included) misses it here
    if not err <= op.error_bound * (1 + 1e-9):
        raise TlrError(
            f"compression reached ||A - A_tlr||_F / ||A||_F = {err:.3g}, above the "
            f"{bound_words(op)}: the matrix's values defeat fp32 arithmetic; scale it "
            "(entries within about 1e-30 .. 1e30)"
        )
    return op


def bound_words(op: TlrOperator, name: str = "threshold") -> str:
    """The bound in words, the threshold called `name` (the CLI's "--threshold"): the
    threshold ("tile"), or the "matrix" rule's bound and its factor."""
    if op.rule == "tile":
        return f"{name} {op.threshold:g}"
    return f"bound {op.error_bound:.3g} ({name} {op.threshold:g} x sqrt({op.ranks.size} tiles))"


def _stack_column(vs: list[list], j: int) -> np.ndarray:
    """Tile column j's V side by side, each tile's V released once stacked."""
    out = np.ascontiguousarray(np.concatenate([row[j] for row in vs], axis=1))
    for row in vs:
        row[j] = None
    return out


def achieved_error(op: TlrOperator, a: np.ndarray) -> float:
    """||A - A_tlr||_F / ||A||_F of `op` against the fp32 matrix `a` it was compressed from,
    measured as `compress` measures it (tile by tile, U V^H rebuilt in fp32, norms in
    float64; no dense copy of either)."""
    err_sq = norm_sq = 0.0
    with threadpool_limits(limits=1):  # compress's BLAS: the same figure, bit for bit
        for i, j in np.ndindex(*op.tiles):
            tile = a[op.tile_rows(i), op.tile_cols(j)]
            err_sq += _tile_error(op.u(i, j), op.v(i, j), tile) ** 2
            norm_sq += _norm(tile) ** 2
    return float(np.sqrt(err_sq)) / float(np.sqrt(norm_sq)) if norm_sq > 0 else 0.0


# Host memory of one tile's SVD, in tiles of its own bytes: NumPy's gesdd (its copy of the
# tile, U, V^H and LAPACK's work arrays) peaked 17-21 tiles above the tile, square tiles of
# 500-2000, float32 and complex64 (RSS sampled every 2 ms, 2026-12-05).
SVD_WORK_TILES = 20
# What the heap adds to the sum of arrays (chunk headers, pages, frees not yet reused): the
# model's peaks measured 0.99-1.00 of its sum at full rank, nb 50-200 (max RSS less the
# refused command's, complex64 2000 x 2000 and float32 3000 x 3000 files, 2026-12-05).
HEAP_SLACK = 1.1


def compress_host_bytes(
    shape: tuple[int, int], nb: int, *, complex_: bool, read_itemsize: int = 0
) -> int:
    """Peak host bytes of compressing an M x N matrix in tiles of nb and saving it, at full
    rank (the most bases), the larger of:
    - reading it: its file's values mapped (`read_itemsize` bytes each; 0 for a matrix made
      in memory), their fp32 copy and a byte of mask each;
    - compressing it: the fp32 matrix, its bases (at most twice it), the tiles' V freed as
      they are stacked, which the heap keeps (at most the bases' half), one tile row of U or
      column of V being stacked, and one tile's SVD work (SVD_WORK_TILES).
    Saving streams the bases (`save_operator`). Hunt 69: 24 B a value was counted for a
    complex128 file; the command peaked at ~60 (max RSS less the import's)."""
    m, n = shape
    f = 8 if complex_ else 4
    h, w = min(nb, m), min(nb, n)
    read = (read_itemsize + f + 1) * m * n
    work = 4 * f * m * n + f * (h * n + m * w) + SVD_WORK_TILES * f * h * w
    return int(HEAP_SLACK * max(read, work))


def check_length(x: np.ndarray, n: int, what: str = "x") -> None:
    """TlrError unless x is (n,) or (n, b): the one length check of a product's vector
    (`tlrmvm_numpy`, `engine.as_batch`)."""
    if x.ndim not in (1, 2) or x.shape[0] != n:
        raise TlrError(f"{what} must have length {n} (shape ({n},) or ({n}, b)), got {x.shape}")


def tlrmvm_numpy(op: TlrOperator, x: np.ndarray, *, adjoint: bool = False) -> np.ndarray:
    """y = A_tlr @ x (or A_tlr^H @ x) with plain NumPy GEMVs over the stacked bases.

    x: (N,) or (N, b) for the product, (M,) or (M, b) for the adjoint; same dtype family.
    TlrError for another length (hunt 69: a longer x was cut to N without a word).
    """
    x = np.asarray(x)
    check_length(x, op.shape[0] if adjoint else op.shape[1], "y" if adjoint else "x")
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
