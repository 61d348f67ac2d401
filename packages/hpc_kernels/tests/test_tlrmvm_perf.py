"""The TLR-MVM cost model: costs counted by hand on one tile, Cerebras's matvec accounting
by hand, the traced fabric per phase, and plans that change the prediction through the
plan object the emulation runs."""

import dataclasses
import functools

import numpy as np
import pytest
from wse_core import preset
from wse_core.cost.calibration import Calibration
from wse_core.cost.perf import PerfModel
from wse_core.cost.report import RunReport
from wse_core.errors import SramBudgetError
from wse_hpc.tlrmvm import compress, perf
from wse_hpc.tlrmvm.engine import TlrEngine
from wse_hpc.tlrmvm.grouped_plan import plan_grouped
from wse_hpc.tlrmvm.packed import plan_packed
from wse_hpc.tlrmvm.testing import random_vectors, smooth_kernel
from wse_hpc.tlrmvm.wafer import place_plan, plan_placement, tlrmvm

NB, K = 16, 3  # one nb x nb tile of rank K
ISSUE = 3.0  # the presets' dsd_issue_cycles (its prior; uncalibrated models keep it)


@pytest.fixture(scope="module")
def one_tile():
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((NB, K)) @ rng.standard_normal((K, NB))).astype(np.float32)
    op = compress(a, nb=NB, threshold=1e-5)
    assert op.ranks.tolist() == [[K]]
    return op


@pytest.fixture(scope="module")
def op():
    return compress(smooth_kernel(70, 53), nb=12, threshold=1e-3)  # 6 x 5 complex tiles


def _uncalibrated(spec):
    return PerfModel(spec, calibration=Calibration())  # the spec's own constants


@pytest.mark.smoke
def test_one_tile_cost_counted_by_hand(one_tile):
    spec = preset("small")
    eng = TlrEngine.build(one_tile, spec, layout="banded", rank_chunk=K)
    assert eng.plan.grid == (1, 1)
    (prog,) = perf.pe_tiles(eng.plan)
    # phase 1: V^T x, the K x NB piece of the transposed V stack by column AXPY (the
    # published program): NB FMACs of K elements; phase 3: U y, NB x K by column AXPY: K
    # FMACs of NB elements (ch = nb / nt = NB rows per PE). fmac.fp32: 1 element per cycle.
    assert prog.phase1 == (perf.Tile(K, NB),) and prog.phase3 == (perf.Tile(NB, K),)
    model = _uncalibrated(spec)
    p1 = model.cost(prog.work(1, 1))
    assert p1.compute_cycles == NB * (ISSUE + K)
    w1 = prog.work(1, 1)
    assert w1.sram_read_bytes == 8 * K * NB + 4 * NB  # A and y per element, x per column
    assert w1.sram_write_bytes == 4 * K * NB  # y per element
    assert model.cost(prog.work(3, 1)).compute_cycles == K * (ISSUE + NB)
    # the alternative (ours): K row dots of NB into one accumulator
    (alt,) = perf.pe_tiles(eng.plan, "dot")
    assert alt.phase1 == (perf.Tile(K, NB, "dot"),) and alt.phase3 == prog.phase3
    assert model.cost(alt.work(1, 1)).compute_cycles == K * (ISSUE + NB)
    # the engine's report prices the same tiles
    rep = eng.report()
    assert isinstance(rep, RunReport)
    leaf = rep.phases.parts[0].parts[1]
    assert leaf.name == "phase1_vhx" and leaf.work == w1


