"""A load test's results as they come (`load_test`'s `RequestResult` of each request, the
`Tally` of a run and its JSON summary; the figures and their definitions: `load_test`'s module
docstring). Apart from the client so that each stays small.

vLLM's figures beside ours (vllm/benchmarks/serve.py, `calculate_metrics`):

- request_goodput: the completed requests meeting every SLO of `goodput_ms` (vLLM's
  `--goodput ttft:500 tpot:50 e2el:...`: a request is good when each SLO, in ms, is >= its
  figure; a request of one token has a TPOT of 0 there) / wall time; None without SLOs.
- p{P}_{metric}_ms for each P of `metric_percentiles` and each metric of
  `percentile_metrics` (NumPy's linear percentile, as vLLM's; P written `99` or `99.9`),
  with mean_, median_ and std_ of the same metrics.
- max_output_tokens_per_s, max_concurrent_requests: the most chunks with a choice (vLLM's
  tokens: one a chunk, a chat's role chunk and a closing one too) received within one second,
  and the most completed requests in flight during one second, in whole seconds from the
  run's start (vLLM counts from the first completed request's send: the same seconds,
  microseconds apart, unless the first request sent failed); None with no completed request.
  Counted as requests come, in one integer a second of the run.

Ours beside them: peak_output_tokens_per_s, the most tokens received within one second (the
same seconds), counted where each chunk's tokens are known: when every completed request
streamed one token a chunk (its completion tokens equal its chunks that carry one: not a
chat's role chunk nor a closing one); None where a request's chunks carried several (a
speculative server's: hunt 80, vLLM's one-a-chunk figure, 54, stood as the "peak output
tokens/s" below the mean of 823), and `several_tokens_a_chunk` counts those requests."""

from __future__ import annotations

import dataclasses
import math
import random
from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from wse_inference.demo.load_test import LoadTestConfig

__all__ = ["GOODPUT_METRICS", "ITL_SAMPLE", "METRICS", "RequestResult", "Tally", "percentile_key",
           "stats"]  # fmt: skip

# The inter-token gaps kept for the ITL percentiles: every gap of a run of up to 3,000
# requests of 32 tokens; past it a uniform sample of this many (a p99 off by ~0.03 percentile
# points), in 800 KB whatever the run's size.
ITL_SAMPLE = 100_000
METRICS = ("ttft", "tpot", "itl", "e2el")  # vLLM's names of the four, in its order
GOODPUT_METRICS = ("ttft", "tpot", "e2el")  # a request's own: vLLM's --goodput keys
_OURS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_s", "e2el": "e2e_s"}


@dataclasses.dataclass(frozen=True)
class RequestResult:
    """One request's figures (s from sending it): `itl_s` the gaps between its chunks."""

    ok: bool
    ttft_s: float = float("nan")
    e2e_s: float = float("nan")
    completion_tokens: int = 0
    error: str | None = None
    itl_s: tuple[float, ...] = ()
    prompt_tokens: int | None = None  # the server's usage.prompt_tokens, when it sent one
    start_s: float = 0.0  # when it was sent, s from the run's start
    # of each chunk with a choice (the first, then one a gap): whether it carries a token
    # (not a chat's role chunk nor a closing one); () when not told: each chunk one token
    carries: tuple[bool, ...] = ()

    @property
    def tpot_s(self) -> float:
        n = self.completion_tokens
        return (self.e2e_s - self.ttft_s) / (n - 1) if self.ok and n > 1 else float("nan")


def _finite(values: Iterable[float]) -> np.ndarray:
    """The finite `values` (a request without a TPOT has NaN), float64."""
    v = np.asarray(values, dtype=np.float64)
    return v[np.isfinite(v)]


def percentile_key(p: float, metric: str) -> str:
    """vLLM's key of percentile `p` of `metric`: p99_ttft_ms, p99.9_ttft_ms."""
    return f"p{int(p) if int(p) == p else p}_{metric}_ms"


def stats(values: Iterable[float], mean: float | None = None) -> dict[str, float | None]:
    """{"mean", "p50", "p90", "p99", "n"} of the finite `values` (`mean` when given: the
    mean of more values than these)."""
    v = _finite(values)
    if v.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "n": 0}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    m = float(v.mean()) if mean is None else mean
    return {"mean": m, "p50": float(p50), "p90": float(p90), "p99": float(p99), "n": int(v.size)}


