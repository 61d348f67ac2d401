"""`wse infer bench --request-rate R --burstiness B --seed S`, as vLLM's bench sends: gaps
between sends drawn from a gamma distribution of mean 1 / R and shape B (1: Poisson), seeded;
without a rate every request is sent at once. Oracles: the gamma distribution's mean and
coefficient of variation (1 / sqrt(B)), the schedule recomputed from the seed against the
run's wall time, and the CLI's one-line refusal."""

from __future__ import annotations

import itertools
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
    times = np.fromiter(itertools.islice(arrival_times(rate, burstiness, seed), n), float)
    return np.diff(times)


@pytest.mark.parametrize("burstiness", [1.0, 4.0, 0.25])
def test_the_gaps_are_gamma_of_mean_one_over_the_rate(burstiness):
    gaps = _gaps(10.0, burstiness, seed=3)
    assert gaps.min() >= 0 and gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.08)
    assert np.array_equal(gaps, _gaps(10.0, burstiness, seed=3))  # seeded
    assert not np.array_equal(gaps, _gaps(10.0, burstiness, seed=4))
    assert list(itertools.islice(arrival_times(None, 1.0, 0), 5)) == [0.0] * 5  # all at once


def test_a_run_at_a_rate_sends_on_its_schedule():
    n, rate = 8, 20.0
    last = list(itertools.islice(arrival_times(rate, 1.0, 7), n))[-1]
    with fake_openai_server(MODELS, STREAM) as url:
        paced = run_load_test(LoadTestConfig(url=url, num_requests=n, concurrency=n,
                                             max_tokens=1, request_rate=rate, seed=7))  # fmt: skip
        at_once = run_load_test(LoadTestConfig(url=url, num_requests=n, concurrency=n,
                                               max_tokens=1))  # fmt: skip
    assert paced["completed"] == at_once["completed"] == n
    assert paced["wall_s"] >= last  # the last request is sent at its time, not before
    # all at once: "inf", as vLLM writes it (hunt 77: was null)
    assert (paced["request_rate"], paced["seed"], at_once["request_rate"]) == (rate, 7, "inf")
    json.dumps(paced)  # JSON as saved


def test_burstiness_without_a_rate_is_refused_in_one_line():
    refused_in_one_line(typer.main.get_command(app), ["infer", "bench", "--url",
                        "http://127.0.0.1:9", "--burstiness", "0.5"],
                        "--burstiness and --seed shape the arrivals of --request-rate")  # fmt: skip
