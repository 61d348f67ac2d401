"""A load-test client for an OpenAI-compatible server (`wse infer bench --url ...`).

`run_load_test(LoadTestConfig(url=..., ...))` sends `num_requests` streaming
`/v1/completions` requests (temperature 0, `stream_options.include_usage`) with at most
`concurrency` in flight, on one asyncio loop with httpx, and returns a JSON-ready summary:

- request_throughput_per_s: completed requests / wall time of the whole run;
- output_tokens_per_s: completion tokens / wall time: `usage.completion_tokens` (as vLLM's
  benchmark_serving counts them), else the chunks that carried text;
- ttft_s: arrival of the first non-empty text chunk after sending, per request;
- tpot_s: (end - first token) / (completion tokens - 1), per request with >= 2 tokens;
- e2e_s: send to `data: [DONE]`;
each as {"mean", "p50", "p90", "p99"} (NumPy's linear-interpolation percentiles), and the
counts of completed and failed requests with the first few error messages. A 429 is counted
as failed (the client does not retry), so the figures reflect the server's admission policy.

The server's answers are checked, not trusted (hunt 58b: a /v1/models that was HTML or had no
model, or a chunk that was a list or had text 5, crashed the client with a traceback): a
/v1/models without a model id is `ServerReplyError`; a chunk that is not OpenAI's shape, an
`error` event, a stream that ends without `data: [DONE]` or that has not ended `timeout_s`
after it was sent (one that never ends held the client forever) fails that request, with why.
So does a usage count no honest server sends (hunt 68: 10^400 tokens crashed the summary with
an OverflowError, 10^9 was reported as 154 billion tokens/s): an integer longer than any
count, a count past the `max_tokens` the bench asked for, or one below the chunks that carried
text (each is at least one token). `errors` lists each distinct reason once (at most five).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time

import httpx
import numpy as np

__all__ = ["LoadTestConfig", "RequestResult", "ServerReplyError", "run_load_test", "summarize"]


class ServerReplyError(Exception):
    """The server's GET /v1/models is not OpenAI's list of models (no model id to ask for)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadTestConfig:
    url: str  # base URL, e.g. http://127.0.0.1:8000
    model: str | None = None  # None: the first model of GET /v1/models
    num_requests: int = 64
    concurrency: int = 8
    prompt: str = "The wafer-scale engine"
    max_tokens: int = 32
    timeout_s: float = 60.0  # per request, from sending it to data: [DONE]


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


def _first_model(reply: httpx.Response) -> str:
    """The first model id of OpenAI's GET /v1/models reply."""
    try:
        model = reply.json()["data"][0]["id"]
    except (ValueError, LookupError, TypeError):
        model = None
    if not isinstance(model, str) or not model:
        raise ServerReplyError(
            f'GET /v1/models did not answer OpenAI\'s {{"data": [{{"id": ...}}]}} (got '
            f"{reply.text[:80]!r}); give the model with --model, or check the URL"
        )
    return model


# Digits of the longest integer a chunk may hold: a count or a timestamp fits in 64 bits (19
# digits); a longer one is refused before Python makes it (past 4,300 digits Python's own
# refusal tells the reader to lift an interpreter limit).
MAX_INT_DIGITS = 20


def _chunk(data: str) -> tuple[str, int | None]:
    """The text and completion token count (None if absent) of one SSE `data:` payload;
    ValueError naming what is wrong if it is not OpenAI's chunk (or is an error event)."""

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise ValueError(
                f"a chunk holding an integer of {len(digits.lstrip('-')):,} digits (a count "
                f"has at most {MAX_INT_DIGITS} digits): {data[:80]!r}"
            )
        return int(digits)

    chunk = json.loads(data, parse_int=integer)
    if not isinstance(chunk, dict):
        raise ValueError(f"a chunk that is not a JSON object: {data[:80]!r}")
    if "error" in chunk:
        err = chunk["error"]
        raise ValueError(str(err.get("message") if isinstance(err, dict) else err)[:200])
    choices = chunk.get("choices") or []
    if not isinstance(choices, list) or not all(
        isinstance(c, dict) and isinstance(c.get("text") or "", str) for c in choices
    ):
        raise ValueError(f"a chunk whose choices are not OpenAI's: {data[:80]!r}")
    usage = chunk.get("usage")
    if usage is None:
        return "".join(c.get("text") or "" for c in choices), None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"a chunk whose usage is not OpenAI's: {data[:80]!r}")
    return "".join(c.get("text") or "" for c in choices), tokens


