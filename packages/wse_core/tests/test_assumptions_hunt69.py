"""Hunt 69: every swept constant that moves a prediction is listed beside it, and only those.

Broken before:
- experiment rows listed only the `assumed` constants of a mechanism's map
  (`mechanisms.assumed_beside`): the sourced `hop_latency_cycles` and `ramp_latency_cycles`,
  which moved a BiCGSTAB row 15% and 3%, were never listed; `fp32_mul_width`, which did not
  move it, was; a row without cycles by mechanism (a GPU's) listed `clock_hz`;
- no surface recorded what its pricing read, so a plan, a report or an experiment could not
  say which constants moved it (`wse_core.cost.reads`, `wse_core.cost.listing` now);
- an `--assume` key nothing read was accepted and listed as if priced (`refuse_unread`);
- results.json carried no assumption and no calibration, though its tables listed them.

Oracles: the prediction repriced with the constant at each end of its sweep (`spec.replace`,
or the `assume` block the CLI runs in), and the calibration's own `to_dict()`.
"""

import json

import pytest
from wse_core.cost.assumptions import assume, assumed_spec, setting
from wse_core.cost.calibration import BUSY_CASE, UNCALIBRATED, current
from wse_core.cost.listing import assumed_lines, assumed_list, listed, refuse_unread, unread
from wse_core.cost.mechanisms import CALIBRATION_KEYS, CONSTANTS, assumed_beside
from wse_core.cost.perf import Op, PerfModel, Phase, Work
from wse_core.cost.reads import fit_reads, recording
from wse_core.cost.report import REPORT_KEYS, RunReport
from wse_core.errors import SpecError
from wse_core.hw.spec import preset
from wse_core.studies.experiment import (
    ExperimentResult,
    PredictionRow,
    read_by,
    run_experiment,
    write_experiment,
)

WSE3 = preset("wse3")
SWEPT = [k for k, c in CONSTANTS.items() if c.sweep and k not in CALIBRATION_KEYS]

# Works whose priced time some constants move and others do not
WORKS = {
    # BiCGSTAB-like: fp32 adds, a chain of hops, relays through cores
    "adds, hops, relays": Work(
        ops=(Op("add", "fp32", 600, count=4),), latency_hops=1200, relay_stages=40
    ),  # fmt: skip
    # an fp32 FMAC reading 4 operands an element: the read port binds, not its SIMD width
    "port-bound fmac": Work(ops=(Op("fmac", "fp32", 512, count=8, mem_reads=4),)),
    # the router's words far above the core's: issue overhead hides under them
    "link-bound": Work(ops=(Op("add", "fp32", 8),), links={"E": 1e6}),
    "host I/O": Work(host_io_bytes=1e6, system_hops=3),
}


def _moved(spec, work: Work) -> set[str]:
    """The keys whose sweep ends change `work`'s seconds, repriced on `spec.replace`."""
    base = PerfModel(spec, UNCALIBRATED).cost(work).seconds
    out = set()
    for key in SWEPT:
        for v in (min(CONSTANTS[key].sweep), max(CONSTANTS[key].sweep)):
            if PerfModel(spec.replace(**{key: v}), UNCALIBRATED).cost(work).seconds != base:
                out.add(key)
    return out


@pytest.mark.parametrize("case", WORKS)
def test_pricing_notes_exactly_the_constants_whose_sweep_moves_a_phase(case):
    work = WORKS[case]
    with recording() as got:
        PerfModel(WSE3, UNCALIBRATED).cost(work)
    assert {k for k in got.moving if k in SWEPT} == _moved(WSE3, work)


def test_a_sourced_hop_is_listed_and_an_unused_width_is_not():
    with recording() as got:
        PerfModel(WSE3, UNCALIBRATED).cost(WORKS["adds, hops, relays"])
    names = [e.key for e in listed(got, {})]
    assert "hop_latency_cycles" in names and "ramp_latency_cycles" in names
    assert "fp32_mul_width" not in names  # no fp32 multiply: it prices nothing here
    # the mechanisms-only guess (rows nothing recorded) now lists sourced constants too
    text = assumed_beside({"simd": 1.0, "hop": 1.0, "relay": 1.0})
    assert "hop_latency_cycles in 1..2" in text and "ramp_latency_cycles in 1..7" in text
    assert assumed_beside({}) == ""  # a row of no cycles (a GPU's): no wafer clock


