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
--max-requests.

    python bench/bench_soak.py [--minutes 10] [--quick] [--model-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent
DEMO_MODEL = ROOT / "wse_demo_out" / "train" / "model_dir"
WSE = [sys.executable, "-m", "wse_cli"]
PROMPTS = ["def ", "import os\n", "class Wafer:\n", "for i in range(", "return self.", "# The "]
KINDS = ("normal", "cancel", "disconnect", "oversize", "hostile")
WEIGHTS = (0.6, 0.1, 0.1, 0.1, 0.1)
HOSTILE = (
    "prompt_5mb", "prompt_1_5mb", "deep_2000", "deep_100000", "seed_2_70", "stop_1000",
    "not_json", "n_99", "logprobs_99", "content_length_10gb", "template_bomb",
)  # fmt: skip
TEMPLATE_BOMB = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
HEAVY = ("prompt_5mb", "deep_2000", "deep_100000")  # /health is timed while these are refused


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _model_dir(args, tmp: Path) -> Path:
    if args.model_dir:
        return Path(args.model_dir)
    if (DEMO_MODEL / "hf" / "config.json").is_file():
        return DEMO_MODEL
    out = tmp / "model_dir"
    print(f"training a tiny model for {args.train_steps} steps into {out} ...", flush=True)
    overrides = [
        f"runconfig.model_dir={out}",
        f"runconfig.max_steps={args.train_steps}",
        f"runconfig.checkpoint_steps={args.train_steps}",
        "runconfig.mode=train",
        "runconfig.sample_tokens=0",
        "train_input.max_corpus_bytes=300000",
        "optimizer.warmup_steps=5",
    ]
    subprocess.run([*WSE, "train", "tiny", *overrides], check=True, stdout=subprocess.DEVNULL)
    return out


def _start_server(
    model_dir: Path, port: int, slots: int, grpc_port: int, template: Path
) -> subprocess.Popen:
    cmd = [
        *WSE,
        "infer",
        "serve",
        "--model-dir",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-num-seqs",
        str(slots),
        "--max-queued",
        "256",
        "--grpc-port",
        str(grpc_port),
        "--chat-template",
        str(template),
        "--drain-s",
        "30",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.kill()
    raise RuntimeError("the server did not become healthy in 300 s")


def _grpc_drain(proc: subprocess.Popen, target: str, max_tokens: int = 64) -> dict:
    """SIGTERM the server while one gRPC stream runs: its status and tokens (all of them
    when the drain works), and the seconds from the signal to the stream's end."""
    import grpc
    from wse_inference.serve.proto import load_stubs

    pb2, stubs = load_stubs()
    got: dict = {"tokens": 0}
    first = threading.Event()

    def read() -> None:
        req = pb2.GenerateRequest(text="def ", max_tokens=max_tokens, ignore_eos=True)
        with grpc.insecure_channel(target) as ch:
            try:
                for r in stubs.GenerationStub(ch).Generate(req, timeout=120):
                    got["tokens"] += len(r.token_ids)
                    first.set()
                got["code"] = "OK"
            except grpc.RpcError as e:
                got["code"] = e.code().name
        first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    first.wait(60)
    t = time.monotonic()
    proc.terminate()
    reader.join(60)
    return {**got, "asked": max_tokens, "after_sigterm_s": round(time.monotonic() - t, 3)}


def _metrics(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=30).text
    return {
        s.name + "".join(f"{{{k}={v}}}" for k, v in sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def _hostile_body(what: str, model: str) -> bytes:
    base = {"model": model, "prompt": "def ", "max_tokens": 8}
    if what.startswith("deep_"):
        depth = int(what.split("_")[1])
        return b'{"model": "%s", "prompt": %s}' % (model.encode(), b"[" * depth + b"]" * depth)
    if what == "not_json":
        return b"\xff\xfe{garbage" * 10
    extra = {
        "prompt_5mb": {"prompt": "x = 1\n" * (5_000_000 // 6)},
        "prompt_1_5mb": {"prompt": "x = 1\n" * (1_500_000 // 6)},
        "seed_2_70": {"seed": 2**70},
        "stop_1000": {"stop": [f"s{i}" for i in range(1000)]},
        "n_99": {"n": 99},
        "logprobs_99": {"logprobs": 99},
    }[what]
    return json.dumps({**base, **extra}).encode()


async def _lying_content_length(url: str) -> int | None:
    """A POST whose Content-Length says 10 GB with 100 bytes behind it: the status code the
    server answers before reading the body, or None if it does not within 10 s."""
    host, port = url.split("//")[1].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 10000000000\r\n\r\n" + b"{" * 100
        )
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout=10)
        return int(line.split()[1]) if line.startswith(b"HTTP/") else None
    except (TimeoutError, OSError, ValueError, IndexError):
        return None
    finally:
        writer.close()


async def _hostile(client: httpx.AsyncClient, model: str, rng: random.Random) -> list[dict]:
    """Three hostile requests one after the other; a record each (outcome `refused` when
    the answer is a 4xx with an error body)."""
    recs = []
    for what in rng.sample(HOSTILE, 3):
        rec = {"kind": f"hostile:{what}", "start": time.monotonic(), "ttft_s": None}
        try:
            if what == "template_bomb":
                r = await client.post(
                    "/v1/chat/completions",
                    json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
                )
                ok = r.status_code == 400 and "error" in r.json()
                rec["outcome"] = "refused" if ok else f"http_{r.status_code}"
            elif what == "content_length_10gb":
                status = await _lying_content_length(str(client.base_url).rstrip("/"))
                rec["outcome"] = "refused" if status == 413 else f"http_{status}"
            else:
                r = await client.post(
                    "/v1/completions",
                    content=_hostile_body(what, model),
                    headers={"content-type": "application/json"},
                )
                ok = 400 <= r.status_code < 500 and "error" in r.json()
                rec["outcome"] = "refused" if ok else f"http_{r.status_code}"
        except Exception as e:  # noqa: BLE001 -- counted by kind, none ends the soak
            rec["outcome"] = f"exception:{type(e).__name__}"
        rec["end"] = time.monotonic()
        recs.append(rec)
    return recs


async def _request(client: httpx.AsyncClient, model: str, kind: str, rng: random.Random) -> dict:
    """One client request of `kind`; returns its record (outcome, ttft_s, start)."""
    start = time.monotonic()
    rec = {"kind": kind, "start": start, "ttft_s": None, "outcome": None}
    prompt = rng.choice(PROMPTS) * rng.randint(1, 4)
    body = {"model": model, "prompt": prompt, "max_tokens": rng.randint(8, 48), "stream": True}
    if kind == "oversize":
        if rng.random() < 0.5:
            body["prompt"] = "x = 1\n" * 2000  # far beyond the context
        else:
            body["max_tokens"] = 100_000
    stop_after = rng.randint(1, 4)  # chunks a disconnecting client reads
    cancel_s = rng.uniform(0.05, 2.0)
    try:
        task = _stream(client, body, rec, kind, stop_after)
        if kind == "cancel":
            try:
                await asyncio.wait_for(task, timeout=cancel_s)
            except TimeoutError:
                rec["outcome"] = "cancelled"
        else:
            await task
    except Exception as e:  # noqa: BLE001 -- every failure is counted by kind, none ends the soak
        rec["outcome"] = f"exception:{type(e).__name__}"
    rec["end"] = time.monotonic()
    return rec


async def _stream(client, body, rec, kind, stop_after) -> None:
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            text = (await r.aread()).decode(errors="replace")
            try:
                message = json.loads(text)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = None
            if 400 <= r.status_code < 500 and message:
                rec["outcome"] = "refused" if kind == "oversize" else f"refused_{r.status_code}"
            else:
                rec["outcome"] = f"http_{r.status_code}"
            return
        chunks, done = 0, False
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            payload = json.loads(line[6:])
            if "error" in payload:
                rec["outcome"] = "stream_error"
                return
            if rec["ttft_s"] is None and payload.get("choices"):
                rec["ttft_s"] = time.monotonic() - rec["start"]
            chunks += 1
            if kind == "disconnect" and chunks >= stop_after:
                rec["outcome"] = "disconnected"
                return  # leaving the block closes the connection mid-stream
        if kind == "oversize":
            rec["outcome"] = "oversize_accepted"
        else:
            rec["outcome"] = "ok" if done else "no_done"


async def _wave(url: str, model: str, n: int, rng: random.Random) -> list[dict]:
    limits = httpx.Limits(max_connections=n + 8)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        kinds = rng.choices(KINDS, WEIGHTS, k=n)
        hostile = [_hostile(client, model, rng) for k in kinds if k == "hostile"]
        normal = [_request(client, model, k, rng) for k in kinds if k != "hostile"]
        done = await asyncio.gather(*normal, *hostile)
        return [r for d in done for r in (d if isinstance(d, list) else [d])]


def _probe(url: str, conn, every_s: float = 0.02) -> None:
    """In its own process: GET /health every `every_s` until told to stop; sends back
    [(monotonic start, latency s, status)] (CLOCK_MONOTONIC is shared by the processes)."""
    samples = []
    with httpx.Client(timeout=30) as client:
        while not conn.poll(every_s):
            t = time.monotonic()
            try:
                status = client.get(url + "/health").status_code
            except httpx.HTTPError:
                status = 0
            samples.append((t, time.monotonic() - t, status))
    conn.send(samples)


def _health_report(samples: list, records: list[dict]) -> dict:
    """/health latency (ms) over all samples, and over those taken while a heavy hostile
    request (a 5 MB prompt, a deep body) was in flight."""
    heavy = [(r["start"], r["end"]) for r in records if r["kind"].split(":")[-1] in HEAVY]
    hit = [any(a <= t <= b for a, b in heavy) for t, _, _ in samples]
    during = [lat for (_, lat, _), h in zip(samples, hit, strict=True) if h]
    outside = [lat for (_, lat, _), h in zip(samples, hit, strict=True) if not h]
    every = [lat for _, lat, _ in samples]
    return {
        "samples": len(every),
        "not_200": sum(status != 200 for *_, status in samples),
        "p50_ms": _ms(_pct(every, 50)),
        "p99_ms": _ms(_pct(every, 99)),
        "max_ms": _ms(max(every, default=None)),
        "during_heavy_hostile": {
            "samples": len(during),
            "heavy_requests": len(heavy),
            "p50_ms": _ms(_pct(during, 50)),
            "p99_ms": _ms(_pct(during, 99)),
            "max_ms": _ms(max(during, default=None)),
        },
        "outside_heavy_hostile": {  # the same waves, side by side: what the machine gives
            "samples": len(outside),
            "p50_ms": _ms(_pct(outside, 50)),
            "p99_ms": _ms(_pct(outside, 99)),
        },
    }


def _ms(s: float | None) -> float | None:
    return None if s is None else round(1e3 * s, 2)


def _settle(url: str, timeout_s: float = 30.0) -> tuple[float, float, float]:
    """(running right after the wave, running after settling, seconds to settle)."""
    t0 = time.monotonic()
    first = _metrics(url)["wse_num_requests_running"]
    running = first
    while running > 0 and time.monotonic() - t0 < timeout_s:
        time.sleep(0.2)
        running = _metrics(url)["wse_num_requests_running"]
    return first, running, time.monotonic() - t0


def _sampler(pid: int, t0: float, out: list, stop: threading.Event, every_s: float) -> None:
    while not stop.is_set():
        rss = _rss_bytes(pid)
        if rss is not None:
            out.append((time.monotonic() - t0, rss))
        stop.wait(every_s)


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _per_minute(records: list[dict], rss: list, t0: float, minutes: int) -> list[dict]:
    rows = []
    for m in range(minutes + 1):
        lo, hi = 60 * m, 60 * (m + 1)
        recs = [r for r in records if lo <= r["start"] - t0 < hi]
        if not recs:
            continue
        ttft = [r["ttft_s"] for r in recs if r["ttft_s"] is not None]
        mem = [b for t, b in rss if lo <= t < hi]
        rows.append(
            {
                "minute": m,
                "requests": len(recs),
                "ttft_p50_s": _pct(ttft, 50),
                "ttft_p99_s": _pct(ttft, 99),
                "rss_max_mib": max(mem) / 2**20 if mem else None,
                "errors": sum(r["outcome"] not in GOOD for r in recs),
            }
        )
    return rows


GOOD = {"ok", "cancelled", "disconnected", "refused"}


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
        model_dir = _model_dir(args, Path(tmp))
        port, grpc_port = _free_port(), _free_port()
        url = f"http://127.0.0.1:{port}"
        template = Path(tmp) / "bomb.jinja"
        template.write_text(TEMPLATE_BOMB)
        t_start = time.monotonic()
        proc = _start_server(model_dir, port, args.slots, grpc_port, template)
        startup_s = time.monotonic() - t_start
        model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
        rss: list = []
        stop = threading.Event()
        t0 = time.monotonic()
        sampler = threading.Thread(target=_sampler, args=(proc.pid, t0, rss, stop, 2.0))
        sampler.start()
        records, waves = [], []
        here, there = multiprocessing.Pipe()
        probe = multiprocessing.Process(target=_probe, args=(url, there), daemon=True)
        probe.start()
        health: list = []
        try:
            while time.monotonic() - t0 < 60 * minutes and len(records) < args.max_requests:
                n = rng.randint(lo, hi)
                w0 = time.monotonic()
                recs = asyncio.run(_wave(url, model, n, rng))
                after, settled, settle_s = _settle(url)
                waiting = _metrics(url)["wse_num_requests_waiting"]
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
                        "rss_mib": (_rss_bytes(proc.pid) or 0) / 2**20,
                    }
                )
                print(
                    f"wave {len(waves):3d} at {w0 - t0:6.1f} s: {n} clients in "
                    f"{waves[-1]['wall_s']:.1f} s; slots running after {after:.0f} -> "
                    f"{settled:.0f}; RSS {waves[-1]['rss_mib']:.0f} MiB",
                    flush=True,
                )
            final_metrics = _metrics(url)
        finally:
            here.send("stop")
            health = here.recv() if here.poll(60) else []
            probe.join(10)
            stop.set()
            sampler.join()
            grpc_drain = _grpc_drain(proc, f"127.0.0.1:{grpc_port}")
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        summary = _report(
            args, minutes, model_dir, startup_s, records, waves, rss, t0, final_metrics, proc
        )
        summary["grpc_drain"] = grpc_drain
        print(f"gRPC stream across SIGTERM (--drain-s 30): {grpc_drain}")
        _write(args, summary, _health_report(health, records), records)


def _report(args, minutes, model_dir, startup_s, records, waves, rss, t0, final, proc) -> None:
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    errors = {k: v for k, v in outcomes.items() if k not in GOOD}
    rows = _per_minute(records, rss, t0, int(minutes) + 1)
    mem = [b for _, b in rss]
    half = [b for t, b in rss if t >= rss[-1][0] / 2] if rss else []
    first_half = [b for t, b in rss if t < rss[-1][0] / 2] if rss else []
    slope = None
    if len(half) > 2:  # MiB per minute over the second half
        ts = np.array([t for t, _ in rss if t >= rss[-1][0] / 2]) / 60
        slope = float(np.polyfit(ts, np.array(half) / 2**20, 1)[0])
    summary = {
        "model_dir": str(model_dir),
        "minutes": minutes,
        "server_startup_s": startup_s,
        "requests": len(records),
        "waves": len(waves),
        "outcomes": outcomes,
        "errors_by_kind": errors,
        "every_request_ended": all(r["outcome"] is not None for r in records),
        "slots_leaked_after_any_wave": max((w["running_after_settle"] for w in waves), default=0),
        "max_settle_s": max((w["settle_s"] for w in waves), default=0.0),
        "rss_mib": {
            "first": mem[0] / 2**20 if mem else None,
            "max": max(mem) / 2**20 if mem else None,
            "last": mem[-1] / 2**20 if mem else None,
            "first_half_max": max(first_half) / 2**20 if first_half else None,
            "second_half_max": max(half) / 2**20 if half else None,
            "second_half_slope_mib_per_min": slope,
        },
        "per_minute": rows,
        "waves_detail": waves,
        "rss_samples": [(round(t, 1), b) for t, b in rss],
        "server_metrics_final": {
            k: v
            for k, v in final.items()
            if k.startswith(("wse_request_success", "wse_request_rejected", "wse_num_"))
        },
        "server_exit_code": proc.returncode,
        "cpu_count": os.cpu_count(),
    }
    print(f"\n{'min':>4} {'requests':>9} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} "
          f"{'RSS max MiB':>12} {'errors':>7}")  # fmt: skip
    for r in rows:
        p50 = "-" if r["ttft_p50_s"] is None else f"{r['ttft_p50_s'] * 1e3:.0f}"
        p99 = "-" if r["ttft_p99_s"] is None else f"{r['ttft_p99_s'] * 1e3:.0f}"
        rss_m = "-" if r["rss_max_mib"] is None else f"{r['rss_max_mib']:.0f}"
        print(f"{r['minute']:>4} {r['requests']:>9} {p50:>12} {p99:>12} {rss_m:>12} "
              f"{r['errors']:>7}")  # fmt: skip
    print(f"\n{len(records)} requests in {len(waves)} waves; outcomes {outcomes}")
    print(f"errors by kind: {errors or 'none'}")
    print(
        f"slots running after settling, worst wave: {summary['slots_leaked_after_any_wave']:.0f} "
        f"(settled within {summary['max_settle_s']:.1f} s)"
    )
    m = summary["rss_mib"]
    if m["first"] is not None:
        print(
            f"server RSS: first {m['first']:.0f} MiB, max {m['max']:.0f}, last {m['last']:.0f}; "
            f"max first half {m['first_half_max']:.0f} vs second half {m['second_half_max']:.0f}"
            + (f"; slope over the second half {slope:+.2f} MiB/min" if slope is not None else "")
        )
    return summary


def _write(args, summary: dict, health: dict, records: list[dict]) -> None:
    hostile: dict[str, dict[str, int]] = {}
    for r in records:
        if r["kind"].startswith("hostile:"):
            by = hostile.setdefault(r["kind"].split(":")[1], {})
            by[r["outcome"]] = by.get(r["outcome"], 0) + 1
    summary.update(
        health=health,
        hostile_outcomes=hostile,
        http_5xx=sum(str(r["outcome"]).startswith("http_5") for r in records),
        load_average=os.getloadavg(),
    )
    d = health["during_heavy_hostile"]
    print(
        f"/health: {health['samples']} probes, p50 {health['p50_ms']} ms, p99 "
        f"{health['p99_ms']} ms, max {health['max_ms']} ms, {health['not_200']} not 200; while "
        f"a 5 MB prompt or a deep body was refused ({d['heavy_requests']} of them): "
        f"{d['samples']} probes, p50 {d['p50_ms']} ms, p99 {d['p99_ms']} ms, max {d['max_ms']} ms"
        f"; at the other moments of the waves p50 {health['outside_heavy_hostile']['p50_ms']} ms, "
        f"p99 {health['outside_heavy_hostile']['p99_ms']} ms"
    )
    print(f"hostile requests by kind: {hostile}; HTTP 5xx: {summary['http_5xx']}")
    print(f"load average (1, 5, 15 min): {summary['load_average']}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "soak_quick.json" if args.quick else "soak.json"
    from wse_core.host.memory import host_record

    summary["host"] = host_record()  # bandwidth, load average, CPUs, machine, time
    (RESULTS / name).write_text(json.dumps(summary, indent=2))
    print(f"wrote {RESULTS / name}")


if __name__ == "__main__":
    main()
