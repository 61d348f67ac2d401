"""Hunt 82 D: `wse hpc stencil --kind bicgstab`'s predicted Gcell/s was per Krylov iteration
(`predicted_s_per_step`: reliable updates and the start left out) beside "µs for the same run"
and TFLOP/s, which price the whole solve: `--grid 4 4 1300 --steps 3` printed 0.7 Gcell/s
beside 151.487 µs for 3 x 20,800 cell-iterations (0.41 Gcell/s). Now all three count the
same run, as the measured Mcell/s does (cells x steps over the wall time).

Oracle: a hand count from the report's own totals: cells x iterations / predicted seconds,
and the grid's flops of the whole run (the report's phases) over the same seconds.
"""

from __future__ import annotations

import math

import pytest
from wse_core import PRESETS
from wse_hpc.stencil.runs import StencilConfig, _grid_flops, run_stencil

WSE2 = PRESETS["wse2"]


@pytest.mark.parametrize("kind", ["bicgstab", "jacobi"])
def test_gcells_count_the_run_the_seconds_price(kind):
    grid, steps = (8, 8, 8), 3  # bicgstab's cap reached: 3 iterations, 3 reliable updates
    run = run_stencil(StencilConfig(kind=kind, grid=grid, spec=WSE2, steps=steps, chunks=1))
    r = run.report
    x = r.extra
    done, cells = x["steps"], math.prod(grid)
    assert done == steps
    whole = cells * done / r.predicted_s / 1e9
    assert x["predicted_gcells_per_s"] == pytest.approx(whole, rel=1e-12)
    assert x["predicted_flops_per_s"] == pytest.approx(
        _grid_flops(run.grid, r.phases) / r.predicted_s, rel=1e-12
    )
    if kind == "bicgstab":  # the updates and the start cost beyond the iterations
        assert r.predicted_s > done * x["predicted_s_per_step"] * (1 + 1e-6)
    else:  # a Jacobi run is its steps: the two counts agree
        assert r.predicted_s == pytest.approx(done * x["predicted_s_per_step"], rel=1e-12)