def test_each_line_names_value_units_range_and_basis_and_the_json_is_the_same():
    work = Work(ops=(Op("add", "fp32", 8),), latency_hops=100)
    with recording() as got:
        PerfModel(WSE3, UNCALIBRATED).cost(work)
    lines = assumed_lines(got, {})
    assert "hop_latency_cycles = 1 cycles/hop (swept 1..2; sourced)" in lines
    assert "clock_hz = 1.1e+09 Hz (swept 8.5e+08..1.1e+09; assumed)" in lines
    entry = next(e for e in assumed_list(got, {}) if e["name"] == "hop_latency_cycles")
    # hunt 82: "moves", whether a figure moves with it
    assert entry == {"name": "hop_latency_cycles", "value": 1.0, "units": "cycles/hop",
                     "sweep": [1.0, 2.0], "basis": "sourced", "assumed": False,
                     "moves": True}  # fmt: skip
    with assume(hop_latency_cycles=2), recording() as moved:
        PerfModel(assumed_spec("wse3"), UNCALIBRATED).cost(work)
        line = next(x for x in assumed_lines(moved) if x.startswith("hop_"))
    assert line == "hop_latency_cycles = 2 cycles/hop (swept 1..2; sourced; --assume)"


def test_a_fitted_constant_lists_what_refits_it_and_the_fit_keeps_its_reads():
    cal = current()
    # issue 41: a WSE-3 prices CS-3's own DSD issue (fitted on WaferLLM's MeshGEMV rows),
    # listed once, not beside WSE-2's; a WSE-2 the Table II fit's, and what refits it
    with recording() as three:
        PerfModel(WSE3).cost(Work(ops=(Op("add", "fp32", 64),)))
    assert three.values["dsd_issue_cycles"] == {cal.by_system["CS-3"]["dsd_issue_cycles"]}
    with recording() as got:
        PerfModel(preset("wse2")).cost(Work(ops=(Op("add", "fp32", 64),)))
    assert got.values["dsd_issue_cycles"] == {cal.values["dsd_issue_cycles"]}  # not the prior
    for key in ("table_ii_block_z", "wave25_add_width", "router_switch_cycles"):
        assert key in got.moving  # each refits dsd_issue_cycles (the calibration's rows)
    with recording() as outer:
        fresh = current(published={BUSY_CASE: 0.70})  # a new fit, not cached
    assert not outer  # the fit's reads are its own
    assert {"table_ii_block_z", "clock_hz"} <= set(fit_reads(fresh).values)
    with recording() as read:
        setting("table_ii_block_z")
    assert read.values == {"table_ii_block_z": {334.0}}


def test_an_assumption_nothing_read_is_refused_naming_what_was_read():
    with recording() as hops:
        PerfModel(WSE3, UNCALIBRATED).cost(Work(latency_hops=10))
    cal = current()
    assert unread({"memoryx_bytes_per_s": 7.5e10, "hop_latency_cycles": 2}, hops, cal) == [
        "memoryx_bytes_per_s"
    ]
    with pytest.raises(SpecError) as err:
        refuse_unread({"memoryx_bytes_per_s": 7.5e10}, hops, cal, "this plan")
    msg = str(err.value)
    assert msg.startswith("--assume memoryx_bytes_per_s: this plan does not read it")
    assert "it reads clock_hz, hop_latency_cycles" in msg and "\n" not in msg
    # calibration.FIELD is read where a fitted constant is priced (the fit reads the field)
    assert unread({"calibration.clock_hz": 1e9}, hops, cal) == ["calibration.clock_hz"]
    with recording() as fitted:
        PerfModel(WSE3).cost(Work(ops=(Op("add", "fp32", 64),)))
    assert unread({"calibration.clock_hz": 1e9}, fitted, cal) == []


