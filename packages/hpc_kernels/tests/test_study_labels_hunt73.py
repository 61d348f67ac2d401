"""Hunt 73, `domain-translation-swe`'s labels. Broken before: the `latency 1 ms` stress rows
put 100% of their cycles under "host_io" where the step is ~3 x system_latency_s (a network
latency, not I/O: the bytes are ~600 of 3.3M cycles), and they listed system_latency_s
"(swept 5e-07..1e-05)" beside a row priced at 1 ms, outside that range, with nothing saying
so. Now the latency is under "fixed" (a latency mechanism), the bytes alone under "host_io",
and a row priced outside the sweep says so.

Oracles: the crossing counted by hand (bytes over the spec's I/O rate, 3 RK3 messages x the
latency, over k in flight when the translation's crossing sets the step), the row's cycles
(the clock over its steps/s), the registry's sweep, and the documented role vocabulary.
"""

from __future__ import annotations

import json
import re

import pytest
from wse_core.cost.assumptions import assumed_spec
from wse_core.cost.mechanisms import CONSTANTS, LATENCY_MECHANISMS
from wse_core.studies.experiment import results_json
from wse_hpc.studies import domain_translation_swe as dt

MESSAGES = 3  # SSP-RK3: each stage reads the previous stage's Y halo
ROLE = re.compile(r"fits [A-Za-z_][\w.]*(?:, [A-Za-z_][\w.]*)*|check|prediction")


@pytest.fixture(scope="module")
def rows():
    return dt.run_predictions()


def _crossing_by_hand(spec, r) -> tuple[float, float]:
    """(fixed, host_io) cycles the row's crossing adds by hand: 0 where it does not set the
    step."""
    systems, k = r.params["systems"], r.params["slack_steps"]
    if systems == 1:
        return 0.0, 0.0
    latency_s = MESSAGES * r.params["system_latency_s"]
    bytes_s = r.params["crossing_bytes"] / spec.host_io_bytes_per_s
    step_s = 1 / r.value
    if k is None:  # plain: the step waits for the whole crossing
        return latency_s * spec.clock_hz, bytes_s * spec.clock_hz
    in_flight = (latency_s + bytes_s) / k
    if step_s == pytest.approx(in_flight, rel=1e-12):  # the crossing in flight sets it
        return latency_s / k * spec.clock_hz, bytes_s / k * spec.clock_hz
    return 0.0, 0.0


def test_the_crossing_s_latency_is_a_latency_mechanism(rows):
    spec = assumed_spec("wse3")
    assert dt.LATENCY_MECHANISM in LATENCY_MECHANISMS
    steps = [r for r in rows if r.name == "steps_per_s"]
    stress = [r for r in steps if r.params["system_latency_s"] == dt.STRESS_LATENCY_S]
    assert len(steps) == 8 + 5 and len(stress) == 5
    for r in steps:
        mech = r.mechanisms
        cycles = spec.clock_hz / r.value  # the row's cycles per step
        assert sum(mech.values()) == pytest.approx(cycles, rel=1e-9), r.params["case"]
        fixed, io = _crossing_by_hand(spec, r)
        assert mech.get("fixed", 0.0) == pytest.approx(fixed, rel=1e-9)
        assert mech.get("host_io", 0.0) == pytest.approx(io, rel=1e-6, abs=1e-6 * cycles)
        assert ("fixed_cycles_are" in r.params) == (fixed > 0)
    plain = next(r for r in stress if r.params["slack_steps"] is None)
    share = plain.mechanisms["fixed"] / sum(plain.mechanisms.values())
    assert share > 0.99 and plain.mechanisms["host_io"] < 1e-3 * plain.mechanisms["fixed"]
    for r in (r for r in rows if r.name == "crossing_s"):  # one crossing, two systems
        hz = spec.clock_hz
        by_hand = r.params["crossing_bytes"] / spec.host_io_bytes_per_s * hz
        assert r.mechanisms["host_io"] == pytest.approx(by_hand, rel=1e-9)
        assert r.mechanisms["fixed"] == pytest.approx(MESSAGES * spec.system_latency_s * hz)
        assert sum(r.mechanisms.values()) == pytest.approx(r.value * hz, rel=1e-12)


def test_a_row_priced_outside_the_latency_sweep_says_so(rows):
    lo, hi = min(CONSTANTS["system_latency_s"].sweep), max(CONSTANTS["system_latency_s"].sweep)
    assert not lo <= dt.STRESS_LATENCY_S <= hi  # the stress value is outside the sweep
    cluster = [r for r in rows if "system_latency_s" in r.params]
    for r in cluster:
        note = r.params.get("system_latency_note")
        if lo <= r.params["system_latency_s"] <= hi:
            assert note is None
            continue
        assert "latency 1 ms" in r.params["case"]
        top = f"{1e-3 / hi:g}x its top"  # 100x
        assert note == (f"system_latency_s 0.001 s is a stress value outside its sweep "
                        f"({lo:g}..{hi:g} s; {top}), no network's figure")  # fmt: skip
    assert sum("system_latency_note" in r.params for r in cluster) == 3 * 5


def test_every_role_is_the_documented_vocabulary(monkeypatch):
    monkeypatch.setattr(dt, "_measured", lambda quick: {"bit_identical": True})  # no emulator
    data = json.loads(results_json(dt.run(quick=True, seed=0)))
    assert data["predictions"]
    for r in data["predictions"]:
        assert ROLE.fullmatch(r["role"]), r["role"]
