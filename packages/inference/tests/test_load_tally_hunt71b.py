"""Hunt 71: `wse infer bench --out`'s JSON had none of vLLM's `vllm bench serve
--save-result` keys (`mean_ttft_ms`, `request_throughput`, ...: a vLLM user's script got a
KeyError), and ours hold seconds where vLLM's hold ms (ttft_s.mean 0.0123 for the printed
12.3 ms), with nothing saying so. Now vLLM's keys stand beside ours.

Oracles: vLLM's `calculate_metrics` (vllm/benchmarks/serve.py) written out here with NumPy
over the requests' recorded times (ttfts, tpots of requests of 2 or more tokens, every
inter-token gap, latencies; x 1000 to ms), and our own keys converted by hand.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from wse_inference.demo.load_tally import RequestResult, Tally
from wse_inference.demo.load_test import LoadTestConfig

# (ttft s, gaps s, completion tokens): one request of one token (no TPOT, no gap), one failed
REQUESTS = [(0.012, (0.004, 0.006, 0.005), 4), (0.030, (0.010,), 2), (0.021, (), 1),
            (0.017, (0.003, 0.009, 0.002, 0.004, 0.008), 6)]  # fmt: skip
WALL_S, PROMPT_TOKENS = 0.25, 7
TIMES = ("ttft", "tpot", "itl", "e2el")


def _summary() -> dict:
    tally = Tally()
    for ttft, gaps, n in REQUESTS:
        e2e = ttft + sum(gaps)
        tally.add(RequestResult(True, ttft, e2e, n, itl_s=gaps, prompt_tokens=PROMPT_TOKENS))
    tally.add(RequestResult(False, error="HTTP 500: boom"))
    cfg = LoadTestConfig(url="http://x", num_requests=5, concurrency=3, max_tokens=8)
    return json.loads(json.dumps(tally.summary(WALL_S, cfg, "m")))  # as saved


def _vllm_oracle() -> dict:
    """vLLM's figures from the same requests, as its calculate_metrics computes them."""
    ttfts = [t for t, _, _ in REQUESTS]
    e2els = [t + sum(g) for t, g, _ in REQUESTS]
    tpots = [(e - t) / (n - 1) for (t, _, n), e in zip(REQUESTS, e2els, strict=True) if n > 1]
    itls = [g for _, gaps, _ in REQUESTS for g in gaps]
    out_tokens, in_tokens = sum(n for _, _, n in REQUESTS), PROMPT_TOKENS * len(REQUESTS)
    want = {"completed": 4, "failed": 1, "total_input_tokens": in_tokens,
            "total_output_tokens": out_tokens, "duration": WALL_S,
            "request_throughput": 4 / WALL_S, "output_throughput": out_tokens / WALL_S,
            "total_token_throughput": (in_tokens + out_tokens) / WALL_S,
            "num_prompts": 5, "max_concurrency": 3, "burstiness": 1.0, "model_id": "m"}  # fmt: skip
    for name, values in zip(TIMES, (ttfts, tpots, itls, e2els), strict=True):
        want[f"mean_{name}_ms"] = np.mean(values) * 1000
        want[f"median_{name}_ms"] = np.median(values) * 1000
        want[f"std_{name}_ms"] = np.std(values) * 1000
        want[f"p99_{name}_ms"] = np.percentile(values, 99) * 1000
    return want


def test_the_summary_carries_vllms_keys_with_vllms_figures():
    got, want = _summary(), _vllm_oracle()
    missing = sorted(set(want) - set(got))
    assert missing == []  # was every vLLM key but completed, failed, burstiness
    for key, value in want.items():
        if isinstance(value, str):  # pytest 9.2 refuses approx of text (the model id)
            assert got[key] == value, key
        else:
            assert got[key] == pytest.approx(value, rel=1e-12, abs=0), key


def test_each_vllm_time_is_ours_in_ms_and_ours_are_kept():
    s = _summary()
    for name, ours in zip(TIMES, ("ttft_s", "tpot_s", "itl_s", "e2e_s"), strict=True):
        assert set(s[ours]) == {"mean", "p50", "p90", "p99", "n"}  # ours as before, in s
        assert s[f"mean_{name}_ms"] == s[ours]["mean"] * 1000
        assert s[f"median_{name}_ms"] == s[ours]["p50"] * 1000
        assert s[f"p99_{name}_ms"] == s[ours]["p99"] * 1000
    pairs = {"request_throughput": "request_throughput_per_s", "duration": "wall_s",
             "output_throughput": "output_tokens_per_s", "num_prompts": "num_requests",
             "total_token_throughput": "total_tokens_per_s", "model_id": "model",
             "total_input_tokens": "input_tokens", "total_output_tokens": "output_tokens",
             "max_concurrency": "concurrency"}  # fmt: skip
    for vllm, ours in pairs.items():
        assert s[vllm] == s[ours], vllm
    assert s["request_rate"] == "inf"  # all at once, as vLLM writes it (hunt 77: was null)


def test_a_figure_with_no_values_is_null_in_both_schemas():
    tally = Tally()
    tally.add(RequestResult(True, 0.01, 0.01, 1, prompt_tokens=3))  # one token: no TPOT, no ITL
    s = tally.summary(1.0, LoadTestConfig(url="http://x", num_requests=1), "m")
    for name in ("tpot", "itl"):
        assert [s[f"{k}_{name}_ms"] for k in ("mean", "median", "std", "p99")] == [None] * 4
    assert s["mean_ttft_ms"] == pytest.approx(10.0) and s["std_ttft_ms"] == 0.0
    json.dumps(s, allow_nan=False)  # strict JSON
