"""Hunt 77: a vLLM user's `vllm bench serve` figures that `wse infer bench`'s summary lacked:
goodput (`--goodput ttft:500 tpot:50`), percentiles other than p99 (`--metric-percentiles`,
`--percentile-metrics`), the peak output tokens/s and concurrent requests, and a chat
endpoint's stream (vLLM's `--backend openai-chat`).

Oracles: vLLM's `calculate_metrics` (vllm/benchmarks/serve.py) written out here in plain
Python over requests whose times the test sets (a request is good when every SLO / 1000 >= its
figure, a one-token request's TPOT 0; percentiles NumPy's; tokens and flight bucketed in whole
seconds from the first completed request's send), and vLLM's chat client
(benchmarks/lib/endpoint_request_func.py: the first chunk with a choice is the TTFT, its
`delta.content` the text).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from wse_inference.demo import load_tally
from wse_inference.demo.bench_data import BenchRequest
from wse_inference.demo.bench_endpoints import Sampling, read_chunk, request_body
from wse_inference.demo.load_tally import RequestResult, Tally
from wse_inference.demo.load_test import LoadTestConfig

# (sent s from the run's start, ttft s, gaps s, completion tokens): the first sent at 0.0, as
# in a run; one of one token (TPOT 0 for goodput), one exactly at the TTFT SLO
REQUESTS = [(0.0, 0.3, (0.2, 0.3, 0.4), 4), (0.4, 0.5, (0.9, 0.05), 3), (1.2, 0.25, (), 1),
            (1.7, 0.125, (0.125, 0.25, 0.5, 0.5, 1.0), 6), (2.05, 0.6, (0.1,), 2)]  # fmt: skip
WALL_S = 4.0


def _cfg(**kw) -> LoadTestConfig:
    return LoadTestConfig(url="http://x", num_requests=len(REQUESTS) + 1, max_tokens=8, **kw)


def _summary(**kw) -> dict:
    tally = Tally()
    for start, ttft, gaps, n in REQUESTS:
        e2e = ttft + sum(gaps)
        tally.add(RequestResult(True, ttft, e2e, n, None, gaps, 5, start))
    tally.add(RequestResult(False, error="HTTP 500: boom"))
    return json.loads(json.dumps(tally.summary(WALL_S, _cfg(**kw), "m")))  # as saved


def _vllm_goodput(slo_ms: dict[str, float]) -> float:
    """vLLM's request_goodput, as its calculate_metrics counts good requests."""
    good = 0
    for _, ttft, gaps, n in REQUESTS:
        e2el = ttft + sum(gaps)
        tpot = (e2el - ttft) / (n - 1) if n > 1 else 0  # "we regard tpot as 0 for goodput"
        metric = {"ttft": ttft, "tpot": tpot, "e2el": e2el}
        good += all(slo / 1000 >= metric[k] for k, slo in slo_ms.items())
    return good / WALL_S


@pytest.mark.parametrize("slo_ms", [{"ttft": 500, "tpot": 500}, {"tpot": 300}, {"ttft": 300},
                                    {"e2el": 1000, "ttft": 600}, {"ttft": 0}])  # fmt: skip
def test_goodput_is_vllms(slo_ms):
    s = _summary(goodput_ms=slo_ms)
    assert s["request_goodput"] == pytest.approx(_vllm_goodput(slo_ms), rel=1e-12, abs=0)
    assert s["good_requests"] == round(_vllm_goodput(slo_ms) * WALL_S)
    assert s["goodput_slos"] == {f"{k}_ms": v for k, v in slo_ms.items()}


def test_goodput_is_null_without_slos_as_vllm_writes_it():
    s = _summary()
    assert "request_goodput" in s and s["request_goodput"] is None
    assert s["good_requests"] is None and s["goodput_slos"] is None


def test_the_boundary_and_a_one_token_request_count_as_vllms():
    # the second request's TTFT is 0.5 s exactly: good at ttft:500 (>=), not at 499.9; the
    # one-token request (TPOT 0) is good at any TPOT SLO
    assert _summary(goodput_ms={"ttft": 500})["good_requests"] == 4  # the last: 0.6 s
    assert _summary(goodput_ms={"ttft": 499.9})["good_requests"] == 3
    assert _summary(goodput_ms={"tpot": 0})["good_requests"] == 1


def _values() -> dict[str, list[float]]:
    e2els = [t + sum(g) for _, t, g, _ in REQUESTS]
    pairs = zip(REQUESTS, e2els, strict=True)
    return {
        "ttft": [t for _, t, _, _ in REQUESTS],
        "tpot": [(e - t) / (n - 1) for (_, t, _, n), e in pairs if n > 1],
        "itl": [g for _, _, gaps, _ in REQUESTS for g in gaps],
        "e2el": e2els,
    }


