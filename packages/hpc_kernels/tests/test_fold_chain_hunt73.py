"""Hunt 73: a periodic axis' chain on the mesh is walked on its ring, link by link.

Broken before: `ledger.on_mesh` priced a folded periodic shift at FOLD_HOPS times its
recorded one-link chain (the axis' longest link), and an in-place axis at n - 1 times the
longest link, so one detour was paid on both links of every ring neighbour pair. The
stencil's halo line (`detours.halo_detour_hops`) and the field layer's exchanges
(`fields.perf._shift_hops`) copied the rule: Jacobi 30 x 30 x 8, periodic, defect seed 3
said and paid 8 extra hops an exchange where its slowest ring pair adds 6.

Oracle: a brute-force walk built here from the fold's description (each ring cut in two,
the second half reversed, the two laid alternately): every line, every ring PE, every reach,
the link hops between the two places summed in Python (`Remap.link_hops`); plain chain
lengths without dead PEs.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from wse_core import DefectError, fabric, preset
from wse_core.fabric import ledger
from wse_core.hw.wafer import build_wafer
from wse_hpc.fields.grid import field_grid, traced_program
from wse_hpc.fields.perf import _shift_hops, exchange_hops, traced_step
from wse_hpc.fields.swe import shallow_water, swe_state
from wse_hpc.stencil import detours
from wse_hpc.stencil.placement import grid_wafer, place_grid
from wse_hpc.stencil.runs import StencilConfig, run_stencil

SMALL = preset("small")


def _fold_places(n: int) -> dict[int, int]:
    """Ring PE -> place on its mesh line: the first ceil(n / 2) PEs and the rest reversed,
    laid alternately."""
    first, second = list(range(-(-n // 2))), list(range(-(-n // 2), n))[::-1]
    order = [p for pair in zip(first, second + [None], strict=False) for p in pair if p is not None]
    return {pe: place for place, pe in enumerate(order)}


def _lines(remap, axis: int, rows: int, cols: int) -> list[list[int]]:
    """Each line's physical hops per logical link along `axis` on the rows x cols PEs: a row
    per line along axis 1, a column along axis 0."""
    h = remap.link_hops(axis)
    if axis == 1:
        return [[int(h[r, c]) for c in range(cols - 1)] for r in range(rows)]
    return [[int(h[r, c]) for r in range(rows - 1)] for c in range(cols)]


def _walk(lines: list[list[int]], layout: str, reach: int) -> float:
    """The most physical hops between any two ring PEs 1 .. reach apart on any line, the
    ring laid on the line as `layout` says."""
    n = len(lines[0]) + 1
    place = _fold_places(n) if layout == "fold" else {i: i for i in range(n)}
    best = 0
    for line in lines:
        for i in range(n):
            for d in range(1, min(reach, n - 1) + 1):
                a, b = sorted((place[i], place[(i + d) % n]))
                best = max(best, sum(line[a:b]))
    return float(best)


def _defective(seed: int, grid=(9, 13)):
    try:
        return build_wafer(SMALL, grid=grid, mesh_shape=(1, 1), devices=jax.devices()[:1],
                           defect_seed=seed, defect_rate=0.02)  # fmt: skip
    except DefectError:
        return None


def _wafers():
    found = [w for w in map(_defective, range(10)) if w is not None]
    assert len(found) >= 5
    for axis in (0, 1):  # the draws put detours on both axes, or the checks prove little
        assert sum(ledger.hops(w, axis)[1] > 1 for w in found) >= 3
    return found


def test_the_ring_walk_is_the_slowest_pair_a_loop_finds():
    for w in _wafers():
        for axis in (0, 1):
            lines = _lines(w.remap, axis, w.rows, w.cols)
            for layout in ("fold", "wrap"):
                for reach in (1, 2, 3):
                    want = _walk(lines, layout, reach)
                    assert ledger.ring_hops(w, axis, layout, reach) == want, (axis, layout, reach)


def _entries(w, fn):
    xs = w.place(np.zeros((w.rows, w.cols, 2), np.float32))
    with w.traffic.scope() as entries:
        jax.eval_shape(lambda a: fn(w, a), xs)
    return list(entries)


def test_on_mesh_walks_each_shift_and_multicast_on_its_ring():
    seen_fold_gain = False
    for w in _wafers():
        for direction, axis in (("E", 1), ("W", 1), ("N", 0), ("S", 0)):
            lines = _lines(w.remap, axis, w.rows, w.cols)
            n = (w.rows, w.cols)[axis]
            for d in (1, 2):
                (e,) = _entries(
                    w, lambda v, a, d=d, to=direction: fabric.shift(v, a, to, distance=d)
                )
                (m,) = _entries(w, lambda v, a, d=d, to=direction: fabric.multicast(v, a, to, d))
                for layout in ("fold", "wrap"):
                    want = _walk(lines, layout, d)
                    assert ledger.on_mesh(w, e, {axis: layout}).latency_hops == want
                    assert ledger.on_mesh(w, m, {axis: layout}).latency_hops == want
                if d == 1:
                    # the old rule: FOLD_HOPS x the one-link chain (the axis' longest link)
                    seen_fold_gain |= _walk(lines, "fold", 1) < ledger.FOLD_HOPS * e.latency_hops
                    assert (
                        _walk(lines, "wrap", 1)
                        == max(map(sum, lines))
                        <= (n - 1) * max(map(max, lines))
                    )
    assert seen_fold_gain  # some draw has a lone detour: paid once now, twice before


def test_without_dead_pes_nothing_moves():
    w = build_wafer(SMALL, grid=(9, 13), mesh_shape=(1, 1), devices=jax.devices()[:1])
    for direction, axis in (("E", 1), ("S", 0)):
        n = (w.rows, w.cols)[axis]
        for d in (1, 2, 3, 4):
            (e,) = _entries(w, lambda v, a, d=d, to=direction: fabric.shift(v, a, to, distance=d))
            assert e.latency_hops == d
            assert ledger.on_mesh(w, e, {axis: "fold"}).latency_hops == ledger.FOLD_HOPS * d
            assert ledger.on_mesh(w, e, {axis: "wrap"}).latency_hops == n - 1
    grid = place_grid(grid_wafer(SMALL, (12, 10, 4), mesh_shape=(1, 1)), (12, 10, 4),
                      {"u": "fp32"}, boundary="periodic")  # fmt: skip
    assert detours.halo_detour_hops(grid) == 0.0
    fg = field_grid(SMALL, (12, 10, 3), periodic=(True, False, False), mesh_shape=(1, 1))
    assert _shift_hops(fg) == {"N": 2.0, "S": 2.0, "E": 1.0, "W": 1.0}
    assert _shift_hops(fg, (32, 32)) == {"N": 2.0, "S": 2.0, "E": 1.0, "W": 1.0}


def _halo_line(seed, steps=1):
    cfg = StencilConfig(kind="jacobi", grid=(30, 30, 8), spec=SMALL, steps=steps,
                        boundary="periodic", defect_seed=seed)  # fmt: skip
    report = run_stencil(cfg).report
    return report.cycles_by_mechanism()["hop"], report.assumptions["detours"]


def test_the_seed_3_halo_line_and_price_add_the_slowest_ring_pairs():
    wafer = grid_wafer(SMALL, (30, 30, 8), mesh_shape=(1, 1), defect_seed=3)
    per_axis = [_walk(_lines(wafer.remap, a, 30, 30), "fold", 1) - 2 for a in (0, 1)]
    want = 2 * sum(per_axis)  # two shifts an axis, in series
    old = sum(2 * (ledger.FOLD_HOPS * ledger.hops(wafer, a)[1] - 2) for a in (0, 1))
    assert (want, old) == (6.0, 8.0)
    plain, _ = _halo_line(None)
    detoured, line = _halo_line(3)
    said = float(re.search(r"\(([0-9.]+) per halo exchange\)", line)[1])
    assert said == want
    assert detoured - plain == pytest.approx(want * SMALL.hop_latency_cycles)


def test_a_periodic_field_exchange_waits_for_its_slowest_ring_pair():
    grid = field_grid(SMALL, (30, 30, 1), periodic=(True, True, True), mesh_shape=(1, 1),
                      defect_seed=3)  # fmt: skip
    remap = grid.wafer.remap
    walk = {a: _walk(_lines(remap, a, 30, 30), "fold", 1) for a in (0, 1)}
    assert walk != {0: 2.0, 1: 2.0}  # the seed puts detours on this grid
    by_dir = {"N": walk[0], "S": walk[0], "E": walk[1], "W": walk[1]}
    assert _shift_hops(grid) == by_dir
    # priced over a larger rectangle, the ring spans it: walked on its PEs
    rect = {a: _walk(_lines(remap, a, 32, 31), "fold", 1) for a in (0, 1)}
    assert _shift_hops(grid, (32, 31)) == {d: rect[0 if d in "NS" else 1] for d in "NSEW"}
    z = np.zeros((30, 30, 1))
    step, s0 = shallow_water(grid, dt=1e-3), swe_state(grid, z + 1.0, z, z)
    shifts = [d for _, d, _ in traced_program(step, s0).shifts]
    groups = [shifts[i : i + 4] for i in range(0, len(shifts), 4)]
    assert exchange_hops(grid, shifts) == sum(max(by_dir[d] for d in g) for g in groups)
    phases, traffic = traced_step(grid, step, s0)
    assert phases.total_work().latency_hops == sum(max(by_dir[d] for d in g) for g in groups)
    # the report's traffic: each shift's chain as the mesh moves it (no reductions in a step)
    assert traffic.latency_hops == sum(by_dir[d] for d in shifts)
