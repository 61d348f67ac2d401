"""Issue 41 (fix86-sdkctl): the "sdk" GEMV program's control instructions, counted by hand
from the SDK's examples (Cerebras/csl-examples at 162e0f3; `wse_systems.matvec.SOURCE`):
per product, the axpy's 8 (the task's @activate, gemv_map's call and return, its 3
@load_to_dsr, the @map's counter and input DSD: single-tile-matvec pe_matvec.csl lines
68-81) and the reduce task's start, 1 + 3 per @faddh into the row's middle PE
(gemv-checkerboard-pattern pe.csl lines 102, 117-122), both on the axpy's core work before
the reduce streams; none per column AXPY (the @map's loop is `dsd_issue_cycles`').

Oracles: those hand counts, and the same product priced with the control constant changed
(everything else equal), at CS-3's fitted constant and at WSE-2's assumed 1."""

from __future__ import annotations

import math

import pytest
from wse_core import PerfModel, preset
from wse_core.cost.assumptions import assume, assumed_spec
from wse_core.cost.calibration import current
from wse_core.hw.sram import Region
from wse_systems.matvec import matvec_phases, matvec_work, reduce_control

# The hand counts (module docstring): per product, and per @faddh the middle PE runs
AXPY_HAND = 1 + 1 + 3 + 2 + 1  # @activate, call, 3 DSR loads, @map set-up (2), return
REDUCE_TASK_HAND, FADD_HAND = 1, 3  # @activate(REDUCE); fabout, fabin and mem DSR loads


def _phases(spec, region, n_in, n_out):
    return {p.name: p.work for p in matvec_phases(region, n_in, n_out, spec=spec).parts}


def _cycles(name, region, n_in, n_out) -> tuple[float, dict[str, float]]:
    """The product's cycles and their split by mechanism, on the wafer `name` as built under
    the active assumptions."""
    spec = assumed_spec(name)
    t = PerfModel(spec).evaluate(matvec_phases(region, n_in, n_out, spec=spec))
    return t.seconds * spec.clock_hz, t.by_mechanism()


def test_one_products_control_counted_by_hand():
    """n_in 4096 on 196 columns: ceil(4096 / 196) = 21 column AXPYs a PE, each one FMAC DSD
    (its loop in the DSD issue), and one product's control on the axpy: its 8 and the reduce
    task's 1 + 2 x 3 into the middle of a row of 196 (both halves reach it); none on x_in,
    the reduce's stream or move."""
    spec = preset("wse3")
    region = Region("r", 0, 0, 8, 196)
    parts = _phases(spec, region, 4096, 1024)
    assert math.ceil(4096 / 196) == 21
    assert parts["axpy"].ops[0].count == 21  # the column AXPYs: DSDs, not control
    assert AXPY_HAND == 8 and REDUCE_TASK_HAND + 2 * FADD_HAND == 7
    assert parts["axpy"].control_instructions == 8 + 7
    assert {parts[k].control_instructions for k in ("x_in", "reduce", "move")} == {0}
    whole = matvec_work(region, 4096, 1024, spec=spec)
    assert whole.control_instructions == 15
    # the count is per product, not per column AXPY: 42 columns' worth of inputs, same 15
    assert matvec_work(region, 8192, 1024, spec=spec).control_instructions == 15
    # zeros skip column AXPYs, never the call's control
    half = matvec_work(region, 4096, 1024, input_density=0.5, spec=spec)
    assert half.ops[0].count == pytest.approx(10.5) and half.control_instructions == 15


@pytest.mark.parametrize(("cols", "sides"), [(1, 0), (2, 1), (3, 2), (4, 2), (196, 2)])
def test_the_reduce_pays_one_faddh_per_half_reaching_the_middle(cols, sides):
    """The middle PE of `reduce_to_centre`, (cols - 1) // 2: on one PE no reduce, on a row of
    2 it is the row's end (one half reaches it), otherwise both halves do."""
    want = 0 if cols == 1 else REDUCE_TASK_HAND + sides * FADD_HAND
    assert reduce_control(cols) == want
    got = _phases(preset("wse3"), Region("r", 0, 0, 4, cols), 64, 64)
    assert got["axpy"].control_instructions == AXPY_HAND + want


def test_cs3_prices_the_count_at_its_fitted_control_constant():
    """On WSE-3 the 15 instructions cost 15 x CS-3's fitted constant (about 3.09), on the
    control mechanism alone: the same product at a constant of 0 is 15 x c cycles faster."""
    wse3 = preset("wse3")
    c = current().by_system["CS-3"]["control_instruction_cycles"]
    assert PerfModel(wse3).rates.control_instruction_cycles == c and 3.0 < c < 3.2
    region = Region("r", 0, 0, 8, 196)
    fitted, mech = _cycles("wse3", region, 4096, 1024)
    assert mech["control"] == pytest.approx(15 * c)
    with assume(control_instruction_cycles=0.0):
        none, mech0 = _cycles("wse3", region, 4096, 1024)
    assert mech0.get("control", 0.0) == 0.0
    assert fitted - none == pytest.approx(15 * c)
    others = {k: v for k, v in mech.items() if k != "control"}
    assert others == pytest.approx({k: v for k, v in mech0.items() if k != "control"})


def test_wse2_moves_by_the_count_at_its_assumed_one_cycle():
    """WSE-2 is not a system the control constant is fitted on: 1 cycle an instruction, so
    the product is 15 cycles slower than at a constant of 0."""
    wse2 = preset("wse2")
    assert PerfModel(wse2).rates.control_instruction_cycles == 1.0
    region = Region("r", 0, 0, 8, 196)
    priced, mech = _cycles("wse2", region, 4096, 1024)
    with assume(control_instruction_cycles=0.0):
        none, _ = _cycles("wse2", region, 4096, 1024)
    assert mech["control"] == pytest.approx(15.0)
    assert priced - none == pytest.approx(15.0)
