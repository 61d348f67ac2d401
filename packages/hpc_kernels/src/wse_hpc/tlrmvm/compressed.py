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

What an operator can be (`check_args`): its tiles at most the limit `tlr_tiles` (each is
one SVD in a Python loop, rank rows the planner colours; hunt 69: `--nb 1` ran for
minutes; `wse_core.host.limits`, `WSE_LIMIT_TLR_TILES` lifts it), its threshold in
[`LEAST_THRESHOLD`, 1): below that fp32 rounding of the tiles, up to `FP32_ROUNDING` of
||A||_F, is what decides the error, and no rank certifies it (hunt 69: 1e-9 was written and
shown as met). `error_fro` is the achieved error `compress` measured, at most `error_bound`
(its `rule`'s); the loader refuses a file whose figures compress could not have written.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
from wse_core.errors import NUMPY_FILE_ERRORS, WseError, numpy_file_problem
from wse_core.host.limits import lift, limit
from wse_core.host.memory import HostMemoryError
from wse_core.host.readers import open_npz, require_npz

from wse_hpc.tlrmvm.fp32 import to_fp32

__all__ = [
    "FP32_ROUNDING",
    "LEAST_THRESHOLD",
    "RULES",
    "TlrError",
    "TlrOperator",
    "check_args",
    "least_nb",
    "load_operator",
    "save_operator",
    "threshold_problem",
    "tiles_problem",
]

_FORMAT = 1
# What rounding an operator's tiles to fp32 adds to ||A - A_tlr||_F / ||A||_F at any rank,
# its U V^H rebuilt in fp32 (as `TlrOperator.dense`): measured 1.3e-7 (random 128 x 128 at
# full rank) to 1.8e-7 (the synthetic operator, n 256, nb 32); 8 fp32 epsilons leave room
# for larger tiles.
FP32_ROUNDING = 8 * 2.0**-23  # 9.5e-7
# The tightest threshold `compress` certifies: twice the rounding (a rank still decides at
# least half the error, as the stencil's least_tol), rounded up to a figure one types.
LEAST_THRESHOLD = 2e-6
# A threshold's norm: ||A||_F for every tile (ecrc/tlrmvm's acc, saveUV) or each tile's own
RULES = ("matrix", "tile")
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
    error_fro: float = float("nan")  # achieved ||A - A_tlr||_F / ||A||_F (`compress`'s)
    rule: str = "tile"  # of RULES; "tile", the only rule before hunt 71, for older files

    @property
    def error_bound(self) -> float:
        """||A - A_tlr||_F / ||A||_F's bound: the threshold ("tile"), or threshold x sqrt(tiles)
        ("matrix": each tile's error up to threshold x ||A||_F, adding in squares)."""
        return self.threshold * (math.sqrt(self.ranks.size) if self.rule == "matrix" else 1.0)

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
            "threshold_rule": self.rule,
            "dtype": str(self.dtype),
            "rank_mean": float(self.ranks.mean()),
            "rank_max": int(self.ranks.max()),
            "bases_bytes": self.bases_bytes,
            "dense_bytes": self.dense_bytes,
            "compression_ratio": self.compression_ratio,
            "error_bound": self.error_bound,  # the rule's bound on error_fro (hunt 76)
            # JSON has no NaN (hunt 69: `run --json` printed it): an older file's error is null
            "error_fro": self.error_fro if math.isfinite(self.error_fro) else None,
        }


def check_args(shape: tuple[int, int], nb: int, threshold: float) -> None:
    """TlrError unless nb is an integer in 1..max(shape) cutting at most the `tlr_tiles`
    limit's tiles and threshold lies in [LEAST_THRESHOLD, 1)."""
    _check_nb(shape, nb)
    if not 0.0 < float(threshold) < 1.0:
        raise TlrError(f"threshold must lie in (0, 1) (a relative accuracy), got {threshold!r}")
    for problem in (tiles_problem(shape, int(nb), "nb"), threshold_problem(threshold, "threshold")):
        if problem:
            raise TlrError(problem)


def _check_nb(shape: tuple[int, int], nb: int) -> None:
    if not isinstance(nb, int | np.integer) or nb <= 0 or nb > max(shape):
        raise TlrError(f"tile size nb must be an integer in 1..{max(shape)}, got {nb!r}")


