"""Plain NumPy TLR-MVMs over the same bases: the CPU baselines of the benchmark.

Contract: `stacked_fn(op)` returns x -> A_tlr x as ecrc/tlrmvm does it on CPUs: one GEMV per
tile column over the stacked V_j^H (phase 1), one gather with a precomputed index (the
reshuffle, phase 2), one GEMV per tile row over the stacked U_i (phase 3); no padding.
`padded_fn(op)` pads every tile to the largest rank and runs each phase as one batched
`np.matmul` over all tiles (the "pad to a max rank with masks" layout, on a CPU). Both close
over contiguous copies made once; x is (N,) or (N, b); the result matches `tlrmvm_numpy`.
`best_median_s(fn)` times a baseline fairly on a shared machine: the median wall time
(`wse_core.host.runtime.median_wall_s`, after one warm-up call) with BLAS on one thread and with
its default threads, keeping the faster (OpenBLAS GEMV on two busy cores is often several
times slower than on one).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits
from wse_core.host.runtime import median_wall_s

from wse_hpc.tlrmvm.compress import TlrOperator

__all__ = ["stacked_fn", "padded_fn", "reshuffle_index", "best_median_s"]


def reshuffle_index(op: TlrOperator) -> np.ndarray:
    """Index into the column-ordered yv (tile columns side by side, tile rows inside) that
    lists it in row order (tile rows side by side, tile columns inside)."""
    ranks = op.ranks
    col_off = np.concatenate([[0], np.cumsum(ranks.sum(axis=0))[:-1]])
    parts = []
    for i in range(ranks.shape[0]):
        for j in range(ranks.shape[1]):
            start = col_off[j] + ranks[:i, j].sum()
            parts.append(np.arange(start, start + ranks[i, j]))
    return np.concatenate(parts).astype(np.int64)


def stacked_fn(op: TlrOperator) -> Callable[[np.ndarray], np.ndarray]:
    vh = [np.ascontiguousarray(v.conj().T) for v in op.v_cols]
    u = [np.ascontiguousarray(x) for x in op.u_rows]
    idx = reshuffle_index(op)
    nb, n = op.nb, op.shape[1]
    k_rows = np.concatenate([[0], np.cumsum(op.ranks.sum(axis=1))])
    col_edges = [(j * nb, min((j + 1) * nb, n)) for j in range(len(vh))]

    def fn(x: np.ndarray) -> np.ndarray:
        yv = np.concatenate([v @ x[a:b] for v, (a, b) in zip(vh, col_edges, strict=True)])
        yu = yv[idx]
        return np.concatenate([ui @ yu[k_rows[i] : k_rows[i + 1]] for i, ui in enumerate(u)])

    return fn


def padded_fn(op: TlrOperator) -> Callable[[np.ndarray], np.ndarray]:
    (m, n), nb, (mt, nt) = op.shape, op.nb, op.tiles
    k = int(op.ranks.max())
    vh = np.zeros((nt, mt, k, nb), op.dtype)  # tile column j, tile row i
    u = np.zeros((mt, nt, nb, k), op.dtype)
    for i in range(mt):
        for j in range(nt):
            v_ij, u_ij = op.v(i, j), op.u(i, j)
            vh[j, i, : v_ij.shape[1], : v_ij.shape[0]] = v_ij.conj().T
            u[i, j, : u_ij.shape[0], : u_ij.shape[1]] = u_ij
    vh2 = vh.reshape(nt, mt * k, nb)

    def fn(x: np.ndarray) -> np.ndarray:
        xb = x.reshape(n, -1)
        xt = np.zeros((nt * nb, xb.shape[1]), np.result_type(x, op.dtype))
        xt[:n] = xb
        yv = np.matmul(vh2, xt.reshape(nt, nb, -1)).reshape(nt, mt, k, -1)
        yu = yv.transpose(1, 0, 2, 3)  # the reshuffle: tile-row order
        y = np.matmul(u, yu).sum(axis=1).reshape(mt * nb, -1)[:m]
        return y.reshape(m) if x.ndim == 1 else y

    return fn


def best_median_s(fn: Callable[[], object], repeats: int = 5) -> tuple[float, int | None]:
    """(seconds, BLAS threads) of the faster of one thread and the default threads."""
    with threadpool_limits(limits=1):
        one = median_wall_s(fn, repeats=repeats)
    default = median_wall_s(fn, repeats=repeats)
    return (one, 1) if one <= default else (default, None)
