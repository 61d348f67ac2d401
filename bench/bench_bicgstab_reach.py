"""BiCGSTAB reach: the largest grid and the smallest tolerance each precision reaches, in the
true residual, within the CLI's 1,000-iteration cap.

The problem is `wse hpc stencil --kind bicgstab`'s: 7-point Poisson on the unit cube, N^3,
Dirichlet, b = A u for the manufactured u (`runs.exact_solution`), placed as the CLI places
it (`problems.place_bicgstab` on WSE-2 PEs, one device unless --devices). Four solvers:
- "mixed + refinement": what the CLI runs by default (`refine`, fp16 inner vectors, fp32
  dots and x; x carried as an fp32 pair for tol < 1e-4, as `runs` does);
- "fp32 + refinement": the CLI's `--dtype fp32`;
- "mixed" / "fp32" without refinement: the inner BiCGSTAB alone (`bicgstab`, the scaling
  of `scale_for`, residual replacement as by default), stopping on its recurrence residual.
Each run's truth is ||b - A x|| / ||b|| in float64 (SciPy's sparse Poisson matrix, b as
placed): a tolerance counts as reached when the truth is <= tol. For each solver the
tolerances go from loose to tight; for the loosest, grids grow until one fails; for each
tighter one, the search starts at the largest grid the looser one reached and goes down
until one succeeds (a tighter tolerance is assumed not to reach a larger grid, and a grid
larger than one that failed is assumed to fail: both are assumptions, not runs).

    python bench/bench_bicgstab_reach.py [--grids 8 16 24 32 48 64] [--tols 1e-3 ...]
        [--solvers ...] [--devices 1] [--maxiter 1000] [--out FILE]

Prints the runs and a markdown table (largest N reached per tolerance); writes
bench/results/bicgstab_reach.json (or FILE).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
SOLVERS = ("mixed + refinement", "fp32 + refinement", "mixed", "fp32")


def solve_once(n: int, solver: str, tol: float, maxiter: int) -> dict:
    """One solve of the N^3 problem: the float64 truth, iterations, the solver's own view."""
    import jax
    import numpy as np
    from wse_core import preset
    from wse_hpc.stencil import bicgstab, refine, scale_for
    from wse_hpc.stencil.kernels import laplacian7
    from wse_hpc.stencil.placement import grid_wafer
    from wse_hpc.stencil.reference import poisson_matrix
    from wse_hpc.stencil.refine import PAIR_BELOW
    from wse_hpc.stencil.runs import exact_solution, place_bicgstab

    precision, refined = solver.split(" + ")[0], solver.endswith("refinement")
    pair = refined and tol < PAIR_BELOW
    shape = (n, n, n)
    grid = place_bicgstab(grid_wafer(preset("wse2"), shape), shape, precision, pair=pair)
    b = jax.jit(laplacian7(grid))(grid.place(exact_solution(grid, "bicgstab"), "b"))
    t0 = time.perf_counter()
    if refined:
        res = jax.jit(refine(grid, precision=precision, tol=tol, maxiter=maxiter, pair=pair))(b)
        x = grid.gather(res.x).astype(np.float64) + grid.gather(res.x_lo)
        own = {"converged": bool(res.converged), "stalled": bool(res.stalled)}
    else:
        bmax = float(np.abs(grid.gather(b)).max())
        solve = jax.jit(bicgstab(grid, precision=precision, tol=tol, maxiter=maxiter))
        res = solve(b, None, scale_for(grid, bmax))
        x = grid.gather(res.x).astype(np.float64)
        own = {"recurrence_residual": float(res.residual), "breakdown": bool(res.breakdown)}
    wall = time.perf_counter() - t0
    bb = grid.gather(b).astype(np.float64).ravel()
    a = poisson_matrix(shape, grid.spacing)
    truth = float(np.linalg.norm(bb - a @ x.ravel()) / np.linalg.norm(bb))
    return {
        "n": n, "solver": solver, "tol": tol, "truth": truth,
        "reached": bool(truth <= tol),  # NaN compares False
        "iterations": int(res.iterations), "wall_s": wall, **own,
    }  # fmt: skip


def sweep(solver: str, grids: list[int], tols: list[float], maxiter: int) -> list[dict]:
    runs: list[dict] = []

    def run(n: int, tol: float) -> bool:
        r = solve_once(n, solver, tol, maxiter)
        runs.append(r)
        print(
            f"{solver:<20} N={n:<4} tol {tol:<7g} true residual {r['truth']:.2e} after "
            f"{r['iterations']:>4} iterations: {'reached' if r['reached'] else 'NOT reached'}",
            flush=True,
        )
        return r["reached"]

    best = None  # the largest grid the previous (looser) tolerance reached
    for tol in sorted(tols, reverse=True):
        if best is None:
            for n in grids:
                if not run(n, tol):
                    break
                best = n
            if best is None:
                return runs  # the loosest tolerance fails on the smallest grid
            continue
        ok = None
        for n in [g for g in grids if g <= best][::-1]:
            if run(n, tol):
                ok = n
                break
        if ok is None:
            break
        best = ok
    return runs


def table(runs: list[dict], grids: list[int], tols: list[float]) -> str:
    """Largest N whose truth reached each tol (—: not reached on the smallest grid)."""
    head = "| solver | " + " | ".join(f"tol {t:g}" for t in sorted(tols, reverse=True)) + " |"
    lines = [head, "|---|" + "---|" * len(tols)]
    for solver in dict.fromkeys(r["solver"] for r in runs):
        cells = []
        for tol in sorted(tols, reverse=True):
            ok = [
                r["n"] for r in runs if r["solver"] == solver and r["tol"] == tol and r["reached"]
            ]
            tried = [r for r in runs if r["solver"] == solver and r["tol"] == tol]
            fails = [r for r in tried if not r["reached"]]
            if ok:
                worst = min(fails, key=lambda r: r["n"]) if fails else None
                cell = f"{max(ok)}^3"
                if worst and worst["n"] > max(ok):
                    cell += f" ({worst['n']}^3: {worst['truth']:.0e})"
            elif fails:
                cell = f"no ({min(r['n'] for r in fails)}^3: {fails[0]['truth']:.0e})"
            else:
                cell = "-"
            cells.append(cell)
        lines.append(f"| {solver} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", type=int, nargs="+", default=[8, 16, 24, 32, 48, 64])
    ap.add_argument("--tols", type=float, nargs="+", default=[1e-3, 1e-4, 1e-5, 1e-6, 3e-7])
    ap.add_argument("--solvers", nargs="+", default=list(SOLVERS), choices=SOLVERS)
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--maxiter", type=int, default=1000, help="the CLI's default cap")
    ap.add_argument("--out", type=Path, default=RESULTS / "bicgstab_reach.json")
    args = ap.parse_args()
    from wse_core.host.runtime import configure

    configure(args.devices)
    import jax

    t0 = time.perf_counter()
    runs = [r for s in args.solvers for r in sweep(s, sorted(args.grids), args.tols, args.maxiter)]
    text = table(runs, args.grids, args.tols)
    print("\n" + text)
    out = {
        "benchmark": "bicgstab_reach",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {jax.devices()[0].device_kind}",
        "devices": len(jax.devices()),
        "jax": jax.__version__,
        "maxiter": args.maxiter,
        "wall_s": time.perf_counter() - t0,
        "runs": runs,
        "table_md": text,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
