"""Hunt 81: one fabric op, one price.

Broken before: the traced `fabric.allreduce` (`ledger.record_reduce`) paid the tree's depth
(its relay stages) with 2 w words a link, a chain's contention, while `fabric-collectives`
priced Luczynski et al.'s tree with its contention B ceil(log2 p): 2,274 against 2,592
cycles on the full WSE-3 at 16 words, 96 against 144 on 7 x 9; the traced detours summed
each axis' worst (194 hops where the slowest path has 192); its word-hops were one hop a
word; and one fp16 was half a wavelet, one bool a quarter. Now every reduction is
`collectives.reduction`'s price, which the ledger records and the experiment reads, and a
message is whole wavelets.

Oracles: cycles, word-hops and wavelets counted by hand on small grids (the arithmetic in
the comments), and every reduction's detours walked PE by PE over the wafer's own links
(`Remap.link_hops`) with Python loops.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import fabric, preset
from wse_core.cost.assumptions import assumed_spec
from wse_core.cost.collectives import line_word_hops
from wse_core.cost.perf import PerfModel, Work
from wse_core.hw.wafer import build_wafer
from wse_core.studies import fabric_collectives


def _count(w, fn, per_pe=(4,), dtype=jnp.float32):
    x = jax.ShapeDtypeStruct(w.padded_shape + per_pe, dtype, sharding=w.sharding(len(per_pe)))
    return fabric.count(w, lambda a: fn(w, a), x)


def test_a_3x5_allreduce_counted_by_hand():
    # tiny: T_R = 2 (a relay 5 cycles), 1 cycle a hop, one 4 B wavelet a cycle; 4 words a PE.
    # Rows (5 PEs to PE 2): two halves of 3 PEs; a line of 3 by star 4*2 + 2 + 5 = 15 (chain
    # 4 + 2 + 10 = 16, tree and two-phase 8 + 2 + 10 = 20): C 8, L 2, D 1; the join of an odd
    # line 0 hops, 4 words, 1 relay. The column (3 PEs to PE 1): halves of 2, all four 10
    # (star first): C 4, L 1, D 1; the join 4 words, 1 relay. The flood: 4 words, 1 + 2
    # hops, 1 relay. Ramp 8 + 4 + 4 + 4 + 4 = 24, hops 2 + 1 + 3 = 6, relays 5.
    w = build_wafer(preset("tiny"), grid=(3, 5))
    t = _count(w, lambda v, a: fabric.allreduce(v, a, "sum"))
    assert (t.links["ramp"], t.latency_hops, t.relay_stages) == (24, 6, 5)
    assert PerfModel(w.spec).cost(Work.from_traffic(t)).cycles == 24 + 6 + 5 * 5  # 55 (was 39)
    # word-hops: each row's halves send over 2 + 1 links each (star): 6 links a row, 3 rows;
    # the centre column 1 + 1; the flood over the column's 2 links and each row's 4: 14.
    assert t.word_hops == 4 * (3 * 6 + 2 + 14)  # 136 (was 120, one hop a word)
    assert t.words == 3 * 5 * 4 * 2  # reduce and flood back: each PE's words once each way


def test_line_word_hops_by_hand():
    # 8 PEs to PE 0: star 7 + 6 + ... + 1 = 28; chain 7; tree 4 senders x 1 + 2 x 2 + 1 x 4
    # = 12 (B p/2 log2 p); two-phase: groups of 3 (PEs 0-2, 3-5, 6-7), 8 - 3 = 5 one-link
    # sends, then the groups' firsts 6 -> 3 -> 0, 3 links each
    assert [line_word_hops(a, 8, 1) for a in ("star", "chain", "tree", "two_phase")] == [
        28,
        7,
        12,
        11,
    ]
    # 5 PEs: tree, level 1 PEs 1, 3 (1 link each), level 2 PE 2 (2 links), level 3 PE 4 (4)
    assert line_word_hops("tree", 5, 2) == 2 * (1 + 1 + 2 + 4)


def test_the_experiment_prices_what_a_kernel_pays():
    # 7 x 9 on WSE-3 at 16 words, seed 0 (no dead PE inside): the experiment's rows are the
    # traced ops' prices, as a kernel pays them. The allreduce, 144 cycles, is counted by
    # hand in the next test; the shift: 16 words, 1 hop, one exchange's relay, 16 + 1 + 5.
    grid = (7, 9)
    monkey = pytest.MonkeyPatch()
    monkey.setattr(fabric_collectives, "GRIDS", (grid,))
    monkey.setattr(fabric_collectives, "_measure", lambda *a, **k: {})
    try:
        res = fabric_collectives.run(quick=True, seed=0)
    finally:
        monkey.undo()
    rows = {p.params["op"]: p.value for p in res.predictions if p.name == "wafer_cycles"}
    spec = assumed_spec("wse3")
    w = build_wafer(spec, grid=grid, defect_seed=0)
    model = PerfModel(spec)
    ar = _count(w, lambda v, a: fabric.allreduce(v, a, "sum"), (16,))
    shift = _count(w, lambda v, a: fabric.shift(v, a, "E"), (16,))
    # at WSE-3's fitted hop h and relay 2 T_R + 1 (CS-3's MeshGEMV rows; 1 and 5 before)
    h, relay = model.rates.hop_latency_cycles, 2 * model.rates.ramp_latency_cycles + 1
    assert rows["allreduce"] == model.cost(Work.from_traffic(ar)).cycles
    assert rows["allreduce"] == pytest.approx(80 + 14 * h + 10 * relay)  # 144 at 1 and 5
    assert rows["shift"] == model.cost(Work.from_traffic(shift, exchanges=1)).cycles
    assert rows["shift"] == pytest.approx(16 + h + relay)  # 22 at 1 and 5


def test_the_7x9_allreduce_by_hand():
    # WSE-3 constants as tiny's. 16 words. Rows: 9 PEs, halves of 5: star 64 + 4 + 5 = 73,
    # chain 16 + 4 + 20 = 40, tree (3 levels) 48 + 4 + 15 = 67, two-phase (s = 3) 32 + 4 + 20
    # = 56: chain, C 16, L 4, D 4; join 16 words, 0 hops, 1 relay. Column: 7 PEs, halves of 4:
    # star 48 + 3 + 5 = 56, chain 16 + 3 + 15 = 34, tree 32 + 3 + 10 = 45, two-phase 32 + 3 +
    # 10 = 45: chain, C 16, L 3, D 3; join 16, 1 relay. Flood 16 words, 3 + 4 hops, 1 relay.
    # Ramp 16 * 5 = 80, hops 4 + 3 + 7 = 14, relays 4 + 1 + 3 + 1 + 1 = 10: 80 + 14 + 50.
    w = build_wafer(assumed_spec("wse3"), grid=(7, 9), defect_seed=0)
    t = _count(w, lambda v, a: fabric.allreduce(v, a, "sum"), (16,))
    assert (t.links["ramp"], t.latency_hops, t.relay_stages) == (80, 14, 10)
    rates = PerfModel(w.spec).rates  # WSE-3's fitted hop and relay (1 and 5 give 144)
    h, relay = rates.hop_latency_cycles, 2 * rates.ramp_latency_cycles + 1
    assert PerfModel(w.spec).cost(Work.from_traffic(t)).cycles == pytest.approx(
        80 + 14 * h + 10 * relay
    )


def _walk(remap, rows, cols, axes, back):
    """Extra hops of a reduction's slowest path by loops: every line to its centre (a row to
    the centre column, a column to the centre row), with both axes the centre column to the
    centre PE; back, the flood from the centre out to every PE along the same lines."""
    ns, ew = remap.link_hops(0) - 1, remap.link_hops(1) - 1
    mr, mc = math.ceil(rows / 2) - 1, math.ceil(cols / 2) - 1

    def along_row(r, c):
        return sum(ew[r, k] for k in range(min(c, mc), max(c, mc)))

    def along_col(r, c):
        return sum(ns[k, c] for k in range(min(r, mr), max(r, mr)))

    if axes == (1,):
        one = max(along_row(r, c) for r in range(rows) for c in (0, cols - 1))
        return one * (2 if back else 1)
    if axes == (0,):
        one = max(along_col(r, c) for c in range(cols) for r in (0, rows - 1))
        return one * (2 if back else 1)
    rows_in = max(along_row(r, c) for r in range(rows) for c in (0, cols - 1))
    col_in = max(along_col(r, mc) for r in (0, rows - 1))
    flood = max(along_col(r, mc) + along_row(r, c) for r in range(rows) for c in (0, cols - 1))
    return rows_in + col_in + (flood if back else 0)


@pytest.mark.parametrize(
    "name,grid,seed,rate",
    [("wse3", (48, 40), 3, None), ("wse3", (64, 96), 3, None)]
    + [("small", (9, 13), s, 0.02) for s in (0, 2, 7)],
)
def test_every_reductions_detours_are_its_slowest_path_walked(name, grid, seed, rate):
    spec = assumed_spec(name)
    w = build_wafer(spec, grid=grid, defect_seed=seed, defect_rate=rate)
    clean = build_wafer(spec, grid=grid)
    ops = {
        ((0, 1), True): lambda v, a: fabric.allreduce(v, a),
        ((1,), True): lambda v, a: fabric.allreduce(v, a, axis="row"),
        ((0,), True): lambda v, a: fabric.allreduce(v, a, axis="col"),
        ((0, 1), False): lambda v, a: fabric.reduce(v, a),
    }
    moved = 0.0
    for (axes, back), op in ops.items():
        extra = _count(w, op).latency_hops - _count(clean, op).latency_hops
        assert extra == _walk(w.remap, *grid, axes, back), (axes, back)
        moved += extra
    assert moved > 0  # the draws detour links inside the grid, or this proves little


@pytest.mark.parametrize(
    "dtype,per_pe,wavelets",
    [
        (jnp.float16, (), 1),  # 2 B: a whole wavelet (was 0.5)
        (jnp.bool_, (), 1),  # 1 B (was 0.25)
        (jnp.int8, (3,), 1),  # 3 B packed (was 0.75)
        (jnp.float16, (3,), 2),  # 6 B (was 1.5)
        (jnp.float16, (4,), 2),  # 8 B: two packed pairs
        (jnp.float32, (3,), 3),
    ],
)
def test_a_message_is_whole_wavelets(dtype, per_pe, wavelets):
    w = build_wafer(preset("small"), grid=(16, 16))
    t = _count(w, lambda v, a: fabric.shift(v, a, "E"), per_pe, dtype)
    assert dict(t.links) == {"E": wavelets}
    assert t.words == 16 * 15 * wavelets  # the 15 columns with an east neighbour send


def test_a_window_row_is_one_message():
    # a 3-wide window of one fp16 a PE: E and W multicasts of one value (1 wavelet each
    # link), then N and S shifts of the window's row, 3 fp16 = 6 B: 2 wavelets, not 3
    w = build_wafer(preset("small"), grid=(16, 16))
    x = jax.ShapeDtypeStruct(w.padded_shape, jnp.float16, sharding=w.sharding())
    with w.traffic.scope() as entries:
        jax.eval_shape(lambda a: fabric.window_apply(w, a, 1, 1, lambda r: r[1:-1, 1:-1]), x)
    shifts = [dict(e.links) for e in entries if e.op.startswith("shift")]
    assert shifts == [{"S": 2}, {"N": 2}]
    assert np.isfinite(sum(e.words for e in entries))
