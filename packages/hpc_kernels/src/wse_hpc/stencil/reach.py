"""What each BiCGSTAB precision was measured to reach, and the advice `wse hpc stencil` gives
for a request beyond it.

`REACH[precision][tol]` is the largest N such that the N^3 Poisson problem of `wse hpc stencil
--kind bicgstab` (reliable updates, x an fp32 pair below PAIR_BELOW, the CLI's 1,000-iteration
cap) reached `tol` in the float64 true residual, from `bench/bench_bicgstab_reach.py` (its
JSON is committed as bench/results/bicgstab_reach.json; docs/bicgstab-reach.md's table is
the same sweep). Measured on one virtual CPU device (a 1 x 1 mesh, as on a one-GPU host),
JAX 0.10.2,
2026-11-27, grids 8 to 96 and 128; tolerances 1e-3 to 3e-7. Rounding differs across meshes
and machines, so this is guidance, never a refusal: the run still happens. (The restarted
refinement this solver replaced reached only 24^3 in mixed precision:
bench/results/bicgstab_reach_restarted.json.)

`advice(precision, grid, tol, maxiter)` is None for a request inside the measured reach
(largest side N <= the largest grid that reached the nearest measured tolerance at least as
loose as `tol`), else one line naming what was measured and what to use instead: `--dtype
fp32` where fp32 reached it, else a looser `--tol` or a higher `--steps`.
"""

from __future__ import annotations

__all__ = ["MEASURED_MAXITER", "REACH", "advice", "reach"]

MEASURED_MAXITER = 1000
# precision -> {tol: largest N^3 that reached tol}; a tolerance missing from a precision's
# row was not reached on the smallest grid tried (8^3)
REACH: dict[str, dict[float, int]] = {
    "mixed": {1e-3: 128, 1e-4: 96, 1e-5: 96, 1e-6: 96, 3e-7: 96},
    "fp32": {1e-3: 128, 1e-4: 128, 1e-5: 128, 1e-6: 128, 3e-7: 96},
}
LARGEST_TRIED = 128


def reach(precision: str, tol: float) -> tuple[float, int] | None:
    """(measured tolerance, largest N) for the tightest measured tolerance >= tol (what the
    request is compared with), or None where tol is looser than every measured one."""
    looser = sorted(t for t in REACH["fp32"] if t >= tol)
    if not looser:
        return None
    t = looser[0]
    return t, REACH[precision].get(t, 0)


def advice(precision: str, grid: tuple[int, ...], tol: float, maxiter: int) -> str | None:
    """One line for a request beyond the measured reach, else None (see the module doc)."""
    n = max(grid)
    mine = reach(precision, tol)
    if mine is None or maxiter > MEASURED_MAXITER:
        return None
    t, largest = mine
    if n <= largest or largest == LARGEST_TRIED:
        return None  # inside the measured reach, or past the largest grid tried (unmeasured)
    did = f"reached tol {t:g} on grids up to {largest}^3" if largest else f"did not reach tol {t:g}"
    head = (
        f"{precision} BiCGSTAB {did} in the measured sweep (docs/bicgstab-reach.md; "
        f"{MEASURED_MAXITER} iterations)"
    )
    fp32 = reach("fp32", tol)
    if precision == "mixed" and fp32 is not None and fp32[1] >= min(n, LARGEST_TRIED):
        largest_tried = ", the largest grid tried" if n > fp32[1] else ""
        return f"{head}; use --dtype fp32 (it reached {fp32[0]:g} on {fp32[1]}^3{largest_tried})"
    ok = [s for s, m in REACH[precision].items() if m >= n]
    looser = f"a looser --tol ({min(ok):g} was reached there)" if ok else "a smaller grid"
    return f"{head}; try {looser} or a higher --steps"
