"""wse_core.host.memory: what is available, the largest size that fits, and the one-line refusal."""

import re

import pytest
from wse_core import WseError
from wse_core.host.memory import HostMemoryError, available_bytes, format_bytes, largest, require


def _meminfo_available() -> int:
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemAvailable")


def test_available_is_memavailable_capped_by_the_variable(monkeypatch):
    monkeypatch.delenv("WSE_HOST_MEMORY_BYTES", raising=False)
    assert abs(available_bytes() - _meminfo_available()) < 2**30  # the machine moves a little
    monkeypatch.setenv("WSE_HOST_MEMORY_BYTES", "12345")
    assert available_bytes() == 12345
    monkeypatch.setenv("WSE_HOST_MEMORY_BYTES", "lots")
    with pytest.raises(WseError, match="WSE_HOST_MEMORY_BYTES"):
        available_bytes()


def test_held_bytes_count_once_and_stay_under_the_cap(monkeypatch):
    """Bytes a run already holds are back in its budget (MemAvailable no longer counts
    them), but never past the variable's cap: the cap bounds the whole problem."""
    import wse_core.host.memory as memory

    monkeypatch.delenv("WSE_HOST_MEMORY_BYTES", raising=False)
    monkeypatch.setattr(memory, "_meminfo_available", lambda: 1000)
    assert available_bytes(held_bytes=300) == 1300
    require("held", 1300, fits=lambda b: "unused", held_bytes=300)  # fits
    with pytest.raises(HostMemoryError, match="1,300 B"):
        require("not held", 1300, fits=lambda b: "unused")  # 1,000 available
    monkeypatch.setenv("WSE_HOST_MEMORY_BYTES", "1100")
    assert available_bytes(held_bytes=300) == 1100


@pytest.mark.parametrize("budget", [0, 1, 99, 100, 101, 10**6, 10**12])
def test_largest_is_the_brute_force_answer(budget):
    cost = lambda n: 100 * n + 7 * n * n  # noqa: E731
    expect = max((n for n in range(0, 400_000) if cost(n) <= budget), default=0)
    assert largest(cost, budget, hi=399_999) == expect


def test_refusal_is_one_line_with_needed_available_and_fit(monkeypatch):
    monkeypatch.setenv("WSE_HOST_MEMORY_BYTES", str(3 * 2**20))
    require("small", 2**20, fits=lambda b: "unused")  # fits: no error
    with pytest.raises(HostMemoryError) as e:
        require("a big thing", 5 * 2**30, fits=lambda b: f"at most {b // 1000} widgets fit")
    msg = str(e.value)
    assert "\n" not in msg and isinstance(e.value, WseError)
    assert "needs 5 GiB of host memory (5,368,709,120 B)" in msg
    assert "3 MiB (3,145,728 B) is available" in msg
    assert re.search(r"at most 3145 widgets fit$", msg)
    assert format_bytes(1536) == "1.5 KiB"


def test_host_record_is_json_and_names_this_process_cpus():
    """What every bench JSON carries: a bandwidth within physical bounds (a triad on 8 MiB
    arrays moves 40 MiB; no host moves it at under 0.1 or over 10,000 GB/s), the load
    average, the CPUs this process may use, a round trip through JSON."""
    import json
    import os

    from wse_core.host.memory import host_record

    rec = json.loads(json.dumps(host_record(n_bytes=8 << 20)))
    assert 0.1 < rec["memory_bandwidth_gb_s"] < 10_000
    assert len(rec["load_average"]) == 3 and min(rec["load_average"]) >= 0
    assert rec["cpus"] == sorted(os.sched_getaffinity(0))
    assert rec["utc"].endswith("+00:00") and rec["machine"]
