"""Hunt 63 in wse_core: a sweep's range column printed `nan%` for a prediction of 0; a swept
value that takes a refitted calibration constant past its limits was refused naming only the
constant ("dsd_issue_cycles must be in [0, 10000] cycles/DSD, got 48830.57")."""

from __future__ import annotations

import pytest
from wse_core.cost import calibration
from wse_core.cost.assumptions import assume
from wse_core.cost.mechanisms import CONSTANTS
from wse_core.errors import SpecError
from wse_core.studies.sweeps import Sweep


def _range_column(sweep: Sweep) -> list[str]:
    rows = sweep.markdown().splitlines()[2:]
    return [row.strip("| ").split(" | ")[-1] for row in rows]


def test_the_range_column_is_a_figure_or_a_dash():
    lines = (("zero", "u", (0.0, 0.0, 0.0)),  # never moves: 0%
             ("from zero", "u", (0.0, 3.0, 1.0)),  # no relative range from 0: a dash
             ("positive", "u", (2.0, 3.0, 2.5)),  # 3 / 2 - 1
             ("across zero", "u", (-1.0, 1.0, 0.5)))  # fmt: skip
    sweep = Sweep("clock_hz", (1e9, 2e9, 3e9), lines)
    assert _range_column(sweep) == ["0.0%", "-", "50.0%", "-"]
    assert "nan" not in sweep.markdown()


def test_a_refit_past_a_constant_limit_names_the_assumption():
    # hunt 66: the calibration's WSE-2 clock is `calibration.clock_hz` (`clock_hz` is the
    # priced wafers' and refits nothing)
    with assume(**{"calibration.clock_hz": 1e11}), pytest.raises(SpecError) as e:
        calibration.current()
    line = str(e.value)
    assert line.startswith("calibration.clock_hz=1e+11 takes the refit of ")
    key = line.split("refit of ")[1].split()[0]
    low, high = CONSTANTS[key].limits
    shown = float(line.split(f"refit of {key} to ")[1].split()[0].replace(",", ""))
    assert not low <= shown <= high  # the figure it names is past the limit it names
    assert f"past its limit [{low:,g}, {high:,g}]" in line
    assert "assume calibration.clock_hz nearer its plausible 8.5e+08, 1e+09, 1.1e+09" in line
    assert f"or hold {key} with --assume {key}=VALUE" in line


def test_a_refit_within_the_limits_still_fits():
    with assume(**{"calibration.clock_hz": 1.1e9}):
        fitted = calibration.current().values
    for key, value in fitted.items():
        low, high = CONSTANTS[key].limits
        assert low <= value <= high
