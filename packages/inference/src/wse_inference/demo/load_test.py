"""A load-test client for an OpenAI-compatible server (`wse infer bench --url ...`).

`run_load_test(LoadTestConfig(url=..., ...))` sends `num_requests` streaming requests to
`/v1/completions` (`backend` "openai") or `/v1/chat/completions` ("openai-chat"), as vLLM's
bench sends them (`demo.bench_endpoints`: temperature 0 unless `sampling` says otherwise,
`stream_options.include_usage`), with at most `concurrency` in flight, on one asyncio loop
with httpx, and returns a JSON-ready summary. `num_warmups` copies of the first request are
sent first, at most `concurrency` at once, and not counted (vLLM's `--num-warmups`). The
prompts and max_tokens are `dataset`'s (`demo.bench_data`; None: `prompt` for `max_tokens`
each time), `ignore_eos: true` sent where set and for the random dataset (as vLLM's). The
figures are vLLM's (`vllm bench serve`, benchmarks/backend_request_func.py), so the two can be
compared; per request, times from sending it (a chat's opening role chunk, with no content,
is its first chunk with a choice, as vLLM times it, but no token):

- ttft_s: the first chunk whose `choices` list is not empty, whatever its text: vLLM streams
  `"text": ""` for a token that is not yet text (a byte of an unfinished UTF-8 character, a
  special token), and its client times that chunk (hunt 69: it waited for text, so such a
  request had no TTFT and no TPOT, dropped without a word);
- e2e_s: the last chunk with a choice (vLLM's latency), not `data: [DONE]` nor the usage
  chunk after it (hunt 69: a usage sent 1 s late made a TPOT of 350 ms out of 100);
- tpot_s: (e2e - ttft) / (completion tokens - 1), per request with >= 2 tokens;
- itl_s: the gap between consecutive chunks with a choice, over every gap of the run;
- output_tokens_per_s: completion tokens / wall time of the whole run, the tokens being
  `usage.completion_tokens` when the server sends it (as vLLM takes them), else counted: one
  per chunk with a choice, but for a closing chunk (no text, a finish_reason: OpenAI's end
  marker). vLLM re-tokenizes the text instead; without the model's tokenizer this client
  counts chunks, as a vLLM server streams one token a chunk (one short when the last token
  was a special one);
- request_throughput_per_s: completed requests / wall time;
- input_tokens (/ wall time, and + output tokens: vLLM's total token throughput): the completed
  requests' prompt tokens as the dataset counted them (for the fixed prompt, the server's
  usage.prompt_tokens; None when a completed request's were counted by neither);
each as {"mean", "p50", "p90", "p99", "n"} (NumPy's linear-interpolation percentiles; `n`: the
requests or gaps they are over, so none is left out unseen: a request of one token has no TPOT,
one with no chunk with a choice no TTFT nor e2e); goodput, vLLM's percentiles
(`metric_percentiles` of `percentile_metrics`) and its peak figures: `load_tally`'s. The ITL
percentiles are exact up to `ITL_SAMPLE` gaps; past that they are of a uniform sample of that
many (their mean stays exact), so memory does not grow with the run. A 429 is counted as
failed (the client does not retry), so the figures reflect the server's admission policy.

The server's answers are read with bounds and checked, not trusted (`demo.openai_replies`):
GET /v1/models is read under `timeout_s` and at most 1 MiB (hunt 69: an endless one was read
whole, without end), and a /v1/models without a model id is `ServerReplyError`, carrying the
HTTP status it answered. A chunk that is not OpenAI's shape (or nested past what Python's JSON
reader goes), an `error` event, an SSE line past 1 MiB, a stream that ends without
`data: [DONE]` or that has not ended `timeout_s` after it was sent fails that request, with
why. So does a token count no honest server sends (hunt 68: 10^400 tokens crashed the summary,
10^9 was reported as 154 billion tokens/s): an integer longer than any count, more tokens than
the `max_tokens` the bench asked for (by usage, or by the chunks it streamed: hunt 69, 100
chunks and no usage were 100 tokens for max_tokens 32), or a usage below the chunks that
carried text (each is at least one token). `errors` lists each distinct reason once (at most
five). No completion's text is kept (hunt 69: each was, to the end of the run, and never read:
1.1 GB for 1,000 requests of 1 MB).

Arrivals (`request_rate`, `burstiness`, `seed`): vLLM's, `bench_data.arrival_times` (the last
request sent at num_requests / request_rate s, whatever the seed); a request whose time has
come waits for a free slot of `concurrency` (vLLM's `--max-concurrency`) and is timed from
its send.

`api_key`: sent as `Authorization: Bearer <key>` (as vLLM's bench sends OPENAI_API_KEY); it
is never part of a result, an error or the config's repr.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterable

import httpx

from wse_inference.demo.bench_data import (
    BenchRequest,
    RandomSpec,
    ShareGPTSpec,
    arrival_times,
)
from wse_inference.demo.bench_endpoints import BACKENDS, CHAT, Sampling, read_chunk, request_body
from wse_inference.demo.bench_tokens import draw
from wse_inference.demo.load_tally import ITL_SAMPLE, METRICS, RequestResult, Tally
from wse_inference.demo.openai_replies import (
    MAX_ERROR_BYTES,
    MAX_LINE_BYTES,
    MAX_MODELS_BYTES,
    Chunk,
    ServerReplyError,
    first_model,
    read_head,
    reason,
    sse_data,
)

__all__ = [
    "ITL_SAMPLE",
    "LoadTestConfig",
    "METRICS",
    "RequestResult",
    "Sampling",
    "ServerReplyError",
    "Tally",
    "run_load_test",
    "summarize",
    "summary_keys",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadTestConfig:
    url: str  # base URL, e.g. http://127.0.0.1:8000
    model: str | None = None  # None: the first model of GET /v1/models
    num_requests: int = 64
    concurrency: int = 8
    prompt: str = "The wafer-scale engine"
    max_tokens: int = 32
    timeout_s: float = 60.0  # per request, from sending it to data: [DONE]; and GET /v1/models
    api_key: str | None = dataclasses.field(default=None, repr=False)  # a secret: never shown
    request_rate: float | None = None  # requests a second; None: all at once (vLLM's inf)
    burstiness: float = 1.0  # the gamma shape of the gaps (1: Poisson)
    seed: int = 0  # of the arrivals and of the dataset's draws (vLLM's one --seed)
    dataset: RandomSpec | ShareGPTSpec | None = None  # None: `prompt`, `max_tokens` each time
    ignore_eos: bool = False  # vLLM's --ignore-eos
    backend: str = "openai"  # vLLM's --backend: a key of bench_endpoints.BACKENDS
    sampling: Sampling = Sampling()  # vLLM's --temperature, --top-p, --top-k
    num_warmups: int = 0  # vLLM's --num-warmups: copies of the first request, not counted
    goodput_ms: dict[str, float] = dataclasses.field(default_factory=dict)  # vLLM's --goodput
    percentile_metrics: tuple[str, ...] = METRICS  # vLLM's --percentile-metrics (ours: all)
    metric_percentiles: tuple[float, ...] = (99.0,)  # vLLM's --metric-percentiles

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {self.backend!r}")

    @property
    def sends_ignore_eos(self) -> bool:  # vLLM's bench sets it for its random dataset
        return self.ignore_eos or isinstance(self.dataset, RandomSpec)

    @property
    def endpoint(self) -> str:
        return BACKENDS[self.backend]


@dataclasses.dataclass
class _Stream:
    """What one request's stream has shown so far (times in s from sending it; `start_s`:
    when it was sent, in s from the run's start; `spare`: the chunks with a choice it may
    send beyond one a token, a closing one and a chat's role chunk)."""

    start_s: float = 0.0
    spare: int = 1
    ttft_s: float = float("nan")
    last_s: float = float("nan")
    itl_s: list[float] = dataclasses.field(default_factory=list)
    usage: int | None = None
    prompt_usage: int | None = None
    choice_chunks: int = 0
    token_chunks: int = 0  # chunks with a choice, but for a closing one (no text, finished)
    text_chunks: int = 0
    carries: list[bool] = dataclasses.field(default_factory=list)  # each timed chunk's token

    def add(self, chunk: Chunk, t_s: float, max_tokens: int, role: bool = False) -> None:
        """Take a chunk that arrived at `t_s` (`role`: a chat's role chunk, no token)."""
        self.usage = chunk.tokens if chunk.tokens is not None else self.usage
        if chunk.prompt_tokens is not None:
            self.prompt_usage = chunk.prompt_tokens
        if not chunk.choice:  # the usage chunk (choices: []) is no token: vLLM's rule
            return
        token = bool(chunk.text) or not (chunk.finished or role)
        if not self.choice_chunks:
            self.ttft_s = t_s
            self.carries.append(token)
        elif self.choice_chunks < max_tokens + self.spare:  # more fails it: no gap kept past
            self.itl_s.append(t_s - self.last_s)
            self.carries.append(token)
        self.last_s = t_s
        self.choice_chunks += 1
        self.token_chunks += token
        self.text_chunks += bool(chunk.text)

    def result(self, max_tokens: int) -> RequestResult:
        """The request's result once its stream ended with data: [DONE]."""
        why = _miscount(self.usage, self.text_chunks, max_tokens) or self._overrun(max_tokens)
        if why is not None:
            return RequestResult(False, error=why)
        n = self.usage if self.usage is not None else self.token_chunks
        itl_s, prompt = tuple(self.itl_s), self.prompt_usage
        return RequestResult(True, self.ttft_s, self.last_s, n, None, itl_s, prompt, self.start_s,
                             tuple(self.carries))  # fmt: skip

    def _overrun(self, max_tokens: int) -> str | None:
        """Why the chunks streamed are more than `max_tokens` allows, or None (hunt 69: with
        no usage, 100 chunks were taken as 100 tokens for max_tokens 32)."""
        if self.token_chunks > max_tokens:
            return (
                f"the server streamed {self.token_chunks:,} chunks carrying a token, past the "
                f"max_tokens {max_tokens} the bench asked for"
            )
        if self.choice_chunks > max_tokens + self.spare:
            role = " and a chat's role chunk" if self.spare > 1 else ""
            return (
                f"the server streamed {self.choice_chunks:,} chunks with a choice for max_tokens "
                f"{max_tokens} (a token each, and at most one closing chunk{role})"
            )
        return None


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


