"""Hunt 82 (H1, L1), sweeps.

Broken before: `sweep` appended each line's values in the order they came, with no index of
the setting, so a case that occurs at only some settings slid into the wrong columns
(`hotchips24-inference --sweep code_stack_bytes_per_pe`: the 405B plan needs 22 wafers at 0
and 2048 B, 26 at 4096 B, and the 26-wafer figure was printed and saved under 0 B); and one
setting refused at plan time (sc20-bicgstab at an 8192 B reserve) lost the whole sweep.

Oracle: a synthetic prediction whose rows are written by hand from the setting (the wafer
count steps from 22 to 26 past a reserve of 3000 B, as the 405B plan's does), so each
column's value and each empty cell is known before the sweep runs.
"""

import csv

import pytest
from wse_core.cost.assumptions import active
from wse_core.errors import SramBudgetError
from wse_core.studies.experiment import PredictionRow
from wse_core.studies.sweeps import sweep

KEY = "code_stack_bytes_per_pe"
VALUES = (0.0, 2048.0, 4096.0)


def _wafers(reserve: float) -> int:
    return 22 if reserve < 3000 else 26


def _rate(reserve: float) -> float:  # any figure that differs by setting, known by hand
    return 1000.0 + reserve / 8


def _rows(seed=0):
    reserve = active()[KEY]
    return [
        PredictionRow("tokens_per_s", 3010.0, "tokens/s", {"model": "8b", "wafers": 1}),
        PredictionRow(
            "tokens_per_s",
            _rate(reserve),
            "tokens/s",
            {"model": "405b", "wafers": _wafers(reserve)},
        ),
    ]


def test_each_value_stays_under_the_setting_it_came_from(tmp_path):
    result = sweep(_rows, KEY, VALUES)
    lines = {label: vals for label, _, vals in result.lines}
    # by hand: 22 wafers at 0 and 2048 B (rates 1000 and 1256), 26 at 4096 B (1512)
    assert lines["tokens_per_s model=405b wafers=22"] == (1000.0, 1256.0, None)
    assert lines["tokens_per_s model=405b wafers=26"] == (None, None, 1512.0)
    assert lines["tokens_per_s model=8b wafers=1"] == (3010.0, 3010.0, 3010.0)
    table = result.markdown()
    row26 = next(r for r in table.splitlines() if "wafers=26" in r and r.startswith("|"))
    assert row26.split(" | ")[2:5] == ["-", "-", "1512"]  # the two settings it is not at
    assert "wafers=26 occurs only at code_stack_bytes_per_pe=4096" in table
    assert "wafers=22 occurs only at code_stack_bytes_per_pe=0, 2048" in table
    path = result.write(tmp_path)
    rows = list(csv.reader(path.with_suffix(".csv").open()))
    assert rows[0] == ["prediction", "unit", "0", "2048", "4096"]
    by_label = {r[0]: r[2:] for r in rows[1:]}
    assert by_label["tokens_per_s model=405b wafers=26"] == ["", "", "1512.0"]
    assert by_label["tokens_per_s model=405b wafers=22"] == ["1000.0", "1256.0", ""]


def test_a_setting_that_does_not_fit_keeps_the_others():
    def rows(seed=0):
        if active()[KEY] > 5000:
            raise SramBudgetError("a Z column of 1536 does not fit: 36864 B, 36808 B free")
        return _rows(seed)

    result = sweep(rows, KEY, (*VALUES, 8192.0))
    lines = {label: vals for label, _, vals in result.lines}
    assert lines["tokens_per_s model=8b wafers=1"] == (3010.0, 3010.0, 3010.0, None)
    assert result.refused == ((3, "a Z column of 1536 does not fit: 36864 B, 36808 B free"),)
    table = result.markdown()
    assert (
        "at code_stack_bytes_per_pe=8192 the predictions were refused (no value in its "
        "column): a Z column of 1536 does not fit" in table
    )
    assert "wafers=1 occurs only" not in table  # absent only where the whole setting was


def test_a_sweep_refused_at_every_value_names_the_setting():
    def rows(seed=0):
        raise SramBudgetError("does not fit")

    with pytest.raises(SramBudgetError, match=f"refused at every value; at {KEY}=0: does not fit"):
        sweep(rows, KEY, VALUES)