def test_metric_percentiles_are_vllms_keys_and_numpys_values():
    ps = (50.0, 90.0, 99.9, 25.5)
    s = _summary(metric_percentiles=ps, percentile_metrics=("ttft", "itl"))
    for name in ("ttft", "itl"):
        v = _values()[name]
        for p, word in zip(ps, ("50", "90", "99.9", "25.5"), strict=True):
            want = np.percentile(v, p) * 1000
            assert s[f"p{word}_{name}_ms"] == pytest.approx(want, rel=1e-12), (name, p)
        assert s[f"median_{name}_ms"] == pytest.approx(np.median(v) * 1000, rel=1e-12)
        assert s[f"std_{name}_ms"] == pytest.approx(np.std(v) * 1000, rel=1e-12)
    for name in ("tpot", "e2el"):  # not selected: none of vLLM's keys (ours stay)
        assert not [k for k in s if k.endswith(f"_{name}_ms")], name
    assert set(s["tpot_s"]) == {"mean", "p50", "p90", "p99", "n"}
    assert "p99_ttft_ms" not in s  # 99 was not asked


def test_by_default_every_metric_has_its_p99():
    s = _summary()
    for name, v in _values().items():
        assert s[f"p99_{name}_ms"] == pytest.approx(np.percentile(v, 99) * 1000, rel=1e-12)


def _vllm_peaks() -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s and max_concurrent_requests, its loops written out."""
    starts = [s for s, _, _, _ in REQUESTS]
    ends = [s + t + sum(g) for s, t, g, _ in REQUESTS]
    m = min(starts)
    seconds = int(math.ceil(max(ends) - m)) + 1
    tokens, flight = np.zeros(seconds), np.zeros(seconds)
    for (start, ttft, gaps, _), end in zip(REQUESTS, ends, strict=True):
        times = [start + ttft]
        for gap in gaps:
            times.append(times[-1] + gap)
        for t in times:
            tokens[int(t - m)] += 1
        for second in range(int(start - m), int(end - m) + 1):
            flight[second] += 1
    return float(tokens.max()), int(flight.max())


def test_the_peaks_are_vllms():
    s = _summary()
    want_tokens, want_flight = _vllm_peaks()
    # by hand: second 1 holds 6 chunks (1.2; 1.8, 1.85; 1.45; 1.825, 1.95) and 4 requests
    assert (want_tokens, want_flight) == (6.0, 4)
    assert s["max_output_tokens_per_s"] == want_tokens
    assert s["max_concurrent_requests"] == want_flight


def test_the_loaders_lists_agree_with_the_clis_copies():
    from wse_cli.commands import infer_bench_data, infer_bench_report
    from wse_inference.demo.bench_endpoints import BACKENDS

    assert infer_bench_data.BACKENDS == BACKENDS
    assert infer_bench_report.METRICS == load_tally.METRICS
    assert infer_bench_report.GOODPUT_METRICS == load_tally.GOODPUT_METRICS


# --- the chat endpoint ---------------------------------------------------------------------
def test_a_chat_body_is_vllms():
    req = BenchRequest("hi", None, 7)
    body = request_body("openai-chat", "m", req, Sampling(), ignore_eos=False)
    assert body == {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi"}]}], "max_completion_tokens": 7, "temperature": 0.0,
        "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    plain = request_body("openai", "m", req, Sampling(0.7, 0.9, 5), ignore_eos=True)
    assert (plain["prompt"], plain["max_tokens"], plain["temperature"]) == ("hi", 7, 0.7)
    assert (plain["top_p"], plain["top_k"], plain["ignore_eos"]) == (0.9, 5, True)
    with pytest.raises(ValueError, match="token ids"):
        request_body("openai-chat", "m", BenchRequest([1, 2], 2, 7), Sampling(), False)


@pytest.mark.parametrize(
    ("data", "text", "role_only"),
    [('{"choices": [{"delta": {"role": "assistant", "content": ""}}]}', "", True),
     ('{"choices": [{"delta": {"role": "assistant", "content": "Hi"}}]}', "Hi", False),
     ('{"choices": [{"delta": {"content": " there"}}]}', " there", False),
     ('{"choices": [{"delta": {}, "finish_reason": "stop"}]}', "", False),
     ('{"choices": [{"delta": {}}]}', "", False)],  # a token not yet text (vLLM streams "")
)  # fmt: skip
def test_a_chat_chunks_text_is_its_deltas_content(data, text, role_only):
    chunk, role = read_chunk("openai-chat", data)
    assert (chunk.choice, chunk.text, role) == (True, text, role_only)


def test_a_chat_chunk_that_is_not_openais_fails_its_request():
    with pytest.raises(ValueError, match="not OpenAI chat's"):
        read_chunk("openai-chat", '{"choices": [{"delta": {"content": 5}}]}')
    with pytest.raises(ValueError, match="boom"):
        read_chunk("openai-chat", '{"error": {"message": "boom"}}')
