"""Prometheus metrics of a served model (vLLM's names, with the `wse_` prefix).

`ServeMetrics(model_name)` is a `SchedulerObserver`: the scheduler's engine thread calls it on
the first token, on later tokens and on finish. It owns its own `CollectorRegistry` (several
servers may live in one process, e.g. in tests); `render()` gives the text format for GET /metrics.

- histograms: `wse_time_to_first_token_seconds` (arrival to first token, queue included),
  `wse_inter_token_latency_seconds` (one observation per token: the gap between engine steps
  divided by the tokens that step produced), `wse_e2e_request_latency_seconds`,
  `wse_request_queue_time_seconds`;
- counters: `wse_request_success_total{finished_reason}`, `wse_prompt_tokens_total`,
  `wse_generation_tokens_total`, `wse_request_rejected_total{reason}`;
- gauges read at scrape time: `wse_num_requests_running`, `wse_num_requests_waiting`,
  `wse_num_slots`, `wse_spec_decode_draft_acceptance_rate` (when the engine reports
  speculative decoding: `spec_acceptance_rate` / `acceptance_rate`, or accepted / drafted
  from `spec_accepted_tokens` / `spec_draft_tokens` or `accepted` / `proposed`),
  `wse_mlp_zero_fraction{layer}` and `wse_mlp_zero_fraction_mean` (the fraction of exact
  zeros in each layer's MLP hidden activation over the prompts served, when the engine
  reports `mlp_zero_fraction_layer_<i>`: ReLU-like models), and every other engine counter
  from `engine.metrics()` as `wse_engine_<name>`.

Every series carries the label `model_name` (the served model's name), as vLLM labels each
of its metrics (hunt 75).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from wse_inference.serve.request import RequestHandle
from wse_inference.serve.scheduler import SchedulerStats

__all__ = ["ServeMetrics", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_ACCEPTANCE_KEYS = ("spec_acceptance_rate", "spec_decode_acceptance_rate", "acceptance_rate")
_ACCEPTANCE_PAIRS = (("spec_accepted_tokens", "spec_draft_tokens"), ("accepted", "proposed"))
_ZERO_LAYER = re.compile(r"mlp_zero_fraction_layer_(\d+)$")


def _acceptance_rate(m: dict[str, float]) -> float | None:
    """The engine's speculative acceptance rate, given directly or as accepted / drafted."""
    rate = next((m[k] for k in _ACCEPTANCE_KEYS if k in m), None)
    if rate is None:
        for acc, drafted in _ACCEPTANCE_PAIRS:
            if m.get(drafted):
                return m.get(acc, 0.0) / m[drafted]
    return rate


class _StatsCollector(Collector):
    def __init__(self, stats_fn: Callable[[], SchedulerStats], model_name: str) -> None:
        self._stats_fn = stats_fn
        self._model = model_name

    def _gauge(self, name: str, documentation: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, documentation, labels=["model_name"])
        g.add_metric([self._model], value)
        return g

    def collect(self) -> Iterator[GaugeMetricFamily]:
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
    """The observer of one scheduler; see the module docstring."""

    def __init__(self, model_name: str = "") -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry()
        r, label = self.registry, ["model_name"]

        def histogram(name: str, documentation: str) -> Any:
            h = Histogram(name, documentation, label, buckets=_LATENCY_BUCKETS_S, registry=r)
            return h.labels(model_name=model_name)

        self.ttft = histogram("wse_time_to_first_token_seconds", "Time to first token.")
        self.itl = histogram("wse_inter_token_latency_seconds", "Time per output token.")
        self.e2e = histogram("wse_e2e_request_latency_seconds", "Arrival to last token.")
        self.queue = histogram("wse_request_queue_time_seconds", "Arrival to prefill.")
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

    def on_first_token(self, handle: RequestHandle) -> None:
        t = handle.timing
        if t.first_token_s is not None:
            self.ttft.observe(t.first_token_s - t.arrival_s)

    def on_tokens(self, handle: RequestHandle, n: int, gap_s: float) -> None:
        for _ in range(n):
            self.itl.observe(gap_s / n)

    def on_finish(self, handle: RequestHandle, reason: str) -> None:
        t = handle.timing
        self.success.labels(model_name=self.model_name, finished_reason=reason).inc()
        self.prompt_tokens.inc(len(handle.prompt_ids) if t.prefill_start_s is not None else 0)
        self.generation_tokens.inc(handle.completion_tokens)
        if t.end_s is not None:
            self.e2e.observe(t.end_s - t.arrival_s)
        if t.prefill_start_s is not None:
            self.queue.observe(t.prefill_start_s - t.arrival_s)

    def reject(self, reason: str) -> None:
        self.rejected.labels(model_name=self.model_name, reason=reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
