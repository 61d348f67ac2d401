"""Synthetic seismic-like operators: frequency-domain Green's functions between two surfaces.

Contract: `green_operator(n=..., freq_hz=...)` returns the complex64 n x n matrix
G[r, s] = exp(-2πi f |x_r - x_s| / c) / (4π |x_r - x_s|) between n source points on the
surface z = 0 and n receiver points on a parallel surface at `depth_m`, in a homogeneous
medium of velocity `velocity_m_per_s`. Points lie on a regular grid of spacing `spacing_m`
(the first n points of a ceil(sqrt(n))-wide grid) and are ordered along a Z-order (Morton)
curve so that each tile of consecutive points is a compact patch: that locality is what makes
the tiles low-rank, as the Hilbert ordering does in the seismic TLR-MVM papers.
`green_operators(freqs_hz=...)` stacks one matrix per frequency, the slices of a
multi-dimensional convolution operator; `GreenMatrix` makes any block on demand, so large
slices are compressed without ever being held whole. `load_matrix(path)` reads any `.npy` matrix
(`open_matrix` maps it for the caller's checks of its shape and size, `read_matrix` reads it).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from wse_core.errors import NUMPY_FILE_ERRORS, numpy_file_problem
from wse_core.host.readers import not_regular

from wse_hpc.tlrmvm.compress import TlrError, check_form, check_matrix

__all__ = [
    "GreenMatrix",
    "morton_order",
    "surface_points",
    "green_operator",
    "green_operator_bytes",
    "green_operators",
    "load_matrix",
    "open_matrix",
    "read_matrix",
]


def morton_order(ix: np.ndarray, iy: np.ndarray) -> np.ndarray:
    """Indices that sort integer grid points (ix, iy) along the Z-order curve."""
    code = np.zeros(ix.shape, np.int64)
    for bit in range(16):
        code |= ((ix >> bit) & 1) << (2 * bit) | ((iy >> bit) & 1) << (2 * bit + 1)
    return np.argsort(code, kind="stable")


def surface_points(n: int, spacing_m: float) -> np.ndarray:
    """(n, 2) horizontal coordinates in metres, Morton-ordered."""
    if n <= 0:
        raise TlrError(f"the operator size n must be positive, got {n}")
    side = int(np.ceil(np.sqrt(n)))
    iy, ix = np.divmod(np.arange(n), side)
    order = morton_order(ix, iy)
    return np.stack([ix[order], iy[order]], axis=1).astype(np.float64) * spacing_m


@dataclasses.dataclass(frozen=True)
class GreenMatrix:
    """The Green's-function slice as a lazy matrix: `g[r0:r1, c0:c1]` computes that block
    only (a `compress.LazyMatrix`), so a 9801 x 9801 slice is compressed tile by tile."""

    n: int
    freq_hz: float = 15.0
    spacing_m: float = 20.0
    depth_m: float = 400.0
    velocity_m_per_s: float = 2000.0

    @property
    def shape(self) -> tuple[int, int]:
        return self.n, self.n

    @functools.cached_property
    def _xy(self) -> np.ndarray:
        return surface_points(self.n, self.spacing_m)

    def __getitem__(self, key: tuple[slice, slice]) -> np.ndarray:
        rows, cols = self._xy[key[0]], self._xy[key[1]]
        dx = rows[:, None, 0] - cols[None, :, 0]
        dy = rows[:, None, 1] - cols[None, :, 1]
        r = np.sqrt(dx * dx + dy * dy + self.depth_m**2)
        g = np.exp(-2j * np.pi * self.freq_hz * r / self.velocity_m_per_s) / (4 * np.pi * r)
        return (g * self.depth_m).astype(np.complex64)  # scaled so entries are O(0.1)


def green_operator(
    *,
    n: int,
    freq_hz: float = 15.0,
    spacing_m: float = 20.0,
    depth_m: float = 400.0,
    velocity_m_per_s: float = 2000.0,
    block: int = 1024,
) -> np.ndarray:
    """One frequency slice, (n, n) complex64 (rows: receivers at depth, cols: sources)."""
    g = GreenMatrix(n, freq_hz, spacing_m, depth_m, velocity_m_per_s)
    out = np.empty((n, n), np.complex64)
    for r0 in range(0, n, block):  # in row blocks: float64 temporaries stay small
        out[r0 : r0 + block] = g[r0 : r0 + block, 0:n]
    return out


def green_operator_bytes(n: int, block: int = 1024) -> int:
    """Peak host bytes of `green_operator(n=n)`: the (n, n) complex64 result and one row
    block's float64 temporaries (distances, phases, real and imaginary parts: 64 B per
    entry of the block)."""
    return 8 * n * n + 64 * n * min(n, block)


def green_operators(*, n: int, freqs_hz: Sequence[float], **kwargs: float) -> np.ndarray:
    """(len(freqs_hz), n, n) complex64: one slice per frequency."""
    return np.stack([green_operator(n=n, freq_hz=f, **kwargs) for f in freqs_hz])


def open_matrix(path: str | Path) -> np.ndarray:
    """The 2-D `.npy` matrix at `path` mapped, not read (its header's shape and dtype, for the
    caller's size checks); TlrError for a file that holds no such matrix."""
    path = Path(path)
    if not path.is_file():  # a FIFO would block np.load
        why = not_regular(path) or "does not exist"
        raise TlrError(f"cannot read matrix {str(path)!r}: it {why}")
    try:  # mapped, not read: the header's shape is checked against memory first
        m = np.load(path, mmap_mode="r", allow_pickle=False)
        if not isinstance(m, np.ndarray):
            raise ValueError("it is an .npz archive, not one .npy array")
    except NUMPY_FILE_ERRORS as e:
        why = numpy_file_problem(e)
        if "mmap length is greater" in why:
            why = "its header claims more data than the file holds (cut short or forged)"
        elif "Python objects" in why:
            why = "it holds Python objects (a pickle), not numbers"
        raise TlrError(f"cannot read matrix {str(path)!r}: {why}") from None
    if m.dtype.kind == "V" and m.dtype.names is None and m.dtype.itemsize == 2:
        # hunt 69: "must hold real or complex numbers, got dtype |V2"; JAX's and ml_dtypes'
        # bfloat16 is saved as bare 2-byte values, which may as well be any 2-byte type:
        # refused rather than guessed
        raise TlrError(
            f"cannot read matrix {str(path)!r}: it holds bare 2-byte values (dtype |V2), as "
            "NumPy saves a bfloat16 array (JAX, ml_dtypes); save it as float32 "
            "(np.save(path, x.astype(np.float32)))"
        )
    check_form(m)  # before any size is worked out from its shape
    return m


def read_matrix(m: np.ndarray) -> np.ndarray:
    """`open_matrix`'s mapped matrix read into memory as fp32 / complex64 and checked like
    any operator (`compress.check_matrix`); memory: `compress.compress_host_bytes`."""
    a = check_matrix(m)  # cast straight from the mapped file: no copy in its own dtype
    return np.array(a) if np.may_share_memory(a, m) else a


def load_matrix(path: str | Path) -> np.ndarray:
    """A 2-D real or complex matrix from a `.npy` file, checked like any operator."""
    from wse_core.host.memory import require

    m = open_matrix(path)
    # the mapped values, their fp32 copy (a byte of mask each) and SVD work of about its size
    fp32 = 8 if m.dtype.kind == "c" else 4
    need = (m.dtype.itemsize + 2 * fp32 + 1) * m.size
    require(f"--matrix {str(path)!r} ({m.shape} {m.dtype})", need,
            fits=lambda budget: "give a smaller matrix")  # fmt: skip
    return read_matrix(m)
