"""CFD benchmark: time to a Nusselt number, the emulated wafer against a NumPy reference and
Dedalus, side by side in one run.

The case: 2D Rayleigh-Benard, Ra 1e4, Pr 1, aspect 2, no-slip plates, free-fall units,
from the same small perturbation to t = `--t-end`; the figure is the Nusselt number
averaged over the last `--t-avg` time units and the wall time to reach it.

- wafer: `wse_hpc.fields.convection.nusselt_run` on the emulator (Jacobi-PCG pressure on
  the fabric, fp32).
- numpy: the same scheme (MAC grid, Chorin projection, central fluxes; the operators of
  `wse_hpc.fields.reference`) in float64 NumPy with the pressure Poisson factorized once
  by SciPy (a direct solve each step): equal accuracy by construction, the same Nu to the
  CG tolerance.
- dedalus: Dedalus 3's own Rayleigh-Benard example on the same case
  (`wse_hpc.fields.dedalus_peer`, RealFourier x ChebyshevT, RK222, its CFL) at
  `--dedalus-modes` (default 32 x 16): the spectral code is converged there to far below
  the finite-difference codes' error, so its wall time bounds its time at equal accuracy
  from above, and its Nu is the reference the other rows' errors are given against. The
  row says "skipped" where Dedalus is not installed (the `peers` extra).

Measured 2026-11-28 (`--quick`: 32 x 16, t 30, 2 loaded cores): Nu wafer 2.6848 in 11.8 s,
numpy 2.6767 in 2.1 s, Dedalus (32 x 16 modes, 279 steps) 2.6295 in 15.7 s: the 32 x 16
finite-difference grid is 2.1% / 1.8% off Dedalus; 64 x 32 (the slow test's grid) is 0.5%.

Prints a table and writes bench/results/cfd.json (with `host_record()`).

    python bench/bench_cfd.py [--quick] [--grid NX NY]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"
RA, PR, ASPECT = 1e4, 1.0, 2.0


def wafer(grid, t_end, t_avg) -> dict:
    from wse_core import PRESETS
    from wse_hpc.fields.convection import nusselt_run

    t0 = time.perf_counter()
    nu, _ = nusselt_run(PRESETS["small"], (*grid, 1), ra=RA, pr=PR, aspect=ASPECT,
                        t_end=t_end, t_avg=t_avg, chunk=100)  # fmt: skip
    return {"nusselt": nu, "wall_s": time.perf_counter() - t0}


def numpy_reference(grid, t_end, t_avg) -> dict:
    from wse_hpc.fields.convection import stable_dt

    nx, ny = grid
    dt = stable_dt((nx, ny, 1), ASPECT, RA, PR)
    from wse_hpc.fields.reference_flow import rayleigh_benard_np

    step, kappa = rayleigh_benard_np(grid, dt, ra=RA, pr=PR, aspect=ASPECT)
    x = (np.arange(nx) + 0.5) * ASPECT / nx
    y = (np.arange(ny) + 0.5) / ny
    X, Y = np.meshgrid(x, y, indexing="ij")
    th = (1e-2 * np.sin(np.pi * Y) * np.cos(2 * np.pi * X / ASPECT))[..., None]
    u = np.zeros_like(th)
    v = np.zeros_like(th)
    t0 = time.perf_counter()
    steps, acc, cnt = int(round(t_end / dt)), 0.0, 0
    for k in range(1, steps + 1):
        u, v, th = step(u, v, th)
        if k * dt > t_end - t_avg:
            vt = 0.5 * (th + np.concatenate([th[:, 1:], -th[:, -1:]], axis=1))
            acc, cnt = acc + 1 + (v * vt).mean() / kappa, cnt + 1
    return {"nusselt": acc / max(cnt, 1), "wall_s": time.perf_counter() - t0}


def dedalus(modes, t_end, t_avg) -> dict:
    import importlib.util

    if importlib.util.find_spec("dedalus") is None:
        return {"skipped": "dedalus is not installed (pip install -e '.[peers]')"}
    from wse_hpc.fields.dedalus_peer import dedalus_nusselt

    t0 = time.perf_counter()
    run = dedalus_nusselt(ra=RA, pr=PR, aspect=ASPECT, nx=modes[0], nz=modes[1], t_end=t_end,
                          t_avg=t_avg)  # fmt: skip
    return {"nusselt": run.nusselt, "wall_s": time.perf_counter() - t0, "modes": list(modes),
            "steps": run.steps, "build_s": run.build_s}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--grid", type=int, nargs=2, default=(32, 16))
    p.add_argument("--dedalus-modes", type=int, nargs=2, default=(32, 16))
    args = p.parse_args()
    t_end, t_avg = (30.0, 5.0) if args.quick else (150.0, 30.0)
    grid = tuple(args.grid)
    out = {"case": {"ra": RA, "pr": PR, "aspect": ASPECT, "grid": grid, "t_end": t_end,
                    "t_avg": t_avg}}  # fmt: skip
    for name, fn, size in (("wafer", wafer, grid), ("numpy", numpy_reference, grid),
                           ("dedalus", dedalus, tuple(args.dedalus_modes))):  # fmt: skip
        out[name] = fn(size, t_end, t_avg)
        print(name, out[name], flush=True)
    from wse_core.host.memory import host_record

    out["host"] = host_record()
    w, n = out["wafer"], out["numpy"]
    print(f"{'contender':<10}{'Nu':>10}{'wall s':>10}")
    for name in ("wafer", "numpy", "dedalus"):
        r = out[name]
        if "skipped" in r:
            print(f"{name:<10}  skipped: {r['skipped']}")
        else:
            print(f"{name:<10}{r['nusselt']:>10.4f}{r['wall_s']:>10.2f}")
    print(f"Nu difference wafer - numpy: {w['nusselt'] - n['nusselt']:.2e}; "
          f"wall ratio numpy / wafer: {n['wall_s'] / w['wall_s']:.2f}")  # fmt: skip
    if "nusselt" in (d := out["dedalus"]):
        print(f"Nu error against Dedalus: wafer {w['nusselt'] / d['nusselt'] - 1:+.2%}, numpy "
              f"{n['nusselt'] / d['nusselt'] - 1:+.2%}; wall ratio dedalus / wafer "
              f"{d['wall_s'] / w['wall_s']:.2f}")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cfd.json").write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
