"""`wse infer bench --request-rate R --burstiness B --seed S`, as vLLM's bench sends: n gaps
drawn from a gamma distribution of mean 1 / R and shape B (1: Poisson), seeded as vLLM's
`np.random.seed(S)`, summed and rescaled so the last request goes at n / R s (vLLM's
`get_request`, vllm/benchmarks/serve.py); without a rate every request is sent at once.
Oracles: the gamma distribution's coefficient of variation (1 / sqrt(B)), vLLM's schedule
recomputed here one scalar draw at a time (hunt 82: not rescaled, -n 64 at 4 req/s ended
between 11.8 and 20.0 s over seeds 0..9, vLLM's at 16.0 for every seed), the run's wall time
against n / R, and the CLI's one-line refusal."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import refused_in_one_line
from wse_inference.demo.load_test import LoadTestConfig, arrival_times, run_load_test
from wse_inference.testing import fake_openai_server

pytestmark = pytest.mark.timeout(60)
MODELS = b'{"object": "list", "data": [{"id": "m"}]}'
STREAM = (b'data: {"choices": [{"text": "a", "finish_reason": "length"}]}\n\n'
          b'data: {"choices": [], "usage": {"completion_tokens": 1}}\n\n'
          b"data: [DONE]\n\n")  # fmt: skip


def _gaps(rate, burstiness, seed, n=20_000):
    return np.diff(arrival_times(rate, burstiness, seed, n), prepend=0.0)  # the first's too


def _vllm_schedule(rate, burstiness, seed, n):
    """vLLM's `get_request`: a gamma draw a request from NumPy's global generator after
    `np.random.seed(seed)` (a RandomState of that seed, drawn one scalar at a time), summed
    in order, then scaled so that the last is n / rate."""
    rs, theta, delays = np.random.RandomState(seed), 1.0 / (rate * burstiness), []
    for _ in range(n):
        delays.append(rs.gamma(shape=burstiness, scale=theta))
    for i in range(1, n):
        delays[i] += delays[i - 1]
    return [d * (n / rate) / delays[-1] for d in delays]


@pytest.mark.parametrize("burstiness", [1.0, 4.0, 0.25])
def test_the_gaps_are_gamma_of_mean_one_over_the_rate(burstiness):
    gaps = _gaps(10.0, burstiness, seed=3)
    assert gaps.min() >= 0 and gaps.mean() == pytest.approx(0.1, rel=1e-12)  # n / R exactly
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.08)
    assert np.array_equal(gaps, _gaps(10.0, burstiness, seed=3))  # seeded
    assert not np.array_equal(gaps, _gaps(10.0, burstiness, seed=4))
    assert np.array_equal(arrival_times(None, 1.0, 0, 5), [0.0] * 5)  # all at once


@pytest.mark.parametrize("rate, burstiness, n", [(4.0, 1.0, 64), (1.0, 1.0, 16), (2.5, 0.3, 33),
                                                  (50.0, 7.0, 5), (1.0, 1.0, 1)])  # fmt: skip
def test_the_schedule_is_vllms_and_ends_at_n_over_the_rate_whatever_the_seed(rate, burstiness, n):
    for seed in range(10):
        times = arrival_times(rate, burstiness, seed, n)
        np.testing.assert_allclose(times, _vllm_schedule(rate, burstiness, seed, n), rtol=1e-12)
        assert times[-1] == pytest.approx(n / rate, rel=1e-12)  # before: 11.8..20.0 s for 16
        assert times[0] > 0 and np.all(np.diff(times) >= 0)  # the first waits its gap too


def test_a_seed_past_numpys_range_draws_its_own_schedule():
    """vLLM's np.random.seed refuses a seed of 2**32 or more; --seed takes int64's range."""
    big = arrival_times(2.0, 1.0, 2**63 - 1, 8)
    assert big[-1] == pytest.approx(4.0)
    assert np.array_equal(big, arrival_times(2.0, 1.0, 2**63 - 1, 8))
    assert not np.array_equal(big, arrival_times(2.0, 1.0, 2**32, 8))


def test_a_run_at_a_rate_sends_on_its_schedule():
    n, rate = 8, 20.0
    with fake_openai_server(MODELS, STREAM) as url:
        paced = run_load_test(LoadTestConfig(url=url, num_requests=n, concurrency=n,
                                             max_tokens=1, request_rate=rate, seed=7))  # fmt: skip
        at_once = run_load_test(LoadTestConfig(url=url, num_requests=n, concurrency=n,
                                               max_tokens=1))  # fmt: skip
    assert paced["completed"] == at_once["completed"] == n
    assert paced["wall_s"] >= n / rate  # the last request is sent at n / R, not before
    # all at once: "inf", as vLLM writes it (hunt 77: was null)
    assert (paced["request_rate"], paced["seed"], at_once["request_rate"]) == (rate, 7, "inf")
    json.dumps(paced)  # JSON as saved


def test_burstiness_without_a_rate_is_refused_in_one_line():
    refused_in_one_line(typer.main.get_command(app), ["infer", "bench", "--url",
                        "http://127.0.0.1:9", "--burstiness", "0.5"],
                        "--burstiness and --seed shape the arrivals of --request-rate")  # fmt: skip
