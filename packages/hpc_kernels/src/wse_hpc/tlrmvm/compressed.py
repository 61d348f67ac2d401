"""The compressed operator: `TlrOperator`, its `.npz` file and `TlrError`.

A `TlrOperator` is an M x N operator in nb x nb tiles, tile (i, j) U_ij V_ij^H of rank
k_ij. Bases are stacked as ecrc/tlrmvm stores them: `v_cols[j]` is (n_j, K_j) with the V_ij
of tile column j side by side in tile-row order, `u_rows[i]` is (m_i, K_i) with the U_ij of
tile row i in tile-column order. Singular values are folded into U. `compress.compress`
makes one; `save_operator` / `load_operator` write and read its uncompressed `.npz` form.
Bases are fp32 / complex64 whatever a file holds: wider ones (float64, complex128, long
double) are rounded at load, values past fp32's range refused (`fp32.to_fp32`), so that the
report, the price and the run share one dtype (hunt 64: complex128 bases were priced as
complex128 and run as complex64; 1e300 overflowed in the run, exit 1).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
from wse_core.errors import NUMPY_FILE_ERRORS, WseError, numpy_file_problem
from wse_core.host.memory import HostMemoryError
from wse_core.host.readers import open_npz, require_npz

from wse_hpc.tlrmvm.fp32 import to_fp32

__all__ = ["TlrError", "TlrOperator", "check_args", "load_operator", "save_operator"]

_FORMAT = 1
_NOT_THIS_HOST = "this operator was not written by this machine's wse, or needs a larger host"


class TlrError(WseError):
    """Bad input to TLR compression or the TLR-MVM (shape, tile size, threshold, values)."""


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


def check_args(shape: tuple[int, int], nb: int, threshold: float) -> None:
    """TlrError unless nb is an integer in 1..max(shape) and threshold lies in (0, 1)."""
    if not isinstance(nb, int | np.integer) or nb <= 0 or nb > max(shape):
        raise TlrError(f"tile size nb must be an integer in 1..{max(shape)}, got {nb!r}")
    if not 0.0 < float(threshold) < 1.0:
        raise TlrError(f"threshold must lie in (0, 1) (a relative accuracy), got {threshold!r}")


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


def load_operator(path: str | Path) -> TlrOperator:
    """Read an operator written by `save_operator`; TlrError for a missing, foreign or
    damaged file (one line naming what is wrong)."""
    try:  # mmap: a .npy given here is not read whole (its header may claim 10^12 values)
        what = f"TLR operator {str(path)!r}"
        z = open_npz(Path(path), what, mmap_mode="r")
        with z:
            require_npz(z, what, fits=lambda budget: _NOT_THIS_HOST)
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
    # hunt 64: complex128 bases were priced as complex128 and run as complex64 (JAX's
    # truncation warnings); 1e300 overflowed in the run (exit 1): rounded or refused here
    for key in ("u", "v"):
        basis = np.asarray(data[key])
        if basis.dtype.kind in "fc":  # any other kind: refused as corrupt below
            data[key] = to_fp32(basis, f"{what}: its {key.upper()} basis", TlrError)
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
    check_args((m, n), nb, float(data["threshold"]))  # NaN, 0 or 2 is no file compress wrote
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
