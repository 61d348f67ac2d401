"""Inference benchmark: pipelined and plain decoding vs a PyTorch KV-cache decoder, speculative
speedup, and multi-user throughput against the number of pipeline stages.

Measured side by side in one process, fp32 on the CPU, batch 1, after a warm-up (compile).
Both sides get ONE core: the process is pinned to one CPU before torch and JAX start their
threads (os.sched_setaffinity; --cores N to change), torch.set_num_threads(1), and XLA with
--xla_cpu_multi_thread_eigen=false (without these XLA used ~1.6 cores against torch's one);
the `cpu_util` column (process CPU seconds / wall seconds of a whole call, prompt included)
shows what each decoder really used. Every comparison is
interleaved (each round runs every decoder once, in a rotating order) and reported as the
median over rounds, with ratios taken within a round (pairs measured back to back):
- decode: greedy tokens/s after the first token of `bench/torch_baseline.TorchDecoder`,
  the plain JAX decoder (`decoding.PlainDecoder`, fused while_loop) and the pipelined engine
  (`pipeline.PipelineEngine`, S = 1 and 2 stages, one user, 16 steps per dispatch); all must
  produce the same tokens; target: pipelined >= 1x torch;
- speculative (`infer_speculative`): a 24-layer target (d_model 256) and its first layer as
  the draft, gamma = 4, temperature 1, head scaled for acceptance ~0.8; each round both
  decoders generate the same two sequences; speedup = speculative tokens/s / plain target
  tokens/s (target >= 2x), next to Leviathan's formula with the measured a, c and v;
- throughput: S users on S stages, aggregate tokens/s for S = 1, 2, 4, with the stage rows
  on one device and on two (fabric shifts across devices). On a CPU every stage runs in
  turn (one core does the work of all S regions), so these tokens/s are the CPU's cost of
  emulating the pipeline, not the wafer's throughput: that is `wse_systems.serving.wafer`'s
  prediction (`wse plan infer`), which the next table checks the schedule against;
- occupancy: U = 1..S users on an S-stage engine, each stage's share of the ticks it worked
  on an occupied slot as the device ran the schedule (`PipelineEngine.stage_occupancy`),
  beside the serving model's occupancy: at equal stage times (U / S, what the schedule
  should give) and on the engine's plan priced per region (`WaferServing.occupancy`, range
  over the regions, the head region included).
Prints tables and writes bench/results/infer.json (with --only: infer_<section>.json).

    python bench/bench_infer.py [--quick] [--only SECTION ...] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from infer_common import interleaved_calls as _interleaved  # bench/infer_common.py
from infer_common import tiny_llama as _model
from infer_speculative import bench_speculative  # bench/infer_speculative.py
from rounds import ratio, ratio_line, record  # bench/rounds.py
from wse_core import preset

RESULTS = Path(__file__).parent / "results"
DECODE_TARGET = 1.0  # pipelined decode vs PyTorch's KV-cached decode, tokens/s
ONE_THREAD = "--xla_cpu_multi_thread_eigen=false"
SECTIONS = ("decode", "speculative", "throughput", "occupancy")


def _pipeline_decode(eng, prompt, sampling):
    """(decode seconds after prefill + insert, tokens) of one user, 16 steps per dispatch."""
    import jax

    state = eng.init_decode_state()
    state = eng.insert(
        prefix=eng.prefill(prompt_ids=prompt, sampling=sampling), state=state, slot=0
    )
    jax.block_until_ready(state.device)
    t0 = time.perf_counter()
    while state.seqs[0].finish_reason is None:
        state, _ = eng.generate_steps(state=state, steps=16)
    return time.perf_counter() - t0, state.seqs[0].tokens


def bench_decode(quick: bool, rounds: int) -> list[dict]:
    from torch_baseline import TorchDecoder
    from wse_inference.decoding import PlainDecoder
    from wse_inference.engine import SamplingParams
    from wse_inference.pipeline.engine import PipelineEngine

    m = _model(4, 128 if quick else 256, 2048)
    prompt, n = list(range(1, 17)), 32 if quick else 64
    greedy = SamplingParams(max_tokens=n, temperature=0.0)
    ctx = len(prompt) + n
    torch_dec = TorchDecoder(m.config, m.params, ctx)
    plain = PlainDecoder(m.config, m.params, max_context=ctx)
    engines = {s: PipelineEngine(m, spec=preset("wse3"), stages=s, max_context=ctx) for s in (1, 2)}

    def plain_run():
        out = plain.generate(prompt, greedy)
        return out.decode_s, out.tokens

    fns = {
        "pytorch KV-cache": lambda: torch_dec.generate(prompt, n)[::-1],
        "plain JAX (while_loop)": plain_run,
        **{
            f"pipelined, {s} stage(s), 1 user": (lambda e=e: _pipeline_decode(e, prompt, greedy))
            for s, e in engines.items()
        },
    }
    for fn in fns.values():
        fn()  # warm-up (compile)
    runs = _interleaved(fns, rounds)
    ref = runs["pytorch KV-cache"][0][2][1]
    base = [(n - 1) / w for w, _, _ in runs["pytorch KV-cache"]]
    torch_s = [w for w, _, _ in runs["pytorch KV-cache"]]
    rows = []
    for name, rs in runs.items():
        rates = [(n - 1) / w for w, _, _ in rs]
        ratios = [r / b for r, b in zip(rates, base, strict=True)]
        rows.append(
            {
                "decoder": name,
                "tokens_per_s": statistics.median(rates),
                "vs_pytorch": statistics.median(ratios),
                "vs_pytorch_min": min(ratios),
                "ratio_vs_pytorch": ratio([w for w, _, _ in rs], torch_s, DECODE_TARGET),
                "cpu_util": statistics.median(u for _, u, _ in rs),
                "same_tokens": all(r[2][1] == ref for r in rs),
            }
        )
    return rows


def bench_throughput(quick: bool, rounds: int) -> list[dict]:
    from wse_inference.engine import SamplingParams
    from wse_inference.pipeline.engine import PipelineEngine

    m = _model(4, 128 if quick else 256, 2048)
    n = 24 if quick else 48
    rows = []
    for stages, devices in ((1, 1), (2, 1), (4, 1), (2, 2), (4, 2)):
        prompts = [list(range(1 + u, 17 + u)) for u in range(stages)]
        samplings = [SamplingParams(max_tokens=n, temperature=0.0)] * stages
        eng = PipelineEngine(
            m, spec=preset("wse3"), stages=stages, max_context=16 + n, mesh_rows=devices
        )
        run = lambda e=eng, p=prompts, s=samplings: e.generate_all(p, s, steps_per_call=8)  # noqa: E731
        run()  # warm-up (compile)
        secs = statistics.median(w for w, _, _ in _interleaved({"run": run}, rounds)["run"])
        rows.append(
            {
                "stages": stages,
                "users": stages,
                "devices": devices,
                "tokens_per_s": stages * n / secs,
                "per_user_tokens_per_s": n / secs,
            }
        )
    return rows


def bench_occupancy(quick: bool, stages: int = 4) -> list[dict]:
    from wse_inference.engine import SamplingParams
    from wse_inference.pipeline.engine import PipelineEngine
    from wse_systems.pipeline import Regions
    from wse_systems.serving import Workload
    from wse_systems.serving.wafer import WaferServing, occupancy

    m = _model(stages, 64 if quick else 128, 2048)
    eng = PipelineEngine(m, spec=preset("wse3"), stages=stages, max_context=48)
    plan = eng.plan
    serve = WaferServing(
        m.config, plan.spec, num_wafers=plan.num_wafers,
        workload=Workload(prompt_tokens=16, output_tokens=32, context_len=48),
        bytes_per_param=plan.bytes_per_param, regions=Regions(stages=stages, layout=None),
    )  # fmt: skip
    rows = []
    for users in range(1, stages + 1):
        state = eng.init_decode_state()
        for slot in range(users):
            ids = list(range(1 + slot, 17 + slot))
            sampling = SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True)
            state = eng.insert(prefix=eng.prefill(prompt_ids=ids, sampling=sampling),
                               state=state, slot=slot)  # fmt: skip
        for _ in range(16):
            state, _ = eng.generate(state=state)
        got = eng.stage_occupancy(state)
        uniform = occupancy({f"s{j}": 1.0 for j in range(stages)}, stages, users)
        regions = {s.name for s in (plan.head, *plan.stages)}
        priced = {k: v for k, v in serve.occupancy(users).items() if k in regions}
        rows.append(
            {
                "stages": stages,
                "users": users,
                "emulated_min": float(got.min()),
                "emulated_max": float(got.max()),
                "model_equal_stages": max(uniform.values()),
                "model_priced_min": min(priced.values()),
                "model_priced_max": max(priced.values()),
            }
        )
    return rows


def _table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    keys = [k for k, v in rows[0].items() if not isinstance(v, dict)]  # ratios: printed after
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(f"{r[k]:.3g}" if isinstance(r[k], float) else str(r[k]) for k in keys))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cores", type=int, default=1, help="CPUs the process may use (0: all)")
    ap.add_argument("--only", nargs="+", choices=SECTIONS, help="run these sections only")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 5 quick, else 9)")
    args = ap.parse_args()
    pinned = sorted(os.sched_getaffinity(0))
    if args.cores > 0:  # before torch and JAX start threads: they inherit it
        pinned = pinned[-args.cores :]
        os.sched_setaffinity(0, pinned)
    flags = os.environ.get("XLA_FLAGS", "")
    if ONE_THREAD not in flags:  # before JAX starts: one XLA thread, like torch below
        os.environ["XLA_FLAGS"] = f"{flags} {ONE_THREAD}".strip()
    from wse_core.host.runtime import configure

    configure(2)
    import torch

    torch.set_num_threads(1)
    rounds = args.rounds or (5 if args.quick else 9)
    run = set(args.only or SECTIONS)
    out: dict = {"threads": {"cpus": pinned, "torch": torch.get_num_threads(),
                             "xla_flags": os.environ["XLA_FLAGS"]}}  # fmt: skip
    if "decode" in run:
        out["decode"] = bench_decode(args.quick, rounds)
        _table("batch-1 greedy decode (tokens/s after the first token; medians)", out["decode"])
    if "speculative" in run:
        out["speculative"] = bench_speculative(args.quick, rounds)
        _table("speculative decoding (gamma 4, first-layer draft; medians)", [out["speculative"]])
    if "throughput" in run:
        out["throughput"] = bench_throughput(args.quick, 3)
        _table(
            "multi-user throughput: S users on S stages (the CPU's cost of emulating the"
            " pipeline: its stages run in turn on one core, so this is not the wafer's"
            " throughput)",
            out["throughput"],
        )
    if "occupancy" in run:
        out["occupancy"] = bench_occupancy(args.quick)
        _table(
            "stage occupancy, U users on 4 stages: the schedule as run against the serving model",
            out["occupancy"],
        )
    for r in out.get("decode", []):
        print(ratio_line(f"{r['decoder']} vs PyTorch", r["ratio_vs_pytorch"]))
    if "speculative" in out:
        spec = out["speculative"]["ratio_vs_target_model"]
        print(ratio_line("speculative vs its target model", spec))
    RESULTS.mkdir(exist_ok=True)
    rec = record("torch", "numpy")  # host (bandwidth, load, time), versions, threads
    out["host"], out["baselines"] = rec["host"], rec["baselines"]
    out["threads"].update(rec["threads"])
    name = "infer.json" if args.only is None else f"infer_{'_'.join(args.only)}.json"
    (RESULTS / name).write_text(json.dumps(out, indent=2, default=float))
    print(f"\nwrote {RESULTS / name}")


if __name__ == "__main__":
    main()
