"""Multi-dimensional deconvolution (MDD) with LSQR on a TLR operator, against the dense solve.

Contract: `mdd_case(n=..., freqs_hz=...)` builds a small synthetic MDD problem: for each
frequency f, a Green's-function slice G_f (`seismic.green_operator`), a smooth "reflectivity"
x_f (Gaussian blobs over the surface, a different phase per frequency) and the data
d_f = G_f x_f. `solve_lsqr(matvec, rmatvec, d, ...)` runs scipy's LSQR through a
`LinearOperator`. `compare(case, ...)` solves every slice twice with the same iterations —
with the compressed operator on the emulated wafer (`TlrEngine.matvec` / `rmatvec`) and
with the dense G_f — and reports both solutions' errors against x_f and their difference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
from scipy.sparse.linalg import LinearOperator, lsqr
from wse_core.hw.spec import WaferSpec

from wse_hpc.tlrmvm.compress import compress
from wse_hpc.tlrmvm.engine import TlrEngine
from wse_hpc.tlrmvm.seismic import green_operator, surface_points

__all__ = ["MddCase", "mdd_case", "solve_lsqr", "compare"]


@dataclasses.dataclass(frozen=True)
class MddCase:
    freqs_hz: tuple[float, ...]
    operators: tuple[np.ndarray, ...]  # G_f, (n, n) complex64
    truth: tuple[np.ndarray, ...]  # x_f, (n,)
    data: tuple[np.ndarray, ...]  # d_f = G_f x_f


def _reflectivity(n: int, spacing_m: float, rng: np.random.Generator) -> np.ndarray:
    xy = surface_points(n, spacing_m)
    centres = xy[rng.choice(n, size=3, replace=False)]
    amp = rng.uniform(0.5, 1.0, 3)
    width = 3 * spacing_m
    d2 = ((xy[:, None, :] - centres[None]) ** 2).sum(-1)
    return (np.exp(-d2 / (2 * width**2)) @ amp).astype(np.complex64)


def mdd_case(
    *, n: int, freqs_hz: Sequence[float], seed: int = 0, spacing_m: float = 20.0
) -> MddCase:
    rng = np.random.default_rng(seed)
    ops, xs, ds = [], [], []
    base = _reflectivity(n, spacing_m, rng)
    for f in freqs_hz:
        g = green_operator(n=n, freq_hz=f, spacing_m=spacing_m)
        x = (base * np.exp(1j * rng.uniform(0, 2 * np.pi))).astype(np.complex64)
        ops.append(g)
        xs.append(x)
        ds.append(g @ x)
    return MddCase(tuple(freqs_hz), tuple(ops), tuple(xs), tuple(ds))


def solve_lsqr(
    matvec: Callable[[np.ndarray], np.ndarray],
    rmatvec: Callable[[np.ndarray], np.ndarray],
    d: np.ndarray,
    *,
    n: int,
    iters: int,
    damp: float = 0.0,
) -> np.ndarray:
    """x minimizing ||A x - d||^2 + damp^2 ||x||^2 after `iters` LSQR steps (x0 = 0)."""
    a = LinearOperator((d.shape[0], n), matvec=matvec, rmatvec=rmatvec, dtype=np.complex64)
    return lsqr(a, d, damp=damp, iter_lim=iters, atol=0.0, btol=0.0, conlim=0.0)[0]


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def compare(
    case: MddCase,
    spec: WaferSpec,
    *,
    nb: int,
    threshold: float,
    rule: str = "matrix",
    iters: int = 30,
    mesh_shape: tuple[int, int] | None = (1, 1),
) -> list[dict[str, float]]:
    """One row per frequency: errors of the TLR-on-wafer and dense LSQR solutions (each slice
    compressed at `threshold` under `rule`, `compress`'s)."""
    rows = []
    for f, g, x, d in zip(case.freqs_hz, case.operators, case.truth, case.data, strict=True):
        op = compress(g, nb=nb, threshold=threshold, rule=rule)
        eng = TlrEngine.build(op, spec, mesh_shape=mesh_shape)
        n = g.shape[1]
        x_tlr = solve_lsqr(eng.matvec, eng.rmatvec, d, n=n, iters=iters)
        x_dense = solve_lsqr(
            lambda v, g=g: g @ v, lambda v, g=g: g.conj().T @ v, d, n=n, iters=iters
        )
        rows.append(
            {
                "freq_hz": f,
                "compression_ratio": op.compression_ratio,
                "tlr_vs_truth": _rel(x_tlr, x),
                "dense_vs_truth": _rel(x_dense, x),
                "tlr_vs_dense": _rel(x_tlr, x_dense),
                "residual_tlr": _rel(g @ x_tlr, d),
                "residual_dense": _rel(g @ x_dense, d),
            }
        )
    return rows