def _http_error(e: httpx.HTTPError, timeout_s: float) -> str:
    """An httpx error on one line's terms; a timeout names it (httpx's own text is empty)."""
    said = str(e) or (
        f"no answer within {timeout_s:g} s" if isinstance(e, httpx.TimeoutException) else ""
    )
    return f"{type(e).__name__}: {said}"


async def _one(
    client: httpx.AsyncClient, cfg: LoadTestConfig, model: str, req: BenchRequest, origin: float
) -> RequestResult:
    """One request, timed from its send; `origin`: the run's start (perf_counter s)."""
    body = request_body(cfg.backend, model, req, cfg.sampling, cfg.sends_ignore_eos)
    t0 = time.perf_counter()
    seen, done = _Stream(start_s=t0 - origin, spare=1 + (cfg.backend == CHAT)), False
    try:
        async with (  # the whole request: a server that streams forever is cut off
            asyncio.timeout(cfg.timeout_s),
            client.stream("POST", cfg.endpoint, json=body) as r,
        ):
            if r.status_code != 200:  # the start of it: a body may be endless
                detail = await read_head(r.aiter_bytes(), MAX_ERROR_BYTES)
                return RequestResult(False, error=f"HTTP {r.status_code}: {reason(detail)}")
            async for payloads in sse_data(r.aiter_bytes(), MAX_LINE_BYTES):
                t_s = time.perf_counter() - t0  # when this read arrived
                for data in payloads:
                    if data == "[DONE]":
                        done = True
                        break
                    chunk, role = read_chunk(cfg.backend, data)
                    seen.add(chunk, t_s, req.max_tokens, role)
                if done:
                    break
    except ValueError as e:  # a chunk that is not OpenAI's, a line past MAX_LINE_BYTES
        return RequestResult(False, error=str(e))
    except httpx.HTTPError as e:
        return RequestResult(False, error=_http_error(e, cfg.timeout_s))
    except TimeoutError:
        return RequestResult(False, error=f"no data: [DONE] within {cfg.timeout_s:g} s")
    if not done:
        return RequestResult(False, error="the stream ended without data: [DONE]")
    return seen.result(req.max_tokens)


