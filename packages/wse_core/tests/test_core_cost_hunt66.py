"""Hunt 66 in wse_core's cost model. Broken before:

- `assume(clock_hz=...)` (and any wafer field: `fp32_mul_width`, ...) was written into every
  preset, the WSE-2 the calibration rows were measured on too: sweeping the WSE-3 clock
  refitted the calibration (dsd_issue 11.49 -> 128.2 cycles, task activations held at 0), a
  faster clock predicted a slower WSE-3, and the sweep's column at WSE-3's own clock was 2.2x
  off the plain run. Now a wafer field is the priced wafers'; `calibration.FIELD` is the
  calibration's WSE-2 (refitted, its misses reported), and a sweep says which it moved.
- a `--spec` file's (or `--set`'s) fitted constants were read and never priced, silently:
  refused now in one line (a dump of a preset, which restates the prior, still loads).
"""

from __future__ import annotations

import pytest
import yaml
from wse_core import preset
from wse_core.cost import calibration
from wse_core.cost.assumptions import (
    assume,
    assumed_spec,
    calibration_spec,
    listed,
    parse_assumptions,
    resolve_spec,
)
from wse_core.cost.perf import PerfModel
from wse_core.errors import SpecError
from wse_core.hw.spec import PRESETS, load_spec
from wse_core.studies.experiment import PredictionRow
from wse_core.studies.sweeps import parse_sweep, sweep, sweep_values

FITTED = {"dsd_issue_cycles": 11.49, "router_switch_cycles": 302.3, "task_activation_cycles": 32.25}
CAL_CLOCK = "calibration.clock_hz"


def _rounded(values) -> dict[str, float]:
    return {k: round(v, 2 if k != "router_switch_cycles" else 1) for k, v in values.items()}


def test_the_fitted_constants_at_the_presets_are_as_they_were():
    assert _rounded(calibration.current().values) == FITTED
    assert calibration.current().misses == {}


@pytest.mark.parametrize("changes", [{"clock_hz": 2e9}, {"clock_hz": 1.1e9},
                                     {"fp32_mul_width": 2.0}, {"hop_latency_cycles": 2.0},
                                     {"sram_read_bytes_per_cycle": 32.0}])  # fmt: skip
def test_a_wafer_field_moves_the_priced_wafers_not_the_calibration(changes):
    plain = calibration.current()
    with assume(**changes):
        assert calibration.current() is plain  # the same fit, not a refit
        assert calibration_spec("wse2") == preset("wse2")  # the rows' wafer, as measured
        assert assumed_spec("wse2") == preset("wse2").replace(**changes)  # a priced wafer
        assert assumed_spec("wse3") == preset("wse3").replace(**changes)


def test_an_assumed_clock_divides_the_same_cycles():
    """The oracle: the Table II step's cycles at the presets, over the assumed clock."""
    phases = calibration.table_ii_phases()
    timing = PerfModel(preset("wse2")).evaluate(phases)
    cycles = timing.seconds * preset("wse2").clock_hz
    for hz in (0.85e9, 1.1e9, 2e9):
        with assume(clock_hz=hz):
            seconds = PerfModel(assumed_spec("wse2")).evaluate(phases).seconds
        assert seconds == pytest.approx(cycles / hz, rel=1e-12)


def test_the_calibration_clock_is_assumed_explicitly_and_reports_its_misses():
    with assume(**{CAL_CLOCK: 1.1e9}):
        cal = calibration.current()
        assert assumed_spec("wse3") == preset("wse3")  # the priced wafer is left alone
        assert calibration_spec("wse2").clock_hz == 1.1e9
        rows = {r["case"]: r for r in calibration.rows(cal)}
        assert "calibration.clock_hz" in listed(preset("wse3"))
    assert cal.values["task_activation_cycles"] == 0.0  # held at 0: the rows disagree
    summa = rows[calibration.SUMMA_CASE]
    assert cal.misses["task_activation_cycles"] == pytest.approx(summa["ratio"] - 1, 1e-9)
    assert cal.values["dsd_issue_cycles"] > 100  # the refit the hunt saw under clock_hz
    assert (cal.wafer, cal.clock_hz) == ("wse2", 1.1e9)
    assert dict(cal.wafer_assumed) == {"clock_hz": 1.1e9}
    d = cal.to_dict()
    assert d["clock_hz"] == 1.1e9 and d["wafer_assumed"] == {"clock_hz": 1.1e9}
    text = cal.describe()
    assert "rows priced on wse2 at 1.1e+09 Hz (assumed: calibration.clock_hz=1.1e+09)" in text
    assert "cannot all be met" in text and "task_activation_cycles +14" in text
    plain = calibration.current()
    assert (plain.wafer, plain.clock_hz, dict(plain.wafer_assumed)) == ("wse2", 8.5e8, {})
    assert "rows priced on wse2 at 8.5e+08 Hz" in plain.describe()


