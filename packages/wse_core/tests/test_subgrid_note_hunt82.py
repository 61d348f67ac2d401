"""Hunt 82 (H2): the sub-grid refusal note never lists an empty row set, nor fewer rows
than the run needs, as where the run "would sit".

Broken before: `defects.subgrid_note` took the first `rows` physical rows whose dead PEs
the spare columns mend, and never checked how many there were: at a defect rate of 0.5 the
3 x 3 run "would sit on physical row , which repair"; with no spares a 13-row run "would
sit on physical rows 1, 5, 7, 13, 22, 30" (6 rows).

Oracle: defect maps drawn by hand (each row's dead PEs chosen), so the rows that keep are
known before the note is written.
"""

import numpy as np
import pytest
from wse_core import preset
from wse_core.errors import DefectError
from wse_core.hw.defects import DefectMap, subgrid_note
from wse_core.hw.wafer import build_wafer


def _map(spec, dead_per_row):
    dead = np.zeros((spec.physical_rows, spec.physical_cols), bool)
    for r, n in enumerate(dead_per_row):
        dead[r, :n] = True
    return DefectMap(dead, None, 0.1)


def test_no_row_keeps():
    spec = preset("tiny")  # 8 x 8, one spare row and one spare column: 9 physical rows
    note = subgrid_note(spec, _map(spec, [2] * spec.physical_rows), 3, 3)
    assert note.endswith(
        "no repair row by row would seat it: none of the wafer's 9 physical rows have at most "
        "1 dead PE, what its spare columns mend, and a 3-row run needs 3"
    )


def test_fewer_rows_keep_than_the_run_needs():
    spec = preset("tiny").replace(spare_cols=0)
    per_row = [1, 0, 1, 0, 1, 1, 1, 1, 1]  # rows 1 and 3 keep: 2 of 9
    note = subgrid_note(spec, _map(spec, per_row), 3, 4)
    assert "only 2 of the wafer's 9 physical rows have no dead PE" in note
    assert note.endswith("and a 3-row run needs 3") and "sit on" not in note


@pytest.mark.parametrize(("rows", "where"), [(3, "physical rows 1, 3, 4"), (1, "physical row 1")])
def test_enough_rows_are_listed(rows, where):
    spec = preset("tiny")
    per_row = [2, 0, 3, 1, 0, 2, 2, 0, 0]  # rows 1, 3, 4, 7, 8 keep (at most 1 dead PE)
    note = subgrid_note(spec, _map(spec, per_row), rows, 3)
    assert note.endswith(f"though its rows would sit on {where}, each with at most 1 dead PE, "
                         "what its spare columns mend")  # fmt: skip


def test_the_wafer_refusal_carries_the_note():
    spec = preset("tiny").replace(defect_rate=0.5)
    with pytest.raises(DefectError) as e:
        build_wafer(spec, grid=(3, 3), defect_seed=0)
    dead = np.random.default_rng(0).random((spec.physical_rows, spec.physical_cols)) < 0.5
    keep = int((dead.sum(axis=1) <= spec.spare_cols).sum())  # NumPy's own draw, recounted
    assert keep < 3  # the draw leaves too few rows (so the note must say so)
    some = "none" if keep == 0 else f"only {keep}"
    assert f"{some} of the wafer's 9 physical rows have at most 1 dead PE" in str(e.value)
    assert "sit on physical row ," not in str(e.value)
