"""The stencil's per-PE trace (`wse_hpc.stencil.perf.pe_trace`, `wse hpc stencil --trace`):
the grid's PEs each carry the run's predicted step, its SRAM allocations, and the seed's dead
PEs; nothing outside the grid is busy."""

import numpy as np
import pytest
from wse_core import defect_map, preset
from wse_core.trace import load
from wse_hpc.stencil.perf import pe_trace
from wse_hpc.stencil.runs import StencilConfig, run_stencil


def test_stencil_trace_is_the_grid_running_the_predicted_step(tmp_path):
    spec = preset("small")
    cfg = StencilConfig(kind="jacobi", grid=(12, 10, 8), spec=spec, steps=2, defect_seed=3)
    report = run_stencil(cfg).report
    trace = load(pe_trace(spec, report, grid_xy=(12, 10), defect_seed=3).save(tmp_path / "s"))
    busy = trace.layers["busy_cycles"]
    assert busy[:12, :10].min() == pytest.approx(report.predicted_s * spec.clock_hz, rel=1e-9)
    assert np.count_nonzero(busy) == 12 * 10  # a hand count: the X x Y grid, one PE a column
    per_pe = sum(a["bytes_per_pe"] for a in report.sram["allocations"])
    assert trace.layers["sram_bytes"].sum() == per_pe * 12 * 10
    assert len(trace.dead) == defect_map(spec, 3).num_dead > 0
    assert trace.regions == [{"name": "stencil grid", "rect": [0, 0, 12, 10]}]