class Tally:
    """A run's results as they come, in memory that grows by 24 bytes a request (its TTFT,
    TPOT and e2e) and 16 a second of the run (its chunks and flight), not with what the
    server sent: counts, at most `ITL_SAMPLE` gaps (a seeded uniform sample past that,
    Vitter's algorithm R) and the first five reasons."""

    def __init__(self) -> None:
        self.completed = self.failed = self.tokens = 0
        self.input_tokens: int | None = 0
        self.ttft_s, self.tpot_s, self.e2e_s = array("d"), array("d"), array("d")
        self.itl_s, self.itl_count, self.itl_sum = array("d"), 0, 0.0
        self.errors: dict[str, None] = {}
        self._rng = random.Random(0)
        # each second of the run: chunks received, and completed requests in flight (as
        # differences: +1 the second one is sent, -1 the second after its last chunk)
        self.chunks_at, self.flight_steps = array("q"), array("q")
        self.tokens_at = array("q")  # chunks that carry a token, each second
        self.several_a_chunk = 0  # completed requests whose chunks carried several tokens

    def add(self, r: RequestResult, prompt_len: int | None = None) -> None:
        if not r.ok:
            self.failed += 1
            if len(self.errors) < 5:  # each reason once: a miscount on every request is one
                self.errors[str(r.error)] = None
            return
        self.completed += 1
        self.tokens += r.completion_tokens
        if prompt_len is None:  # the fixed prompt: the server's count, as its usage gives it
            prompt_len = r.prompt_tokens
        if self.input_tokens is not None:  # None once a completed request's were not counted
            self.input_tokens = None if prompt_len is None else self.input_tokens + prompt_len
        self.ttft_s.append(r.ttft_s)
        self.tpot_s.append(r.tpot_s)
        self.e2e_s.append(r.e2e_s)
        self._per_second(r)
        for gap in r.itl_s:
            self.itl_count += 1
            self.itl_sum += gap
            if len(self.itl_s) < ITL_SAMPLE:
                self.itl_s.append(gap)
            elif (j := self._rng.randrange(self.itl_count)) < ITL_SAMPLE:
                self.itl_s[j] = gap

    def _per_second(self, r: RequestResult) -> None:
        """Count a completed request's chunks and flight in the seconds they fall in (vLLM's
        peak figures); one with no chunk with a choice has neither (vLLM fails it)."""
        if not math.isfinite(r.ttft_s):
            return
        t = r.start_s + r.ttft_s  # vLLM's sums, in its order
        times = [t]
        for gap in r.itl_s:
            t += gap
            times.append(t)
        first, last = int(r.start_s), int(r.start_s + r.e2e_s)
        _grow(self.chunks_at, int(times[-1]) + 1)
        _grow(self.tokens_at, int(times[-1]) + 1)
        _grow(self.flight_steps, last + 2)
        carries = r.carries or (True,) * len(times)
        for t, token in zip(times, carries, strict=True):
            self.chunks_at[int(t)] += 1
            self.tokens_at[int(t)] += token
        self.several_a_chunk += r.completion_tokens != sum(carries)
        self.flight_steps[first] += 1
        self.flight_steps[last + 1] -= 1

    def good_requests(self, slo_ms: dict[str, float]) -> int | None:
        """The completed requests that meet every SLO of `slo_ms` (module docstring); None
        without SLOs."""
        if not slo_ms:
            return None
        tpot = np.nan_to_num(np.asarray(self.tpot_s), nan=0.0)  # one token: 0, as vLLM's
        values = {"ttft": np.asarray(self.ttft_s), "tpot": tpot, "e2el": np.asarray(self.e2e_s)}
        good = np.ones(self.completed, dtype=bool)
        for name, ms in slo_ms.items():
            good &= ms / 1000 >= values[name]  # vLLM's test, in its units
        return int(good.sum())

    def summary(self, wall_s: float, cfg: LoadTestConfig, model: str, dataset=None) -> dict:
        """The JSON summary of a run (module docstring); `dataset`: the dataset's params. Ours
        first (times in s), then vLLM's `--save-result` keys (`vllm_keys`, times in ms)."""
        ours = self._ours(wall_s, cfg, model, dataset)
        return {**ours, **self.vllm_keys(ours, cfg)}

    def vllm_keys(self, ours: dict, cfg: LoadTestConfig) -> dict:
        """vLLM's `vllm bench serve --save-result` keys, names and units (its result_json,
        vllm/benchmarks/serve.py) from our summary `ours`: times in ms (x 1000), the median
        our p50, `std_*_ms` NumPy's population std (ddof 0, as vLLM's) of the same values
        (the ITL's over the ITL_SAMPLE gaps kept), None where ours is (vLLM writes 0 there),
        for the metrics of `cfg.percentile_metrics`, with its percentiles
        `cfg.metric_percentiles`. The keys both have (completed, failed, request_rate,
        burstiness) are ours, with vLLM's meaning: request_rate "inf" for all at once. Hunt
        71: a vLLM user's `d["mean_ttft_ms"]` was a KeyError, and ttft_s.mean 1000x its ms."""
        good, done = ours["good_requests"], self.completed > 0
        flight = np.cumsum(self.flight_steps)
        out = {
            "backend": cfg.backend,
            "endpoint_type": cfg.backend,  # vLLM writes both, the one value
            "model_id": ours["model"],
            "tokenizer_id": ours["model"],  # the server's: it counts the tokens (usage)
            "num_prompts": ours["num_requests"],
            "max_concurrency": ours["concurrency"],
            "duration": ours["wall_s"],
            "total_input_tokens": ours["input_tokens"],
            "total_output_tokens": ours["output_tokens"],
            "request_throughput": ours["request_throughput_per_s"],
            "output_throughput": ours["output_tokens_per_s"],
            "total_token_throughput": ours["total_tokens_per_s"],
            "request_goodput": None if good is None else good / ours["wall_s"],
            "max_output_tokens_per_s": float(max(self.chunks_at, default=0)) if done else None,
            "max_concurrent_requests": int(flight.max(initial=0)) if done else None,
        }
        values = {"ttft": self.ttft_s, "tpot": self.tpot_s, "itl": self.itl_s, "e2el": self.e2e_s}
        for name in (m for m in METRICS if m in cfg.percentile_metrics):  # in vLLM's order
            s, v = ours[_OURS[name]], _finite(values[name])
            out[f"mean_{name}_ms"] = _ms(s["mean"])
            out[f"median_{name}_ms"] = _ms(s["p50"])
            out[f"std_{name}_ms"] = float(v.std()) * 1000 if v.size else None
            qs = cfg.metric_percentiles
            for p, x in zip(qs, np.percentile(v, qs) if v.size else [None] * len(qs), strict=True):
                out[percentile_key(p, name)] = None if x is None else float(x) * 1000
        return out

    def _token_peak(self) -> int | None:
        """The most tokens in one second (module docstring); None with no completed request
        or where a request's chunks carried several tokens."""
        known = self.completed and not self.several_a_chunk
        return max(self.tokens_at, default=0) if known else None

    def _ours(self, wall_s: float, cfg: LoadTestConfig, model: str, dataset) -> dict:
        itl_mean = self.itl_sum / self.itl_count if self.itl_count else None
        n_in = self.input_tokens
        return {
            "url": cfg.url,
            "model": model,
            "num_requests": cfg.num_requests,
            "concurrency": cfg.concurrency,
            "request_rate": "inf" if cfg.request_rate is None else cfg.request_rate,
            "burstiness": cfg.burstiness,
            "seed": cfg.seed,
            "dataset": dataset or {"name": "prompt", "max_tokens": cfg.max_tokens},
            "ignore_eos": cfg.sends_ignore_eos,
            "endpoint": cfg.endpoint,
            "sampling": {k: v for k, v in cfg.sampling._asdict().items() if v is not None},
            "num_warmups": cfg.num_warmups,
            "goodput_slos": {f"{k}_ms": v for k, v in cfg.goodput_ms.items()} or None,
            "good_requests": self.good_requests(cfg.goodput_ms),
            "max_tokens": cfg.max_tokens if cfg.dataset is None else None,  # else the dataset's
            "completed": self.completed,
            "failed": self.failed,
            "errors": list(self.errors),
            "wall_s": wall_s,
            "request_throughput_per_s": self.completed / wall_s,
            "output_tokens": self.tokens,
            "output_tokens_per_s": self.tokens / wall_s,
            "input_tokens": n_in,
            "input_tokens_per_s": None if n_in is None else n_in / wall_s,
            "total_tokens_per_s": None if n_in is None else (n_in + self.tokens) / wall_s,
            "peak_output_tokens_per_s": self._token_peak(),
            "several_tokens_a_chunk": self.several_a_chunk,
            "ttft_s": stats(self.ttft_s),
            "tpot_s": stats(self.tpot_s),
            "itl_s": {**stats(self.itl_s, itl_mean), "n": self.itl_count},
            "e2e_s": stats(self.e2e_s),
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _grow(counts: array, size: int) -> None:
    """`counts` zero-extended to at least `size` entries."""
    if len(counts) < size:
        counts.frombytes(bytes(counts.itemsize * (size - len(counts))))
