"""Prometheus metrics of a served model (vLLM's names, with the `wse_` prefix).

`ServeMetrics(model_name, max_model_len=...)` is a `SchedulerObserver`: the scheduler's engine
thread calls it on the first token, on later tokens, on finish and after each engine
iteration; the front ends call `on_admitted(n)` for each request admitted (its n choices). It
owns its own `CollectorRegistry` (several servers may live in one process, e.g. in tests);
`render()` gives the text format for GET /metrics. Every histogram has vLLM's bucket edges
(vllm/v1/metrics/loggers.py) and is observed as vLLM observes it (vllm/v1/metrics/stats.py):

- histograms of seconds: `wse_time_to_first_token_seconds` (arrival to first token, queue
  included), `wse_inter_token_latency_seconds` (one observation per request per engine step
  that gave it tokens after its first: the whole gap since its previous tokens, however many
  tokens the step holds, as vLLM v1's `IterationStats.update_from_output`; hunt 78: a
  speculative step of k tokens was k observations of gap / k), per finished request
  `wse_request_time_per_output_token_seconds` (vLLM's TPOT: its decode time over its tokens
  after the first; 0 for one token), `wse_e2e_request_latency_seconds` (arrival to end),
  `wse_request_queue_time_seconds` (arrival to prefill), `wse_request_prefill_time_seconds`
  (prefill to first token), `wse_request_decode_time_seconds` (first token to last) and
  `wse_request_inference_time_seconds` (prefill to last token);
- histograms of counts: per finished request `wse_request_prompt_tokens`,
  `wse_request_generation_tokens` and `wse_request_params_max_tokens`; per admitted request
  `wse_request_params_n`; per engine iteration `wse_iteration_tokens_total` (prompt tokens
  prefilled plus tokens made, the warm-up's iterations not counted);
- counters: `wse_request_success_total{finished_reason}`, `wse_prompt_tokens_total`,
  `wse_generation_tokens_total`, `wse_request_rejected_total{reason}`;
- gauges read at scrape time: `wse_num_requests_running`, `wse_num_requests_waiting`,
  `wse_num_slots`, `wse_spec_decode_draft_acceptance_rate` (when the engine reports
  speculative decoding: `spec_acceptance_rate` / `acceptance_rate`, or accepted / drafted
  from `spec_accepted_tokens` / `spec_draft_tokens` or `accepted` / `proposed`),
  `wse_mlp_zero_fraction{layer}` and `wse_mlp_zero_fraction_mean` (the fraction of exact
  zeros in each layer's MLP hidden activation over the prompts served, when the engine
  reports `mlp_zero_fraction_layer_<i>`: ReLU-like models), and every other engine counter
  from `engine.metrics()` as `wse_engine_<name>`;
- counters read at scrape time, vLLM v1's speculative ones (vllm/v1/spec_decode/metrics.py,
  `SpecDecodingProm`) when the engine reports speculation (`spec_drafts`, or drafted tokens):
  `wse_spec_decode_num_drafts_total` (rounds, from `spec_drafts`),
  `wse_spec_decode_num_draft_tokens_total` (`spec_draft_tokens`),
  `wse_spec_decode_num_accepted_tokens_total` (`spec_accepted_tokens`) and
  `wse_spec_decode_num_accepted_tokens_per_pos_total{position}` (`spec_accepted_tokens_pos_<i>`,
  position 0-based as vLLM's), each where the engine reports its source; the drafted and
  accepted tokens stay `wse_engine_*` gauges too. The engine's counters start after the
  warm-up (`serve.warmup` resets them), so the counters only grow while the port is open.

Not served, since nothing here measures them truthfully (`NOT_SERVED`): vLLM's
`kv_cache_usage_perc` (each slot's KV cache is reserved whole for the context at start, not
paged), `num_preemptions_total` (a request is never preempted), `prefix_cache_queries` /
`prefix_cache_hits` (no prefix cache), `request_max_num_generation_tokens`,
`time_per_prefill_token_request_seconds`, `cache_config_info`, `lora_requests_info` and the
deprecated `time_per_output_token_seconds` (vLLM's old name of the inter-token latency).

Every series carries the label `model_name` (the served model's name), as vLLM labels each
of its metrics (hunt 75). Hunt 77: the per-request histograms above were missing, and the
inter-token latency had the first token's bucket edges and the HELP "Time per output token.".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from wse_inference.serve.request import RequestHandle
from wse_inference.serve.scheduler import SchedulerStats

__all__ = ["ServeMetrics", "CONTENT_TYPE", "NOT_SERVED", "one_two_five_buckets"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# vLLM's bucket edges (vllm/v1/metrics/loggers.py)
_TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                   5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
_TOKEN_GAP_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                        5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
_REQUEST_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                      60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
_ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_N_BUCKETS = (1, 2, 5, 10, 20)
NOT_SERVED = (
    "kv_cache_usage_perc",
    "num_preemptions_total",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "request_max_num_generation_tokens",
    "time_per_prefill_token_request_seconds",
    "cache_config_info",
    "lora_requests_info",
    "time_per_output_token_seconds",
)
_ACCEPTANCE_KEYS = ("spec_acceptance_rate", "spec_decode_acceptance_rate", "acceptance_rate")
_ACCEPTANCE_PAIRS = (("spec_accepted_tokens", "spec_draft_tokens"), ("accepted", "proposed"))
_ZERO_LAYER = re.compile(r"mlp_zero_fraction_layer_(\d+)$")
_SPEC_POSITION = re.compile(r"spec_accepted_tokens_pos_(\d+)$")
# vLLM v1's speculative counters (SpecDecodingProm): name -> (engine key, HELP, popped)
_SPEC_COUNTERS = {
    "wse_spec_decode_num_drafts": ("spec_drafts", "Number of spec decoding drafts.", True),
    "wse_spec_decode_num_draft_tokens": ("spec_draft_tokens", "Number of draft tokens.", False),
    "wse_spec_decode_num_accepted_tokens": (
        "spec_accepted_tokens", "Number of accepted tokens.", False),
}  # fmt: skip


def one_two_five_buckets(max_value: int) -> tuple[int, ...]:
    """vLLM's `build_1_2_5_buckets`: 1, 2, 5, 10, 20, 50, ... up to `max_value`."""
    edges = [m * 10**e for e in range(len(str(max(1, max_value)))) for m in (1, 2, 5)]
    return tuple(x for x in edges if x <= max_value)


