"""Training benchmark: the weight-streamed step against a plain fused jit train step of the
same model (target >= 0.8x) and against a minimal PyTorch CPU loop of the same GPT-2
(transformers' GPT2LMHeadModel + torch.optim.AdamW; target >= 1x), measured side by side.
Also tokens/s and model FLOP/s against this machine's measured matmul peak.

    python bench/bench_train.py [--quick] [--cores 1,2]

Equal resources for every contender: each core count N runs in its own worker process
pinned to N cores (`sched_setaffinity`, inherited by every thread XLA, oneDNN or OpenMP
starts) with `torch.set_num_threads(N)` set once; XLA sizes its thread pool by the machine,
but those threads share the same N cores. The XLA flags are the ones `wse` runs with
(`wse_core.host.runtime.configure`), the same for the streamed and the fused step, and so is the
allocator setting (`keep_freed_memory(arenas=train_arenas())`, as `wse train` runs: freed
temporaries stay mapped instead of being faulted in again every call; glibc's arenas on 2+
cores, one on one core), which
holds for torch in the same process too. Prints a table
and writes bench/results/train.json. Every contender is timed in interleaved rounds
(`bench/rounds.py`: 5 with `--quick`, else 9; each round times every contender for
`ROUND_STEPS` steps in a row, its round time their mean; the order rotates from round to
round, so no contender always follows the same other) and each ratio is reported per round:
median, spread and worst round (target vs PyTorch >= 1.1x at every core count, no round
below 1x). Python's garbage collector is off while the rounds run, for every contender
alike (collected once before). `cpu_ms` is each contender's process CPU time per step
(every thread's, user + system): on a loaded machine it moves less than the wall time, and
`cpu_ratios` gives the same per-round ratios on it. Each worker's JSON carries the versions
of torch and transformers, its thread settings and the XLA ones (`xla`: flags, CPU devices,
the threads the process runs after warm-up). `faults` counts minor page faults
per step: memory the allocator had to map afresh (the fused step still takes some, from heap
fragmentation when interleaved with the others; alone it takes none).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from rounds import interleaved, ratio, ratio_line, record  # noqa: E402  (bench/rounds.py)

RESULTS = Path(__file__).parent / "results"
FUSED_TARGET = 0.8  # streamed step vs the fused jit step
TORCH_TARGET = 1.1  # streamed step vs PyTorch, at every core count (issue 44)
ROUND_STEPS = 3  # steps per contender per round (one ~0.35 s step is shorter than load swings)
CASES = {  # name: (d_model, n_layers, n_heads, d_ff, vocab, batch, seq)
    "tiny d128 L4": (128, 4, 4, 512, 2048, 16, 128),
    "small d256 L6": (256, 6, 8, 1024, 4096, 16, 128),
}


def matmul_peak_flops(n: int = 1024, repeats: int = 10) -> float:
    """fp32 matmul FLOP/s of this machine through XLA (the best of `repeats`)."""
    import jax
    import jax.numpy as jnp
    from wse_core.host.runtime import wall_times_s

    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    best = min(wall_times_s(f, a, repeats=repeats))
    return 2 * n**3 / best


def streamed_trainer(model, params, data, wafer: str = "small", layout=None):
    """The streamed trainer of `model` for `data`'s batch, planned for the preset `wafer`,
    with `layout` (None: chosen as `wse train` chooses it): (trainer, its layout)."""
    from wse_core import preset
    from wse_systems.training.plan import plan_activations
    from wse_trainer.config import OptimizerConfig
    from wse_trainer.layout import choose_layout
    from wse_trainer.optimizer import base_transform
    from wse_trainer.stream import StreamedTrainer

    batch, seq = data.shape[0], data.shape[1] - 1
    plan = plan_activations(model, preset(wafer), batch, seq)
    if layout is None:
        layout = choose_layout(model, plan, micro_batch=batch, seq_len=seq, local_replicas=1)
    tx = base_transform(OptimizerConfig(), 1000)
    tr = StreamedTrainer(model, params, tx, num_csx=1, global_batch=batch, seq_len=seq,
                         plan=plan, layout=layout)  # fmt: skip
    return tr, layout


def jax_contenders(shape, seed: int, host_loop: bool = True):
    import jax
    import numpy as np
    import wse_models
    from wse_trainer.config import OptimizerConfig
    from wse_trainer.layout import Layout
    from wse_trainer.optimizer import full_transform
    from wse_trainer.reference import fused_step

    d, layers, heads, ff, vocab, batch, seq = shape
    model = wse_models.preset_config(
        "tiny-gpt2",
        d_model=d,
        n_layers=layers,
        n_heads=heads,
        n_kv_heads=heads,
        d_ff=ff,
        vocab_size=vocab,
        max_seq_len=seq,
    )
    data = np.random.default_rng(seed).integers(0, vocab, (batch, seq + 1)).astype(np.int32)
    opt = OptimizerConfig()
    params = wse_models.init_params(model, jax.random.key(seed))
    streamed, chosen = streamed_trainer(model, params, data)
    plain, _ = streamed_trainer(model, params, data, layout=Layout())
    tx = full_transform(opt, 1000)
    step = jax.jit(fused_step(model, tx), donate_argnums=(0, 1))
    state = {"p": jax.tree.map(lambda x: x.copy(), params)}
    state["s"] = tx.init(state["p"])

    def fused():
        state["p"], state["s"], loss = step(state["p"], state["s"], data)
        jax.block_until_ready(loss)

    stalls = []

    def stream():
        stalls.append(streamed.step(data).stall_fraction)

    def stream_plain():
        plain.step(data)

    fns = {"streamed": stream, "fused jit": fused}
    if chosen != Layout() and host_loop:
        # the same step as Layout() runs it: one device, no kept residuals, the host loop
        fns["stream 1dev"] = stream_plain
    for _ in range(2):  # compile and warm up
        for fn in fns.values():
            fn()
    stalls.clear()
    return model, data, fns, stalls, chosen


def torch_contender(shape, data, device: str = "cpu"):
    """One AdamW step of transformers' GPT2LMHeadModel of `shape` on `device` ("cpu" or
    "cuda"; each step waits for the device), warmed up."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    d, layers, heads, ff, vocab, batch, seq = shape
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=vocab,
        n_positions=seq,
        n_embd=d,
        n_layer=layers,
        n_head=heads,
        n_inner=ff,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        activation_function="gelu_new",
    )
    model = GPT2LMHeadModel(cfg).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.from_numpy(data[:, :-1].astype("int64")).to(device)
    y = torch.from_numpy(data[:, 1:].astype("int64")).to(device)

    def torch_step():
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device != "cpu":
            torch.cuda.synchronize()

    for _ in range(2):
        torch_step()
    return torch_step


