"""Hunt 82 (H5's view, L2): the wafer view draws link words only where a PE sends, and its
SRAM layer says what it is measured against.

Broken before: `trace_uniform` spread each direction's link words over every PE of the
region, so a Dirichlet stencil's column 7 showed 200 wavelets east (it has no east
neighbour) and row 0 200 north; the SRAM layer showed the data in use with no capacity and
no program reserve.

Oracles: the per-PE link layers built with NumPy from the phase's words and the region
(the edge line toward each direction zero), summed in the trace's blocks by reshaping, and
the capacity arithmetic by hand (49,152 B less the 2,048 B reserve of wse2).
"""

from __future__ import annotations

import numpy as np
import pytest
from wse_core import PerfModel, Phase, RunReport, Work, preset, serial
from wse_core.cost.calibration import UNCALIBRATED
from wse_core.hw.sram import Region
from wse_core.trace import trace_uniform
from wse_core.trace.fields import sram_capacity
from wse_core.trace.page import page_html
from wse_core.trace.png import trace_figure

WORDS = {"N": 2.0, "S": 1.0, "E": 4.0, "W": 3.0}


def _report(spec):
    phase = Phase("halo", Work(links=dict(WORDS), latency_hops=1))
    sram = {"bytes_per_pe": spec.sram_bytes_per_pe, "allocations": [
        {"name": "u", "bytes_per_pe": 400, "region": "grid"}]}  # fmt: skip
    model = PerfModel(spec, UNCALIBRATED)
    return RunReport.build("s", spec, serial(phase, name="step"), model=model, sram=sram)


def _oracle(shape, region: Region, block: int) -> dict[str, np.ndarray]:
    """Each direction's words on the PEs of `region` that have a neighbour that way inside
    it, summed in `block` x `block` cells."""
    out = {}
    r0, c0, r1, c1 = region.row0, region.col0, region.row0 + region.rows, region.col0 + region.cols
    for d, w in WORDS.items():
        a = np.zeros(shape)
        rows = slice(r0 + (d == "N"), r1 - (d == "S"))
        cols = slice(c0 + (d == "W"), c1 - (d == "E"))
        a[rows, cols] = w
        pad = np.zeros((-(-shape[0] // block) * block, -(-shape[1] // block) * block))
        pad[: shape[0], : shape[1]] = a
        out[d] = pad.reshape(pad.shape[0] // block, block, -1, block).sum(axis=(1, 3))
    return out


@pytest.mark.parametrize(
    ("preset_name", "region"),
    [
        ("tiny", Region("grid", 1, 2, 3, 4)),
        ("tiny", Region("line", 0, 0, 1, 8)),
        ("wse2", Region("grid", 3, 5, 100, 200)),
    ],
    ids=["inside", "one-row", "blocked"],
)
def test_no_wavelet_leaves_the_region(preset_name, region):
    spec = preset(preset_name)
    trace = trace_uniform(spec, _report(spec), region=region)
    want = _oracle((spec.pe_rows, spec.pe_cols), region, trace.block)
    for d in WORDS:
        np.testing.assert_allclose(trace.layers[f"link_{d}"], want[d], rtol=1e-12, atol=0)
    if region.rows == 1:  # a row of PEs: nothing north or south
        assert trace.layers["link_N"].max() == trace.layers["link_S"].max() == 0


def test_the_sram_layer_says_its_capacity():
    spec = preset("wse2")
    trace = trace_uniform(spec, _report(spec), region=Region("grid", 0, 0, 4, 4))
    reserve = spec.code_stack_bytes_per_pe
    assert (trace.meta["sram_bytes_per_pe"], trace.meta["code_stack_bytes_per_pe"]) == (
        49_152,
        reserve,
    )
    words = (
        f"of {49_152 - reserve:,} B a PE holds for data (49,152 B less {reserve:,} B of program, "
        "assumed)"
    )
    assert sram_capacity(trace.meta) == words
    assert words in page_html(trace)  # the legend of the page's SRAM layer
    fig = trace_figure(trace)
    assert fig.axes[0].get_title() == f"SRAM in use\n{words}"
    assert sram_capacity({}) == ""  # a file from before: no capacity to say
