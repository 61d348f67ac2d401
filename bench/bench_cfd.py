"""CFD benchmark: time to a Nusselt number at equal accuracy, the emulated wafer against a
NumPy finite-difference reference and Dedalus, side by side in one run.

The case: 2D Rayleigh-Benard, Ra 1e4, Pr 1, aspect 2, no-slip plates at T = 1 and 0,
periodic sides, free-fall units, from the same small perturbation to t = T_END (a steady
single roll pair by t ~ 60, tests/test_fields_dedalus.py); Nu is averaged over the last
T_AVG free-fall times.

Equal accuracy: the reference Nu is Dedalus at REF_MODES (64 x 32 modes; at 32 x 16 it
already agrees to 2e-5, test_fields_dedalus.py), or, where Dedalus is not installed, the
Richardson extrapolation (h^2) of the NumPy scheme's two finest ladder grids. Each contender
walks its resolution ladder from the coarsest and stops at the first resolution whose Nu is
within TOL (1%) of the reference; the figure is that run's wall time (the ladder's coarser
runs are reported, not counted). Same end time, same averaging window for every contender.

- wafer: `wse_hpc.fields.convection.nusselt_run` on the emulator (fp32, Jacobi-PCG pressure
  on the fabric), run at the grid the NumPy ladder stopped at (the same scheme: the same Nu
  to the CG tolerance, tests/test_fields_flow.py), one grid finer if it misses TOL there.
- numpy: the same scheme in float64 (`reference_flow.rayleigh_benard_np`, a sparse-LU
  pressure factorized once) over FD_LADDER.
- dedalus: Dedalus 3's own Rayleigh-Benard example on the same case
  (`wse_hpc.fields.dedalus_peer`, RealFourier x ChebyshevT, RK222, its CFL) over
  DEDALUS_LADDER; "skipped" where Dedalus is not installed (the `peers` extra).

Measured 2026-12-02 (2 cores shared at load ~17, so wall times are pessimistic; Dedalus
3.0.5 built with `CC=mpicc pip install dedalus==3.0.5`): reference Nu 2.64866 (Dedalus
64 x 32 modes, 1,452 steps, 415 s; the NumPy scheme's Richardson value from 48 x 24 and
64 x 32 is 2.64879). At 1%: wafer 48 x 24 cells Nu 2.6727 (+0.91%) in 73.4 s, numpy
48 x 24 2.6727 (+0.91%) in 78.7 s, Dedalus 16 x 8 modes 2.6466 (-0.08%) in 61.2 s (its
build 8.6 s included; 640 steps, held at the max_dt 0.125 cap, so its time hardly depends
on the modes: 8 x 4 took 57.8 s). Ladders: FD 16 x 8 +7.7%, 24 x 12 +3.5%, 32 x 16 +2.0%;
Dedalus 8 x 4 +21.9%, 12 x 6 +2.8%. The wafer's Nu equals NumPy's to 1.2e-6.

Prints a table and writes bench/results/cfd.json (with `host_record()`).

    python bench/bench_cfd.py [--quick]      (--quick: t_end 40, tolerance 2%)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from pathlib import Path

# one thread per contender, as Dedalus asks ("strongly suggest OMP_NUM_THREADS=1"); set
# before NumPy and Dedalus load their OpenMP / BLAS runtimes
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

RESULTS = Path(__file__).parent / "results"
RA, PR, ASPECT = 1e4, 1.0, 2.0
T_END, T_AVG = 80.0, 20.0  # free-fall times: steady by ~60 (test_fields_dedalus.py)
TOL = 0.01  # |Nu / Nu_ref - 1| of "equal accuracy"
FD_LADDER = ((16, 8), (24, 12), (32, 16), (48, 24), (64, 32))
DEDALUS_LADDER = ((8, 4), (12, 6), (16, 8), (24, 12), (32, 16))
REF_MODES = (64, 32)


def wafer(grid, t_end, t_avg) -> dict:
    from wse_core import PRESETS
    from wse_hpc.fields.convection import NusseltConfig, nusselt_run

    cfg = NusseltConfig(ra=RA, pr=PR, aspect=ASPECT, t_end=t_end, t_avg=t_avg, chunk=100)
    t0 = time.perf_counter()
    nu, _ = nusselt_run(PRESETS["wse3"], (*grid, 1), cfg)
    return {"nusselt": nu, "wall_s": time.perf_counter() - t0, "grid": list(grid)}


def numpy_reference(grid, t_end, t_avg) -> dict:
    from wse_hpc.fields.convection import stable_dt
    from wse_hpc.fields.reference_flow import rayleigh_benard_np

    nx, ny = grid
    dt = stable_dt((nx, ny, 1), ASPECT, RA, PR)
    t0 = time.perf_counter()
    step, kappa = rayleigh_benard_np(grid, dt, ra=RA, pr=PR, aspect=ASPECT)
    x = (np.arange(nx) + 0.5) * ASPECT / nx
    y = (np.arange(ny) + 0.5) / ny
    X, Y = np.meshgrid(x, y, indexing="ij")
    th = (1e-2 * np.sin(np.pi * Y) * np.cos(2 * np.pi * X / ASPECT))[..., None]
    u = np.zeros_like(th)
    v = np.zeros_like(th)
    steps, acc, cnt = int(round(t_end / dt)), 0.0, 0
    for k in range(1, steps + 1):
        u, v, th = step(u, v, th)
        if k * dt > t_end - t_avg:  # as flow.nusselt: 1 + <v theta> / kappa on v's faces
            vt = 0.5 * (th + np.concatenate([th[:, 1:], -th[:, -1:]], axis=1))
            acc, cnt = acc + 1 + (v * vt).mean() / kappa, cnt + 1
    return {"nusselt": acc / max(cnt, 1), "wall_s": time.perf_counter() - t0, "grid": list(grid)}


def dedalus(modes, t_end, t_avg) -> dict:
    from wse_hpc.fields.dedalus_peer import DedalusConfig, dedalus_nusselt

    t0 = time.perf_counter()
    cfg = DedalusConfig(ra=RA, pr=PR, aspect=ASPECT, nx=modes[0], nz=modes[1], t_end=t_end,
                        t_avg=t_avg)  # fmt: skip
    try:
        run = dedalus_nusselt(cfg)
    except FloatingPointError as e:
        return {"unstable": str(e), "wall_s": time.perf_counter() - t0, "grid": list(modes)}
    return {"nusselt": run.nusselt, "wall_s": time.perf_counter() - t0, "grid": list(modes),
            "steps": run.steps, "build_s": run.build_s}  # fmt: skip


def ladder(fn, sizes, ref, tol, t_end, t_avg) -> tuple[dict | None, list[dict]]:
    """Run `fn` up `sizes`; stop at the first within tol of ref: (that run, every run)."""
    runs = []
    for size in sizes:
        r = fn(size, t_end, t_avg)
        if "nusselt" in r:
            r["error"] = r["nusselt"] / ref - 1
        runs.append(r)
        print(f"  {fn.__name__} {size}: {r}", flush=True)
        if "error" in r and abs(r["error"]) <= tol:
            return r, runs
    return None, runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    t_end, t_avg, tol = (40.0, 10.0, 0.02) if args.quick else (T_END, T_AVG, TOL)
    out: dict = {"case": {"ra": RA, "pr": PR, "aspect": ASPECT, "t_end": t_end,
                          "t_avg": t_avg, "tol": tol}}  # fmt: skip
    have_dedalus = importlib.util.find_spec("dedalus") is not None
    if have_dedalus:
        ref = dedalus(REF_MODES, t_end, t_avg)
        out["reference"] = {"by": f"Dedalus {REF_MODES[0]} x {REF_MODES[1]} modes", **ref}
    else:  # Richardson (second order) from the NumPy scheme's two finest grids
        fine, finer = (numpy_reference(g, t_end, t_avg) for g in FD_LADDER[-2:])
        r2 = (FD_LADDER[-1][0] / FD_LADDER[-2][0]) ** 2
        nu = (r2 * finer["nusselt"] - fine["nusselt"]) / (r2 - 1)
        out["reference"] = {"by": f"Richardson h^2 from NumPy {FD_LADDER[-2]} and "
                            f"{FD_LADDER[-1]} (Dedalus not installed)", "nusselt": nu}  # fmt: skip
    nu_ref = out["reference"]["nusselt"]
    print(f"reference Nu {nu_ref:.5f} ({out['reference']['by']})", flush=True)
    chosen: dict = {}
    chosen["numpy"], out["numpy_ladder"] = ladder(numpy_reference, FD_LADDER, nu_ref, tol,
                                                  t_end, t_avg)  # fmt: skip
    start = FD_LADDER.index(tuple(chosen["numpy"]["grid"])) if chosen["numpy"] else 0
    chosen["wafer"], out["wafer_ladder"] = ladder(wafer, FD_LADDER[start:start + 2], nu_ref,
                                                  tol, t_end, t_avg)  # fmt: skip
    if have_dedalus:
        chosen["dedalus"], out["dedalus_ladder"] = ladder(dedalus, DEDALUS_LADDER, nu_ref, tol,
                                                          t_end, t_avg)  # fmt: skip
    else:
        out["dedalus_ladder"] = [{"skipped": "dedalus is not installed (pip install -e "
                                  "'.[peers]', PLATFORM.md)"}]  # fmt: skip
    out["at_equal_accuracy"] = chosen
    from wse_core.host.memory import host_record

    out["host"] = host_record()
    print(f"\ntime to Nu within {tol:.0%} of {nu_ref:.4f} ({out['reference']['by']}), "
          f"t_end {t_end:g}, Nu averaged over the last {t_avg:g}:")  # fmt: skip
    print(f"{'contender':<10}{'resolution':>12}{'Nu':>10}{'error':>9}{'wall s':>9}")
    for name in ("wafer", "numpy", "dedalus"):
        r = chosen.get(name)
        if r is None:
            why = "skipped" if name == "dedalus" and not have_dedalus else "none within tol"
            print(f"{name:<10}  {why}")
        else:
            res = "x".join(map(str, r["grid"]))
            print(f"{name:<10}{res:>12}{r['nusselt']:>10.4f}{r['error']:>+9.2%}"
                  f"{r['wall_s']:>9.2f}")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cfd.json").write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
