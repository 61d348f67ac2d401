"""A load-test client for an OpenAI-compatible server (`wse infer bench --url ...`).

`run_load_test(LoadTestConfig(url=..., ...))` sends `num_requests` streaming
`/v1/completions` requests (temperature 0, `stream_options.include_usage`) with at most
`concurrency` in flight, on one asyncio loop with httpx, and returns a JSON-ready summary:

- request_throughput_per_s: completed requests / wall time of the whole run;
- output_tokens_per_s: completion tokens (from `usage`) / wall time;
- ttft_s: arrival of the first non-empty text chunk after sending, per request;
- tpot_s: (end - first token) / (completion tokens - 1), per request with >= 2 tokens;
- e2e_s: send to `data: [DONE]`;
each as {"mean", "p50", "p90", "p99"} (NumPy's linear-interpolation percentiles), and the
counts of completed and failed requests with the first few error messages. A 429 is counted
as failed (the client does not retry), so the figures reflect the server's admission policy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time

import httpx
import numpy as np

__all__ = ["LoadTestConfig", "RequestResult", "run_load_test", "summarize"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadTestConfig:
    url: str  # base URL, e.g. http://127.0.0.1:8000
    model: str | None = None  # None: the first model of GET /v1/models
    num_requests: int = 64
    concurrency: int = 8
    prompt: str = "The wafer-scale engine"
    max_tokens: int = 32
    timeout_s: float = 60.0


@dataclasses.dataclass(frozen=True)
class RequestResult:
    ok: bool
    ttft_s: float = float("nan")
    e2e_s: float = float("nan")
    completion_tokens: int = 0
    text: str = ""
    error: str | None = None

    @property
    def tpot_s(self) -> float:
        n = self.completion_tokens
        return (self.e2e_s - self.ttft_s) / (n - 1) if self.ok and n > 1 else float("nan")


async def _one(client: httpx.AsyncClient, cfg: LoadTestConfig, model: str) -> RequestResult:
    body = {
        "model": model,
        "prompt": cfg.prompt,
        "max_tokens": cfg.max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    ttft, usage = float("nan"), None
    parts: list[str] = []
    try:
        async with client.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                detail = (await r.aread())[:200].decode(errors="replace")
                return RequestResult(False, error=f"HTTP {r.status_code}: {detail}")
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    break
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    return RequestResult(False, error=chunk["error"].get("message"))
                usage = chunk.get("usage") or usage
                text = "".join(c.get("text") or "" for c in chunk.get("choices", []))
                if text and not parts:
                    ttft = time.perf_counter() - t0
                parts.append(text)
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        return RequestResult(False, error=f"{type(e).__name__}: {e}")
    n = usage["completion_tokens"] if usage else len([p for p in parts if p])
    return RequestResult(True, ttft, time.perf_counter() - t0, n, "".join(parts))


def _stats(values: list[float]) -> dict[str, float | None]:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"mean": float(v.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def summarize(results: list[RequestResult], wall_s: float, cfg: LoadTestConfig, model: str) -> dict:
    """The JSON summary of a run (see the module docstring)."""
    ok = [r for r in results if r.ok]
    tokens = sum(r.completion_tokens for r in ok)
    return {
        "url": cfg.url,
        "model": model,
        "num_requests": cfg.num_requests,
        "concurrency": cfg.concurrency,
        "max_tokens": cfg.max_tokens,
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "errors": [r.error for r in results if not r.ok][:5],
        "wall_s": wall_s,
        "request_throughput_per_s": len(ok) / wall_s,
        "output_tokens": tokens,
        "output_tokens_per_s": tokens / wall_s,
        "ttft_s": _stats([r.ttft_s for r in ok]),
        "tpot_s": _stats([r.tpot_s for r in ok]),
        "e2e_s": _stats([r.e2e_s for r in ok]),
    }


async def _run(cfg: LoadTestConfig) -> tuple[list[RequestResult], float, str]:
    n = cfg.concurrency
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=cfg.url, timeout=cfg.timeout_s, limits=limits) as client:
        model = cfg.model
        if model is None:
            r = await client.get("/v1/models")
            r.raise_for_status()
            model = r.json()["data"][0]["id"]
        gate = asyncio.Semaphore(cfg.concurrency)

        async def gated() -> RequestResult:
            async with gate:
                return await _one(client, cfg, model)

        t0 = time.perf_counter()
        results = await asyncio.gather(*(gated() for _ in range(cfg.num_requests)))
        return list(results), time.perf_counter() - t0, model


def run_load_test(cfg: LoadTestConfig) -> dict:
    """Run the load test (blocking) and return its summary."""
    results, wall_s, model = asyncio.run(_run(cfg))
    return summarize(results, wall_s, cfg, model)