def _acceptance_rate(m: dict[str, float]) -> float | None:
    """The engine's speculative acceptance rate, given directly or as accepted / drafted."""
    rate = next((m[k] for k in _ACCEPTANCE_KEYS if k in m), None)
    if rate is None:
        for acc, drafted in _ACCEPTANCE_PAIRS:
            if m.get(drafted):
                return m.get(acc, 0.0) / m[drafted]
    return rate


def _spec_counters(m: dict[str, float], model: str) -> Iterator[CounterMetricFamily]:
    """vLLM's speculative counters from the engine's metrics `m` (the module docstring);
    the keys only they show (rounds, per position) are popped from `m`."""
    positions = {int(k[1]): k.string for k in map(_SPEC_POSITION.match, m) if k}
    if not ("spec_drafts" in m or m.get("spec_draft_tokens")):  # no speculation reported
        return
    for name, (key, documentation, popped) in _SPEC_COUNTERS.items():
        if key in m:
            c = CounterMetricFamily(name, documentation, labels=["model_name"])
            c.add_metric([model], float(m.pop(key) if popped else m[key]))
            yield c
    if positions:
        c = CounterMetricFamily(
            "wse_spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            labels=["model_name", "position"],
        )
        for pos in sorted(positions):
            c.add_metric([model, str(pos)], float(m.pop(positions[pos])))
        yield c


class _StatsCollector(Collector):
    def __init__(self, stats_fn: Callable[[], SchedulerStats], model_name: str) -> None:
        self._stats_fn = stats_fn
        self._model = model_name

    def _gauge(self, name: str, documentation: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, documentation, labels=["model_name"])
        g.add_metric([self._model], value)
        return g

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        s = self._stats_fn()
        yield self._gauge("wse_num_requests_running", "Requests in a decode slot.", s.running)
        yield self._gauge("wse_num_requests_waiting", "Requests in the admission queue.", s.waiting)
        yield self._gauge("wse_num_slots", "Decode slots of the engine.", s.max_slots)
        rate = _acceptance_rate(s.engine_metrics)
        if rate is not None:
            yield self._gauge(
                "wse_spec_decode_draft_acceptance_rate",
                "Accepted / drafted speculative tokens.",
                rate,
            )
        m = dict(s.engine_metrics)
        yield from _spec_counters(m, self._model)
        layers = {k: v for k, v in m.items() if _ZERO_LAYER.match(k)}
        if layers:
            g = GaugeMetricFamily(
                "wse_mlp_zero_fraction",
                "Exact zeros of the MLP hidden activation per layer (prompts served).",
                labels=["model_name", "layer"],
            )
            for k in sorted(layers, key=lambda k: int(_ZERO_LAYER.match(k)[1])):
                g.add_metric([self._model, _ZERO_LAYER.match(k)[1]], float(m.pop(k)))
            yield g
            yield self._gauge(
                "wse_mlp_zero_fraction_mean",
                "Mean over layers of wse_mlp_zero_fraction.",
                float(m.pop("mlp_zero_fraction_mean", sum(layers.values()) / len(layers))),
            )
        for name, value in sorted(m.items()):
            clean = re.sub(r"[^a-zA-Z0-9_]", "_", name)
            yield self._gauge(f"wse_engine_{clean}", f"Engine counter {name!r}.", float(value))