def _tiles(shape: tuple[int, int], nb: int) -> int:
    return -(-shape[0] // nb) * -(-shape[1] // nb)


def least_nb(shape: tuple[int, int]) -> int:
    """The least tile size cutting `shape` into at most the `tlr_tiles` limit's tiles."""
    lo, hi, most = 1, max(shape), limit("tlr_tiles")
    while lo < hi:  # the tile count falls as nb grows
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _tiles(shape, mid) <= most else (mid + 1, hi)
    return lo


def tiles_problem(shape: tuple[int, int], nb: int, name: str) -> str | None:
    """The line refusing tile size `nb` (the option or argument `name`) for an operator of
    `shape` that it is larger than, or cuts into more tiles than the limit `tlr_tiles`."""
    if nb > max(shape):  # hunt 76: "tile size nb must be an integer in 1..100", no --nb
        m, n = shape
        return f"{name} {nb} is larger than the matrix ({m} x {n}); give {name} {max(m, n)} or less"
    if _tiles(shape, nb) <= limit("tlr_tiles"):
        return None
    return (
        f"{name} {nb} cuts the {shape[0]} x {shape[1]} operator into {_tiles(shape, nb):,} "
        f"tiles, over the limit of {limit('tlr_tiles'):,} (an SVD each; {lift('tlr_tiles')}): "
        f"give {name} {least_nb(shape)} or more"
    )


def threshold_problem(threshold: float, name: str) -> str | None:
    """The line refusing a threshold (the option or argument `name`) below LEAST_THRESHOLD."""
    if float(threshold) >= LEAST_THRESHOLD:
        return None
    return (
        f"{name} {float(threshold)!r} is below {LEAST_THRESHOLD:g}, the least an fp32 operator "
        f"can certify (rounding its tiles to fp32 alone costs up to {FP32_ROUNDING:.1e} of "
        f"||A||_F): give {name} {LEAST_THRESHOLD:g} or more"
    )


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
    """`np.savez`'s uncompressed archive, the stacked bases streamed a tile row (column) at a
    time: their concatenated copies were twice the bases, the peak of `wse hpc tlrmvm
    compress` (hunt 69)."""
    import zipfile

    head = {
        "format": np.int64(_FORMAT),
        "shape": np.array(op.shape, np.int64),
        "nb": np.int64(op.nb),
        "threshold": np.float64(op.threshold),
        "rule": np.str_(op.rule),
        "ranks": op.ranks,
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, value in head.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asarray(value), allow_pickle=False)
        for name, parts in (("u", op.u_rows), ("v", op.v_cols)):
            _write_stacked(z, name, parts, op.dtype)
        with z.open("error_fro.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array(f, np.asarray(np.float64(op.error_fro)))


def _write_stacked(z: object, name: str, parts: tuple[np.ndarray, ...], dtype: np.dtype) -> None:
    """The member `name`.npy holding `parts` raveled one after another (1-D, `dtype`)."""
    size = sum(p.size for p in parts)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
              "shape": (size,)}  # fmt: skip
    with z.open(f"{name}.npy", "w", force_zip64=True) as f:  # type: ignore[attr-defined]
        np.lib.format.write_array_header_1_0(f, header)
        for part in parts:
            if part.size:
                f.write(memoryview(np.ascontiguousarray(part, dtype)).cast("B"))


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
    if not _is_operator(data):
        raise TlrError(f"{str(path)!r} is not a TLR operator file (use `wse hpc tlrmvm compress`)")
    # hunt 64: complex128 bases were priced as complex128 and run as complex64 (JAX's
    # truncation warnings); 1e300 overflowed in the run (exit 1): rounded or refused here
    for key in ("u", "v"):
        basis = np.asarray(data[key])
        if basis.dtype.kind in "fc":  # any other kind: refused as corrupt below
            data[key] = to_fp32(basis, f"{what}: its {key.upper()} basis", TlrError)
    try:
        return _operator_from(data)
    except _BeyondLimit as e:  # no damage: more tiles than an operator may have
        raise TlrError(f"TLR operator file {str(path)!r} {e}") from None
    except (TypeError, ValueError, IndexError, OverflowError) as e:  # TlrError included
        # hunt 69: Python's own words ("float() argument must be ...") were the reason
        why = str(e) if isinstance(e, TlrError) else "its members have the wrong types"
        raise TlrError(f"TLR operator file {str(path)!r} is corrupt: {why}") from None


def _is_operator(data: dict[str, np.ndarray]) -> bool:
    """Every member there, and `format` the integer _FORMAT (hunt 69: 1.5 and '1' passed)."""
    if not {"format", "shape", "nb", "threshold", "ranks", "u", "v"} <= set(data):
        return False
    fmt = np.asarray(data["format"])
    return fmt.shape == () and fmt.dtype.kind in "iu" and int(fmt) == _FORMAT


class _BeyondLimit(TlrError):
    """A file compress would refuse to write for its size, not for damage."""


def _real(data: dict[str, np.ndarray], key: str) -> float:
    """Member `key` as one real number (hunt 69: a complex threshold was Python's TypeError;
    -0 is 0, as a report shows it)."""
    value = np.asarray(data[key])
    if value.shape != () or value.dtype.kind not in "fiu":
        shape = f" of shape {value.shape}" if value.shape != () else ""
        raise TlrError(f"{key} must be one real number, got {value.dtype}{shape}")
    return float(value) + 0.0


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
    if ranks.size > limit("tlr_tiles"):  # hunt 69: 65,536 tiles planned for 2 minutes
        raise _BeyondLimit(
            f"has {ranks.size:,} tiles ({m} x {n} in tiles of {nb}), over the limit of "
            f"{limit('tlr_tiles'):,} ({lift('tlr_tiles')}); compress it again with --nb "
            f"{least_nb((m, n))} or more"
        )
    u, v = np.asarray(data["u"]), np.asarray(data["v"])
    if u.dtype.kind not in "fc" or v.dtype != u.dtype:
        raise TlrError(f"bases of dtype {u.dtype} and {v.dtype}")
    if ranks.min() < 0 or ranks.max() > nb:
        raise TlrError(f"ranks outside 0..{nb}")
    threshold = _real(data, "threshold")
    _check_nb((m, n), nb)
    _check_threshold(threshold)
    mt, nt = ranks.shape
    heights = [min(nb, m - i * nb) for i in range(mt)]
    widths = [min(nb, n - j * nb) for j in range(nt)]
    _check_ranks(ranks, heights, widths)
    for name, basis in (("U", u), ("V", v)):
        bad = int(np.size(basis) - np.count_nonzero(np.isfinite(basis)))
        if bad:  # refused at load: the run would only return NaN
            raise TlrError(f"{bad:,} {name} basis values are NaN or Inf")
    u_rows = _split(u, [(h, int(ranks[i].sum())) for i, h in enumerate(heights)])
    v_cols = _split(v, [(w, int(ranks[:, j].sum())) for j, w in enumerate(widths)])
    if not np.any(u) or not np.any(v):  # hunt 69: "compression 32768x, error 8.3e-04"
        why = "all its ranks are 0" if not ranks.any() else "a basis is all zero"
        raise TlrError(
            f"the operator is zero ({why}): its error would be 1, above its threshold "
            f"{threshold:g} (compress never writes that)"
        )
    err = _real(data, "error_fro") if "error_fro" in data else math.nan  # nan: an older file
    if "error_fro" in data and not 0 <= err < math.inf:  # hunt 61: inf was printed as the error
        raise TlrError(f"error_fro must be a finite number >= 0, got {err}")
    op = TlrOperator((m, n), nb, threshold, ranks, u_rows, v_cols, err, _rule(data))
    if err > op.error_bound * (1 + 1e-6):  # hunt 69: 0.5 was shown beside its threshold 0.001
        of = "" if op.rule == "tile" else f" x sqrt({ranks.size} tiles) = {op.error_bound:.3g}"
        raise TlrError(
            f"its recorded error {err:g} is above its threshold {threshold:g}{of} (compress "
            "never writes that)"
        )
    return op


def _rule(data: dict[str, np.ndarray]) -> str:
    """The file's threshold rule: one of RULES, "tile" when absent (an older file)."""
    value = np.asarray(data.get("rule", "tile"))
    if value.shape != () or value.dtype.kind != "U" or str(value) not in RULES:
        raise TlrError(f"rule must be one of {', '.join(RULES)}, got {value!r}")
    return str(value)


def _check_threshold(threshold: float) -> None:
    """A file's threshold: in (0, 1) (NaN, 0 or 2 is no file compress wrote) and not below
    LEAST_THRESHOLD (hunt 69: 5e-324 was shown as the operator's)."""
    if not 0.0 < threshold < 1.0:
        raise TlrError(f"threshold must lie in (0, 1) (a relative accuracy), got {threshold!r}")
    if threshold < LEAST_THRESHOLD:
        raise TlrError(
            f"threshold {threshold!r} is below {LEAST_THRESHOLD:g}, the least an fp32 operator "
            "can certify (compress never writes that)"
        )


def _check_ranks(ranks: np.ndarray, heights: list[int], widths: list[int]) -> None:
    """No tile's rank above its own size (its SVD has no more singular values)."""
    over = ranks > np.minimum.outer(np.asarray(heights), np.asarray(widths))
    if over.any():
        i, j = (int(k) for k in np.argwhere(over)[0])
        raise TlrError(
            f"tile ({i}, {j}) has rank {int(ranks[i, j])}, more than its {heights[i]} x "
            f"{widths[j]} size allows"
        )


def _split(flat: np.ndarray, shapes: list[tuple[int, int]]) -> tuple[np.ndarray, ...]:
    sizes = [r * c for r, c in shapes]
    if flat.ndim != 1 or sum(sizes) != flat.size:
        raise TlrError("bases do not match the ranks")
    parts = np.split(flat, np.cumsum(sizes)[:-1])
    return tuple(p.reshape(s) for p, s in zip(parts, shapes, strict=True))
