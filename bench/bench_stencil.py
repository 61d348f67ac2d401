"""Stencil benchmark: emulated 7-point Jacobi, BiCGSTAB and 25-point wave against NumPy / SciPy.

Measured side by side in one process: this machine's memory bandwidth (a NumPy triad), a
7-point Jacobi sweep at 256^3 fp32 (wafer emulation vs a NumPy sweep; GB/s from the bytes a
sweep must move: read u and f, write u), BiCGSTAB on the 7-point Poisson problem
(iterations, time per iteration and time to solution vs scipy.sparse.linalg.bicgstab to the
same true residual on the same right-hand side), and the 25-point wave step (cells/s).
Jacobi and BiCGSTAB run on one device block (mesh 1 x 1) and on the default mesh over all
devices; the table shows the layout faster per sweep / iteration, the JSON both. Each
wafer figure sits next to the performance model's wafer time. Prints a table and writes
bench/results/stencil.json.

    python bench/bench_stencil.py [--quick] [--devices N]

Every contender pair runs in interleaved rounds (`bench/rounds.py`: ours, peer, ours, ...;
`--quick` 2 Jacobi rounds, 5 BiCGSTAB rounds); each ratio is reported as its median, spread
and worst round, and the JSON carries the host, NumPy's and SciPy's versions and the thread
settings. The right-hand side is fixed and the same for both (b = A u* formed on the wafer
in fp32, u* the problem's exact solution; SciPy solves it in fp64 from x0 = 0) and both
iteration counts are printed, with SciPy's on b formed in fp64 beside them (BiCGSTAB's
count moves with rounding: 68 against 78 at 48^3 for a ~1e-8 relative change of b, and
SciPy's own fp64 count on the same b with the host's BLAS kernels: 68 on the EPYC VM, 76 on
a Xeon one). SciPy iterates in the dtype of A and b, fp64 here (the table says so). So the
counts are also compared over 8 more right-hand sides (`_iteration_spread`): per b both
counts, their ratios' median and range.

Targets: Jacobi >= 8x NumPy and >= 40% of the measured bandwidth (issue 4); BiCGSTAB to
solution >= 3x SciPy in fp32 and >= 2x in mixed precision, fp32 iterations within 10% of
SciPy's (issue 44); a target is met by the median with no round below 1x.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

# One BLAS thread for SciPy's dot products: on 2 shared cores a second spinning BLAS thread
# made SciPy's iterations erratic (1.6 to 49 ms at 48^3); one thread is its fastest here.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from rounds import interleaved, ratio, ratio_line, record  # noqa: E402  (bench/rounds.py)

RESULTS = Path(__file__).parent / "results"
JACOBI_TARGET = 8.0  # x NumPy per sweep (issue 4)
BICGSTAB_TARGET = {"fp32": 3.0, "mixed": 2.0}  # x SciPy to solution (issue 44)
ITERATIONS_TARGET = 1.1  # fp32 iterations at most this x SciPy's on the same b (issue 44)


def _best(fn, repeats: int) -> float:
    from wse_core.host.runtime import wall_times_s  # imported late: OPENBLAS_NUM_THREADS first

    return min(wall_times_s(fn, repeats=repeats, warmup=0))


def bench_jacobi(n: int, steps: int, repeats: int, mesh_shape=None) -> dict:
    import jax
    import numpy as np
    from jax import lax
    from wse_core import preset
    from wse_core.host.runtime import wall_s
    from wse_hpc.stencil import grid_wafer, jacobi, place_grid
    from wse_hpc.stencil import perf as sperf
    from wse_hpc.stencil.kernels import iterate_padded, pad_z
    from wse_hpc.stencil.reference import shifted

    shape = (n, n, n)
    wafer = grid_wafer(preset("wse2"), shape, mesh_shape=mesh_shape)
    grid = place_grid(wafer, shape, {"u": "fp32", "u_next": "fp32", "f": "fp32"})
    rng = np.random.default_rng(0)
    u0 = rng.random(shape, dtype=np.float32)
    f0 = rng.random(shape, dtype=np.float32)
    step = jacobi(grid)
    # Sweeps as the shell runs them: two Z-ghost-padded buffers in turn (no carry copies).
    padded = jacobi(grid, padded=True)
    run = jax.jit(
        lambda ab, f: iterate_padded(grid, lambda a: padded(a, f), steps)(ab), donate_argnums=0
    )
    u, f = grid.place(u0, "u"), grid.place(f0, "f")
    pads = jax.jit(lambda a: (pad_z(grid, a), pad_z(grid, a)))
    jax.block_until_ready(run(pads(u), f))

    def timed():
        ab = jax.block_until_ready(pads(u))  # fresh donated buffers, outside the timing
        return wall_s(run, ab, f)[1]

    plain = jax.jit(lambda u, f: lax.fori_loop(0, steps, lambda i, a: step(a, f), u))
    jax.block_until_ready(plain(u, f))

    inv = [1 / h**2 for h in grid.spacing]
    d = 2 * sum(inv)

    def numpy_sweep(a):
        out = f0.copy()
        for axis, c in enumerate(inv):
            out += np.float32(c) * (shifted(a, axis, 1, False) + shifted(a, axis, -1, False))
        out *= np.float32(1 / d)
        return out

    times = interleaved(
        {
            "wafer": lambda: timed() / steps,
            "numpy": lambda: _best(lambda: numpy_sweep(u0), 1),
            "plain": lambda: _best(lambda: jax.block_until_ready(plain(u, f)), 1) / steps,
        },
        repeats,
    )
    wafer_s, numpy_s = float(np.median(times["wafer"])), float(np.median(times["numpy"]))
    plain_s = float(np.median(times["plain"]))
    check = grid.gather(jax.jit(step)(u, f))
    err = float(np.abs(check - numpy_sweep(u0)).max() / np.abs(check).max())
    from wse_core import PerfModel

    pred = PerfModel(wafer.spec).evaluate(sperf.jacobi_phases(grid, jacobi(grid), 1))
    return {
        "grid": f"{n}^3",
        "mesh": "x".join(map(str, wafer.mesh_shape)),
        "wafer_s_per_sweep": wafer_s,
        "one_buffer_fori_loop_s_per_sweep": plain_s,
        "numpy_s_per_sweep": numpy_s,
        "ratio_vs_numpy": ratio(times["wafer"], times["numpy"], JACOBI_TARGET),
        "bytes_per_sweep": 3 * 4 * n**3,
        "wafer_gb_s": 3 * 4 * n**3 / wafer_s / 1e9,
        "max_rel_diff_vs_numpy": err,
        "speedup_vs_numpy": ratio(times["wafer"], times["numpy"])["median"],
        "predicted_wse2_s_per_sweep": pred.seconds,
        "predicted_note": f"{n} x {n} PEs of WSE-2, nz = {n}",
    }


def bench_bicgstab(n: int, precision: str, tol: float, mesh_shape=None, rounds: int = 5) -> dict:
    """One `wse hpc stencil --kind bicgstab` run (its report: iterations, residuals, the
    prediction, the first solve's wall time), then the same solve and SciPy's timed warm in
    `rounds` interleaved rounds (medians; the first solve after compiling pays XLA's scratch
    page faults: 1.9 against 0.7-0.9 ms per mixed iteration at 48^3)."""
    import jax
    import numpy as np
    import scipy.sparse.linalg as spla
    from wse_core import preset
    from wse_core.host.runtime import wall_s
    from wse_hpc.stencil import grid_wafer
    from wse_hpc.stencil.kernels import laplacian7
    from wse_hpc.stencil.problems import place_bicgstab
    from wse_hpc.stencil.reference import poisson_matrix
    from wse_hpc.stencil.refine import PAIR_BELOW, refine
    from wse_hpc.stencil.runs import StencilConfig, exact_solution, run_stencil

    shape = (n, n, n)
    cfg = StencilConfig(
        kind="bicgstab",
        grid=shape,
        dtype=precision,
        tol=tol,
        steps=2000,
        mesh_shape=mesh_shape,
        spec=preset("wse2"),
    )
    run = run_stencil(cfg).report
    final = run.extra["final"]
    wafer = grid_wafer(preset("wse2"), shape, mesh_shape=mesh_shape)
    grid = place_bicgstab(wafer, shape, precision, pair=tol < PAIR_BELOW)
    solve = jax.jit(refine(grid, precision=precision, tol=tol, maxiter=2000, pair=tol < PAIR_BELOW))
    placed = jax.jit(laplacian7(grid))(grid.place(exact_solution(grid, "bicgstab"), "b"))
    iterations = int(jax.block_until_ready(solve(placed)).iterations)  # compiled, warm
    # SciPy on the same discrete problem and the same right-hand side (the fp32 b the wafer
    # solves, in fp64), to the true residual the wafer run reached.
    a = poisson_matrix(grid.shape, grid.spacing)
    b = grid.gather(placed).ravel().astype(np.float64)
    target = max(final["true_residual"], 1e-12)

    count, x = _scipy_count(a, b, target)  # also the warm-up: one-time costs stay out
    # BiCGSTAB's count is sensitive to rounding: the same solve on b = A u* formed in fp64
    # (differing from the fp32 b by ~1e-8 relative) is recorded beside it.
    count_b64, _ = _scipy_count(a, a @ exact_solution(grid, "bicgstab").ravel(), target)

    def ours() -> float:
        return wall_s(solve, placed)[1]

    def scipy() -> float:
        t0 = time.perf_counter()
        spla.bicgstab(a, b, rtol=target, maxiter=5000)
        return time.perf_counter() - t0

    spread = _iteration_spread(grid, solve, a, lambda: jax.jit(laplacian7(grid)))
    times = interleaved({"wafer": ours, "scipy": scipy}, rounds)
    wafer_s, scipy_s = float(np.median(times["wafer"])), float(np.median(times["scipy"]))
    wafer_it, scipy_it = wafer_s / max(iterations, 1), scipy_s / max(count, 1)
    to_solution = ratio(times["wafer"], times["scipy"], BICGSTAB_TARGET[precision])
    return {
        "grid": f"{n}^3",
        "mesh": "x".join(map(str, run.extra["emulated_wafer"]["mesh"])),
        "precision": precision,
        "tol": tol,
        "rounds": rounds,
        "wafer_iterations": iterations,
        "wafer_reliable_updates": final["reliable_updates"],
        "wafer_s_to_solution": wafer_s,
        "wafer_round_s": times["wafer"],
        "wafer_first_solve_s": run.measured_wall_s,
        "wafer_s_per_iteration": wafer_it,
        "wafer_recurrence_residual": final["recurrence_residual"],
        "wafer_true_residual": final["true_residual"],
        "scipy_iterations": count,
        "scipy_iterations_fp64_rhs": count_b64,
        "scipy_s_to_solution": scipy_s,
        "scipy_round_s": times["scipy"],
        "scipy_s_per_iteration": scipy_it,
        "scipy_true_residual": float(np.linalg.norm(b - a @ x) / np.linalg.norm(b)),
        "speedup_per_iteration": scipy_it / wafer_it,
        "speedup_to_solution": to_solution["median"],
        "ratio_to_solution": to_solution,
        "iterations_vs_scipy": iterations / max(count, 1),
        "iterations_target": ITERATIONS_TARGET if precision == "fp32" else None,
        "scipy_dtype": str(x.dtype),
        "iterations_over_rhs": spread,
        "rhs": "b = A u* formed on the wafer in fp32 (u* the exact solution); SciPy solves the "
        "same b in fp64 from x0 = 0 (scipy_iterations_fp64_rhs: b = A u* formed in fp64)",
        "predicted_wse2_s_per_iteration": run.extra["predicted_s_per_step"],
        "converged": run.extra["converged"],
    }


def _scipy_count(a, rhs, rtol: float):
    """SciPy's BiCGSTAB on A x = rhs from 0 to `rtol`: (iterations, x)."""
    import scipy.sparse.linalg as spla

    count = [0]
    tick = lambda xk: count.__setitem__(0, count[0] + 1)
    x, _ = spla.bicgstab(a, rhs, rtol=rtol, maxiter=5000, callback=tick)
    return count[0], x


RHS_SEEDS = tuple(range(1, 9))  # the spread's right-hand sides (`_iteration_spread`)


def _iteration_spread(grid, solve, a, lap) -> dict:
    """Both iteration counts over more right-hand sides than the bench's one (each count
    moves with rounding: one b says little): b = A u for u the exact solution times (1 +
    1e-3 noise) (seeds 1-4) and for u white noise (seeds 5-8), formed on the wafer in fp32;
    SciPy (fp64) to the true residual the wafer reached on each. Per b the two counts and
    their ratio; the ratios' median, range and how many are within ITERATIONS_TARGET."""
    import jax
    import numpy as np
    from wse_hpc.stencil.runs import exact_solution

    apply_a, u_star, rows = lap(), exact_solution(grid, "bicgstab"), []
    for seed in RHS_SEEDS:
        noise = np.random.default_rng(seed).standard_normal(grid.shape)
        u = u_star * (1 + 1e-3 * noise) if seed <= 4 else noise
        placed = apply_a(grid.place(u.astype(np.float32), "b"))
        res = jax.block_until_ready(solve(placed))
        b = grid.gather(placed).ravel().astype(np.float64)
        count, _ = _scipy_count(a, b, max(float(res.true_residual), 1e-12))
        rows.append({"seed": seed, "wafer": int(res.iterations), "scipy": count})
    ratios = [r["wafer"] / max(r["scipy"], 1) for r in rows]
    return {
        "rhs": rows,
        "ratio_median": float(np.median(ratios)),
        "ratio_range": [min(ratios), max(ratios)],
        "within_target": sum(q <= ITERATIONS_TARGET for q in ratios),
    }


def bench_wave(n: int, steps: int) -> dict:
    from wse_core import preset
    from wse_hpc.stencil.runs import StencilConfig, run_stencil

    cfg = StencilConfig(kind="wave25", grid=(n, n, n), steps=steps, chunks=2, spec=preset("wse2"))
    run = run_stencil(cfg).report
    return {
        "grid": f"{n}^3",
        "steps": run.extra["steps"],
        "wafer_s_per_step": run.measured_wall_s / steps,
        "emulated_mcells_per_s": run.extra["measured_cells_per_s"] / 1e6,
        "predicted_wse2_s_per_step": run.extra["predicted_s_per_step"],
        "predicted_wse2_gcells_per_s": run.extra["predicted_gcells_per_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--devices", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    from wse_core.host.runtime import configure, keep_freed_memory

    kept = keep_freed_memory()  # before JAX starts threads; every contender shares it
    configure(args.devices, compile_cache=False)
    quick = args.quick
    out = {"devices": args.devices, "quick": quick, "keep_freed_memory": kept}
    out.update(record("numpy", "scipy"))  # host (triad bandwidth, load), versions, threads
    out["bandwidth_gb_s"] = out["host"]["memory_bandwidth_gb_s"]
    # One device block (no halo ppermutes) and the default mesh over all devices; the table
    # shows the faster, the JSON both.
    runs = [
        bench_jacobi(96 if quick else 256, 5 if quick else 20, 2 if quick else 3, m)
        for m in ((1, 1), None)
    ]
    for r in runs:
        r["fraction_of_bandwidth"] = r["wafer_gb_s"] / out["bandwidth_gb_s"]
    out["jacobi_meshes"] = runs
    out["jacobi"] = min(runs, key=lambda r: r["wafer_s_per_sweep"])
    n = 48 if quick else 128
    # BiCGSTAB on both layouts too; the table shows the one faster per iteration (a layout's
    # speed; its iteration count moves with the rounding of its reductions), the JSON both.
    solves = [
        [bench_bicgstab(n, p, tol, m) for m in ((1, 1), None)]
        for p, tol in (("fp32", 1e-6), ("mixed", 1e-3))
    ]
    out["bicgstab_meshes"] = [r for pair in solves for r in pair]
    out["bicgstab"] = [min(pair, key=lambda r: r["wafer_s_per_iteration"]) for pair in solves]
    out["wave25"] = bench_wave(48 if quick else 128, 10 if quick else 20)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "stencil.json").write_text(json.dumps(out, indent=2))
    _print(out)


def _print(out: dict) -> None:
    j = out["jacobi"]
    print(
        f"memory bandwidth (NumPy triad): {out['bandwidth_gb_s']:.1f} GB/s; "
        f"{out['devices']} devices"
    )
    print("| kernel | grid | wafer emulation | baseline | ratio | note |")
    print("|---|---|---|---|---|---|")
    print(
        f"| jacobi fp32, mesh {j['mesh']} | {j['grid']} | "
        f"{j['wafer_s_per_sweep'] * 1e3:.1f} ms/sweep "
        f"({j['wafer_gb_s']:.1f} GB/s, {j['fraction_of_bandwidth']:.0%} of bw) | NumPy "
        f"{j['numpy_s_per_sweep'] * 1e3:.1f} ms | {j['speedup_vs_numpy']:.1f}x | "
        f"WSE-2 predicted {j['predicted_wse2_s_per_sweep'] * 1e6:.2f} us |"
    )
    for b in out["bicgstab"]:
        print(
            f"| bicgstab {b['precision']} tol {b['tol']:g}, mesh {b['mesh']} | {b['grid']} | "
            f"{b['wafer_s_per_iteration'] * 1e3:.2f} ms/it x {b['wafer_iterations']} "
            f"(true res {b['wafer_true_residual']:.1e}) | SciPy "
            f"{b['scipy_s_per_iteration'] * 1e3:.2f} ms/it x {b['scipy_iterations']} "
            f"(res {b['scipy_true_residual']:.1e}) | {b['speedup_to_solution']:.2f}x to solution "
            f"({b['speedup_per_iteration']:.1f}x per it.) | WSE-2 predicted "
            f"{b['predicted_wse2_s_per_iteration'] * 1e6:.2f} us/it |"
        )
    w = out["wave25"]
    print(
        f"| wave25 fp32 | {w['grid']} | {w['wafer_s_per_step'] * 1e3:.1f} ms/step "
        f"({w['emulated_mcells_per_s']:.0f} Mcell/s) | - | - | WSE-2 predicted "
        f"{w['predicted_wse2_s_per_step'] * 1e6:.2f} us/step |"
    )
    print(ratio_line(f"jacobi {j['grid']} mesh {j['mesh']} vs NumPy", j["ratio_vs_numpy"]))
    for b in out["bicgstab_meshes"]:
        name = f"bicgstab {b['precision']} {b['grid']} mesh {b['mesh']} vs SciPy to solution"
        print(ratio_line(name, b["ratio_to_solution"]))
        print(
            f"  iterations: wafer {b['wafer_iterations']}, SciPy {b['scipy_iterations']} "
            f"({b['iterations_vs_scipy']:.2f}x; same fp32 right-hand side b = A u*, SciPy "
            f"from 0 in {b['scipy_dtype']}; {b['scipy_iterations_fp64_rhs']} on b formed in "
            "fp64)"
        )
        sp = b["iterations_over_rhs"]
        pairs = ", ".join(f"{r['wafer']}/{r['scipy']}" for r in sp["rhs"])
        within = f", {sp['within_target']} within {ITERATIONS_TARGET}x"
        print(
            f"  over {len(sp['rhs'])} more right-hand sides (wafer/SciPy): {pairs}; ratio median "
            f"{sp['ratio_median']:.2f}, range {sp['ratio_range'][0]:.2f}-"
            f"{sp['ratio_range'][1]:.2f}{within if b['iterations_target'] else ''}"
        )
    print(f"load average {out['host']['load_average']} at the start; {out['host']['utc']}")


if __name__ == "__main__":
    main()
