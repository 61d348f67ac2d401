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

`--timeline N` traces `--steps` steps (before any call is waited for) and prints, per CPU
device, its busy and idle ms per step (busy: some HLO op of that device running on some
thread), the idle before its first op and after its last one, and the N largest idle totals
between two calls, by the pair of modules around the gap. Each device runs its calls in
dispatch order, so a gap before a call is the host dispatching late or the call waiting for
an input from the other device (issue 44: at 2 cores device 1 idles 3-20 ms a step after
its last call while device 0, MemoryX's, finishes the updates).

`--threads N` traces `--steps` steps and prints how many threads run HLO ops at once (ms per
step with 0, 1, 2, 3 or more busy: on N cores, time with fewer than N busy is idle cores,
more is oversubscription), then the N ops that most often run alone (module@device op) and
the N largest spans with no op running, by the calls around them (issue 44: at 2 cores the
numba attention kernels, one thread each, are the largest ops running alone, and the step's
first ~3 ms wait for the host).

`--host` times the host's side of `--steps` steps, nothing waited for: per function (the
replica functions, MemoryX's update, the weight fetches, SwarmX's reduce), its calls and host
ms per step (the host thread's CPU: Python, dispatch, and a copy to another CPU device, which
runs on the calling thread), and how far into the step the host has dispatched the whole step
(the rest of the step it waits for the devices).
"""

from __future__ import annotations

import argparse
import gc
import itertools
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
    ap.add_argument(
        "--timeline", type=int, default=0, metavar="N", help="Also each device's idle, N gaps."
    )
    ap.add_argument(
        "--threads", type=int, default=0, metavar="N", help="Also threads busy at once, N ops."
    )
    ap.add_argument("--host", action="store_true", help="Also the host's dispatch, by function.")
    args = ap.parse_args()
    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cores]))
    from wse_core.host.runtime import configure, keep_freed_memory, train_arenas

    keep_freed_memory(arenas=train_arenas())  # as `wse train` and bench_train run
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
    if args.timeline:
        _timeline(lambda: trainer.step(data), args.steps, args.timeline)
    if args.threads:
        _threads(lambda: trainer.step(data), args.steps, args.threads)
    if args.host:
        _host(trainer, data, args.steps)
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


def _host(trainer, data, steps: int) -> None:
    """The host's side of `steps` steps: host CPU ms by function, and when the host has
    dispatched the step (module docstring). The trainer's calls are wrapped only meanwhile."""
    spent: dict[str, list[float]] = defaultdict(list)
    ends: list[float] = []  # wall ms into the step at which each call had been dispatched
    t_step = [0.0]

    def timed(key, fn):
        def call(*a, **kw):
            h0 = time.thread_time()
            out = fn(*a, **kw)
            spent[key].append(time.thread_time() - h0)
            ends.append(1e3 * (time.perf_counter() - t_step[0]))
            return out

        return call

    memx, swarm = trainer.memx, trainer.swarm
    saved = trainer.fns, memx._update_norm, memx._update
    trainer.fns = trainer.fns._replace(**{k: timed(k, f) for k, f in trainer.fns._asdict().items()})
    memx._update_norm, memx._update = timed("update", saved[1]), timed("update", saved[2])
    trainer._fetch = timed("fetch", trainer._fetch)
    swarm.reduce = timed("reduce", swarm.reduce)
    dispatched, walls = [], []
    try:
        for _ in range(steps):
            ends.clear()
            t_step[0] = time.perf_counter()
            trainer.step(data)
            walls.append(1e3 * (time.perf_counter() - t_step[0]))
            dispatched.append(max(ends))
    finally:
        trainer.fns, memx._update_norm, memx._update = saved
        del trainer._fetch, swarm.reduce
    print(
        f"  host: the step dispatched at {statistics.median(dispatched):.1f} ms of "
        f"{statistics.median(walls):.1f} (medians of {steps} steps, nothing waited for)"
    )
    print(f"  {'function':<20}{'calls':>7}{'host ms':>9}{'per call':>9}")
    for key, ts in sorted(spent.items(), key=lambda kv: -sum(kv[1])):
        per = 1e3 * statistics.median(ts)
        print(f"  {key:<20}{len(ts) / steps:>7.1f}{1e3 * sum(ts) / steps:>9.2f}{per:>9.3f}")


_NESTING = ("while", "conditional", "call")  # ops whose trace events span other ops'


def _busy(item) -> float:
    return -sum(item[1])


