"""Scale checks of the stencil kernels at the published problem sizes (run by hand, not a test).

    python bench/bench_stencil_scale.py sc20    # BiCGSTAB, 600 x 595 x 1536, mixed, a few its
    python bench/bench_stencil_scale.py wse2    # 25-point wave, 755 x 994 x 1000, a few steps

Fields are built on the device (no host copies of the full grid). Prints the SRAM ledger's
verdict, the wall time per iteration / step, the peak resident memory of this process and the
model's wafer prediction, and writes bench/results/stencil_scale_<case>.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: kB


def sc20(iterations: int) -> dict:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from wse_core import preset
    from wse_hpc.stencil import bicgstab, grid_wafer, place_grid, scale_for

    shape = (600, 595, 1536)
    wafer = grid_wafer(preset("wse1"), shape, mesh_shape=(1, 1))
    names = ("x", "r", "rhat", "p", "v", "s", "t")
    grid = place_grid(wafer, shape, {**dict.fromkeys(names, "fp16"), "b": "fp32"})
    nx, ny, nz = shape

    def rhs():  # b = 1 + a smooth bump, in fp32 on the device
        i = lax.broadcasted_iota(jnp.float32, shape, 0) / nx
        k = lax.broadcasted_iota(jnp.float32, shape, 2) / nz
        return 1.0 + jnp.sin(jnp.pi * i) * jnp.sin(jnp.pi * k)

    b = jax.jit(rhs, out_shardings=wafer.sharding(1))()
    solve = bicgstab(grid, precision="mixed", tol=1e-12, maxiter=iterations)
    sigma = scale_for(grid, 2.0)
    run = jax.jit(lambda bb: solve(bb, None, sigma), donate_argnums=0)
    t0 = time.perf_counter()
    compiled = run.lower(b).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = jax.block_until_ready(compiled(b))
    wall = time.perf_counter() - t0
    hist = [float(v) for v in res.history[: int(res.iterations) + 1]]
    return {
        "case": "sc20 bicgstab mixed",
        "grid": list(shape),
        "iterations": int(res.iterations),
        "sram_bytes_per_pe": grid.bytes_per_pe,
        "compile_s": compile_s,
        "wall_s": wall,
        "s_per_iteration": wall / max(int(res.iterations), 1),
        "history": hist,
        "finite": bool(jnp.isfinite(res.residual)),
        "peak_rss_gb": _peak_gb(),
    }


def wse2(steps: int, block_z: int, nz: int = 1000) -> dict:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from wse_core import preset
    from wse_hpc.stencil import RADIUS, grid_wafer, place_grid, wave25
    from wse_hpc.stencil.wave import WaveState, max_stable_dt

    shape = (755, 994, nz)
    wafer = grid_wafer(preset("wse2"), shape, mesh_shape=(1, 1))
    grid = place_grid(
        wafer,
        shape,
        {"u_prev": "fp32", "u": "fp32", "velocity": "fp32"},
        radius=RADIUS,
        extra_per_field=2 * RADIUS,
        buffers_for=lambda n: 64 * block_z + 64,
    )
    dt = 0.4 * max_stable_dt(grid, 1.5)
    fns = wave25(grid, dt=dt, f0=1.0 / (8 * max(grid.spacing)), block_z=block_z)
    nx, ny, nz = shape
    padded = (nx, ny, nz + 2 * RADIUS)

    def init():
        x = lax.broadcasted_iota(jnp.float32, shape, 0) / nx
        vdt2 = (jnp.where(x < 0.5, 1.0, 1.5) * dt) ** 2
        src = jnp.zeros((nx, ny), jnp.float32).at[nx // 2, ny // 2].set(vdt2[0, 0, 0])
        z = jnp.zeros(padded, jnp.float32)
        return WaveState(z, z + 0, vdt2, src, jnp.int32(0))

    st = jax.jit(init)()
    # Two steps per loop iteration: the (u_prev, u) swap then needs no full-field copies.
    pair = lambda i, a: fns.step_fn(fns.step_fn(a))
    run = jax.jit(lambda s: lax.fori_loop(0, steps // 2, pair, s), donate_argnums=0)
    t0 = time.perf_counter()
    compiled = run.lower(st).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    st = jax.block_until_ready(compiled(st))
    wall = time.perf_counter() - t0
    return {
        "case": "wse2 wave25",
        "grid": list(shape),
        "steps": steps,
        "block_z": block_z,
        "sram_bytes_per_pe": grid.bytes_per_pe,
        "compile_s": compile_s,
        "wall_s": wall,
        "s_per_step": wall / steps,
        "max_abs_u": float(jnp.max(jnp.abs(st.u))),
        "peak_rss_gb": _peak_gb(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=["sc20", "wse2"])
    ap.add_argument("--iterations", type=int, default=4, help="iterations / steps (even)")
    ap.add_argument("--block-z", type=int, default=50)
    ap.add_argument("--nz", type=int, default=1000, help="wse2: Z length (1000 as published)")
    args = ap.parse_args()
    from wse_core.host.runtime import configure

    configure(1, compile_cache=False)
    out = (
        sc20(args.iterations)
        if args.case == "sc20"
        else wse2(args.iterations, args.block_z, args.nz)
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    from wse_core.host.memory import host_record

    out["host"] = host_record()  # bandwidth, load average, CPUs, machine, time
    (RESULTS / f"stencil_scale_{args.case}.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