class ServeMetrics:
    """The observer of one scheduler; see the module docstring. `max_model_len`: the context
    served, the top of the token-count histograms' edges (vLLM's)."""

    def __init__(self, model_name: str = "", *, max_model_len: int = 2048) -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry()
        r, label = self.registry, ["model_name"]

        def histogram(name: str, documentation: str, buckets: tuple[float, ...]) -> Any:
            h = Histogram(name, documentation, label, buckets=buckets, registry=r)
            return h.labels(model_name=model_name)

        def request_s(name: str, phase: str) -> Any:
            return histogram(
                name, f"Histogram of time spent in {phase} phase for request.", _REQUEST_BUCKETS_S
            )

        tokens = one_two_five_buckets(max_model_len)
        self.ttft = histogram(
            "wse_time_to_first_token_seconds", "Time to first token.", _TTFT_BUCKETS_S
        )
        self.itl = histogram(
            "wse_inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            _TOKEN_GAP_BUCKETS_S,
        )
        self.tpot = histogram(
            "wse_request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            _TOKEN_GAP_BUCKETS_S,
        )
        self.e2e = histogram(
            "wse_e2e_request_latency_seconds", "Arrival to last token.", _REQUEST_BUCKETS_S
        )
        self.queue = request_s("wse_request_queue_time_seconds", "WAITING")
        self.prefill = request_s("wse_request_prefill_time_seconds", "PREFILL")
        self.decode = request_s("wse_request_decode_time_seconds", "DECODE")
        self.inference = request_s("wse_request_inference_time_seconds", "RUNNING")
        self.prompt_sizes = histogram(
            "wse_request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.generation_sizes = histogram(
            "wse_request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.max_tokens = histogram(
            "wse_request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            tokens,
        )
        self.n = histogram(
            "wse_request_params_n", "Histogram of the n request parameter.", _N_BUCKETS
        )
        self.iteration_tokens = histogram(
            "wse_iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            _ITERATION_BUCKETS,
        )
        self.success = Counter(
            "wse_request_success", "Finished requests.", [*label, "finished_reason"], registry=r
        )
        self.prompt_tokens = Counter(
            "wse_prompt_tokens", "Prefilled tokens.", label, registry=r
        ).labels(model_name=model_name)
        self.generation_tokens = Counter(
            "wse_generation_tokens", "Generated tokens.", label, registry=r
        ).labels(model_name=model_name)
        self.rejected = Counter(
            "wse_request_rejected", "Refused requests.", [*label, "reason"], registry=r
        )

    def bind(self, stats_fn: Callable[[], SchedulerStats]) -> ServeMetrics:
        """Read running / waiting / engine counters from `stats_fn` at scrape time."""
        self.registry.register(_StatsCollector(stats_fn, self.model_name))
        return self

    def on_admitted(self, n: int) -> None:
        """A request admitted with `n` choices (vLLM's request_params_n)."""
        self.n.observe(n)

    def on_first_token(self, handle: RequestHandle) -> None:
        t = handle.timing
        if t.first_token_s is not None:
            self.ttft.observe(t.first_token_s - t.arrival_s)

    def on_tokens(self, handle: RequestHandle, n: int, gap_s: float) -> None:
        """A step's `n` tokens of a request after its first, `gap_s` after its previous ones:
        one inter-token latency of the whole gap, whatever n (vLLM's)."""
        self.itl.observe(gap_s)

    def on_iteration(self, tokens: int) -> None:
        """One engine iteration's prompt tokens prefilled plus tokens made."""
        self.iteration_tokens.observe(tokens)

    def on_finish(self, handle: RequestHandle, reason: str) -> None:
        t = handle.timing
        self.success.labels(model_name=self.model_name, finished_reason=reason).inc()
        self.prompt_tokens.inc(len(handle.prompt_ids) if t.prefill_start_s is not None else 0)
        self.generation_tokens.inc(handle.completion_tokens)
        self.max_tokens.observe(handle.sampling.max_tokens)
        if t.end_s is not None:
            self.e2e.observe(t.end_s - t.arrival_s)
        if t.prefill_start_s is None:  # never left the queue
            return
        self.queue.observe(t.prefill_start_s - t.arrival_s)
        self.prompt_sizes.observe(len(handle.prompt_ids))
        self.generation_sizes.observe(handle.completion_tokens)
        if t.first_token_s is None or t.last_token_s is None:  # its prefill failed
            return
        decode_s = t.last_token_s - t.first_token_s
        self.prefill.observe(t.first_token_s - t.prefill_start_s)
        self.decode.observe(decode_s)
        self.inference.observe(t.last_token_s - t.prefill_start_s)
        after_first = handle.completion_tokens - 1  # vLLM's: the prefill's token not counted
        self.tpot.observe(decode_s / after_first if after_first > 0 else 0.0)

    def reject(self, reason: str) -> None:
        self.rejected.labels(model_name=self.model_name, reason=reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
