"""Hunt 73: a fabric chain's latency is its slowest line's, summed link by link.

Broken before: every chain was priced at its length times the longest single link anywhere
on the grid (`ledger.hops(...)[1]`), so one detour of one extra hop doubled a whole-row
broadcast (762 x 1176 at seed 0: 2,350 hop cycles where its slowest row is 1,179 hops), and
a multicast over k links paid k times it (20 hops for 4 links). Mechanisms.png labelled
fabric-collectives' four ops on a grid alike ("wafer_cycles 8x8").

Oracles: Python loops over every line and window of the defect repair's per-link hop map
(`Remap.link_hops`), hand counts around one dead PE, and plain chain lengths without dead
PEs.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from wse_core import DefectError, DefectMap, fabric, preset, remap
from wse_core.cost.assumptions import assumed_spec
from wse_core.fabric import ledger
from wse_core.hw.wafer import build_wafer
from wse_core.studies.experiment import PredictionRow
from wse_core.studies.mechanism_figure import mechanism_figure, row_labels


def _wafer(grid, **kw):
    return build_wafer(preset("small"), grid=grid, mesh_shape=(1, 1), **kw)


def _defective(seed):
    """A 9 x 13 grid with dead PEs drawn at 2% (None where the draw is unrepairable)."""
    try:
        return _wafer((9, 13), defect_seed=seed, defect_rate=0.02)
    except DefectError:
        return None


def _lines(w, axis):
    """Each row's (axis 1) or column's (axis 0) physical hops per logical link, as lists."""
    h = w.remap.link_hops(axis)
    if axis == 1:
        return [[int(h[r, c]) for c in range(w.cols - 1)] for r in range(w.rows)]
    return [[int(h[r, c]) for r in range(w.rows - 1)] for c in range(w.cols)]


def _slowest(lines, span):
    """The most physical hops on `span` consecutive links of any line; past a line's end,
    the whole line plus one hop a link beyond it."""
    best = float(span)
    for line in lines:
        k = min(span, len(line))
        for i in range(len(line) - k + 1) if k else ():
            best = max(best, float(sum(line[i : i + k]) + span - k))
    return best


def _to_centre(lines, n):
    """n // 2 links (the farthest PE's walk to PE (n - 1) // 2; hunt 76: (n - 1) / 2, half a
    link short on an even line) plus the most detour hops on a line's half, from either end
    to PE ceil(n / 2) - 1."""
    c = (n - 1) // 2
    extra = 0
    for line in lines:
        extra = max(extra, sum(line[:c]) - c, sum(line[c:]) - (n - 1 - c))
    return n // 2 + extra


def _flood(w, rows, cols):
    """Hops of the flood back from the centre PE, by loops: the centre column's links from
    the centre row to row r, then row r's links from the centre column to its far end."""
    mr, mc = (w.rows - 1) // 2, (w.cols - 1) // 2
    down = cols[mc]  # the centre column's N-S links, top to bottom
    return max(
        sum(down[min(r, mr) : max(r, mr)]) + max(sum(rows[r][:mc]), sum(rows[r][mc:]))
        for r in range(w.rows)
    )


def _latency(w, fn):
    xs = w.place(np.zeros((w.rows, w.cols, 2), np.float32))
    return fabric.count(w, lambda a: fn(w, a), xs).latency_hops


def _wafers():
    found = [w for w in map(_defective, range(12)) if w is not None]
    # the draws must exercise both axes, or the comparisons below prove little
    assert len(found) >= 6
    assert sum(any(h > 1 for line in _lines(w, 1) for h in line) for w in found) >= 3
    assert sum(any(h > 1 for line in _lines(w, 0) for h in line) for w in found) >= 3
    return found


def test_chain_hops_is_the_slowest_window_a_loop_finds():
    for w in _wafers():
        for axis in (0, 1):
            lines = _lines(w, axis)
            for span in range(0, (w.rows, w.cols)[axis] + 2):
                assert ledger.chain_hops(w, axis, span) == _slowest(lines, span), (axis, span)