def summarize(
    results: Iterable[RequestResult], wall_s: float, cfg: LoadTestConfig, model: str
) -> dict:
    """The JSON summary of a run's `results` (see the module docstring)."""
    tally = Tally()
    for r in results:
        tally.add(r)
    return tally.summary(wall_s, cfg, model)


async def _served_model(client: httpx.AsyncClient, timeout_s: float) -> str:
    """The first model of GET /v1/models, read whole within `timeout_s` and at most
    `MAX_MODELS_BYTES` (httpx's timeout bounds each read, not the body)."""
    try:
        async with asyncio.timeout(timeout_s), client.stream("GET", "/v1/models") as r:
            cap = MAX_MODELS_BYTES if r.status_code == 200 else MAX_ERROR_BYTES
            body = await read_head(r.aiter_bytes(), cap)
    except TimeoutError:
        raise httpx.ReadTimeout(
            f"GET /v1/models did not finish answering within {timeout_s:g} s"
        ) from None
    except httpx.TimeoutException as e:
        if str(e):
            raise
        raise type(e)(f"GET /v1/models: no answer within {timeout_s:g} s") from None
    return first_model(r.status_code, body if r.status_code == 200 else body[:MAX_ERROR_BYTES])


async def _warm_up(
    client: httpx.AsyncClient, cfg: LoadTestConfig, model: str, req: BenchRequest
) -> None:
    """`cfg.num_warmups` copies of `req`, at most `cfg.concurrency` at once; their results
    dropped (vLLM's --num-warmups sends its first request so)."""
    todo = iter(range(cfg.num_warmups))

    async def worker() -> None:
        for _ in todo:
            await _one(client, cfg, model, req, time.perf_counter())

    await asyncio.gather(*(worker() for _ in range(min(cfg.concurrency, cfg.num_warmups))))


