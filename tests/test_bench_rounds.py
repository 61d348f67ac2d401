"""bench/rounds.py, the benches' interleaved rounds: order, ratios and the record, by hand."""

import importlib.util
import json
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "bench" / "rounds.py"
_SPEC = importlib.util.spec_from_file_location("bench_rounds", _PATH)
rounds = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(rounds)


def test_interleaved_runs_contenders_in_turn():
    calls = []

    def contender(name, seconds):
        def fn():
            calls.append(name)
            return seconds

        return fn

    times = rounds.interleaved({"ours": contender("ours", 1.0), "peer": contender("peer", 3.0)}, 3)
    assert calls == ["ours", "peer"] * 3
    assert times == {"ours": [1.0, 1.0, 1.0], "peer": [3.0, 3.0, 3.0]}
    calls.clear()
    three = {k: contender(k, 1.0) for k in "abc"}
    rounds.interleaved(three, 3, rotate=True)
    assert calls == list("abc" + "bca" + "cab")
    with pytest.raises(ValueError):
        rounds.interleaved({"ours": lambda: 1.0}, 0)


def test_ratio_median_spread_and_worst_round():
    # per round peer / ours: 4/1 = 4, 2/2 = 1, 1/2 = 0.5 -> median 1, worst 0.5
    r = rounds.ratio([1.0, 2.0, 2.0], [4.0, 2.0, 1.0], target=1.0)
    assert r["rounds"] == [4.0, 1.0, 0.5]
    assert r["median"] == 1.0 and r["worst"] == 0.5 and r["spread"] == [0.5, 4.0]
    assert r["met"] is False  # the median reaches 1x but one round lost
    ok = rounds.ratio([1.0, 1.0, 1.0, 1.0], [1.6, 1.5, 1.2, 1.8], target=1.5)
    assert ok["median"] == pytest.approx(1.55) and ok["met"] is True
    assert "met" in rounds.ratio_line("x", ok) and "NOT" in rounds.ratio_line("x", r)
    # a target below 1x against our own other path: its floor, not 1x, bounds the worst round
    own = rounds.ratio([1.0, 1.0, 1.0], [0.9, 0.85, 0.95], target=0.8, floor=0.8)
    assert own["met"] is True and "no round < 0.8x: met" in rounds.ratio_line("x", own)
    assert rounds.ratio([1.0, 1.0, 1.0], [0.9, 0.75, 0.95], target=0.8, floor=0.8)["met"] is False
    with pytest.raises(ValueError):
        rounds.ratio([1.0], [1.0, 2.0])


def test_record_names_versions_threads_and_host(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    rec = rounds.record("numpy", "no-such-distribution-xyz", lammps="LAMMPS (test)")
    import numpy

    assert rec["baselines"]["numpy"] == numpy.__version__
    assert rec["baselines"]["no-such-distribution-xyz"] is None
    assert rec["baselines"]["lammps"] == "LAMMPS (test)"
    assert rec["threads"]["OPENBLAS_NUM_THREADS"] == "1"
    assert set(rec["host"]) >= {"load_average", "memory_bandwidth_gb_s", "utc"}
    json.dumps(rec)  # JSON-ready
