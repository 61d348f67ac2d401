"""Hunt 68 (E3), sweeps' column heads. Broken before: `%g` heads made 1000000001 and
1000000002 both `1e+09` in the .md and the .csv (a script reading the .csv could not tell
the columns apart), and `clock_hz=1e9,1e9` ran twice into identical columns."""

import csv

import pytest
from wse_core.errors import SpecError
from wse_core.studies.sweeps import Sweep, parse_sweep

VALUES = (1000000001.0, 1000000002.0, 1000000003.0)


def test_heads_tell_close_values_apart(tmp_path):
    rows = (("rate", "Hz", tuple(v / 2 for v in VALUES)),)
    path = Sweep("clock_hz", VALUES, rows).write(tmp_path)
    head = next(csv.reader(path.with_suffix(".csv").open()))
    assert [float(h) for h in head[2:]] == list(VALUES)  # the oracle: the values themselves
    md_head = path.read_text().splitlines()[2]
    assert "| clock_hz=1000000001 | clock_hz=1000000002 | clock_hz=1000000003 |" in md_head


def test_heads_stay_short_where_g_tells_them_apart(tmp_path):
    path = Sweep("clock_hz", (1e9, 2e9), (("rate", "Hz", (1.0, 2.0)),)).write(tmp_path)
    assert path.with_suffix(".csv").read_text().splitlines()[0] == "prediction,unit,1e+09,2e+09"


@pytest.mark.parametrize(
    ("item", "line"),
    [
        ("clock_hz=1e9,1e9,1e9", "--sweep gives clock_hz=1e9 twice (values 1 and 2)"),
        ("clock_hz=1e9,2e9,1000000000", "--sweep gives clock_hz=1e9 twice (values 1 and 3)"),
    ],
)
def test_a_repeated_value_is_refused(item, line):
    with pytest.raises(SpecError) as e:
        parse_sweep(item)
    assert str(e.value) == f"{line}; give each value once"