async def _run(cfg: LoadTestConfig) -> tuple[Tally, float, str, dict]:
    n = cfg.concurrency
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else None
    async with httpx.AsyncClient(
        base_url=cfg.url, timeout=cfg.timeout_s, limits=limits, headers=headers
    ) as client:
        model = cfg.model if cfg.model is not None else await _served_model(client, cfg.timeout_s)
        sample = await draw(cfg, client, model)
        await _warm_up(client, cfg, model, sample.request(0))
        # `concurrency` workers taking turns from one counter: a task per request made all
        # num_requests tasks up front (hunt 58b: 1.5 GB for -n 1,000,000); each result goes
        # into the tally and is dropped
        todo, tally = iter(range(cfg.num_requests)), Tally()
        sends = arrival_times(cfg.request_rate, cfg.burstiness, cfg.seed, cfg.num_requests)

        async def worker() -> None:
            for i in todo:
                req = sample.request(i)  # made when sent: a dataset's prompts are not kept
                if (wait := t0 + sends[i] - time.perf_counter()) > 0:
                    await asyncio.sleep(wait)  # its time has not come (--request-rate)
                tally.add(await _one(client, cfg, model, req, t0), req.prompt_len)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(n, cfg.num_requests))))
        return tally, time.perf_counter() - t0, model, sample.params


def summary_keys(cfg: LoadTestConfig) -> frozenset[str]:
    """The top-level keys of `run_load_test(cfg)`'s summary, known before the run (the same
    `Tally.summary`, over no request): a caller's own keys (vLLM's --metadata) checked
    against them before any request is sent."""
    return frozenset({"date", *Tally().summary(1.0, cfg, "")})


def run_load_test(cfg: LoadTestConfig) -> dict:
    """Run the load test (blocking): its summary (`bench_data.DatasetError`: no dataset),
    `date` (vLLM's: when the run ended, local time, YYYYmmdd-HHMMSS) first."""
    from datetime import datetime

    tally, wall_s, model, dataset = asyncio.run(_run(cfg))
    date = datetime.now().strftime("%Y%m%d-%H%M%S")
    return {"date": date, **tally.summary(wall_s, cfg, model, dataset)}
