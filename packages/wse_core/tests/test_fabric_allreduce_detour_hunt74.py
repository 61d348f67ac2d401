"""The fabric-collectives experiment's allreduce row pays the dead PEs' detours on its slowest
path, as its shift, multicast and broadcast rows pay theirs through their traffic's chains
(stop 73: the allreduce row was the defect-free closed form whatever the wafer's dead PEs).
Oracle: the extra hops of the allreduce's slowest path walked PE by PE over the wafer's own
links (`Remap.link_hops`), priced at the model's hop latency beside the closed form."""

import math

import numpy as np
import pytest
from wse_core.cost.assumptions import assumed_spec
from wse_core.cost.collectives import allreduce_2d, allreduce_detour_hops
from wse_core.cost.perf import PerfModel, Work
from wse_core.hw.wafer import build_wafer
from wse_core.studies import fabric_collectives


def _walked(remap, rows: int, cols: int) -> float:
    """Extra hops of the allreduce's three phases, each the most any PE waits, by loops:
    every PE's row to the centre column, the centre column's PEs to the centre, and the
    flood from the centre to every PE (down the centre column, then along the row)."""
    ns, ew = remap.link_hops(0) - 1, remap.link_hops(1) - 1
    mr, mc = math.ceil(rows / 2) - 1, math.ceil(cols / 2) - 1

    def along_row(r, c):  # links between (r, c) and (r, mc)
        lo, hi = min(c, mc), max(c, mc)
        return sum(ew[r, k] for k in range(lo, hi))

    def along_col(r):  # links between (r, mc) and (mr, mc)
        lo, hi = min(r, mr), max(r, mr)
        return sum(ns[k, mc] for k in range(lo, hi))

    rows_in = max(along_row(r, c) for r in range(rows) for c in (0, cols - 1))
    col_in = max(along_col(r) for r in (0, rows - 1))
    flood = max(along_col(r) + along_row(r, c) for r in range(rows) for c in (0, cols - 1))
    return float(rows_in + col_in + flood)


@pytest.mark.parametrize(
    "grid,seed", [((64, 96), 3), ((64, 96), 0), ((48, 40), 3), ((7, 1), 1), ((1, 9), 2)]
)
def test_the_allreduces_detour_is_its_slowest_path_walked(grid, seed):
    wafer = build_wafer(assumed_spec("wse3"), grid=grid, defect_seed=seed)
    assert allreduce_detour_hops(wafer.remap, *grid) == _walked(wafer.remap, *grid)


def test_the_experiments_allreduce_row_pays_its_detours(monkeypatch):
    grid = (64, 96)
    monkeypatch.setattr(fabric_collectives, "GRIDS", (grid,))
    monkeypatch.setattr(fabric_collectives, "_measure", lambda *a, **k: {})
    spec = assumed_spec("wse3")
    wafer = build_wafer(spec, grid=grid, defect_seed=3)
    extra = _walked(wafer.remap, *grid)
    assert extra > 0  # seed 3's dead PEs detour links inside this grid (seed 0's none)
    res = fabric_collectives.run(quick=True, seed=3)
    got = next(
        p.value
        for p in res.predictions
        if p.params["op"] == "allreduce" and p.name == "wafer_cycles"
    )
    model = PerfModel(spec)
    bare = allreduce_2d(model.rates, *grid, fabric_collectives.WORDS_PER_PE)
    assert got == pytest.approx(model.cost(bare + Work(latency_hops=extra)).cycles)
    # at the hop latency priced (WSE-3's, fitted on CS-3's MeshGEMV rows)
    assert got - model.cost(bare).cycles == pytest.approx(extra * model.rates.hop_latency_cycles)
    assert np.isfinite(got)
