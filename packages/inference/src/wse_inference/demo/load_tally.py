"""A load test's results as they come (`load_test`'s `RequestResult` of each request, the
`Tally` of a run and its JSON summary; the figures and their definitions: `load_test`'s module
docstring). Apart from the client so that each stays small."""

from __future__ import annotations

import dataclasses
import random
from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from wse_inference.demo.load_test import LoadTestConfig

__all__ = ["ITL_SAMPLE", "RequestResult", "Tally", "stats"]

# The inter-token gaps kept for the ITL percentiles: every gap of a run of up to 3,000
# requests of 32 tokens; past it a uniform sample of this many (a p99 off by ~0.03 percentile
# points), in 800 KB whatever the run's size.
ITL_SAMPLE = 100_000


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

    @property
    def tpot_s(self) -> float:
        n = self.completion_tokens
        return (self.e2e_s - self.ttft_s) / (n - 1) if self.ok and n > 1 else float("nan")


def _finite(values: Iterable[float]) -> np.ndarray:
    """The finite `values` (a request without a TPOT has NaN), float64."""
    v = np.asarray(values, dtype=np.float64)
    return v[np.isfinite(v)]


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
    TPOT and e2e), not with what the server sent: counts, at most `ITL_SAMPLE` gaps (a
    seeded uniform sample past that, Vitter's algorithm R) and the first five reasons."""

    def __init__(self) -> None:
        self.completed = self.failed = self.tokens = 0
        self.input_tokens: int | None = 0
        self.ttft_s, self.tpot_s, self.e2e_s = array("d"), array("d"), array("d")
        self.itl_s, self.itl_count, self.itl_sum = array("d"), 0, 0.0
        self.errors: dict[str, None] = {}
        self._rng = random.Random(0)

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
        for gap in r.itl_s:
            self.itl_count += 1
            self.itl_sum += gap
            if len(self.itl_s) < ITL_SAMPLE:
                self.itl_s.append(gap)
            elif (j := self._rng.randrange(self.itl_count)) < ITL_SAMPLE:
                self.itl_s[j] = gap

    def summary(self, wall_s: float, cfg: LoadTestConfig, model: str, dataset=None) -> dict:
        """The JSON summary of a run (module docstring); `dataset`: the dataset's params. Ours
        first (times in s), then vLLM's `--save-result` keys (`vllm_keys`, times in ms)."""
        ours = self._ours(wall_s, cfg, model, dataset)
        return {**ours, **self.vllm_keys(ours)}

    def vllm_keys(self, ours: dict) -> dict:
        """vLLM's `vllm bench serve --save-result` keys, names and units (its result_json,
        vllm/benchmarks/serve.py) from our summary `ours`: times in ms (x 1000), the median
        our p50, `std_*_ms` NumPy's population std (ddof 0, as vLLM's) of the same values
        (the ITL's over the ITL_SAMPLE gaps kept), None where ours is (vLLM writes 0 there).
        The keys both have (completed, failed, request_rate, burstiness) are ours: one
        meaning, but request_rate null where vLLM writes "inf" (all at once). Hunt 71: a
        vLLM user's `d["mean_ttft_ms"]` was a KeyError, and ttft_s.mean 1000x its ms."""
        out = {
            "model_id": ours["model"],
            "num_prompts": ours["num_requests"],
            "max_concurrency": ours["concurrency"],
            "duration": ours["wall_s"],
            "total_input_tokens": ours["input_tokens"],
            "total_output_tokens": ours["output_tokens"],
            "request_throughput": ours["request_throughput_per_s"],
            "output_throughput": ours["output_tokens_per_s"],
            "total_token_throughput": ours["total_tokens_per_s"],
        }
        times = (("ttft", "ttft_s", self.ttft_s), ("tpot", "tpot_s", self.tpot_s),
                 ("itl", "itl_s", self.itl_s), ("e2el", "e2e_s", self.e2e_s))  # fmt: skip
        for name, key, values in times:
            s, v = ours[key], _finite(values)
            out[f"mean_{name}_ms"] = _ms(s["mean"])
            out[f"median_{name}_ms"] = _ms(s["p50"])
            out[f"std_{name}_ms"] = float(v.std()) * 1000 if v.size else None
            out[f"p99_{name}_ms"] = _ms(s["p99"])
        return out

    def _ours(self, wall_s: float, cfg: LoadTestConfig, model: str, dataset) -> dict:
        itl_mean = self.itl_sum / self.itl_count if self.itl_count else None
        n_in = self.input_tokens
        return {
            "url": cfg.url,
            "model": model,
            "num_requests": cfg.num_requests,
            "concurrency": cfg.concurrency,
            "request_rate": cfg.request_rate,  # None: all at once
            "burstiness": cfg.burstiness,
            "seed": cfg.seed,
            "dataset": dataset or {"name": "prompt", "max_tokens": cfg.max_tokens},
            "ignore_eos": cfg.sends_ignore_eos,
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
            "ttft_s": stats(self.ttft_s),
            "tpot_s": stats(self.tpot_s),
            "itl_s": {**stats(self.itl_s, itl_mean), "n": self.itl_count},
            "e2e_s": stats(self.e2e_s),
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000
