"""The served side of the soak (`bench_soak.py`): a free port, the model dir, the
`wse infer serve` child and its /health, /metrics and resident memory, the slots settling
after a wave, and one gRPC stream across SIGTERM (the drain check, issue 43).

`probe` runs in its own process (GET /health every 20 ms); `sampler` in a thread (VmRSS from
/proc every few seconds). Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
DEMO_MODEL = ROOT / "wse_demo_out" / "train" / "model_dir"
WSE = [sys.executable, "-m", "wse_cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def model_dir_for(args, tmp: Path) -> Path:
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


def start_server(
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


def grpc_drain(proc: subprocess.Popen, target: str, max_tokens: int = 64) -> dict:
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


def metrics(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=30).text
    return {
        s.name + "".join(f"{{{k}={v}}}" for k, v in sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def settle(url: str, timeout_s: float = 30.0) -> tuple[float, float, float]:
    """(running right after the wave, running after settling, seconds to settle)."""
    t0 = time.monotonic()
    first = metrics(url)["wse_num_requests_running"]
    running = first
    while running > 0 and time.monotonic() - t0 < timeout_s:
        time.sleep(0.2)
        running = metrics(url)["wse_num_requests_running"]
    return first, running, time.monotonic() - t0


def sampler(pid: int, t0: float, out: list, stop: threading.Event, every_s: float) -> None:
    while not stop.is_set():
        rss = rss_bytes(pid)
        if rss is not None:
            out.append((time.monotonic() - t0, rss))
        stop.wait(every_s)


def probe(url: str, conn, every_s: float = 0.02) -> None:
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
