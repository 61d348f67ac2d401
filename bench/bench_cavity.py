"""Lid-driven cavity at Re 1000 to steady state against Ghia, Ghia & Shin (1982): the emulated
wafer (`wse_hpc.fields.cavity`, fp32, Jacobi-PCG pressure on the fabric) and the same scheme
in float64 NumPy (`reference_flow.cavity_np`, a sparse-LU pressure), side by side.

Both run SSP-RK3 with the lagged pressure (`FlowSpec.time_scheme="rk3"`) at the step
`cavity.stable_dt` gives, from rest until max |du| / dt < `--steady-tol`; the figures are
the largest centreline error over Ghia's 17 + 17 tabulated points (in units of the lid
speed; the issue's bar is 2%), the steps, the simulated time and the wall time.

Measured 2026-12-02 (n 130, Re 1000; 2 cores shared at load ~20, so wall times are
pessimistic): numpy steady at t = 48.0 after 9,000 steps in 1,497 s, largest deviation from
Ghia 0.31% (u) / 1.21% (v) of the lid speed; `--wafer-from-state 200` from that state: the
emulated step holds it (8e-5 per unit time), 0.30% / 1.21%, 21 CG iterations and 0.086 s a
step. The emulated run from rest (`--only wafer`, the slow test's loop) is steady at t = 48.0
too (9,000 steps, 943 s), 0.31% / 1.21%; its Poisson takes 300 CG iterations a step at the
start, 22 at the end. n 64: 1.85% / 2.06%, steady at t = 48.7.

Prints a table and writes bench/results/cavity*.json (with `host_record()`).

    python bench/bench_cavity.py [--n 130] [--re 1000] [--only numpy|wafer] [--state F.npz]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"


def _errors(uc, vc, re) -> dict:
    from wse_hpc.fields.cavity import GHIA

    return {"u_err": float(np.abs(uc - np.asarray(GHIA[re]["u"])).max()),
            "v_err": float(np.abs(vc - np.asarray(GHIA[re]["v"])).max())}  # fmt: skip


def numpy_reference(n, re, steady_tol, t_max, chunk=500, state: Path | None = None) -> dict:
    """The NumPy scheme to steady state; `state` (an .npz) is resumed from and written to
    after every chunk, so a long run can be continued."""
    from wse_hpc.fields.cavity import centrelines, stable_dt
    from wse_hpc.fields.reference_flow import cavity_np

    dt = stable_dt((n, n, 1), re, "rk3")
    t0 = time.perf_counter()
    step = cavity_np(n, dt, re=re, time_scheme="rk3")
    u, v, p = (np.zeros((n, n, 1)) for _ in range(3))
    steps, change, wall0 = 0, np.inf, 0.0
    if state is not None and state.exists():
        z = np.load(state)
        u, v, p, steps, wall0 = z["u"], z["v"], z["p"], int(z["steps"]), float(z["wall_s"])
    while steps * dt < t_max and change > steady_tol:
        for _ in range(chunk - 1):
            u, v, p = step(u, v, p)
        u1, v1, p = step(u, v, p)
        change = max(np.abs(u1 - u).max(), np.abs(v1 - v).max()) / dt
        u, v, steps = u1, v1, steps + chunk
        err = _errors(*centrelines(u[..., 0], v[..., 0]), re)
        wall = wall0 + time.perf_counter() - t0
        print(f"numpy t {steps * dt:.1f} change {change:.2e} {err} wall {wall:.0f} s", flush=True)
        if state is not None:
            np.savez(state, u=u, v=v, p=p, steps=steps, wall_s=wall)
    uc, vc = centrelines(u[..., 0], v[..., 0])
    return {"wall_s": wall0 + time.perf_counter() - t0, "steps": steps, "time": steps * dt,
            "change": float(change), "dt": dt, **_errors(uc, vc, re)}  # fmt: skip


def wafer(n, re, steady_tol, t_max, chunk=500) -> dict:
    from wse_core import PRESETS
    from wse_hpc.fields.cavity import CavityConfig, cavity, stable_dt

    cfg = CavityConfig(n=n, re=re, time_scheme="rk3", t_max=t_max, steady_tol=steady_tol,
                       chunk=chunk, mesh_shape=(1, 1))  # fmt: skip
    t0 = time.perf_counter()
    r = cavity(PRESETS["wse1"], cfg)
    return {"wall_s": time.perf_counter() - t0, "steps": r.steps, "time": r.time,
            "change": r.change, "dt": stable_dt((n, n, 1), re, "rk3"),
            **_errors(r.u_centre, r.v_centre, re)}  # fmt: skip


def wafer_from(state: Path, re, steps: int) -> dict:
    """The emulated step from the NumPy run's state (`--state`): `steps` steps, then the
    change per unit time, the centreline errors and the measured time per step (compile
    excluded) with the mean CG iterations: the scheme's fixed point held in fp32."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from wse_core import PRESETS
    from wse_hpc.fields.cavity import cavity_case, centrelines

    z = np.load(state)
    n = z["u"].shape[0]
    grid, flow, fns, s = cavity_case(PRESETS["wse1"], (n, n, 1), re=re, time_scheme="rk3",
                                     mesh_shape=(1, 1))  # fmt: skip

    def place(f, a):
        return f.like(grid.wafer.place(jnp.asarray(a, jnp.float32)))

    s = s._replace(velocity=(place(s.velocity[0], z["u"]), place(s.velocity[1], z["v"])),
                   p=place(s.p, z["p"]))  # fmt: skip

    def body(i, c):
        st, its = c
        st = fns.step_fn(st)
        return st, its + st.cg_iterations

    run = jax.jit(lambda st: lax.fori_loop(0, steps, body, (st, jnp.int32(0))))
    jax.block_until_ready(run(s))  # compile
    t0 = time.perf_counter()
    out, its = jax.block_until_ready(run(s))
    wall = time.perf_counter() - t0
    u1, v1 = (grid.gather(f)[..., 0] for f in out.velocity)
    change = max(np.abs(u1 - z["u"][..., 0]).max(), np.abs(v1 - z["v"][..., 0]).max())
    return {"steps": steps, "wall_s": wall, "s_per_step": wall / steps,
            "cg_iterations_mean": float(its) / steps,
            "change_per_time": float(change) / (steps * flow.dt),
            **_errors(*centrelines(u1, v1), re)}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=130)
    p.add_argument("--re", type=int, default=1000, choices=(100, 1000))
    p.add_argument("--steady-tol", type=float, default=1e-4)
    p.add_argument("--t-max", type=float, default=200.0)
    p.add_argument("--only", choices=("numpy", "wafer"))
    p.add_argument("--state", type=Path, help="numpy: resume from / save to this .npz")
    p.add_argument(
        "--wafer-from-state",
        type=int,
        metavar="STEPS",
        help="wafer: run STEPS emulated steps from --state instead of from rest",
    )
    args = p.parse_args()
    out: dict = {"case": {"n": args.n, "re": args.re, "steady_tol": args.steady_tol}}
    if args.wafer_from_state:
        out["wafer_from_state"] = wafer_from(args.state, args.re, args.wafer_from_state)
        print("wafer from the numpy state", out["wafer_from_state"], flush=True)
    for name, fn in (("numpy", numpy_reference), ("wafer", wafer)):
        if args.only in (None, name) and not args.wafer_from_state:
            kw = {"state": args.state} if name == "numpy" else {}
            out[name] = fn(args.n, args.re, args.steady_tol, args.t_max, **kw)
            print(name, out[name], flush=True)
    from wse_core.host.memory import host_record

    out["host"] = host_record()
    print(f"{'contender':<10}{'max|du| u':>10}{'max|dv| v':>10}{'steps':>8}{'t':>8}{'wall s':>9}")
    for name in ("numpy", "wafer"):
        if (r := out.get(name)) is not None:
            print(f"{name:<10}{r['u_err']:>10.4f}{r['v_err']:>10.4f}{r['steps']:>8}"
                  f"{r['time']:>8.1f}{r['wall_s']:>9.1f}")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    suffix = "_wafer_from_state" if args.wafer_from_state else f"_{args.only}" if args.only else ""
    (RESULTS / f"cavity{suffix}.json").write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
