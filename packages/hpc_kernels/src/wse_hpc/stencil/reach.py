"""What each BiCGSTAB precision was measured to reach, and the advice `wse hpc stencil` gives
for a request beyond it.

`REACH[precision][tol]` is the largest N such that the N^3 Poisson problem of `wse hpc stencil
--kind bicgstab` (reliable updates, x an fp32 pair below PAIR_BELOW, the CLI's 1,000-iteration
cap) reached `tol` in the float64 true residual, from `bench/bench_bicgstab_reach.py` (its
JSON is committed as bench/results/bicgstab_reach.json; docs/bicgstab-reach.md's table is
the same sweep). Measured on one virtual CPU device (a 1 x 1 mesh, as on a one-GPU host),
JAX 0.10.2,
2026-12-05, grids 8 to 96 and 128; tolerances 1e-3 to 3e-7 (on 2026-11-27 mixed reached
only 96^3 past 1e-3 and fp32 96^3 at 3e-7: since then fp16 fields are read by the dots
kernel itself and a group that raises the true residual is dropped). Rounding differs across meshes
and machines, so this is guidance, never a refusal: the run still happens. (The restarted
refinement this solver replaced reached only 24^3 in mixed precision:
bench/results/bicgstab_reach_restarted.json.)

`advice(precision, grid, tol, maxiter)` is None for a request inside the measured reach
(largest side N <= the largest grid that reached the nearest measured tolerance at least as
loose as `tol`), else one line naming what was measured and what to use instead: `--dtype
fp32` where fp32 reached it, else a looser `--tol` or a higher `--steps`. Mixed precision
past the largest grid tried is sent to fp32 too (hunt 64: 256 x 256 x 64 stalled at the
start in mixed, where fp32 converges; this note said nothing there).

`reason(res, grid, ...)` is the one line a solve that did not converge reports: why, and
what to use instead (a mixed solve that stalled: `--dtype fp32`, whatever the table says; one
that broke down, `refine`'s `broke_down`: its breakdowns, as SciPy's info < 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CERTIFY_FLOOR", "MEASURED_MAXITER", "REACH", "advice", "least_tol", "reach", "reason"]

MEASURED_MAXITER = 1000
# precision -> {tol: largest N^3 that reached tol}; a tolerance missing from a precision's
# row was not reached on the smallest grid tried (8^3)
REACH: dict[str, dict[float, int]] = {
    "mixed": {1e-3: 128, 1e-4: 128, 1e-5: 128, 1e-6: 128, 3e-7: 128},
    "fp32": {1e-3: 128, 1e-4: 128, 1e-5: 128, 1e-6: 128, 3e-7: 128},
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
    if n <= largest:
        return None  # inside the measured reach
    if largest == LARGEST_TRIED:  # past the largest grid tried: unmeasured
        return _past_the_sweep(t) if precision == "mixed" else None
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


def _past_the_sweep(t: float) -> str:
    return (
        f"mixed BiCGSTAB reached tol {t:g} on grids up to {LARGEST_TRIED}^3, the largest "
        "tried (docs/bicgstab-reach.md); past it fp16's rounding can stall it where fp32 "
        "converges (256 x 256 x 64 at tol 0.001); use --dtype fp32"
    )


# What an fp32 residual on the wafer can certify: its own rounding is about eps32 ||b||
# (measured against fp64: 4.5e-8 on 12^3, 8e-8 on 48^3), so the solve counts as converged
# only when the computed true residual plus this floor is <= tol: tolerances below
# 2 x 1.2e-7 are out of reach and reported so.
CERTIFY_FLOOR = float(np.finfo(np.float32).eps)  # refine stops by it


def least_tol(floor: float) -> float:
    """The tightest tol a solve can certify, given refine's CERTIFY_FLOOR: converged means
    the true residual plus the floor is <= tol, and the residual's own rounding is about the
    floor, so a tol at or below twice it is out of reach (`config` refuses it up front)."""
    return 2 * floor


def reason(
    res: Any, grid: tuple[int, ...], tol: float, maxiter: int, *, precision: str, pair: bool,
    floor: float,
) -> str:  # fmt: skip
    """One line: why the true residual of `res` (a `refine.SolveResult`) did not reach tol,
    and what to use instead; `floor` is refine's CERTIFY_FLOOR."""
    t, updates = float(res.true_residual), int(res.checks) - 1
    if tol <= least_tol(floor):
        return (
            f"tolerance {tol:g} is out of reach: an fp32 residual on the wafer certifies no "
            f"less than {least_tol(floor):.1e} (reached {t:.2e}; its rounding is ~{floor:.1e})"
        )
    if bool(res.broke_down):  # refine's: the restart from the true residual broke down too
        return (
            f"BiCGSTAB broke down: {int(res.breakdowns)} breakdowns without a gain between them "
            f"(rho, omega or (r^, A p) zero again after the restart from the true residual; "
            f"SciPy's bicgstab returns info -10 / -11 there), true residual {t:.2e}"
        )
    if bool(res.stalled) and precision == "mixed":  # fp32 is the fix, not a looser tol
        head = "made no progress from x = 0" if t >= 1 else f"stalled above tol {tol:g}"
        n = int(res.rejected)
        dropped = f"; {n} fp16 group{'s' * (n > 1)} that raised it dropped" if n else ""
        return (
            f"mixed BiCGSTAB {head} (true residual {t:.2e} after {updates} reliable "
            f"updates{dropped}): fp16's rounding is too coarse for this grid; use --dtype fp32"
        )
    if bool(res.stalled):
        carry = "an fp32 pair" if pair else "fp32"
        why = (
            f"tolerance {tol:g} is out of reach: the true residual stalled at {t:.2e} after "
            f"{updates} reliable updates ({precision} BiCGSTAB, x in {carry})"
        )
    else:
        why = f"iteration cap {maxiter} reached with the true residual at {t:.2e} > tol {tol:g}"
    note = advice(precision, grid, tol, maxiter)
    return why + (f"; {note}" if note else "")
