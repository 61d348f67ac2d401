"""bench/bench_soak.py and its modules (soak_traffic, soak_server, soak_report): the driver's
CLI parses, and the pure parts (hostile bodies, the /health split, the per-minute rows) give
what is worked out by hand here. The soak itself runs for minutes against a served model:
not a test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def soak(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the benches import each other by file name
    import soak_report
    import soak_traffic

    return soak_report, soak_traffic


def test_the_driver_parses_its_options():
    r = subprocess.run([sys.executable, str(BENCH / "bench_soak.py"), "--help"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    for option in ("--minutes", "--quick", "--model-dir", "--train-steps", "--slots",
                   "--max-requests", "--seed"):  # fmt: skip
        assert option in r.stdout
    assert "Serving soak" in r.stdout


def test_hostile_bodies(soak):
    _, traffic = soak
    assert traffic.hostile_body("deep_3", "m") == b'{"model": "m", "prompt": [[[]]]}'
    assert json.loads(traffic.hostile_body("n_99", "m")) == {
        "model": "m", "prompt": "def ", "max_tokens": 8, "n": 99
    }  # fmt: skip
    assert len(json.loads(traffic.hostile_body("stop_1000", "m"))["stop"]) == 1000
    assert len(traffic.hostile_body("prompt_5mb", "m")) > 4_999_000
    assert set(traffic.HEAVY) <= set(traffic.HOSTILE)


def test_health_latency_is_split_at_the_heavy_requests(soak):
    report, _ = soak
    # a heavy request in flight over [1, 2] s, a light one over [3, 4] s
    records = [
        {"kind": "hostile:prompt_5mb", "start": 1.0, "end": 2.0},
        {"kind": "hostile:seed_2_70", "start": 3.0, "end": 4.0},
    ]
    samples = [(0.5, 0.010, 200), (1.5, 0.100, 200), (1.9, 0.300, 200), (3.5, 0.020, 503)]
    h = report.health_report(samples, records)
    assert h["samples"] == 4 and h["not_200"] == 1
    assert h["max_ms"] == 300.0
    assert h["during_heavy_hostile"]["samples"] == 2
    assert h["during_heavy_hostile"]["heavy_requests"] == 1
    assert h["during_heavy_hostile"]["p50_ms"] == 200.0  # the mean of 100 and 300 ms
    assert h["outside_heavy_hostile"]["samples"] == 2
    assert h["outside_heavy_hostile"]["p50_ms"] == 15.0  # the mean of 10 and 20 ms


def test_requests_are_counted_by_the_minute_they_started(soak):
    report, _ = soak
    t0 = 100.0
    records = [
        {"start": t0 + 5, "ttft_s": 0.2, "outcome": "ok"},
        {"start": t0 + 50, "ttft_s": 0.4, "outcome": "no_done"},
        {"start": t0 + 65, "ttft_s": None, "outcome": "cancelled"},
    ]
    rss = [(10.0, 2**20 * 100), (70.0, 2**20 * 120)]
    rows = report.per_minute(records, rss, t0, 2)
    assert [r["minute"] for r in rows] == [0, 1]
    assert [r["requests"] for r in rows] == [2, 1]
    assert [r["errors"] for r in rows] == [1, 0]  # no_done is an error, a cancel is not
    assert rows[0]["ttft_p50_s"] == pytest.approx(0.3) and rows[1]["ttft_p50_s"] is None
    assert [r["rss_max_mib"] for r in rows] == [100.0, 120.0]
