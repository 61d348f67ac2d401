"""Fabric benchmark: op throughput (words/s) on 1, 2 and 8 devices against a single-device
NumPy shift, and trace-plus-compile time against PE-grid size up to the full WSE-3.

Each device count runs in its own process (JAX fixes the device count at start-up); the
NumPy baseline is measured in each process in interleaved rounds with the fabric ops
(`bench/rounds.py`), so every ratio is a median of rounds taken side by side, with its spread.
Prints a table and writes bench/results/fabric.json.

    python bench/bench_fabric.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from rounds import interleaved, ratio, ratio_line, record, timed  # noqa: E402  (bench/rounds.py)

RESULTS = Path(__file__).parent / "results"
WORDS_PER_PE = 16
STEPS = 10  # fabric ops per jitted call (a lax.fori_loop), as a kernel would run them


def worker(devices: int, grid: tuple[int, int], repeats: int) -> dict:
    from wse_core.host.runtime import configure

    configure(devices, compile_cache=False)
    import jax
    import numpy as np
    from wse_core import fabric, preset
    from wse_core.hw.wafer import build_wafer

    rows, cols = grid
    x = np.random.default_rng(0).normal(size=(rows, cols, WORDS_PER_PE)).astype(np.float32)

    def numpy_shifts():
        a = x
        for _ in range(STEPS):
            out = np.empty_like(a)
            out[:, 1:] = a[:, :-1]
            out[:, 0] = 0
            a = out
        return a

    out = {"devices": devices, "grid": f"{rows}x{cols}", "words_per_pe": WORDS_PER_PE}
    wafer = build_wafer(preset("wse3"), grid=grid)
    xs = wafer.place(x)
    out["mesh"] = "x".join(map(str, wafer.mesh_shape))
    ops = {
        "shift": lambda a: fabric.shift(wafer, a, "E"),
        "multicast4": lambda a: fabric.multicast(wafer, a, "S", 4).sum(axis=2),
        "allreduce": lambda a: fabric.allreduce(wafer, a, "sum", axis="row") * 1e-3,
    }
    contenders = {"numpy": numpy_shifts}
    for name, op in ops.items():
        loop = jax.jit(lambda a, op=op: jax.lax.fori_loop(0, STEPS, lambda i, b: op(b), a))
        jax.block_until_ready(loop(xs))  # compile outside the rounds
        contenders[name] = lambda loop=loop: jax.block_until_ready(loop(xs))
    # interleaved rounds (bench/rounds.py): numpy, shift, multicast4, allreduce, numpy, ...
    times = interleaved({k: timed(f) for k, f in contenders.items()}, repeats, rotate=True)
    out["times_s"] = times
    words = rows * cols * WORDS_PER_PE * STEPS
    for name in contenders:
        out[f"{name}_s"] = min(times[name])
        out[f"{name}_words_per_s"] = words / out[f"{name}_s"]
    out["shift_vs_numpy"] = ratio(times["shift"], times["numpy"])
    # Trace + compile time of one fabric op against grid size (same code path for all).
    compile_s = {}
    for g in [(8, 8), (64, 64), (256, 256), (762, 1176)]:
        w = build_wafer(preset("wse3"), grid=g)
        shape = jax.ShapeDtypeStruct(
            w.padded_shape + (WORDS_PER_PE,), np.float32, sharding=w.sharding(1)
        )
        t0 = time.perf_counter()
        jax.jit(lambda a, w=w: fabric.allreduce(w, fabric.shift(w, a, "E"))).lower(shape).compile()
        compile_s[f"{g[0]}x{g[1]}"] = time.perf_counter() - t0
    out["trace_compile_s"] = compile_s
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller grid, fewer repeats")
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--grid", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    grid = (256, 256) if args.quick else (762, 1176)
    repeats = 3 if args.quick else 7
    if args.worker:
        print(json.dumps(worker(args.worker, grid, repeats)))
        return
    rows = []
    for devices in (1, 2, 8):
        cmd = [sys.executable, __file__, "--worker", str(devices)] + (
            ["--quick"] if args.quick else []
        )
        env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "WSE_DEVICES")}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    header = (
        f"{'devices':>7} {'mesh':>5} {'grid':>9} {'numpy Gw/s':>10} {'shift Gw/s':>10} "
        f"{'x numpy':>7} {'mcast4 Gw/s':>11} {'allred Gw/s':>11}  compile s (8x8 .. 762x1176)"
    )
    print(header)
    for r in rows:
        comp = " ".join(f"{v:.3f}" for v in r["trace_compile_s"].values())
        print(
            f"{r['devices']:>7} {r['mesh']:>5} {r['grid']:>9} "
            f"{r['numpy_words_per_s'] / 1e9:>10.3f} {r['shift_words_per_s'] / 1e9:>10.3f} "
            f"{r['shift_vs_numpy']['median']:>7.2f} {r['multicast4_words_per_s'] / 1e9:>11.3f} "
            f"{r['allreduce_words_per_s'] / 1e9:>11.3f}  {comp}"
        )
    for r in rows:
        print(ratio_line(f"{r['devices']} device(s): shift vs numpy", r["shift_vs_numpy"]))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "fabric.json"
    result = {"benchmark": "fabric", "quick": args.quick, "rows": rows, **record("numpy")}
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