def bench_case(name: str, shape, rounds: int) -> dict:
    from wse_core.host.runtime import wall_s

    model, data, fns, stalls, layout = jax_contenders(shape, 0)
    try:
        fns["pytorch"] = torch_contender(shape, data)
    except ImportError:
        pass
    faults = dict.fromkeys(fns, 0)  # minor page faults (memory the allocator maps afresh)
    cpu: dict[str, list[float]] = {k: [] for k in fns}  # process CPU seconds a step, by round

    def timed(key, fn):
        def run() -> float:
            use0 = resource.getrusage(resource.RUSAGE_SELF)
            seconds = sum(wall_s(fn)[1] for _ in range(ROUND_STEPS)) / ROUND_STEPS
            use = resource.getrusage(resource.RUSAGE_SELF)
            faults[key] += use.ru_minflt - use0.ru_minflt
            busy = use.ru_utime + use.ru_stime - use0.ru_utime - use0.ru_stime
            cpu[key].append(busy / ROUND_STEPS)
            return seconds

        return run

    gc.collect()
    gc.disable()  # for every contender alike: no collection lands inside one side's round
    try:
        times = interleaved({k: timed(k, fn) for k, fn in fns.items()}, rounds, rotate=True)
    finally:
        gc.enable()
    t = {k: statistics.median(v) for k, v in times.items()}
    ratios = {"streamed_vs_fused": ratio(times["streamed"], times["fused jit"], FUSED_TARGET)}
    cpu_ratios = {"streamed_vs_fused": ratio(cpu["streamed"], cpu["fused jit"])}
    if "pytorch" in times:
        ratios["streamed_vs_torch"] = ratio(times["streamed"], times["pytorch"], TORCH_TARGET)
        cpu_ratios["streamed_vs_torch"] = ratio(cpu["streamed"], cpu["pytorch"])
    batch, seq = shape[5], shape[6]
    tokens = batch * seq
    flops = model.train_flops_per_token(seq) * tokens
    return {
        "case": name,
        "layout": dataclasses.asdict(layout),
        "params": model.num_params(),
        "batch": batch,
        "seq": seq,
        "step_s": t,
        "tokens_per_s": {k: tokens / v for k, v in t.items()},
        "model_flops_per_s": {k: flops / v for k, v in t.items()},
        "round_s": times,
        "round_steps": ROUND_STEPS,
        "cpu_ms": {k: 1e3 * statistics.median(v) for k, v in cpu.items()},
        "ratios": ratios,
        "cpu_ratios": cpu_ratios,
        "streamed_vs_fused": ratios["streamed_vs_fused"]["median"],
        "streamed_vs_torch": ratios["streamed_vs_torch"]["median"] if "pytorch" in t else None,
        "layout_vs_one_device": t["stream 1dev"] / t["streamed"] if "stream 1dev" in t else None,
        "stall_fraction": statistics.median(stalls) if stalls else None,
        "page_faults_per_step": {k: v / (rounds * ROUND_STEPS) for k, v in faults.items()},
    }