@pytest.mark.parametrize("spec_name", ["wse2", "wse3"])
def test_phase1_per_tile_counted_by_hand(spec_name):
    """TLR's phase 1 on one PE of the grouped plan of SC23's case (nb = 256, complex, the
    PE's rank rows in three x pieces of 3, 2 and 2 rows: real 6, 4 and 4), as the published
    program runs it: single-tile-matvec's column AXPY over each piece of the transposed V
    stack, 2 nb = 512 FMAC DSDs of 6 (then 4, 4) elements. Each DSD: issue + elements at its
    slowest bound: fmac.fp32 SIMD 1 (both generations, the assumed width), SRAM read 16 B a
    cycle over A and y (8 B an element: 2 a cycle), write 8 B over y (4 B: 2 a cycle)."""
    spec = preset(spec_name)
    model = PerfModel(spec)  # the calibration in force
    issue, cols = model.rates.dsd_issue_cycles, 2 * 256
    assert (spec.fp32_mul_width, spec.sram_read_bytes_per_cycle) == (1.0, 16.0)
    assert spec.sram_write_bytes_per_cycle == 8.0
    pieces = (perf.Tile(6, cols), perf.Tile(4, cols), perf.Tile(4, cols))
    prog = perf.PeProgram(1, pieces, ())
    op = pieces[0].work(1).ops[0]
    assert (op.count, op.length) == (cols, 6)
    assert op.bounds(model.rates) == {"simd": 1.0, "sram_read": 2.0, "sram_write": 2.0}
    # 512 x (issue + 6 / 1) + 2 x 512 x (issue + 4 / 1): 1,536 instructions, 7,168 elements
    hand = cols * (issue + 6) + 2 * cols * (issue + 4)
    cost = model.cost(prog.work(1, 1))
    assert cost.mechanisms["dsd_issue"] == pytest.approx(3 * cols * issue)
    assert cost.mechanisms["simd"] == 14 * cols  # 7,168 elements, 1 a cycle
    assert cost.compute_cycles == pytest.approx(hand)
    # SRAM: A and y read per element and x per column, y written per element; the ports
    # overlap the instruction stream and are not the bound (read: 124 B x 512 / 16 B a
    # cycle = 3,968 cycles; write 56 B x 512 / 8 B = 3,584)
    w = prog.work(1, 1)
    assert w.sram_read_bytes == 8 * 14 * cols + 3 * 4 * cols
    assert w.sram_write_bytes == 4 * 14 * cols
    assert cost.sram_cycles == (8 * 14 + 12) * cols / 16 == 3968
    assert cost.sram_cycles < hand
    assert cost.cycles == pytest.approx(hand)
    # single-tile-matvec's 16-byte padding (not the plans': they fill the SRAM unpadded)
    padded = perf.Tile(6, cols, align=4)
    assert padded.column == 8 and padded.stored_bytes == 4 * 8 * cols
    assert model.cost(padded.work(1)).compute_cycles == pytest.approx(cols * (issue + 8))
    # the alternative (ours): 14 row dots of 512 into one accumulator, 1 element a cycle
    dots = perf.PeProgram(1, tuple(perf.Tile(t.m, t.n, "dot") for t in pieces), ())
    alt = model.cost(dots.work(1, 1))
    assert alt.compute_cycles == pytest.approx(14 * (issue + cols))
    assert alt.compute_cycles < hand
    # the SDK's bytes of each form: the matrix once (relative) is the same program-free count
    dot, axpy = perf.Tile(6, cols, "dot"), pieces[0]
    assert dot.relative_bytes == axpy.relative_bytes == 4 * 6 * cols + 4 * 6 + 4 * cols
    assert dot.absolute_bytes == 8 * 6 * cols + 4 * 6
    assert axpy.absolute_bytes == 12 * 6 * cols + 4 * cols


def test_complex_tile_is_a_real_block_of_twice_the_size(op):
    plan = plan_placement(op, preset("small"), rank_chunk=2)
    (prog,) = perf.pe_tiles(plan)
    assert prog.phase1 == (perf.Tile(2 * 2, 2 * op.nb),)  # [[Re, -Im], [Im, Re]]
    assert prog.phase3 == (perf.Tile(2 * plan.chunk, 2 * op.tiles[1] * 2),)


