"""Every constant a mechanism with units and a basis; mechanisms counted by hand (a reduce
over k PEs as Luczynski et al. model it, a GEMV's issue overhead, a phase's cycles by
mechanism); no efficiency divides anything; sweeps move the predictions."""

import dataclasses
import math

import pytest
from wse_core import Op, PerfModel, Phase, Work, preset
from wse_core.cost.assumptions import ASSUMED_FIELDS, assumed_spec
from wse_core.cost.calibration import UNCALIBRATED, Calibration, current
from wse_core.cost.collectives import ALGORITHMS, allreduce_2d, line_work, reduce_line
from wse_core.cost.mechanisms import CALIBRATION_DEFAULTS, CONSTANTS, MECHANISMS
from wse_core.cost.perf import overlap, serial
from wse_core.errors import SpecError
from wse_core.hw.spec import WaferSpec
from wse_core.studies.experiment import PredictionRow
from wse_core.studies.sweeps import parse_sweep, sweep

SPEC = preset("wse2").replace(dsd_issue_cycles=7.0, task_activation_cycles=3.0)
MODEL = PerfModel(SPEC, UNCALIBRATED)  # hop 1 cycle, T_R 2 cycles: a relay costs 5


def test_every_constant_has_units_a_mechanism_and_a_basis():
    fields = {f.name for f in dataclasses.fields(WaferSpec)}
    assert set(ASSUMED_FIELDS) == set(CONSTANTS)
    for key, c in CONSTANTS.items():
        assert c.units and c.mechanism and c.source, key
        assert c.basis in ("published", "sourced", "inferred", "assumed", "fitted"), key
        assert key in fields or key in CALIBRATION_DEFAULTS, key
        if c.basis in ("assumed", "fitted", "inferred"):
            assert c.sweep, f"{key}: an unpublished constant needs a range to sweep"
    fitted = {k for k, c in CONSTANTS.items() if c.basis == "fitted"}
    assert fitted == set(current().values) == set(current().fitted_on)


def test_the_calibration_holds_constants_not_efficiencies():
    assert {f.name for f in dataclasses.fields(Calibration)} == {"values", "fitted_on", "settings"}
    cal = Calibration(values={"dsd_issue_cycles": 11.0})
    # Fitted constants replace the spec's; nothing else changes; no cost is divided.
    work = Work(ops=(Op("add", "fp32", 100, count=2),), links={"E": 40})
    assert PerfModel(SPEC, cal).cost(work).compute_cycles == 2 * (11 + 50)
    assert PerfModel(SPEC, cal).cost(work).fabric_cycles == 40


def test_each_mechanism_counted_by_hand():
    work = Work(
        ops=(Op("fmac", "fp16", 64, count=10), Op("mul", "fp32", 8, fabric_in=True)),
        sram_read_bytes=320,
        links={"N": 30, "ramp": 50},
        latency_hops=12,
        relay_stages=3,
        task_activations=4,
        host_io_bytes=150e9 * 1e-6,  # one microsecond at 150 GB/s
    )
    mech, link = MODEL.mechanisms(work)
    # A GEMV-like op pays the issue overhead per DSD it issues (10 + 1), never a ratio.
    assert mech["dsd_issue"] == 11 * 7.0
    assert mech["simd"] == 10 * 64 / 4 + 8  # fp16 FMAC 4-wide; a fabric operand 1 per cycle
    assert mech["task_activation"] == 4 * 3.0 and mech["sram"] == 320 / 16
    assert link == "ramp" and mech["link"] == 50
    assert mech["hop"] == 12 and mech["relay"] == 3 * 5
    assert mech["host_io"] == pytest.approx(1e-6 * SPEC.clock_hz)
    cost = MODEL.cost(work)
    assert cost.compute_cycles == 160 + 8 + 77 + 12
    assert cost.cycles == max(257, 20, 50) + 12 + 15
    assert set(mech) == set(MECHANISMS)


@pytest.mark.parametrize("p, b", [(8, 4), (17, 1), (64, 256)])
def test_a_reduce_over_k_pes_is_luczynski_et_als_closed_form(p, b):
    tr = SPEC.ramp_latency_cycles
    cyc = lambda alg: MODEL.cost(line_work(alg, p, b)).cycles
    log = math.ceil(math.log2(p))
    assert cyc("chain") == b + (2 * tr + 2) * (p - 1)  # their chain, exactly
    assert cyc("star") == b * (p - 1) + (p - 1) + (2 * tr + 1)
    assert cyc("tree") == b * log + (p - 1) + (2 * tr + 1) * log
    assert cyc("two_phase") == 2 * b + (p - 1) + (2 * tr + 1) * (2 * math.ceil(math.sqrt(p)) - 2)
    best = reduce_line(SPEC, p, b)
    assert MODEL.cost(best).cycles == min(cyc(a) for a in ALGORITHMS)


def test_a_scalar_allreduce_is_about_the_diameter():
    # Rocki et al.: a wafer-wide allreduce in about 1.1 x the diameter of cycles.
    rows, cols = 600, 595
    cycles = MODEL.cost(allreduce_2d(SPEC, rows, cols, 1)).cycles
    assert 1.0 < cycles / (rows + cols - 2) < 1.2


def test_by_mechanism_adds_up_and_keeps_only_what_sets_the_time():
    a = Phase("a", Work(ops=(Op("add", "fp32", 2000),), links={"S": 400}, latency_hops=10))
    b = Phase("b", Work(links={"S": 3000}))
    t = MODEL.evaluate(serial(a, overlap(a, b), repeat=2))
    mech = t.by_mechanism()
    assert sum(mech.values()) == pytest.approx(t.seconds * SPEC.clock_hz)
    # a: compute 7 + 1000 beats 400 link words; in the overlap b (3000 link cycles) wins.
    assert mech == {"simd": 2000, "dsd_issue": 14, "hop": 20, "link": 6000}


def test_sweep_moves_predictions_and_refits():
    def predict(*, seed):
        cal = current()
        spec = assumed_spec("wse2")  # a runner: its edge resolves under the sweep
        w = Work(ops=(Op("add", "fp32", 10, count=100),))
        s = PerfModel(spec, cal).cost(w).cycles
        return [PredictionRow("cycles", s, "cycles", {"case": "x"})]

    result = sweep(predict, "dsd_issue_cycles", (0.0, 10.0))
    ((label, unit, vals),) = result.lines
    assert label == "cycles case=x" and vals == (500.0, 1500.0)
    assert "+200.0%" in result.markdown()
    key, values = parse_sweep("table_ii_block_z")
    assert values is None and CONSTANTS[key].sweep
    with pytest.raises(SpecError, match="unknown assumption"):
        parse_sweep("hop=1,2")
    with pytest.raises(SpecError, match="must be a number"):
        parse_sweep("hop_latency_cycles=1,x")