def worker(cores: int, quick: bool) -> dict:
    """Every case on `cores` cores (this process pinned to them): a JSON-able dict."""
    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cores]))
    from wse_core.host.runtime import configure, keep_freed_memory, train_arenas

    # as `wse train` runs; before any library starts threads (every contender shares it)
    kept = keep_freed_memory(arenas=train_arenas())  # after the pinning above
    configure(cores)  # one virtual device per core, as `wse train` runs (the layout's shards)
    try:
        import torch

        torch.set_num_threads(cores)
    except ImportError:
        pass
    peak = matmul_peak_flops()
    cases = dict(list(CASES.items())[:1]) if quick else CASES
    rows = [bench_case(k, v, 5 if quick else 9) for k, v in cases.items()]
    return {
        **record("torch", "transformers", "numpy"),  # per worker: its threads and CPUs
        "cores": cores,
        "peak_flops": peak,
        "keep_freed_memory": kept,
        "cases": rows,
        "xla": _xla_threads(),
        "load_average": os.getloadavg(),
    }


def _xla_threads() -> dict:
    """XLA's settings in this worker: flags, CPU devices, and the threads the process runs
    (XLA's intra-op pool and its dispatch threads, torch's, Python's) after the rounds."""
    import jax

    tasks = Path("/proc/self/task")
    return {
        "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
        "JAX_NUM_CPU_DEVICES": os.environ.get("JAX_NUM_CPU_DEVICES"),
        "cpu_devices": len(jax.devices("cpu")),
        "process_threads": len(list(tasks.iterdir())) if tasks.exists() else None,
    }


def _print(runs: list[dict]) -> None:
    for run in runs:
        n, peak = run["cores"], run["peak_flops"]
        print(f"\n{n} core(s): fp32 matmul peak {peak / 1e9:.1f} GFLOP/s (XLA, 1024^2)")
        print(
            f"{'case':<15}{'contender':<11}{'step ms':>9}{'tokens/s':>10}{'GFLOP/s':>9}"
            f"{'of peak':>8}{'faults':>8}{'cpu ms':>8}"
        )
        for r in run["cases"]:
            for k, v in r["step_s"].items():
                print(
                    f"{r['case']:<15}{k:<11}{v * 1e3:>9.1f}{r['tokens_per_s'][k]:>10.0f}"
                    f"{r['model_flops_per_s'][k] / 1e9:>9.1f}"
                    f"{r['model_flops_per_s'][k] / peak:>8.1%}"
                    f"{r['page_faults_per_step'][k]:>8.0f}{r['cpu_ms'][k]:>8.1f}"
                )
            for name, rr in r["ratios"].items():
                print("  " + ratio_line(name, rr))
            for name, rr in r["cpu_ratios"].items():
                print("  " + ratio_line(name + " (CPU time)", rr))
            print(f"  stall fraction {r['stall_fraction']:.3f}")
            lay = r["layout"]
            gain = r["layout_vs_one_device"]
            print(
                f"  layout: {lay['shards']} shard(s), residuals kept: {lay['keep_residuals']}"
                + (f"; {gain:.2f}x the one-device step" if gain else "")
            )
        print(
            f"  load average {run['host']['load_average'][0]:.2f} at the start, "
            f"{run['load_average'][0]:.2f} at the end of this worker; {run['host']['utc']}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="One case, fewer rounds.")
    ap.add_argument("--cores", default=None, help="Core counts to compare at (default 1,2).")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.quick)))
        return
    have = len(os.sched_getaffinity(0))
    cores = [int(c) for c in (args.cores or "1,2").split(",") if int(c) <= have]
    runs = []
    for n in cores:
        cmd = [sys.executable, __file__, "--worker", str(n)] + (["--quick"] if args.quick else [])
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    _print(runs)
    RESULTS.mkdir(exist_ok=True)
    from wse_core.host.memory import host_record

    result = {"runs": runs, "host": host_record()}  # at the end; each run has its own record
    (RESULTS / "train.json").write_text(json.dumps(result, indent=2))
    print(f"wrote {RESULTS / 'train.json'}")


if __name__ == "__main__":
    main()
