"""Where a streamed train step's time goes: CPU milliseconds per step by jitted function.

    python bench/profile_train_step.py [--cores 1] [--steps 5]

Runs bench_train's quick case (`CASES`' first) pinned to `--cores` cores with the same set-up
as its workers, then, per step: the process CPU time of the whole step and of the host's own
thread (Python and dispatch: JAX runs each computation on its worker threads), and, with every
jitted call of the trainer waited for in turn (`jax.block_until_ready`, so each call's own
work is what is timed), the calls per step and CPU ms per step of each replica function
(`wse_trainer.replica`), MemoryX's update and the weight fetches. CPU time, not wall time:
on a shared machine it moves far less. Also the PyTorch step's CPU time, for scale.

`--fusions N` then runs `--steps` more steps under `jax.profiler.trace` and prints, per step,
the busy ms of each compiled module and of its N costliest HLO ops (fusions, library dots:
the thunks XLA:CPU runs, summed over the threads that ran them, as the trace records them;
a `while` loop's own line spans its body's ops, which the module's sum counts instead; the
tracer itself adds some time to each). Pair an op's name with the module's optimized HLO
(`XLA_FLAGS=--xla_dump_to=DIR`, `*.<module>.cpu_after_optimizations.txt`) to see what it is.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections import defaultdict

import bench_train


def _cpu_ms(fn, steps: int) -> tuple[float, float]:
    """(process CPU ms, this thread's CPU ms) of one call of `fn`, medians of `steps`."""
    proc, host = [], []
    for _ in range(steps):
        p0, h0 = time.process_time(), time.thread_time()
        fn()
        proc.append(time.process_time() - p0)
        host.append(time.thread_time() - h0)
    return 1e3 * statistics.median(proc), 1e3 * statistics.median(host)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=1, help="Cores to pin to (default 1).")
    ap.add_argument("--steps", type=int, default=5, help="Timed steps (default 5).")
    ap.add_argument(
        "--fusions", type=int, default=0, metavar="N", help="Also each module's N costliest ops."
    )
    args = ap.parse_args()
    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cores]))
    from wse_core.host.runtime import configure, keep_freed_memory

    keep_freed_memory()
    configure(args.cores)
    try:
        import torch

        torch.set_num_threads(args.cores)  # as bench_train's workers do, before JAX starts
    except ImportError:
        pass
    import jax

    name, shape = next(iter(bench_train.CASES.items()))
    _, data, fns, _, layout = bench_train.jax_contenders(shape, 0)
    trainer = fns["streamed"].__closure__  # the StreamedTrainer the bench's contender steps
    trainer = next(c.cell_contents for c in trainer if hasattr(c.cell_contents, "memx"))
    gc.disable()
    step, host = _cpu_ms(lambda: trainer.step(data), args.steps)
    print(f"{name}, {args.cores} core(s), {layout}: streamed step {step:.1f} CPU ms")
    print(f"  host thread (Python, dispatch) {host:.1f} CPU ms")
    try:
        torch_step = bench_train.torch_contender(shape, data)
        print(f"  pytorch step {_cpu_ms(torch_step, args.steps)[0]:.1f} CPU ms")
    except ImportError:
        pass
    spent: dict[str, list[float]] = defaultdict(list)

    def waited(key, fn):
        def call(*a, **kw):
            t0 = time.process_time()
            out = jax.block_until_ready(fn(*a, **kw))
            spent[key].append(time.process_time() - t0)
            return out

        return call

    trainer.fns = trainer.fns._replace(
        **{k: waited(k, f) for k, f in trainer.fns._asdict().items()}
    )
    memx = trainer.memx
    for attr in ("_update", "_update_norm"):  # the optimizer step (with the norm, fused)
        if hasattr(memx, attr):
            setattr(memx, attr, waited("update", getattr(memx, attr)))
    memoryx = sys.modules[type(memx).__module__]  # the squared norm, where a call of its own
    memoryx._add_square_norm = waited("square norm", memoryx._add_square_norm)
    trainer._fetch = waited("fetch", trainer._fetch)
    trainer.step(data)
    spent.clear()
    whole = _cpu_ms(lambda: trainer.step(data), args.steps)[0]
    print(f"  each call waited for: step {whole:.1f} CPU ms")
    print(f"  {'function':<20}{'calls':>7}{'CPU ms':>9}")
    for key, ts in sorted(spent.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {key:<20}{len(ts) / args.steps:>7.1f}{1e3 * sum(ts) / args.steps:>9.1f}")
    rest = whole - 1e3 * sum(map(sum, spent.values())) / args.steps
    print(f"  {'the rest':<20}{'':>7}{rest:>9.1f}")
    if args.fusions:
        _fusions(lambda: trainer.step(data), args.steps, args.fusions)


_NESTING = ("while", "conditional", "call")  # ops whose trace events span other ops'


def _busy(item) -> float:
    return -sum(item[1])


def _fusions(step, steps: int, top: int) -> None:
    """Busy ms per step of each compiled module and its `top` costliest HLO ops, from a
    `jax.profiler` trace of `steps` calls of `step` (module docstring)."""
    import gzip
    import json
    import tempfile
    from pathlib import Path

    import jax

    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            for _ in range(steps):
                step()
        trace = next(Path(tmp).rglob("*.trace.json.gz"))
        events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    ops: dict[tuple[str, str], list[float]] = defaultdict(list)
    for e in events:
        a = e.get("args", {})
        if e.get("ph") == "X" and "hlo_module" in a and "hlo_op" in a:
            ops[a["hlo_module"], a["hlo_op"]].append(e.get("dur", 0) / 1e3)
    modules: dict[str, float] = defaultdict(float)
    for (mod, op), ts in ops.items():
        if not op.startswith(_NESTING):  # a loop's time is its body ops', counted already
            modules[mod] += sum(ts) / steps
    print("  traced, busy ms per step (module, then its costliest ops; calls per step)")
    for mod, ms in sorted(modules.items(), key=lambda kv: -kv[1]):
        if ms < 0.5:
            continue
        print(f"  {mod:<38}{ms:>9.1f}")
        mine = sorted(((op, ts) for (m, op), ts in ops.items() if m == mod), key=_busy)
        for op, ts in mine[:top]:
            print(f"    {op:<32}{len(ts) / steps:>7.1f}{sum(ts) / steps:>9.2f}")


if __name__ == "__main__":
    main()
