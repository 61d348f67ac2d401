"""What detours around dead PEs add to a stencil prediction, and the line that says so.

Contract. A dead PE (`--defect-seed`; `wse_core.hw.defects`) stretches a logical link over
several physical hops (`Remap.link_hops`). The model prices every hop of a critical path at
`hop_latency_cycles` (`wse_core.cost.pricing`: hop = latency_hops x hop_latency_cycles,
serial beside the streams), so a detour costs its extra hops on the slowest PE's path of
each exchange, counted here from the grid's own links:

- a halo exchange (Jacobi, heat, the SpMVs: four one-PE shifts N, S, W, E in series, priced
  from the trace): each shift's chain as the trace records it (`halo_detour_hops`): on a
  bounded axis its longest link (`wse_core.fabric.ledger.chain_hops` of one link; a
  one-link chain is its one link), less one; on a periodic axis the chain as the mesh moves
  it (`ledger.ring_hops`, what `ledger.on_mesh` prices: folded, the slowest pair of
  ring-neighbour links of any line; in place, the slowest line end to end), less the same
  without detours (hunt 72: a folded grid's line said 4 where the price added 8; hunt 73:
  both paid a fold's longest link twice, 8 where seed 3's slowest ring pair adds 6);
- the 25-point step, priced as published (R hops per Z block, the four directions at
  once): the slowest chain of R consecutive links along either axis, less R; on a periodic
  axis the slowest chain between ring neighbours up to R apart as the axis lies on the mesh
  (folded: 2 R links apart), less the same without detours (`wave25_detour_hops`), added
  by `perf.wave25_phases`;
- an allreduce, priced as Luczynski et al. model it (`wse_core.cost.collectives`: each row
  to its centre column, that column to the centre PE, a flood back): the extra hops of the
  slowest row half, of the slower half of the centre column, and of the flood's longest
  path from the centre (`allreduce_detour_hops`), added by `perf.allreduce_work` (and, on
  any rectangle, by `wse_hpc.fields.perf` to its reductions).

`detour_assumption` is the report's line, with the grid's own detour counts (the wafer
description's `detour_hops` count the whole wafer, mostly PEs the grid does not use).
"""

from __future__ import annotations

import numpy as np
from wse_core.cost.collectives import allreduce_detour_hops as rectangle_allreduce_detour_hops
from wse_core.cost.collectives import extra_link_hops
from wse_core.fabric import ledger

from wse_hpc.stencil.periodic import layouts
from wse_hpc.stencil.placement import StencilGrid

__all__ = [
    "allreduce_detour_hops",
    "detour_assumption",
    "halo_detour_hops",
    "rectangle_allreduce_detour_hops",
    "wave25_detour_hops",
]


def _extra(grid: StencilGrid) -> tuple[np.ndarray, np.ndarray]:
    return extra_link_hops(grid.wafer.remap, grid.shape[0], grid.shape[1])


def halo_detour_hops(grid: StencilGrid) -> float:
    """Extra hops of one halo exchange: four one-PE shifts in series, two an axis, each
    waiting for its chain as the traced price records it: a bounded axis' longest link; a
    periodic axis' slowest chain between ring neighbours where its layout puts them
    (`_ring_max` at a reach of one: what `ledger.on_mesh` prices), less the same without
    detours."""
    lay, total = layouts(grid), 0.0
    for axis, extra in enumerate(_extra(grid)):
        if axis in lay:
            shift = _ring_max(extra if axis == 0 else extra.T, 1, lay[axis])
        else:
            shift = float(extra.max(initial=0))
        total += 2.0 * shift  # two shifts an axis
    return total


def _window_max(extra: np.ndarray, k: int) -> float:
    """The most extra hops on k consecutive links along axis 0 (fewer when shorter)."""
    n = extra.shape[0]
    if n == 0 or k <= 0:
        return 0.0
    k = min(k, n)
    run = np.cumsum(np.concatenate([np.zeros((1, extra.shape[1])), extra]), axis=0)
    return float((run[k:] - run[:-k]).max(initial=0))


def _ring_max(extra: np.ndarray, reach: int, layout: str) -> float:
    """The extra hops of the slowest chain of a periodic axis' exchange reaching `reach` ring
    PEs (each PE from those 1 .. reach away), the axis along axis 0 of `extra` laid on the mesh
    as `layout` says (`ledger.ring_walk`): the links between two ring PEs' places crossed,
    detours included, less the slowest chain without detours."""
    n = extra.shape[0] + 1
    runs = np.cumsum(np.concatenate([np.zeros((1, extra.shape[1])), extra]), axis=0).T
    return ledger.ring_walk(runs, layout, reach, n) - ledger.ring_walk(None, layout, reach, n)


def wave25_detour_hops(grid: StencilGrid) -> float:
    """Extra hops of one 25-point Z block's halo: the slowest chain of R consecutive links
    along either axis (the four directions arrive at once); on a periodic axis the links its
    ring's neighbours up to R away cross where `periodic.layouts` lays them (`_ring_max`;
    hunt 72: a folded axis, neighbours R away 2 R links apart, was priced as R links)."""
    lay = layouts(grid)
    extras = [e if a == 0 else e.T for a, e in enumerate(_extra(grid))]
    return max(
        _ring_max(e, grid.radius, lay[a]) if a in lay else _window_max(e, grid.radius)
        for a, e in enumerate(extras)
    )


def allreduce_detour_hops(grid: StencilGrid) -> float:
    """Extra hops of one allreduce over the grid's PEs (`rectangle_allreduce_detour_hops`)."""
    return rectangle_allreduce_detour_hops(grid.wafer.remap, grid.shape[0], grid.shape[1])


def detour_assumption(grid: StencilGrid, kind: str) -> dict[str, str]:
    """The report's line on detours: how they are priced and this grid's own counts."""
    rows, cols, _ = grid.shape
    mine = grid.wafer.remap.extra_hops_within(rows, cols)
    how = (
        f"{wave25_detour_hops(grid):g} per Z block"
        if kind == "wave25"
        else f"{halo_detour_hops(grid):g} per halo exchange"
    )
    if kind == "bicgstab":
        how += f", {allreduce_detour_hops(grid):g} per allreduce"
    return {
        "detours": f"dead PEs' detours priced as their extra hops on the slowest PE's path "
        f"of each exchange, hop_latency_cycles each ({how}); this {rows} x {cols} grid's "
        f"links: N-S {mine['ns_total']} extra hops (longest link {mine['ns_max']} hops), E-W "
        f"{mine['ew_total']} (longest {mine['ew_max']}); the wafer's detour_hops count the "
        "whole wafer"
    }
