"""Hunt 77: `assume(hop_latency_cycles=10)` around `PerfModel(preset("wse3"))` moved nothing,
with no word, though the assumptions module's headline example was `with
assume(hop_latency_cycles=2): ...`.

By design a wafer field assumed changes the wafers built under the block (`assumed_spec`,
`resolve_spec`), never a spec built outside it (the calibration's WSE-2 is priced as measured
under `clock_hz=...`, hunt 66): the example now says `assumed_spec`, and pricing a spec that
lacks an assumed wafer field warns, naming the field and `assumed_spec`. Oracle: the hop
mechanism counted by hand (latency_hops x hop_latency_cycles cycles at the spec's clock).
"""

from __future__ import annotations

import warnings

import pytest
from wse_core import PerfModel, Work, preset
from wse_core.cost.assumptions import assume, assumed_spec, calibration_spec

HOPS = 40.0
WORK = Work(latency_hops=HOPS)


def _hop_s(spec, per_hop):
    return HOPS * per_hop / spec.clock_hz


def test_a_bare_preset_under_an_assumed_field_is_priced_as_built_and_warns():
    spec = preset("wse3")
    with assume(hop_latency_cycles=10.0):
        with pytest.warns(UserWarning, match=r"hop_latency_cycles = 1, not the assumed 10") as w:
            bare = PerfModel(spec).seconds(WORK)
        assert "assumed_spec('wse3')" in str(w[0].message)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the assumed wafer: no warning
            moved = PerfModel(assumed_spec("wse3")).seconds(WORK)
    assert bare == pytest.approx(_hop_s(spec, spec.hop_latency_cycles))
    assert moved == pytest.approx(_hop_s(spec, 10.0))
    with pytest.warns(UserWarning, match="clock_hz"):
        with assume(clock_hz=9e8):
            PerfModel(preset("wse3")).seconds(WORK)


def test_no_warning_where_the_spec_is_priced_as_meant():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PerfModel(preset("wse3")).seconds(WORK)  # no assume block
        with assume(clock_hz=9e8, hop_latency_cycles=2.0):
            # the calibration's wafer, as measured by design (hunt 66)
            PerfModel(calibration_spec("wse2")).seconds(WORK)
        with assume(dsd_issue_cycles=20.0):  # a fitted constant: held on every wafer
            PerfModel(preset("wse3")).seconds(WORK)