def test_cerebras_accounting_by_hand(one_tile):
    nb = 256
    t = perf.Tile(nb, nb)  # the SDK's single-tile-matvec per PE
    assert t.relative_bytes == 4 * nb**2 + 8 * nb
    assert t.absolute_bytes == 12 * nb**2 + 4 * nb
    assert t.flops == 2 * nb**2 - nb
    spec = preset("small")
    plan = plan_placement(one_tile, spec, rank_chunk=K)
    model = _uncalibrated(spec)
    # the slowest (only) PE: phases 1 and 3 compute-bound; a GEMV pays the issue overhead
    # of each FMAC DSD (NB columns of K, then K columns of NB), nothing else
    cycles = NB * (ISSUE + K) + K * (ISSUE + NB)
    rel = (4 * K * NB + 4 * K + 4 * NB) + (4 * NB * K + 4 * NB + 4 * K)
    ab = (12 * K * NB + 4 * NB) + (12 * NB * K + 4 * K)  # A, y, y per element; x per column
    # Only the PEs that hold tiles count: one PE per copy, 5 copies, 48 systems (the whole
    # 750 x 994 rectangle is reported beside it, not used).
    got = perf.cerebras_bandwidth(plan, model, systems=48, copies=5)
    pes = 48 * 5 * 1
    assert got["slowest_pe_cycles"] == cycles
    assert got["program_pes"] == pes and got["rectangle_pes"] == 48 * 750 * 994
    assert got["relative_bytes_per_s"] == pytest.approx(rel * pes / (cycles / 850e6))
    assert got["absolute_bytes_per_s"] == pytest.approx(ab * pes / (cycles / 850e6))
    one = perf.cerebras_bandwidth(plan, model, systems=1, copies=5)
    assert got["relative_bytes_per_s"] == pytest.approx(48 * one["relative_bytes_per_s"])
    # A real operator: the PE holds its real tiles, whatever the convention.
    assert got["bytes"] == "held" and got["relative_bytes_per_pe_max"] == rel
    # The SDK's rule: the PE's bytes times the 750 x 994 rectangle per system.
    assert got["sdk_relative_bytes_per_s"] == pytest.approx(rel * 48 * 745_500 / (cycles / 850e6))
    assert got["sdk_absolute_bytes_per_s"] == pytest.approx(ab * 48 * 745_500 / (cycles / 850e6))
    assert got["relative_exceeds_sram"] == 0.0  # rel bytes fit 48 kB
    # the alternative phase 1 (K row dots of NB into one accumulator)
    dot = perf.cerebras_bandwidth(plan, model, systems=48, copies=5, phase1="dot")
    assert dot["phase1_form"] == "dot" and got["phase1_form"] == "axpy"
    assert dot["slowest_pe_cycles"] == K * (ISSUE + NB) + K * (ISSUE + NB)


def test_sdk_rule_counts_a_complex_pe_at_what_it_holds(op):
    # Same rank chunk, same tiles and cycles: the real-split plan's PEs hold the real
    # 2m x 2n tiles (16 B per complex entry) and are credited twice the complex64 plan's.
    spec = preset("small")
    model = _uncalibrated(spec)
    held = plan_placement(op, spec, rank_chunk=2)
    split = plan_placement(op, spec, rank_chunk=2, real_split=True)
    assert split.bytes_per_pe()["tlrmvm.vh"] == 2 * held.bytes_per_pe()["tlrmvm.vh"]
    assert split.bytes_per_pe()["tlrmvm.vectors"] == held.bytes_per_pe()["tlrmvm.vectors"]
    a, b = perf.cerebras_bandwidth(held, model), perf.cerebras_bandwidth(split, model)
    assert (a["bytes"], b["bytes"]) == ("held", "real-split")
    assert a["slowest_pe_cycles"] == b["slowest_pe_cycles"]
    assert b["sdk_relative_bytes_per_s"] == pytest.approx(2 * a["sdk_relative_bytes_per_s"])
    assert b["relative_bytes_per_pe_max"] <= spec.sram_bytes_per_pe


NB_C, K_C = 16, 3  # one complex nb x nb tile of rank K_C


def test_real_split_pe_counted_by_hand_on_wse2():
    """One PE holding one complex NB_C x NB_C tile of rank K_C as real-split tiles on WSE-2:
    V^H (K_C x NB_C complex) as the real 2 K_C x 2 NB_C tile, 16 K_C NB_C bytes, and U the
    same; phase 1 runs 2 NB_C column FMACs of 2 K_C elements (the transposed V piece), phase
    3 2 K_C column FMACs of 2 NB_C elements (fmac.fp32 is 1 wide on WSE-2; its ports allow 2:
    16 B/cycle read for A and y, 8 B/cycle write), each DSD paying the issue."""
    rng = np.random.default_rng(2)
    u, v = (rng.standard_normal((2, *s)) for s in ((NB_C, K_C), (K_C, NB_C)))
    a = (u[0] + 1j * u[1]) @ (v[0] + 1j * v[1])
    one = compress(a.astype(np.complex64), nb=NB_C, threshold=1e-5)
    assert one.ranks.tolist() == [[K_C]]
    spec = preset("wse2")
    plan = plan_placement(one, spec, real_split=True)
    assert (plan.grid, plan.rank_chunk) == ((1, 1), K_C)
    nbytes = plan.bytes_per_pe()
    assert nbytes["tlrmvm.vh"] == nbytes["tlrmvm.u"] == 16 * K_C * NB_C  # 4 B x 2K x 2NB
    assert nbytes["tlrmvm.vectors"] == 8 * (NB_C + K_C + K_C + NB_C)  # x, yv, yu, y: complex
    model = PerfModel(spec)  # the calibration in force
    issue = model.rates.dsd_issue_cycles
    (prog,) = perf.pe_tiles(plan)
    rows, cols = 2 * K_C, 2 * NB_C
    assert prog.phase1 == (perf.Tile(rows, cols),)
    assert prog.phase3 == (perf.Tile(cols, rows),)
    phase1 = cols * (issue + rows)  # 2NB columns of 2K elements, 1 per cycle
    phase3 = rows * (issue + cols)  # 2K columns of 2NB elements, 1 per cycle
    assert model.cost(prog.work(1, 1)).compute_cycles == pytest.approx(phase1)
    assert model.cost(prog.work(3, 1)).compute_cycles == pytest.approx(phase3)
    # the SDK's relative bytes of the two real tiles: the matrix once, x read, y written
    rel = 2 * (4 * rows * cols + 4 * rows + 4 * cols)
    got = perf.cerebras_bandwidth(plan, model)
    assert got["bytes"] == "real-split" and got["relative_bytes_per_pe_max"] == rel
    assert got["slowest_pe_cycles"] == pytest.approx(phase1 + phase3)
    seconds = (phase1 + phase3) / 850e6
    assert got["sdk_relative_bytes_per_s"] == pytest.approx(rel * 750 * 994 / seconds)
    # the same tile held as complex64 is credited half
    held = perf.cerebras_bandwidth(plan_placement(one, spec), model)
    assert held["sdk_relative_bytes_per_s"] == pytest.approx(rel / 2 * 750 * 994 / seconds)


