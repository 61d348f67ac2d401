"""Serving benchmark: what HTTP (SSE) and gRPC streaming cost over the scheduler alone.

One MockEngine (8 slots, next token = last + 1) serves the same workload several ways, side
by side in one run: `direct` (requests submitted to the `Scheduler` in-process; the baseline),
`http` (the OpenAI server on loopback, driven by `wse_inference.demo.load_test` with streaming
clients, in the same process), `http-2p` (the same with the server in a child process, so
client and server do not share one GIL) and `grpc` (streaming `Generate` calls from a thread
pool). Each is run with a free engine step (0 ms: the serving stack is the bottleneck) and a
2 ms step (an engine-bound server, where the stack should cost little). The four ways run in
interleaved rounds (`bench/rounds.py`); each ratio to `direct` is the median over rounds with
its spread. Prints a table and writes bench/results/serve.json.

    python bench/bench_serve.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from rounds import interleaved, ratio, ratio_line, record  # noqa: E402  (bench/rounds.py)

RESULTS = Path(__file__).parent / "results"
MAX_SLOTS = 8


def _engine(step_delay_s: float):
    from wse_inference.mock import MockEngine

    return MockEngine(max_slots=MAX_SLOTS, max_context=1024, step_delay_s=step_delay_s)


def direct(step_delay_s: float, n: int, max_tokens: int) -> dict:
    from wse_inference.engine import SamplingParams
    from wse_inference.serve.scheduler import Scheduler

    s = Scheduler(_engine(step_delay_s), max_queued=n).start()
    qs = [queue.Queue() for _ in range(n)]
    t0 = time.perf_counter()
    for i, q in enumerate(qs):
        s.submit(
            prompt_ids=[i % 200 + 1], sampling=SamplingParams(max_tokens=max_tokens), sink=q.put
        )
    tokens = 0
    for q in qs:
        while (ev := q.get(timeout=60)).finish_reason is None:
            pass
        tokens += ev.completion_tokens
    wall = time.perf_counter() - t0
    s.stop()
    return {
        "tokens_per_s": tokens / wall,
        "requests_per_s": n / wall,
        "ttft_p50_ms": None,
        "tpot_p50_ms": None,
    }


def http(step_delay_s: float, n: int, max_tokens: int, concurrency: int) -> dict:
    from wse_inference.demo.load_test import LoadTestConfig, run_load_test
    from wse_inference.serve.app import ServeConfig, Server

    srv = Server(_engine(step_delay_s), ServeConfig(port=0, max_queued=n)).start()
    try:
        r = run_load_test(
            LoadTestConfig(
                url=srv.http_url, num_requests=n, concurrency=concurrency, max_tokens=max_tokens
            )
        )
    finally:
        srv.close()
    assert r["failed"] == 0, r["errors"]
    return {
        "tokens_per_s": r["output_tokens_per_s"],
        "requests_per_s": r["request_throughput_per_s"],
        "ttft_p50_ms": r["ttft_s"]["p50"] * 1e3,
        "tpot_p50_ms": r["tpot_s"]["p50"] * 1e3,
    }


def http_subprocess(step_delay_s: float, n: int, max_tokens: int, concurrency: int) -> dict:
    """As `http`, with the server in its own process (client and server do not share a GIL)."""
    from wse_inference.demo.load_test import LoadTestConfig, run_load_test
    from wse_inference.serve.testing import serve_subprocess

    engine = {"max_slots": MAX_SLOTS, "max_context": 1024, "step_delay_s": step_delay_s}
    with serve_subprocess(engine=engine, config={"max_queued": n}) as (_, url, _):
        r = run_load_test(
            LoadTestConfig(url=url, num_requests=n, concurrency=concurrency, max_tokens=max_tokens)
        )
    assert r["failed"] == 0, r["errors"]
    return {
        "tokens_per_s": r["output_tokens_per_s"],
        "requests_per_s": r["request_throughput_per_s"],
        "ttft_p50_ms": r["ttft_s"]["p50"] * 1e3,
        "tpot_p50_ms": r["tpot_s"]["p50"] * 1e3,
    }


def grpc_case(step_delay_s: float, n: int, max_tokens: int, concurrency: int) -> dict:
    import grpc
    from wse_inference.serve.app import ServeConfig, Server
    from wse_inference.serve.proto import load_stubs

    pb2, pb2_grpc = load_stubs()
    srv = Server(_engine(step_delay_s), ServeConfig(port=0, grpc_port=0, max_queued=n)).start()
    channel = grpc.insecure_channel(srv.grpc_target)
    stub = pb2_grpc.GenerationStub(channel)

    def one(i: int) -> tuple[int, float, float]:
        t0 = time.perf_counter()
        first, count = None, 0
        req = pb2.GenerateRequest(text="The wafer-scale engine", max_tokens=max_tokens)
        for resp in stub.Generate(req, timeout=60):
            first = first if first is not None else time.perf_counter() - t0
            count += len(resp.token_ids)
        e2e = time.perf_counter() - t0
        return count, first, (e2e - first) / max(1, count - 1)

    try:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            out = list(pool.map(one, range(n)))
        wall = time.perf_counter() - t0
    finally:
        channel.close()
        srv.close()
    return {
        "tokens_per_s": sum(o[0] for o in out) / wall,
        "requests_per_s": n / wall,
        "ttft_p50_ms": float(np.median([o[1] for o in out])) * 1e3,
        "tpot_p50_ms": float(np.median([o[2] for o in out])) * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (3 quick, 5)")
    args = ap.parse_args()
    n, max_tokens, conc = (32, 16, 16) if args.quick else (128, 64, 32)
    n_rounds = args.rounds or (3 if args.quick else 5)
    rows = []
    for delay in (0.0, 0.002):
        cases = {
            "direct": lambda d=delay: direct(d, n, max_tokens),
            "http": lambda d=delay: http(d, n, max_tokens, conc),
            "http-2p": lambda d=delay: http_subprocess(d, n, max_tokens, conc),
            "grpc": lambda d=delay: grpc_case(d, n, max_tokens, conc),
        }
        runs: dict[str, list[dict]] = {name: [] for name in cases}

        def contender(name, fn, runs=runs):
            def run() -> float:  # seconds per token: rounds compare throughput, lower is better
                r = fn()
                runs[name].append(r)
                return 1.0 / r["tokens_per_s"]

            return run

        times = interleaved({k: contender(k, f) for k, f in cases.items()}, n_rounds, rotate=True)
        for name in cases:
            best = max(runs[name], key=lambda r: r["tokens_per_s"])
            rows.append(
                {
                    "case": name,
                    "step_ms": delay * 1e3,
                    "requests": n,
                    "max_tokens": max_tokens,
                    "concurrency": conc,
                    **best,
                    "rounds_tokens_per_s": [r["tokens_per_s"] for r in runs[name]],
                    "ratio_vs_direct": ratio(times[name], times["direct"]),
                }
            )
    print(
        f"{'case':7} {'step ms':>7} {'tok/s':>9} {'req/s':>7} {'TTFT p50':>9} "
        f"{'TPOT p50':>9} {'vs direct':>9} (median of {n_rounds} interleaved rounds)"
    )
    for r in rows:
        ttft = f"{r['ttft_p50_ms']:.1f}" if r["ttft_p50_ms"] is not None else "-"
        tpot = f"{r['tpot_p50_ms']:.2f}" if r["tpot_p50_ms"] is not None else "-"
        print(
            f"{r['case']:7} {r['step_ms']:7.1f} {r['tokens_per_s']:9.0f} "
            f"{r['requests_per_s']:7.1f} {ttft:>9} {tpot:>9} "
            f"{r['ratio_vs_direct']['median']:9.2f}"
        )
    for r in rows:
        if r["case"] != "direct":
            name = f"{r['case']} vs direct at {r['step_ms']:g} ms/step"
            print(ratio_line(name, r["ratio_vs_direct"]))
    RESULTS.mkdir(parents=True, exist_ok=True)
    result = {"quick": args.quick, "rounds": n_rounds, "rows": rows, **record("grpcio")}
    (RESULTS / "serve.json").write_text(json.dumps(result, indent=2))
    print(f"wrote {RESULTS / 'serve.json'}")


if __name__ == "__main__":
    main()
