"""Tile low-rank (TLR) compression of a dense operator, its `.npz` form and NumPy products.

Contract: `compress(a, nb=..., threshold=eps)` cuts a real fp32 or complex64 matrix `a`
(M x N) into nb x nb tiles (edge tiles smaller) and replaces tile (i, j) by U_ij V_ij^H of
the smallest rank k_ij with ||A_ij - U_ij V_ij^H||_F <= eps * ||A_ij||_F (truncated SVD;
a randomized range finder first for tiles of at least `RANDOMIZED_MIN_TILE` rows). Summed
over tiles this gives ||A - A_tlr||_F <= eps * ||A||_F, hence for any x
||A x - A_tlr x|| <= eps * ||A||_F * ||x|| (the bound the tests check). Each tile is
compressed scaled to norm 1, so any fp32 entries compress alike; a tile whose norm is past
fp32's range, or a result that misses `eps`, is a TlrError.

Bases are stacked as ecrc/tlrmvm stores them: `v_cols[j]` is (n_j, K_j) with the V_ij of
tile column j side by side in tile-row order, `u_rows[i]` is (m_i, K_i) with the U_ij of tile
row i in tile-column order. Singular values are folded into U. `tlrmvm_numpy` is the plain
NumPy TLR-MVM over those stacks (phase 1 GEMVs, reshuffle, phase 3 GEMVs): the baseline and
the oracle of the wafer kernel.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
from threadpoolctl import threadpool_limits
from wse_core.errors import NUMPY_FILE_ERRORS, WseError, numpy_file_problem
from wse_core.host.memory import HostMemoryError
from wse_core.host.readers import open_npz, require_npz

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
_FP32_MAX = float(np.finfo(np.float32).max)
_FORMAT = 1


class TlrError(WseError):
    """Bad input to TLR compression or the TLR-MVM (shape, tile size, threshold, values)."""


@runtime_checkable
class LazyMatrix(Protocol):
    """A matrix made tile by tile: `shape`, and `m[r0:r1, c0:c1]` gives a NumPy block."""

    shape: tuple[int, int]

    def __getitem__(self, key: tuple[slice, slice]) -> np.ndarray: ...


@dataclasses.dataclass(frozen=True, eq=False)
class TlrOperator:
    """A compressed M x N operator: per-tile ranks and the stacked bases (see module doc)."""

    shape: tuple[int, int]
    nb: int
    threshold: float
    ranks: np.ndarray  # (mt, nt) int64
    u_rows: tuple[np.ndarray, ...]  # mt arrays (m_i, K_i)
    v_cols: tuple[np.ndarray, ...]  # nt arrays (n_j, K_j)
    error_fro: float = float("nan")  # achieved ||A - A_tlr||_F / ||A||_F (from the SVDs)

    @property
    def dtype(self) -> np.dtype:
        return self.u_rows[0].dtype

    @property
    def tiles(self) -> tuple[int, int]:
        return self.ranks.shape  # type: ignore[return-value]

    def tile_rows(self, i: int) -> slice:
        return slice(i * self.nb, min((i + 1) * self.nb, self.shape[0]))

    def tile_cols(self, j: int) -> slice:
        return slice(j * self.nb, min((j + 1) * self.nb, self.shape[1]))

    def u(self, i: int, j: int) -> np.ndarray:
        """U_ij, (m_i, k_ij)."""
        off = int(self.ranks[i, :j].sum())
        return self.u_rows[i][:, off : off + int(self.ranks[i, j])]

    def v(self, i: int, j: int) -> np.ndarray:
        """V_ij, (n_j, k_ij); the tile is u(i, j) @ v(i, j).conj().T."""
        off = int(self.ranks[:i, j].sum())
        return self.v_cols[j][:, off : off + int(self.ranks[i, j])]

    @property
    def bases_bytes(self) -> int:
        """Bytes of all U and V bases (what one MVM reads)."""
        return sum(a.nbytes for a in self.u_rows) + sum(a.nbytes for a in self.v_cols)

    @property
    def dense_bytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.dtype.itemsize

    @property
    def compression_ratio(self) -> float:
        """Dense bytes over bases bytes (> 1 means smaller)."""
        return self.dense_bytes / max(self.bases_bytes, 1)

    def dense(self) -> np.ndarray:
        """The TLR approximation as a dense matrix (for tests and small cases)."""
        out = np.zeros(self.shape, self.dtype)
        mt, nt = self.tiles
        for i in range(mt):
            for j in range(nt):
                out[self.tile_rows(i), self.tile_cols(j)] = self.u(i, j) @ self.v(i, j).conj().T
        return out

    def describe(self) -> dict[str, object]:
        return {
            "shape": list(self.shape),
            "nb": self.nb,
            "tiles": list(self.tiles),
            "threshold": self.threshold,
            "dtype": str(self.dtype),
            "rank_mean": float(self.ranks.mean()),
            "rank_max": int(self.ranks.max()),
            "bases_bytes": self.bases_bytes,
            "dense_bytes": self.dense_bytes,
            "compression_ratio": self.compression_ratio,
            "error_fro": self.error_fro,
        }


# -- validation ---------------------------------------------------------------------------
def check_matrix(a: np.ndarray) -> np.ndarray:
    """`a` as fp32 or complex64, or TlrError: 2-D, non-empty, finite."""
    a = np.asarray(a)
    if a.ndim != 2 or a.size == 0:
        raise TlrError(f"the operator must be a non-empty 2-D matrix, got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.number) or np.issubdtype(a.dtype, np.bool_):
        raise TlrError(f"the operator must hold real or complex numbers, got dtype {a.dtype}")
    dtype = np.complex64 if np.iscomplexobj(a) else np.float32
    parts = (a.real, a.imag) if np.iscomplexobj(a) else (a,)
    big = max(float(np.abs(p).max(initial=0)) for p in parts) if a.dtype.itemsize > 4 else 0.0
    if math.isfinite(big) and big > float(np.finfo(np.float32).max):  # NaN, inf: below
        raise TlrError(f"the operator holds {big:.3g}, beyond fp32's range (+-3.4e38)")
    a = a.astype(dtype, copy=False)
    if not np.isfinite(a).all():
        raise TlrError("the operator holds NaN or infinite values; clean it before compressing")
    if not a.any():  # hunt 61: its relative error was 0/0 (NaN, a warning)
        raise TlrError(
            "the operator is zero: there is nothing to compress; give a matrix with non-zero "
            "entries"
        )
    return a


def _check_args(shape: tuple[int, int], nb: int, threshold: float) -> None:
    if not isinstance(nb, int | np.integer) or nb <= 0 or nb > max(shape):
        raise TlrError(f"tile size nb must be an integer in 1..{max(shape)}, got {nb!r}")
    if not 0.0 < float(threshold) < 1.0:
        raise TlrError(f"threshold must lie in (0, 1) (a relative accuracy), got {threshold!r}")


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
    _check_args(a.shape, nb, threshold)
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
                if lazy:
                    tile = check_matrix(tile)
                norm = _norm(tile)
                if norm > _FP32_MAX:  # hunt 62: its singular values were inf, its bases NaN
                    raise TlrError(
                        f"tile ({i}, {j}) has norm {norm:.3g}, past fp32's largest value "
                        f"({_FP32_MAX:.3g}): its singular values overflow; scale the matrix down"
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


# -- .npz ---------------------------------------------------------------------------------
def save_operator(op: TlrOperator, path: str | Path) -> Path:
    """Write `op` to an uncompressed `.npz` (bases flattened, ranks and shape kept)."""
    from wse_core.host.atomic import atomic_path

    path = Path(path)
    path = path if path.suffix == ".npz" else path.with_name(path.name + ".npz")  # savez's
    with atomic_path(path) as tmp:  # the CLI checked the nearest folder
        _savez_operator(op, tmp)
    return path


def _savez_operator(op: TlrOperator, path: Path) -> None:
    np.savez(
        path,
        format=np.int64(_FORMAT),
        shape=np.array(op.shape, np.int64),
        nb=np.int64(op.nb),
        threshold=np.float64(op.threshold),
        ranks=op.ranks,
        u=np.concatenate([u.ravel() for u in op.u_rows]),
        v=np.concatenate([v.ravel() for v in op.v_cols]),
        error_fro=np.float64(op.error_fro),
    )


def _not_this_host(budget: int) -> str:
    return "this operator was not written by this machine's wse, or needs a larger host"


def load_operator(path: str | Path) -> TlrOperator:
    """Read an operator written by `save_operator`; TlrError for a missing, foreign or
    damaged file (one line naming what is wrong)."""
    try:  # mmap: a .npy given here is not read whole (its header may claim 10^12 values)
        what = f"TLR operator {str(path)!r}"
        z = open_npz(Path(path), what, mmap_mode="r")
        with z:
            require_npz(z, what, fits=_not_this_host)
            data = {k: z[k] for k in z.files}
    except HostMemoryError:  # its own line (a WseError is a ValueError)
        raise
    except NUMPY_FILE_ERRORS as e:
        why = numpy_file_problem(e)
        raise TlrError(f"cannot read TLR operator {str(path)!r}: {why}") from None
    need = {"format", "shape", "nb", "threshold", "ranks", "u", "v"}
    try:
        ok = need <= set(data) and int(data["format"]) == _FORMAT
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise TlrError(f"{str(path)!r} is not a TLR operator file (use `wse hpc tlrmvm compress`)")
    try:
        return _operator_from(data)
    except (TypeError, ValueError, IndexError, OverflowError) as e:  # TlrError included
        raise TlrError(f"TLR operator file {str(path)!r} is corrupt: {e}") from None


def _operator_from(data: dict[str, np.ndarray]) -> TlrOperator:
    shape, ranks = np.asarray(data["shape"]), np.asarray(data["ranks"])
    kinds = {ranks.dtype.kind, shape.dtype.kind}  # hunt 61: a shape of 64.5 was read as 64
    if shape.shape != (2,) or ranks.ndim != 2 or not kinds <= {"i", "u"}:
        raise TlrError("shape or ranks have the wrong form")
    nb_array = np.asarray(data["nb"])  # hunt 61: nb 16.5 was read as 16, [16, 16] a numpy line
    if nb_array.shape != () or nb_array.dtype.kind not in "iu":
        raise TlrError(f"nb must be one integer, got {nb_array.dtype} of shape {nb_array.shape}")
    (m, n), nb = (int(s) for s in shape), int(nb_array)
    if min(m, n, nb) < 1 or ranks.shape != (-(-m // nb), -(-n // nb)):
        raise TlrError(f"{m} x {n} in tiles of {nb} does not match ranks {ranks.shape}")
    u, v = np.asarray(data["u"]), np.asarray(data["v"])
    if u.dtype.kind not in "fc" or v.dtype != u.dtype:
        raise TlrError(f"bases of dtype {u.dtype} and {v.dtype}")
    if ranks.min() < 0 or ranks.max() > nb:
        raise TlrError(f"ranks outside 0..{nb}")
    _check_args((m, n), nb, float(data["threshold"]))  # NaN, 0 or 2 is no file compress wrote
    for name, basis in (("U", u), ("V", v)):
        bad = int(np.size(basis) - np.count_nonzero(np.isfinite(basis)))
        if bad:  # refused at load: the run would only return NaN
            raise TlrError(f"{bad:,} {name} basis values are NaN or Inf")
    mt, nt = ranks.shape
    heights = [min(nb, m - i * nb) for i in range(mt)]
    widths = [min(nb, n - j * nb) for j in range(nt)]
    u_rows = _split(u, [(h, int(ranks[i].sum())) for i, h in enumerate(heights)])
    v_cols = _split(v, [(w, int(ranks[:, j].sum())) for j, w in enumerate(widths)])
    err = float(np.asarray(data.get("error_fro", np.nan)).reshape(()))
    if "error_fro" in data and not 0 <= err < math.inf:  # hunt 61: inf was printed as the error
        raise TlrError(f"error_fro must be a finite number >= 0, got {err}")
    return TlrOperator((m, n), nb, float(data["threshold"]), ranks, u_rows, v_cols, err)


def _split(flat: np.ndarray, shapes: list[tuple[int, int]]) -> tuple[np.ndarray, ...]:
    sizes = [r * c for r, c in shapes]
    if flat.ndim != 1 or sum(sizes) != flat.size:
        raise TlrError("bases do not match the ranks")
    parts = np.split(flat, np.cumsum(sizes)[:-1])
    return tuple(p.reshape(s) for p, s in zip(parts, shapes, strict=True))
