"""Serving soak: `wse infer serve` of a small trained model under 32-64 streaming clients.

Not a test: it runs for minutes. The server is a child process (`python -m wse_cli infer
serve --model-dir DIR` on 127.0.0.1, a free port); the model is the demo's
(`wse_demo_out/train/model_dir`) when present, else `--model-dir`, else one trained here for
`--train-steps` steps with `wse train tiny` into a temporary folder. Clients come in waves of
32-64 concurrent `/v1/completions` streams (random prompts and max_tokens); each request is
one of: a normal stream read to `data: [DONE]`, a cancel (the client gives up before or just
after its first token), a disconnect mid-stream (the client closes the connection after a
few chunks), an oversize request (a prompt beyond the context, or max_tokens beyond it),
which must be refused with a 4xx error body, or a hostile client (issue 31), which sends
three of: a 5 MB prompt (413), a 1.5 MB prompt (400 before tokenization), a body nested
2,000 or 100,000 levels deep (400), a seed of 2**70 (400), 1,000 stop strings (400), bytes
that are not JSON (400), n or logprobs out of range (400), or a Content-Length of 10 GB with
a few bytes behind it (413 before the body is read), or a chat request through the server's
chat template, a bomb of two nested `range(100000)` loops (400 within the template limits,
issue 43) - each must be a 4xx with an error body (`refused`). At the end one gRPC stream is
started and the server is sent SIGTERM: the stream must complete within `--drain-s`
(`grpc_drain` in the JSON, issue 43). A probe in its own process reads GET /health every 20
ms during the waves; the report gives its latency p50/p99 over all waves and over the
moments a 5 MB prompt or a deep body was in flight. After each wave the server's /metrics gives the
requests still running and waiting (a leaked slot would stay running); a sampler reads the
server's resident memory (VmRSS from /proc) every few seconds. Every request is classified:
`ok`, `cancelled`, `disconnected`, `refused` (4xx with an OpenAI error body), and anything
else is an error by kind (`http_5xx`, `no_done` for a stream that ended without [DONE] or an
error, `exception:<type>`).

Prints a table per minute (requests, TTFT p50/p99, RSS) and the verdicts (slots back to 0
after every wave, RSS growth over the second half, errors by kind), and writes
bench/results/soak.json. Traffic goes only to 127.0.0.1, bounded by --minutes and
--max-requests. This file is the driver; the clients are `soak_traffic`, the server and its
checks (/health, /metrics, RSS, the gRPC drain) `soak_server`, the verdicts `soak_report`.

    python bench/bench_soak.py [--minutes 10] [--quick] [--model-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx
from hostile_cases import TEMPLATE_BOMB
from soak_report import health_report, report, write
from soak_server import (
    free_port,
    grpc_drain,
    metrics,
    model_dir_for,
    probe,
    rss_bytes,
    sampler,
    settle,
    start_server,
)
from soak_traffic import wave


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--quick", action="store_true", help="1 minute, waves of 8-16 clients")
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--train-steps", type=int, default=60)
    ap.add_argument("--slots", type=int, default=8, help="--max-num-seqs of the server")
    ap.add_argument("--max-requests", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    minutes = 1.0 if args.quick else args.minutes
    lo, hi = (8, 16) if args.quick else (32, 64)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="wse-soak-") as tmp:
        model_dir = model_dir_for(args, Path(tmp))
        port, grpc_port = free_port(), free_port()
        url = f"http://127.0.0.1:{port}"
        template = Path(tmp) / "bomb.jinja"
        template.write_text(TEMPLATE_BOMB)
        t_start = time.monotonic()
        proc = start_server(model_dir, port, args.slots, grpc_port, template)
        startup_s = time.monotonic() - t_start
        model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
        rss: list = []
        stop = threading.Event()
        t0 = time.monotonic()
        sampling = threading.Thread(target=sampler, args=(proc.pid, t0, rss, stop, 2.0))
        sampling.start()
        records, waves = [], []
        here, there = multiprocessing.Pipe()
        probing = multiprocessing.Process(target=probe, args=(url, there), daemon=True)
        probing.start()
        health: list = []
        try:
            while time.monotonic() - t0 < 60 * minutes and len(records) < args.max_requests:
                n = rng.randint(lo, hi)
                w0 = time.monotonic()
                recs = asyncio.run(wave(url, model, n, rng))
                after, settled, settle_s = settle(url)
                waiting = metrics(url)["wse_num_requests_waiting"]
                records += recs
                waves.append(
                    {
                        "t_s": w0 - t0,
                        "clients": n,
                        "wall_s": time.monotonic() - w0,
                        "running_after_wave": after,
                        "running_after_settle": settled,
                        "waiting_after_settle": waiting,
                        "settle_s": settle_s,
                        "rss_mib": (rss_bytes(proc.pid) or 0) / 2**20,
                    }
                )
                print(
                    f"wave {len(waves):3d} at {w0 - t0:6.1f} s: {n} clients in "
                    f"{waves[-1]['wall_s']:.1f} s; slots running after {after:.0f} -> "
                    f"{settled:.0f}; RSS {waves[-1]['rss_mib']:.0f} MiB",
                    flush=True,
                )
            final_metrics = metrics(url)
        finally:
            here.send("stop")
            health = here.recv() if here.poll(60) else []
            probing.join(10)
            stop.set()
            sampling.join()
            drain = grpc_drain(proc, f"127.0.0.1:{grpc_port}")
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        summary = report(
            args, minutes, model_dir, startup_s, records, waves, rss, t0, final_metrics, proc
        )
        summary["grpc_drain"] = drain
        print(f"gRPC stream across SIGTERM (--drain-s 30): {drain}")
        write(args, summary, health_report(health, records), records)


if __name__ == "__main__":
    main()