def test_a_report_lists_what_moved_it():
    phases = Phase("p", Work(ops=(Op("add", "fp32", 64),), latency_hops=50))
    report = RunReport.build("t", WSE3, phases)
    names = [e["name"] for e in report.to_dict()["assumed"]]
    assert "assumed" in REPORT_KEYS and "hop_latency_cycles" in names and "clock_hz" in names
    # WSE-3's hop latency as the calibration fits it on CS-3 (WaferLLM's MeshGEMV rows)
    hop = current().by_system["CS-3"]["hop_latency_cycles"]
    assert report.assumed_compact().startswith(
        f"assumed: clock_hz 1.1e+09, hop_latency_cycles {hop:.3g},"
    )
    assert report.assumed_compact().endswith("(ranges: wse experiments assumptions)")


def _run(*, quick: bool, seed: int) -> ExperimentResult:
    """A run of one recorded wafer row and one row nothing recorded (a GPU's, say)."""
    spec = assumed_spec("wse3")
    with recording() as got:
        t = PerfModel(spec).evaluate(Phase("p", Work(latency_hops=100, links={"E": 64.0})))
    rows = read_by(got, PredictionRow("s", t.seconds, "s", {}, mechanisms=t.by_mechanism()))
    return ExperimentResult("t69", seed, {}, [], [*rows, PredictionRow("n", 1.0, "x", {})])


def test_results_json_carries_the_tables_assumptions_and_the_calibration(tmp_path):
    result = run_experiment(_run, quick=True, seed=0)
    folder = write_experiment(result, tmp_path)
    data = json.loads((folder / "results.json").read_text())
    assert data["calibration"] == current().to_dict()
    wafer, other = data["predictions"]
    names = [e["name"] for e in wafer["assumed"]]
    # the oracle: the row repriced at each end of every sweep, as `--assume` runs it
    moved = set()
    for key in SWEPT:
        for v in (min(CONSTANTS[key].sweep), max(CONSTANTS[key].sweep)):
            with assume(**{key: v}):
                moved |= {key} if _run(quick=True, seed=0).predictions[0].value != wafer[
                    "value"] else set()  # fmt: skip
    # WSE-3's hop latency is fitted on CS-3's MeshGEMV rows: a DSD issue held moves it (the
    # rows' DSDs priced at the held value, the other constants refitted); since issue 41 the
    # rows price CS-3's own DSD issue, so the WSE-2 fit's task activation and router switch,
    # which they never read, no longer move it (they did, through the WSE-2 DSD issue)
    fitted = {"dsd_issue_cycles"}
    assert moved == {"clock_hz", "hop_latency_cycles"} | fitted
    assert set(names) - set(CALIBRATION_KEYS) == moved
    assert other["assumed"] == data["assumed"]  # a row nothing recorded: the run's
    table = (folder / "table.md").read_text()
    for e in listed(result.predictions[0].assumed, {}):
        assert e.line() in table and e.line() in (folder / "table.csv").read_text()
    assert "Calibration in force: rows priced on wse2 at 8.5e+08 Hz" in table


def test_an_assumed_constant_read_that_moves_nothing_says_so():
    """Hunt 82 (jobs18 L1): a key `--assume` changed that the pricing read without moving
    (a capacity, a latency of a link no priced step crosses) was listed like a moving one."""
    from wse_core.cost.listing import Listed, listed
    from wse_core.cost.reads import read

    with recording() as got:
        read("memoryx_capacity_bytes", 2e15, moves=False)
    (entry,) = listed(got, {"memoryx_capacity_bytes": 2e15})
    assert entry.assumed and not entry.moves
    assert entry.line().endswith("; --assume; read, moves nothing here)")
    assert entry.to_dict()["moves"] is False and Listed.from_dict(entry.to_dict()) == entry
    old = {k: v for k, v in entry.to_dict().items() if k != "moves"}  # a JSON written before
    assert Listed.from_dict(old).moves is True