def test_each_op_records_its_slowest_line_chain():
    for w in _wafers():
        rows, cols = _lines(w, 1), _lines(w, 0)
        # a zero-boundary shift by the whole axis moves nothing: no chain (hunt 82)
        for d in range(1, w.cols + 1):
            got = _latency(w, lambda v, a, d=d: fabric.shift(v, a, "E", distance=d))
            assert got == (_slowest(rows, d) if d < w.cols else 0)
        for d in range(1, w.rows + 1):
            got = _latency(w, lambda v, a, d=d: fabric.shift(v, a, "N", distance=d))
            assert got == (_slowest(cols, d) if d < w.rows else 0)
        for k in (1, 3, 5):
            assert _latency(w, lambda v, a, k=k: fabric.multicast(v, a, "W", k)) == _slowest(
                rows, k
            )
            assert _latency(w, lambda v, a, k=k: fabric.multicast(v, a, "S", k)) == _slowest(
                cols, k
            )
        # a broadcast floods out of its source both ways: the worst line's longer side (from
        # an end, the whole line; hunt 77: it was the whole line wherever the source sat)
        assert _latency(w, lambda v, a: fabric.broadcast(v, a, "row", 0)) == max(map(sum, rows))
        sides = max(max(sum(line[:2]), sum(line[2:])) for line in cols)
        assert _latency(w, lambda v, a: fabric.broadcast(v, a, "col", 2)) == sides
        along_rows, down_cols = _to_centre(rows, w.cols), _to_centre(cols, w.rows)
        centre_col = _to_centre([cols[(w.cols - 1) // 2]], w.rows)
        assert _latency(w, lambda v, a: fabric.allreduce(v, a, axis="row")) == 2 * along_rows
        assert _latency(w, lambda v, a: fabric.allreduce(v, a, axis="col")) == 2 * down_cols
        # the grid: each row to its centre column, then that column to its centre; back, the
        # flood's slowest path, walked: down the centre column to a row, then that row's
        # longer side (hunt 81: it was the slowest row half plus the column's, paid again,
        # two maxima that need not lie on one path)
        grid = along_rows + centre_col
        assert _latency(w, lambda v, a: fabric.allreduce(v, a)) == grid + _flood(w, rows, cols)
        assert _latency(w, lambda v, a: fabric.reduce(v, a, "max")) == grid


def test_without_dead_pes_each_chain_is_its_length():
    w = _wafer((7, 10))
    for d in (1, 4, 9):
        assert _latency(w, lambda v, a, d=d: fabric.shift(v, a, "W", distance=d)) == d
    # by all 10 columns, every value leaves the grid: nothing moves (hunt 82: 10 hops)
    assert _latency(w, lambda v, a: fabric.shift(v, a, "W", distance=10)) == 0
    assert _latency(w, lambda v, a: fabric.multicast(v, a, "N", 6)) == 6
    assert _latency(w, lambda v, a: fabric.broadcast(v, a, "row", 9)) == 9
    assert _latency(w, lambda v, a: fabric.broadcast(v, a, "col", 3)) == 3  # 3 each way
    assert _latency(w, lambda v, a: fabric.allreduce(v, a, axis="row")) == 10  # 2 x 10 // 2
    assert _latency(w, lambda v, a: fabric.reduce(v, a)) == 10 // 2 + 7 // 2
    assert ledger.chain_hops(w, 1, 4) == 4 and ledger.chain_hops(w, 0, 0) == 0


def _one_dead(grid, at):
    """A wafer whose only dead PE is physical `at` (row, column)."""
    spec = preset("small")
    dead = np.zeros((spec.physical_rows, spec.physical_cols), bool)
    dead[at] = True
    dm = DefectMap(dead=dead, seed=None, rate=0.0)
    return dataclasses.replace(_wafer(grid), defects=dm, remap=remap(spec, dm))


def test_one_detour_adds_its_extra_hops_once():
    # Physical PE (3, 4) dead: row 3's logical PEs from column 4 on sit one column east, so
    # row 3's link 3-4 is 2 hops, and each column from 4 on bends on its way into and out
    # of row 3 (2 extra hops a column); nothing else moves.
    w = _one_dead((9, 12), (3, 4))
    assert _latency(w, lambda v, a: fabric.broadcast(v, a, "row", 0)) == 11 + 1  # was 22
    assert _latency(w, lambda v, a: fabric.broadcast(v, a, "col", 0)) == 8 + 2  # was 16
    assert _latency(w, lambda v, a: fabric.multicast(v, a, "E", 4)) == 4 + 1  # was 8
    assert _latency(w, lambda v, a: fabric.multicast(v, a, "S", 1)) == 2  # the longest link
    assert _latency(w, lambda v, a: fabric.multicast(v, a, "S", 2)) == 2 + 2  # both bends
    # row 3's detour is on the west half of its row (link 3-4; centre PE 5); the centre
    # column (5) bends on links 2-3 and 3-4, both north of its centre PE 4: 2 extra there.
    # In: rows 6 + 1, the column 4 + 2. Back, the flood's slowest path: up the centre column
    # to row 0 (4 links + 2 bends) and along row 0's longer side (6 links): 12. Row 3, with
    # the row detour, is 2 + 6 = 8 (hunt 81: the flood paid both detours, 26 in all).
    assert _latency(w, lambda v, a: fabric.allreduce(v, a)) == (6 + 1) + (4 + 2) + (4 + 2 + 6)


def test_the_full_wafer_broadcast_is_its_slowest_row():
    """The hunt's own case: WSE-3, 762 x 1176, seed 0 (191 of its row links detour)."""
    spec = assumed_spec("wse3")
    w = build_wafer(spec, grid=(spec.pe_rows, spec.pe_cols), defect_seed=0)
    links = w.remap.link_hops(1)[: w.rows, : w.cols - 1]
    x = jax.ShapeDtypeStruct(w.padded_shape + (16,), jnp.float32, sharding=w.sharding(1))
    got = fabric.count(w, lambda a: fabric.broadcast(w, a, "row", 0), x).latency_hops
    assert got == links.sum(axis=1).max()
    assert got < 2 * (w.cols - 1)  # the longest link times the row was 2,350


def _rows(grids, ops):
    params = [{"preset": "wse3", "grid": g, "op": o, "per": "op"} for g in grids for o in ops]
    return [
        PredictionRow(n, 1.0, "cycles", p, mechanisms={"hop": 1.0, "link": 2.0})
        for p in params
        for n in ("wafer_cycles", "wafer_us")
    ]


def test_mechanism_labels_name_what_differs_between_rows():
    rows = _rows(("8x8", "64x64"), ("shift", "multicast4", "broadcast_row", "allreduce"))
    labels = row_labels(rows)
    assert len(set(labels)) == len(rows)
    for p, text in zip(rows, labels, strict=True):
        assert text.startswith(p.name)
        assert p.params["grid"] in text and f"op={p.params['op']}" in text
        assert "wse3" not in text and "per" not in text  # alike in every row: left out
    fig = mechanism_figure(rows)
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == labels


def test_rows_alike_in_every_param_are_numbered():
    rows = _rows(("8x8",), ("shift",)) * 2
    assert row_labels(rows) == [
        "wafer_cycles #1",
        "wafer_us #1",
        "wafer_cycles #2",
        "wafer_us #2",
    ]
    one = _rows(("8x8",), ("shift",))[:1]
    assert row_labels(one) == ["wafer_cycles"]
    # a param only some rows have still tells them apart
    extra = dataclasses.replace(one[0], params={**one[0].params, "nz": 64})
    assert row_labels([one[0], extra]) == ["wafer_cycles", "wafer_cycles 64"]