def test_a_held_fitted_constant_is_held_on_both_wafers():
    with assume(dsd_issue_cycles=20):
        assert calibration_spec("wse2").dsd_issue_cycles == 20
        assert PerfModel(assumed_spec("wse3")).rates.dsd_issue_cycles == 20
        assert "dsd_issue_cycles" not in calibration.current().values


@pytest.mark.parametrize(
    ("item", "message"),
    [("calibration.dsd_issue_cycles=5", "calibration.dsd_issue_cycles: dsd_issue_cycles is "
      "fitted on the calibration set: an assumed value is held on every wafer, the "
      "calibration's too; assume it as dsd_issue_cycles=VALUE"),
     ("calibration.table_ii_block_z=100", "calibration.table_ii_block_z: table_ii_block_z is "
      "a setting of the calibration; assume it as table_ii_block_z=VALUE"),
     ("calibration.clok_hz=1e9", "unknown assumption 'calibration.clok_hz' (did you mean "
      "'calibration.clock_hz'?); known: clock_hz, "),
     ("calibration.clock_hz=1e12", "assumption calibration.clock_hz must be in [1e+06, 1e+11] Hz")],
)  # fmt: skip
def test_a_calibration_key_is_checked_as_its_field(item, message):
    with pytest.raises(SpecError) as e:
        parse_assumptions([item])
    assert message in str(e.value)


def test_a_calibration_key_sweeps_its_fields_range():
    assert parse_sweep(CAL_CLOCK) == (CAL_CLOCK, None)
    assert sweep_values(CAL_CLOCK, None) == (0.85e9, 1.0e9, 1.1e9)


def _wse3_seconds(*, seed):
    work = calibration.summa_work()
    s = PerfModel(assumed_spec("wse3")).cost(work).seconds
    return [PredictionRow("seconds", s, "s", {"case": "summa on wse3"})]


def test_a_sweep_says_whether_it_moved_the_calibration():
    plain = _wse3_seconds(seed=0)[0].value
    clock = sweep(_wse3_seconds, "clock_hz", (0.85e9, 1.1e9, 2e9))
    ((_, _, vals),) = clock.lines
    assert vals[1] == plain  # the column at WSE-3's own clock is the plain run, exactly
    assert vals[0] > vals[1] > vals[2]  # a faster clock: less time
    text = clock.markdown()
    assert "calibration: the same at every setting (clock_hz does not move it): rows priced " \
           "on wse2 at 8.5e+08 Hz; router_switch_cycles = 302.3" in text  # fmt: skip
    moved = sweep(_wse3_seconds, CAL_CLOCK, (0.85e9, 1.1e9)).markdown()
    assert "calibration refitted at each setting (calibration.clock_hz moves it)" in moved
    assert "| wse2 clock_hz | Hz | 8.5e+08 | 1.1e+09 (+29.4%) | 29.4% |" in moved
    assert "| task_activation_cycles | cycles/activation | 32.245 | 0 (-100.0%) | - |" in moved
    assert "rows the fit could not meet (a constant held at 0; by the constant each fits): " \
           "at calibration.clock_hz=1.1e+09: " in moved  # fmt: skip


# -- fitted constants in a wafer spec (hole 8) -----------------------------------------------
@pytest.mark.parametrize("key", ["dsd_issue_cycles", "task_activation_cycles",
                                 "router_switch_cycles"])  # fmt: skip
def test_a_spec_files_fitted_constant_is_refused(tmp_path, key):
    path = tmp_path / "fit.yaml"
    path.write_text(f"base: wse3\n{key}: 100\n")
    with pytest.raises(SpecError) as e:
        resolve_spec(path=path)
    assert str(e.value) == (
        f"spec file {str(path)!r} gives {key} = 100, but {key} is fitted on the calibration "
        "set (every prediction prices the fitted value; `wse experiments run "
        "cost-model-calibration` shows its rows), so a wafer spec cannot set it: remove it, "
        "or price another value as an assumption, listed with the prediction: `wse "
        f"experiments run NAME --assume {key}=VALUE` (or `wse plan ... --assume`)"
    )
    assert getattr(load_spec(path), key) == 100  # load_spec is pure: Python callers' spec
    with pytest.raises(SpecError, match=f"^--set gives {key} = 7, but {key} is fitted"):
        resolve_spec(name="wse3", sets={key: "7"})


def test_a_dump_of_a_preset_still_loads(tmp_path):
    for name in PRESETS:  # every preset holds the priors, so a dump restates them
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(preset(name).to_dict()))
        assert resolve_spec(path=path) == preset(name)