def _trace_events(step, steps: int, mark: str = "") -> list[dict]:
    """The trace events of `steps` calls of `step` under `jax.profiler.trace` (each call
    inside an annotation named `mark`, when given)."""
    import gzip
    import json
    import tempfile
    from pathlib import Path

    import jax

    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            for _ in range(steps):
                if mark:
                    with jax.profiler.TraceAnnotation(mark):
                        step()
                else:
                    step()
        trace = next(Path(tmp).rglob("*.trace.json.gz"))
        return json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]


def _timeline(step, steps: int, top: int, merge_us: float = 50.0) -> None:
    """Per device: busy and idle ms per step and where the idle lies (module docstring)."""
    events = _trace_events(step, steps, mark="train_step")
    marks = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "train_step")
    ops = defaultdict(list)  # device -> (start, end, module) of its HLO ops
    for e in events:
        a = e.get("args", {})
        if e.get("ph") == "X" and "device_ordinal" in a and "hlo_op" in a:
            if not a["hlo_op"].startswith(_NESTING):
                ops[a["device_ordinal"]].append((e["ts"], e["ts"] + e["dur"], a["hlo_module"]))
    print(f"  timeline, ms per step ({steps} traced steps)")
    for dev in sorted(ops):
        busy = start = end = 0.0
        between: dict[str, float] = defaultdict(float)
        for t0, t1 in marks:
            spans: list[list] = []  # merged op intervals: [start, end, first module, last]
            for s, e, m in sorted(x for x in ops[dev] if t0 <= x[0] <= t1):
                if spans and s - spans[-1][1] < merge_us:
                    spans[-1][1], spans[-1][3] = max(spans[-1][1], e), m
                else:
                    spans.append([s, e, m, m])
            if not spans:
                continue
            busy += sum(e - s for s, e, _, _ in spans)
            start += spans[0][0] - t0
            end += t1 - spans[-1][1]
            for a, b in itertools.pairwise(spans):
                between[f"{a[3]} -> {b[2]}"] += b[0] - a[1]
        wall = sum(t1 - t0 for t0, t1 in marks)
        n = 1e3 * len(marks)
        print(
            f"  device {dev}: busy {busy / n:.1f}, idle {(wall - busy) / n:.1f} "
            f"(before its first op {start / n:.1f}, after its last {end / n:.1f})"
        )
        for pair, us in sorted(between.items(), key=lambda kv: -kv[1])[:top]:
            print(f"    {pair:<58}{us / n:>7.1f}")


def _threads(step, steps: int, top: int) -> None:
    """Threads busy at once per step, the ops running alone, the spans with none (module
    docstring)."""
    events = _trace_events(step, steps, mark="train_step")
    marks = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "train_step"]
    ops = []  # (start, end, "module@device op") of each HLO op, nesting ones left out
    for e in events:
        a = e.get("args", {})
        if e.get("ph") == "X" and "hlo_op" in a and not a["hlo_op"].startswith(_NESTING):
            name = f"{a.get('hlo_module')}@{a.get('device_ordinal')} {a['hlo_op']}"
            ops.append((e["ts"], e["ts"] + e["dur"], name))
    busy: dict[int, float] = defaultdict(float)
    alone: dict[str, float] = defaultdict(float)
    idle: dict[str, float] = defaultdict(float)
    for t0, t1 in marks:
        edges = sorted(
            [(s, 1, i) for i, (s, e, _) in enumerate(ops) if t0 <= s <= t1]
            + [(min(e, t1), -1, i) for i, (s, e, _) in enumerate(ops) if t0 <= s <= t1]
        )
        active: set[int] = set()
        last, before = t0, "step start"
        for t, kind, i in edges:
            span = t - last
            if len(active) == 1:
                alone[ops[next(iter(active))][2]] += span
            elif not active and span > 0:
                idle[f"{before} -> {ops[i][2].split(' ')[0]}"] += span
            busy[min(len(active), 3)] += span
            last = t
            if kind > 0:
                active.add(i)
            else:
                active.discard(i)
                before = ops[i][2].split(" ")[0]
        busy[0] += t1 - last
        idle[f"{before} -> step end"] += t1 - last
    n = 1e3 * len(marks)
    counts = ", ".join(f"{k}{'+' if k == 3 else ''}: {v / n:.1f}" for k, v in sorted(busy.items()))
    print(f"  threads running ops, ms per step ({len(marks)} traced steps): {counts}")
    print("  running alone (module@device op)")
    for name, us in sorted(alone.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {name:<60}{us / n:>7.2f}")
    print("  no op running, between")
    for pair, us in sorted(idle.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {pair:<60}{us / n:>7.2f}")


def _fusions(step, steps: int, top: int) -> None:
    """Busy ms per step of each compiled module and its `top` costliest HLO ops, from a
    `jax.profiler` trace of `steps` calls of `step` (module docstring)."""
    events = _trace_events(step, steps)
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
