"""Hunt 82 (H5): a traced shift or broadcast records traffic only on links that exist and
from PEs that send.

Broken before: `ledger.record_shift` recorded n x w words and a hop of latency whatever the
axis: a zero-boundary shift S on a 1 x 9 grid (no S neighbour; the result is all zeros) was
priced 1 link word and 1 hop (2 cycles), as was shift E on 9 x 1 and 1 x 1; a row broadcast
on 9 x 1 (rows of one PE) sent a word each way; and the last line of PEs, which sends
nothing, was counted (2 x 2 shift E: 4 words where 2 move; the tiny wafer with dead PEs:
64 words and 86.9 word-hops where 56 words cross 76 physical hops). The stencil's wafer
view painted those words on the edge lines.

Oracles: counted by hand per grid (the PEs with a neighbour that way, one 4 B word each; a
cycle a link word and a cycle a hop on `small` and `tiny`), and the physical hops walked
link by link over the remap's own positions with Python loops.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import fabric, preset
from wse_core.cost.perf import PerfModel, Work
from wse_core.hw.defects import DefectMap, remap
from wse_core.hw.wafer import build_wafer


def _count(w, fn):
    x = jax.ShapeDtypeStruct(w.padded_shape + (1,), jnp.float32, sharding=w.sharding(1))
    t = fabric.count(w, lambda a: fn(w, a), x)
    return t, PerfModel(w.spec).cost(Work.from_traffic(t)).cycles


def _shift(direction, boundary="zero"):
    return lambda w, a: fabric.shift(w, a, direction, boundary=boundary)


# grid, direction, PEs that send (by hand: those with a neighbour that way)
SHIFTS = [
    ((1, 9), "S", 0),  # no row below: nothing moves
    ((1, 9), "N", 0),
    ((1, 9), "E", 8),  # columns 0..7 send, column 8 has no east neighbour
    ((9, 1), "E", 0),
    ((9, 1), "W", 0),
    ((9, 1), "S", 8),
    ((1, 1), "N", 0),
    ((1, 1), "E", 0),
    ((2, 2), "E", 2),  # column 0 of each row
    ((2, 2), "N", 2),  # row 1 of each column
]


@pytest.mark.parametrize(("grid", "direction", "senders"), SHIFTS)
def test_a_zero_boundary_shift_moves_only_what_has_a_neighbour(grid, direction, senders):
    w = build_wafer(preset("small"), grid=grid)
    t, cycles = _count(w, _shift(direction))
    assert (t.words, t.word_hops) == (senders, senders)  # one word a sender, one hop a link
    if senders:
        assert (t.latency_hops, dict(t.links), cycles) == (1, {direction: 1}, 1 + 1)
    else:  # no entry, no hop, no link word: 0 cycles (2 before)
        assert (t.count, t.latency_hops, dict(t.links), cycles) == (0, 0, {}, 0)


def test_a_periodic_shift_sends_from_every_pe():
    w = build_wafer(preset("small"), grid=(1, 9))
    t, _ = _count(w, _shift("E", "periodic"))
    assert t.words == 9  # the rotation: column 8 sends round to column 0


def test_the_halo_of_a_line_has_no_north_or_south():
    w = build_wafer(preset("small"), grid=(1, 9))
    t, _ = _count(w, lambda v, a: fabric.halo_apply(v, a, lambda r: r[1:-1, 1:-1]))
    assert t.count == 2 and t.words == 8 + 8  # E and W: 8 senders each; N and S: none
    assert set(t.links) == {"E", "W"}


@pytest.mark.parametrize(
    ("grid", "source", "links"),
    [((9, 1), 0, {}), ((1, 9), 0, {"E": 1}), ((1, 9), 8, {"W": 1}), ((1, 9), 4, {"E": 1, "W": 1})],
)
def test_a_row_broadcast_sends_only_along_links_that_exist(grid, source, links):
    w = build_wafer(preset("small"), grid=grid)
    t, cycles = _count(w, lambda v, a: fabric.broadcast(v, a, "row", source))
    assert dict(t.links) == links
    if not links:  # rows of one PE: nothing is sent (1 cycle before)
        assert (t.count, cycles) == (0, 0)


def test_word_hops_walk_the_detours_of_the_links_used():
    spec = preset("tiny")
    dead = np.zeros((spec.physical_rows, spec.physical_cols), bool)
    dead[3, 2] = True  # row 3 shifts from column 2 on
    dead[5, :] = True  # row 5 retired: the spare row takes over
    repaired = remap(spec, DefectMap(dead, None, 0.01))
    w = dataclasses.replace(
        build_wafer(spec, grid=(spec.pe_rows, spec.pe_cols)),
        defects=DefectMap(dead, None, 0.01),
        remap=repaired,
    )
    rows, cols = spec.pe_rows, spec.pe_cols
    pr, pc = repaired.phys_row, repaired.phys_col

    def hop(r, c, r2, c2):  # physical Manhattan steps between two logical PEs' positions
        return abs(int(pr[r2]) - int(pr[r])) + abs(int(pc[r2, c2]) - int(pc[r, c]))

    down = sum(hop(r, c, r + 1, c) for r in range(rows - 1) for c in range(cols))
    across = sum(hop(r, c, r, c + 1) for r in range(rows) for c in range(cols - 1))
    for direction, links, hops in [("N", cols * (rows - 1), down),
                                   ("E", rows * (cols - 1), across)]:  # fmt: skip
        t, _ = _count(w, _shift(direction))
        assert t.words == links  # one word a link: every PE with a neighbour that way sends
        assert t.word_hops == pytest.approx(hops, rel=1e-12)  # 76 and 57 by hand
