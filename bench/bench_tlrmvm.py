"""Benchmark: TLR-MVM on the emulated wafer against dense NumPy GEMV and plain NumPy TLR-MVMs.

    python bench/bench_tlrmvm.py [--quick] [--sizes 2500,9801] [--threshold 1e-3]
                                 [--devices N] [--batch B]

For each size n, a synthetic seismic operator (complex64, n x n, Green's functions between
two surfaces) is generated and compressed once and cached under $TLR_BENCH_CACHE (default
/tmp/tlr_bench). Side by side in the same process: dense `A @ x` (NumPy/BLAS), the plain
NumPy TLR-MVM over the stacked bases (ecrc/tlrmvm's CPU layout), the padded batched NumPy
TLR-MVM, and the wafer emulator (JAX; `--devices` virtual devices, default one per core):
the grouped layout (the default: phases 1 and 3 as the PEs' numba kernels, `pe_kernels`) on
one device (the engine's default mesh) and spread over all devices, the grouped layout with
XLA dots instead (`kernel="xla"`, the previous kernel and the one off the CPU), and the
packed layout. JAX runs each call on the calling thread (`sync_dispatch`), as NumPy does.
NumPy baselines are timed with BLAS on one thread and then on its default threads, keeping the
faster; each engine likewise as two bursts, keeping the faster (every contender gets the same
two bursts of a warm-up and `repeats` products: a burst right after another runs warmer, the
NumPy TLR-MVM 1.71 -> 1.62 ms, the wafer emulator 1.57 -> 1.51 at n 9801, medians of 8
rounds, 2026-12-04, and before this only NumPy had a second burst); every method is timed in
5 interleaved rounds (`bench/rounds.py`: the emulator, the
NumPy TLR-MVM, then the others), each round's time the median of its products, each
starting 0.3 s after the previous (BLAS worker threads stop spinning); the table shows each
method's median round, and the ratios (per round: median, spread, worst round; target:
>= 1.5x the NumPy TLR-MVM, no round below 1x) follow it. With
`--batch B` every product is of B vectors and times are per vector. Reports the median time
of each, the compression ratio, the relative error against the dense product, the speedup
over dense against the target 0.7 x compression ratio, a STREAM-like copy bandwidth on one
and on two threads, the read bandwidth (the roofline of a product, which only reads its bases:
a numba sum over as many bytes as the TLR bases, on one thread and on the cores, min of
`READ_REPEATS`; reading runs ~2.5x faster than copying on the 2-core VM), each contender's
effective GB/s (the bytes it must stream: the TLR bases, or the dense matrix, over its median
time), and the wafer model's predictions. The allocator setting is the one
`wse hpc tlrmvm run` uses (`keep_freed_memory`: XLA's per-call temporaries reuse mapped pages;
~600 page faults per product at 9801 otherwise, ~10% of its time), the same for every
method. Writes bench/results/tlrmvm[_dN][_bB].json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

from wse_core.host.runtime import configure, keep_freed_memory, sync_dispatch


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="One small size, few repeats.")
    p.add_argument("--sizes", default=None, help="Comma-separated n (default 2500,4900,9801).")
    p.add_argument("--threshold", type=float, default=1e-3)
    p.add_argument("--devices", type=int, default=None, help="Virtual devices (default: cores).")
    p.add_argument("--batch", type=int, default=1, help="Vectors per product.")
    return p.parse_args(argv)


ARGS = _args() if __name__ == "__main__" else None
KEPT = keep_freed_memory()  # before JAX starts threads: every contender in this process shares it
configure(ARGS.devices if ARGS else None)  # before JAX starts
SYNC = sync_dispatch()  # each product on the calling thread, as NumPy's run (see runtime)

import jax  # noqa: E402
import numpy as np  # noqa: E402
from rounds import interleaved, ratio, ratio_line, record  # noqa: E402  (bench/rounds.py)
from wse_core import preset  # noqa: E402
from wse_core.errors import SramBudgetError  # noqa: E402
from wse_core.host.runtime import median_wall_s, wall_s  # noqa: E402
from wse_hpc.tlrmvm import compress, load_operator, save_operator  # noqa: E402
from wse_hpc.tlrmvm.baseline import best_median_s, padded_fn, stacked_fn  # noqa: E402
from wse_hpc.tlrmvm.engine import TlrEngine  # noqa: E402
from wse_hpc.tlrmvm.seismic import green_operator  # noqa: E402

ROUNDS = 5  # interleaved rounds; a ratio's median decides, its worst round is reported
TARGET = 1.5  # wafer emulator vs the NumPy TLR-MVM at n = 9801 (issue 44)
SETTLE_S = 0.3  # idle time before each method's timing (see bench_size)
READ_REPEATS = 20  # read-bandwidth calls; their fastest is the roofline (others' load only slows)
CACHE = Path(os.environ.get("TLR_BENCH_CACHE", "/tmp/tlr_bench"))
RESULTS = Path(__file__).resolve().parent / "results"


def operator(n: int, nb: int, threshold: float):
    CACHE.mkdir(parents=True, exist_ok=True)
    dense_path = CACHE / f"seismic_{n}.npy"
    op_path = CACHE / f"seismic_{n}_nb{nb}_{threshold:g}.npz"
    if dense_path.exists():
        a = np.load(dense_path)
    else:
        a = green_operator(n=n)
        np.save(dense_path, a)
    t0 = time.perf_counter()
    if op_path.exists():
        op = load_operator(op_path)
    else:
        op = compress(a, nb=nb, threshold=threshold)
        save_operator(op, op_path)
    return a, op, time.perf_counter() - t0


def stream_bytes_per_s(repeats: int = 5, threads: int = 1) -> float:
    """A STREAM-like copy of 256 MiB (bytes read + written per second), split over
    `threads` Python threads (NumPy copies without the GIL)."""
    a = np.ones(32 * 2**20)
    b = np.empty_like(a)
    cuts = np.linspace(0, a.size, threads + 1).astype(int)

    def copy(_):
        parts = [
            threading.Thread(target=np.copyto, args=(b[lo:hi], a[lo:hi]))
            for lo, hi in zip(cuts[:-1], cuts[1:], strict=True)
        ]
        for t in parts:
            t.start()
        for t in parts:
            t.join()

    return 2 * a.nbytes / median_wall_s(copy, None, repeats=repeats)


def read_bytes_per_s(nbytes: int, repeats: int = READ_REPEATS) -> dict[str, float]:
    """Bytes read per second by a numba sum over `nbytes` of float32 rows (2 KB, as the PE
    kernels read them) on one thread and on the cores: the fastest of `repeats` calls each
    (the machine's read rate; the memory is written once beforehand, so it is mapped)."""
    from numba import njit, prange

    def row_sums(a):
        out = np.empty(a.shape[0], np.float32)
        for r in prange(a.shape[0]):
            acc = np.float32(0)
            for k in range(a.shape[1]):
                acc += a[r, k]
            out[r] = acc
        return out

    a = np.ones((max(nbytes // 2048, 1), 512), np.float32)
    out = {}
    for name, parallel in (("one_thread", False), ("cores", True)):
        fn = njit(parallel=parallel, fastmath=True)(row_sums)
        fn(a)  # compile
        best = min(wall_s(fn, a)[1] for _ in range(repeats))
        out[name] = a.nbytes / best
    return out


def bench_size(n: int, nb: int, threshold: float, repeats: int, batch: int = 1) -> dict:
    a, op, compress_s = operator(n, nb, threshold)
    rng = np.random.default_rng(0)
    shape = (n, batch)
    x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    exact = a @ x
    eng = TlrEngine.build(op, preset("wse2"), batch=batch)  # one device (the default)
    spread = TlrEngine.build(op, preset("wse2"), batch=batch, mesh_shape=None)  # all devices
    xla = TlrEngine.build(op, preset("wse2"), batch=batch, kernel="xla")  # XLA dots, 1 device
    try:
        packed = TlrEngine.build(op, preset("wse2"), batch=batch, layout="packed")
    except SramBudgetError as e:  # the packed layout's buffers grow with the batch
        packed, packed_refused = None, str(e)
    fns = {"dense": lambda v: a @ v, "numpy_tlr": stacked_fn(op), "numpy_padded": padded_fn(op)}
    row = {
        "n": n,
        "nb": nb,
        "threshold": threshold,
        "batch": batch,
        "compress_or_load_s": compress_s,
        **op.describe(),
        "plan": eng.plan.describe(),
        "kernel": eng.kernel,
        "wafer": eng.wafer.describe(),
    }
    for name, fn in fns.items():
        row[f"{name}_rel_err"] = float(np.linalg.norm(fn(x) - exact) / np.linalg.norm(exact))
    engines = {
        "wafer_emu": eng,
        "wafer_emu_all_devices": spread,
        "wafer_emu_xla": xla,
        "wafer_emu_packed": packed,
    }
    # Interleaved rounds (`rounds.interleaved`): each round times every method once (its
    # median of `repeats` products), each starting SETTLE_S after the previous one ended
    # (OpenBLAS's worker spins ~0.1 s on a core after a threaded call: the next method would
    # run on one core, measured); a burst of load on the shared machine hits all alike.
    blas_threads: dict[str, list] = {name: [] for name in fns}

    def numpy_timer(name, fn):
        def timed() -> float:
            t, threads = best_median_s(lambda: fn(x), repeats)
            blas_threads[name].append(threads)
            return t / batch  # per vector

        return timed

    def engine_timer(e):  # two bursts, the faster kept: as `best_median_s` times NumPy
        def timed() -> float:
            if e is None:
                return float("nan")
            return min(e.time_matvec(x, repeats) for _ in range(2)) / batch

        return timed

    contenders = {
        "wafer_emu": engine_timer(eng),
        "numpy_tlr": numpy_timer("numpy_tlr", fns["numpy_tlr"]),
    }
    contenders.update({k: numpy_timer(k, f) for k, f in fns.items() if k not in contenders})
    contenders.update({k: engine_timer(e) for k, e in engines.items() if k not in contenders})
    times = interleaved(contenders, ROUNDS, settle_s=SETTLE_S)
    row["round_s"] = times
    for name, t in times.items():
        row[f"{name}_s"] = float(np.median(t))
    for name, threads in blas_threads.items():
        row[f"{name}_blas_threads"] = threads  # per round: 1, or None (BLAS's default)
    row["ratios"] = {
        "wafer_emu_vs_numpy_tlr": ratio(times["wafer_emu"], times["numpy_tlr"], TARGET),
        "wafer_emu_vs_dense": ratio(times["wafer_emu"], times["dense"]),
        "wafer_emu_vs_numpy_padded": ratio(times["wafer_emu"], times["numpy_padded"]),
    }
    # effective GB/s: the bytes a contender must stream (TLR bases or the dense matrix)
    row["read_bytes_per_s"] = read_bytes_per_s(op.bases_bytes)
    for name in times:
        nbytes = op.dense_bytes if name == "dense" else op.bases_bytes
        row[f"{name}_bytes_per_s"] = nbytes / row[f"{name}_s"] / batch
    row["wafer_all_devices"] = spread.wafer.describe()
    if packed is not None:
        row["plan_packed"] = packed.plan.describe()
    else:
        row["plan_packed"] = packed_refused
    row["wafer_emu_rel_err"] = float(np.linalg.norm(eng.matvec(x) - exact) / np.linalg.norm(exact))
    row["speedup_vs_dense"] = row["ratios"]["wafer_emu_vs_dense"]["median"]
    row["speedup_target"] = 0.7 * op.compression_ratio
    row["numpy_tlr_speedup_vs_dense"] = row["dense_s"] / row["numpy_tlr_s"]
    row["wafer_emu_vs_numpy_tlr"] = row["ratios"]["wafer_emu_vs_numpy_tlr"]["median"]
    one_product_s = row["wafer_emu_s"] * batch
    row["predicted"] = eng.report(measured_wall_s=one_product_s).to_dict()
    row["predicted_48_cs2"] = eng.report(systems=48, fill=True).to_dict()
    if packed is not None:
        packed_s = row["wafer_emu_packed_s"] * batch  # one product
        row["predicted_packed"] = packed.report(measured_wall_s=packed_s).to_dict()
        row["predicted_packed_48_cs2"] = packed.report(systems=48, fill=True).to_dict()
    return row


def main(argv: list[str] | None = None) -> int:
    args = _args(argv) if argv is not None or ARGS is None else ARGS
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else ([1024] if args.quick else [2500, 4900, 9801])
    )
    repeats = 3 if args.quick else 9
    out = {
        "stream_bytes_per_s": stream_bytes_per_s(),
        "stream_bytes_per_s_2_threads": stream_bytes_per_s(threads=2),
        "load_average_at_start": os.getloadavg()[0],  # other work on the shared machine
        "keep_freed_memory": KEPT,
        "sync_dispatch": SYNC,
        "cores": os.cpu_count(),
        "devices": jax.device_count(),
        "batch": args.batch,
        "rows": [],
    }
    head = (
        f"{'n':>6} {'nb':>4} {'CR':>6} {'dense ms':>9} {'np-tlr ms':>9} {'np-pad ms':>9} "
        f"{'wafer ms':>9} {'all-dev ms':>10} {'xla ms':>8} {'packed ms':>9} {'x dense':>8} "
        f"{'target':>7} "
        f"{'vs np-tlr':>9} "
        f"{'rel err':>9} {'pred µs':>8}"
    )
    print(
        f"memory bandwidth (copy): {out['stream_bytes_per_s'] / 1e9:.1f} GB/s on one thread, "
        f"{out['stream_bytes_per_s_2_threads'] / 1e9:.1f} GB/s on two; "
        f"{out['devices']} JAX device(s); batch {args.batch} (times per vector)"
    )
    print(head)
    summaries = []
    for n in sizes:
        nb = 256 if n >= 4096 else 128 if n >= 1500 else 64
        r = bench_size(n, nb, args.threshold, repeats, args.batch)
        out["rows"].append(r)
        summaries.append((n, r["ratios"]))
        print(
            f"{n:>6} {nb:>4} {r['compression_ratio']:>6.2f} {r['dense_s'] * 1e3:>9.2f} "
            f"{r['numpy_tlr_s'] * 1e3:>9.2f} {r['numpy_padded_s'] * 1e3:>9.2f} "
            f"{r['wafer_emu_s'] * 1e3:>9.2f} {r['wafer_emu_all_devices_s'] * 1e3:>10.2f} "
            f"{r['wafer_emu_xla_s'] * 1e3:>8.2f} {r['wafer_emu_packed_s'] * 1e3:>9.2f} "
            f"{r['speedup_vs_dense']:>8.2f} "
            f"{r['speedup_target']:>7.2f} {r['wafer_emu_vs_numpy_tlr']:>9.2f} "
            f"{r['wafer_emu_rel_err']:>9.2e} {r['predicted']['predicted_s'] * 1e6:>8.2f}",
            flush=True,
        )
        rb = r["read_bytes_per_s"]
        print(
            f"{'':>6} bases {r['bases_bytes'] / 1e6:.1f} MB: read roofline "
            f"{rb['one_thread'] / 1e9:.1f} GB/s on one thread, {rb['cores'] / 1e9:.1f} on the "
            f"cores ({r['bases_bytes'] / rb['cores'] * 1e3:.2f} ms a product); wafer "
            f"{r['wafer_emu_bytes_per_s'] / 1e9:.1f} GB/s, NumPy TLR "
            f"{r['numpy_tlr_bytes_per_s'] / 1e9:.1f} GB/s, dense "
            f"{r['dense_bytes_per_s'] / 1e9:.1f} GB/s",
            flush=True,
        )
    out["load_average_at_end"] = os.getloadavg()[0]
    for n, ratios in summaries:
        for name, rr in ratios.items():
            print(ratio_line(f"n {n} {name}", rr))
    print(
        f"load average (1 min) {out['load_average_at_start']:.1f} at start, "
        f"{out['load_average_at_end']:.1f} at end on {out['cores']} cores"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    default_devices = args.devices is None
    name = "tlrmvm" + ("" if default_devices else f"_d{args.devices}")
    name += "" if args.batch == 1 else f"_b{args.batch}"
    # the host (triad bandwidth, load average, time), NumPy's and SciPy's versions, threads
    out.update(record("numpy", "scipy", "numba", "threadpoolctl"))
    (RESULTS / f"{name}.json").write_text(json.dumps(out, indent=2, default=float))
    print(f"wrote {RESULTS / f'{name}.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