SMALL_SRAM = 2000  # bytes per PE at which every layout's chunk is bound by SRAM on `op`


@pytest.mark.parametrize("planner", [plan_placement, plan_packed, plan_grouped])
def test_real_split_plan_is_sized_for_its_bytes(op, planner):
    # hand-sized PEs: every byte data's (no code and stack reserve, hunt 81)
    spec = dataclasses.replace(
        preset("small"), sram_bytes_per_pe=SMALL_SRAM, code_stack_bytes_per_pe=0
    )
    is_grouped = planner is plan_grouped
    if is_grouped:  # at the group size whose product is priced fastest
        planner = functools.partial(plan_grouped, price=perf.product_s)
    held, split = planner(op, spec), planner(op, spec, real_split=True)
    assert split.real_split and split.describe()["real_split"] is True
    w = split.rank_chunk
    assert split.bytes_per_pe()["tlrmvm.vh"] == 16 * w * op.nb  # the real 2w x 2nb tile
    assert sum(split.bytes_per_pe().values()) <= SMALL_SRAM
    assert w < held.rank_chunk  # the held plan's PEs could not hold their real-split tiles
    assert sum(dataclasses.replace(held, real_split=True).bytes_per_pe().values()) > SMALL_SRAM
    if is_grouped:  # the largest chunk at its group size
        wider = dataclasses.replace(split, rank_chunk=w + 1)
        assert sum(wider.bytes_per_pe().values()) > SMALL_SRAM
    else:
        with pytest.raises(SramBudgetError):  # the largest chunk that fits
            planner(op, spec, rank_chunk=w + 1, real_split=True)
    c = perf.cerebras_bandwidth(split, PerfModel(spec))
    assert c["bytes"] == "real-split" and c["relative_exceeds_sram"] == 0.0


def test_a_real_split_plan_runs_the_same_product(op):
    spec = preset("small")
    plan = plan_placement(op, spec, rank_chunk=2, batch=2, real_split=True)
    wafer, bases = place_plan(op, spec, plan)
    assert wafer.sram.used_bytes() == sum(plan.bytes_per_pe().values())
    x = random_vectors(op.shape[1], 2, op.dtype)
    y = np.asarray(tlrmvm(wafer, plan).matvec_fn(bases, x))
    np.testing.assert_allclose(y, op.dense() @ x, rtol=2e-5, atol=2e-5 * np.abs(y).max())


def test_the_experiment_refuses_bytes_a_pe_cannot_hold():
    """The held plan's PEs credited with their real-split tiles: refused, not flagged."""
    from wse_hpc.studies.ltaief23_tlrmvm import checked

    spec = dataclasses.replace(
        preset("small"), sram_bytes_per_pe=SMALL_SRAM, code_stack_bytes_per_pe=0
    )
    op = compress(smooth_kernel(70, 53), nb=12, threshold=1e-3)
    held = plan_placement(op, spec)
    model = PerfModel(spec)
    assert checked(perf.cerebras_bandwidth(held, model), spec, "held")["bytes"] == "held"
    over = perf.cerebras_bandwidth(dataclasses.replace(held, real_split=True), model)
    assert over["relative_exceeds_sram"] == 1.0
    with pytest.raises(SramBudgetError, match="more than the 2,000 B its SRAM holds for data"):
        checked(over, spec, "real-split on the held plan")


