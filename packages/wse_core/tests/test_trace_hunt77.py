"""Hunt 77: `trace_from` refuses what `load` (and so `wse view`) refuses, each in one
TraceError line (a WseError), so no such trace is built or saved.

Broken before:
- per_pe_work of NaN passed the range check (NaN < 0 is False); the file saved, then `wse
  view` said "layers[1].total is NaN"; a region of [5, 5, 10, 10] on an 8 x 8 grid likewise;
- per_pe_work={"smoth": ...} (no such phase) was silently ignored: now refused with a
  suggestion (wse_systems' pipeline traces keyed the head "head", no phase: now "per_token");
- grid=(100, 100) on the 8 x 8 tiny spec was accepted, grid=(0, 8) was NumPy's zero-size
  ValueError, a wrong SRAM ledger or per_pe_work shape a plain ValueError.

Oracle: the reader itself (`load` of what `save` writes round-trips, and refuses the file of
a trace trace_from refuses), and the refusals' own words.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from wse_core import Op, PerfModel, Phase, RunReport, Work, preset, serial
from wse_core.cost.calibration import UNCALIBRATED
from wse_core.errors import WseError
from wse_core.hw.sram import Region, SramLedger
from wse_core.trace import TraceError, load, trace_from
from wse_core.trace.reader import MAX_TEXT


@pytest.fixture(scope="module")
def spec():
    return preset("tiny")  # 8 x 8 PEs


@pytest.fixture(scope="module")
def report(spec):
    smooth = Phase("smooth", Work(ops=(Op("add", "fp32", 8, count=2),), links={"E": 4.0}))
    reduce = Phase("allreduce", Work(links={"N": 2.0}, latency_hops=6))
    phases = serial(smooth, reduce, name="step")
    return RunReport.build("t", spec, phases, model=PerfModel(spec, UNCALIBRATED), units="step")


def _one_line(e, *words):
    text = str(e.value)
    assert "\n" not in text and isinstance(e.value, WseError)
    for word in words:
        assert word in text, text


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"per_pe_work": {"smooth": np.full((8, 8), np.nan)}}, ("64 NaN or infinite",)),
        ({"per_pe_work": {"smooth": np.full((8, 8), np.inf)}}, ("NaN or infinite",)),
        ({"per_pe_work": {"smooth": np.full((8, 8), -0.5)}}, ("from -0.5",)),
        ({"per_pe_work": {"smooth": np.ones((4, 8))}}, ("(8, 8) array", "shape (4, 8)")),
        ({"per_pe_work": {"smooth": "left"}}, ("(8, 8) array",)),
        ({"per_pe_work": {"smooth": Region("r", 6, 6, 4, 4)}}, ("[6, 6, 4, 4]", "8 x 8")),
        ({"regions": [Region("bad", 5, 5, 10, 10)]}, ("'bad'", "[5, 5, 10, 10]", "8 x 8")),
        ({"regions": [Region("neg", -1, 0, 2, 2)]}, ("'neg'", "[-1, 0, 2, 2]")),
        ({"regions": [(0, 0, 2, 2)]}, ("must be a Region",)),
        ({"grid": (100, 100)}, ("100 x 100", "tiny", "8 x 8")),
        ({"grid": (0, 8)}, ("two integers >= 1", "(0, 8)")),
        ({"grid": (8,)}, ("two integers >= 1",)),
        ({"sram": SramLedger(4, 4, 1024)}, ("SRAM ledger is 4 x 4", "8 x 8")),
    ],
)
def test_what_load_would_refuse_is_refused_when_the_trace_is_built(spec, report, kwargs, words):
    with pytest.raises(TraceError) as e:
        trace_from(spec, report, **kwargs)
    _one_line(e, *words)


def test_a_phase_name_that_names_no_phase_is_refused_with_a_suggestion(spec, report):
    with pytest.raises(TraceError) as e:
        trace_from(spec, report, per_pe_work={"smoth": np.zeros((8, 8))})
    _one_line(e, "'smoth', not a phase of 't'", "did you mean 'smooth'")


def test_a_group_name_still_weighs_its_leaves_and_every_trace_built_loads_back(
    spec, report, tmp_path
):
    w = np.zeros((8, 8))
    w[2, 3] = 1.0
    tr = trace_from(
        spec, report, per_pe_work={"step": w}, regions=[Region("r", np.int64(1), 0, 7, 8)]
    )
    assert tr.layers["link_E"][2, 3] == 4.0 and tr.layers["link_E"].sum() == 4.0
    back = load(tr.save(tmp_path / "ok.npz"))
    assert back.header() == tr.header() and back.regions == [{"name": "r", "rect": [1, 0, 7, 8]}]


def test_what_only_the_reader_checks_is_refused_by_trace_from_as_load_refuses_it(
    spec, report, tmp_path
):
    """A region's name past the reader's MAX_TEXT passes the input checks; trace_from runs the
    reader's own checks on what it built and refuses it. Oracle: the same trace, built with a
    short name and renamed, saved (save does not check), is refused by `load`."""
    long = "r" * (MAX_TEXT + 1)
    with pytest.raises(TraceError) as e:
        trace_from(spec, report, regions=[Region(long, 0, 0, 2, 2)])
    _one_line(e, "not one wse view reads", "regions[0].name")
    tr = trace_from(spec, report, regions=[Region("r", 0, 0, 2, 2)])
    bad = dataclasses.replace(tr, regions=[{"name": long, "rect": [0, 0, 2, 2]}])
    with pytest.raises(TraceError, match=r"regions\[0\]\.name"):
        load(bad.save(tmp_path / "long.npz"))