def _reason(detail: bytes) -> str:
    """An error reply's OpenAI message (at most 300 characters), else its first 200 bytes
    (hunt 61: the JSON was cut at 200 bytes, mid-message)."""
    try:
        message = str(json.loads(detail)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return detail[:200].decode(errors="replace")
    return message if len(message) <= 300 else message[:300] + "..."


def _miscount(usage: int | None, text_chunks: int, max_tokens: int) -> str | None:
    """Why the server's completion token count cannot be true, or None. vLLM's benchmark
    takes `usage` as it comes; a count past what was asked for, or below what streamed,
    would be a throughput and TPOT made up by the server, so the request fails instead."""
    if usage is None:
        return None
    if usage > max_tokens:
        return (
            f"the server's usage says {usage} completion tokens, past the max_tokens "
            f"{max_tokens} the bench asked for"
        )
    if usage < text_chunks:
        return (
            f"the server's usage says {usage} completion tokens, but {text_chunks} "
            f"chunk{'s' if text_chunks > 1 else ''} carried text (each is at least one token)"
        )
    return None


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
    ttft, usage, done = float("nan"), None, False
    parts: list[str] = []
    try:
        async with (  # the whole request: a server that streams forever is cut off
            asyncio.timeout(cfg.timeout_s),
            client.stream("POST", "/v1/completions", json=body) as r,
        ):
            if r.status_code != 200:
                detail = b""
                async for part in r.aiter_bytes():  # the start of it: a body may be endless
                    detail += part
                    if len(detail) >= 4096:
                        break
                return RequestResult(False, error=f"HTTP {r.status_code}: {_reason(detail)}")
            async for line in r.aiter_lines():
                if not line.startswith("data:"):  # SSE: "data:" then an optional space
                    continue
                data = line[5:].removeprefix(" ")
                if data == "[DONE]":
                    done = True
                    break
                try:
                    text, tokens = _chunk(data)
                except ValueError as e:  # JSONDecodeError included
                    return RequestResult(False, error=str(e))
                usage = tokens if tokens is not None else usage
                if text and not parts:
                    ttft = time.perf_counter() - t0
                parts.append(text)
    except httpx.HTTPError as e:
        return RequestResult(False, error=f"{type(e).__name__}: {e}")
    except TimeoutError:
        return RequestResult(False, error=f"no data: [DONE] within {cfg.timeout_s:g} s")
    if not done:
        return RequestResult(False, error="the stream ended without data: [DONE]")
    text_chunks = sum(1 for p in parts if p)
    if (why := _miscount(usage, text_chunks, cfg.max_tokens)) is not None:
        return RequestResult(False, error=why)
    n = usage if usage is not None else text_chunks
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
        # each reason once: a server that miscounts every request is one line, not five
        "errors": list(dict.fromkeys(r.error for r in results if not r.ok))[:5],
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
            model = _first_model(r)
        # `concurrency` workers taking turns from one counter: a task per request made all
        # num_requests tasks up front (hunt 58b: 1.5 GB for -n 1,000,000)
        todo, results = iter(range(cfg.num_requests)), []

        async def worker() -> None:
            for _ in todo:
                results.append(await _one(client, cfg, model))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(n, cfg.num_requests))))
        return results, time.perf_counter() - t0, model


def run_load_test(cfg: LoadTestConfig) -> dict:
    """Run the load test (blocking) and return its summary."""
    results, wall_s, model = asyncio.run(_run(cfg))
    return summarize(results, wall_s, cfg, model)