@pytest.mark.cpu_devices
def test_fabric_phases_come_from_the_traced_product(op):
    eng = TlrEngine.build(op, preset("small"), mesh_shape=(2, 4), layout="packed")
    fab = perf.fabric_by_phase(eng.wafer, eng.plan, eng.fns)
    assert set(fab) == {"x_in", "reshuffle", "y_sum"}
    nt, w = op.tiles[1], eng.plan.rank_chunk
    # ring allgather east: nt - 1 slices of w complex64 (2 words each) out of each PE
    assert dict(fab["reshuffle"].links) == {"E": (nt - 1) * 2 * w}
    rep = eng.report()
    ring = rep.predicted.leaf("reshuffle")
    assert ring.cost.busiest_link == "E"
    per_cycle = preset("small").link_bytes_per_cycle / 4  # words per link per cycle
    assert ring.cost.fabric_cycles == pytest.approx((nt - 1) * 2 * w / per_cycle)


@pytest.mark.parametrize("layout", ["banded", "packed", "grouped"])
def test_plan_changes_the_prediction_through_the_same_object(op, layout):
    spec = preset("small")
    a = TlrEngine.build(op, spec, layout=layout, rank_chunk=2)
    b = TlrEngine.build(op, spec, layout=layout, rank_chunk=4)
    ra, rb = a.report(), b.report()
    assert ra.predicted_s != rb.predicted_s
    for eng, rep in ((a, ra), (b, rb)):  # phase 1 is the busiest PE's tiles of its plan
        works = [p.work(1, 1) for p in perf.pe_tiles(eng.plan)]
        assert rep.phases.parts[0].parts[1].work in works
        assert rep.extra["plan"] == eng.plan.describe()


def test_layouts_price_different_programs(op):
    spec = preset("small")
    reps = {
        layout: TlrEngine.build(op, spec, layout=layout, rank_chunk=2).report()
        for layout in ("banded", "packed", "grouped")
    }
    assert len({r.predicted_s for r in reps.values()}) == 3
    assert reps["banded"].predicted.leaf("y_sum").cost.busiest_link == "N"  # the band sum


def test_systems_and_copies_scale_the_figures(op):
    eng = TlrEngine.build(op, preset("wse2"), layout="grouped")
    one = eng.report(systems=1, fill=True)
    many = eng.report(systems=48, fill=True)
    assert one.extra["copies_per_system"] > 1
    assert many.extra["model_bytes_per_s"] == pytest.approx(48 * one.extra["model_bytes_per_s"])
    c1, c48 = one.extra["cerebras"], many.extra["cerebras"]
    assert c48["absolute_bytes_per_s"] == pytest.approx(48 * c1["absolute_bytes_per_s"])
    # The accounting covers the copies' tile-holding PEs, at most the 745,500 rectangle.
    copies = one.extra["copies_per_system"]
    assert c1["program_pes"] == copies * c1["tile_pes_per_copy"] <= c1["rectangle_pes"] == 745_500
    # Complex operator held as complex64: half the SDK count of the real tiles it runs.
    real = sum(
        p.pes * sum(t.relative_bytes for t in p.phase1 + p.phase3) for p in perf.pe_tiles(eng.plan)
    )
    assert c1["bytes"] == "held"
    assert c1["relative_bytes_per_pe"] == pytest.approx(real / 2 / c1["tile_pes_per_copy"])
    assert "tlrmvm complex" in one.assumptions


def test_a_timed_products_report_is_the_engines_own_plan(op):
    """`engine.report(measured_wall_s=...)`: the caller's measured product beside the
    prediction of the engine's own plan (its description, its wafer's SRAM ledger, the
    phase 1 tiles of its busiest PE), which the measurement does not move."""
    eng = TlrEngine.build(op, preset("small"), layout="grouped", rank_chunk=2)
    x = np.random.default_rng(1).standard_normal(op.shape[1]).astype(op.dtype)
    wall_s = eng.time_matvec(x, repeats=2)
    rep = eng.report(measured_wall_s=wall_s)
    assert isinstance(rep, RunReport) and rep.measured_wall_s == wall_s > 0
    assert rep.extra["plan"] == eng.plan.describe() and rep.sram == eng.wafer.sram.summary()
    works = [p.work(1, 1) for p in perf.pe_tiles(eng.plan)]
    assert rep.phases.parts[0].parts[1].work in works
    plan_only = eng.report()
    assert plan_only.measured_wall_s is None and plan_only.predicted_s == rep.predicted_s
