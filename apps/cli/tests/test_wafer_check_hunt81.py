"""Hunt 81: `wse wafer check` takes `--set` as `wafer info` and `wafer defects` do ("No such
option: --set" before), and a refused wafer under a sub-grid run names the physical rows the
run would sit on (it named only a row past them: "physical row 6 has 2 dead PEs" for a 3 x 3
run).

Oracle: the defect map drawn again with NumPy's own reading (`defect_map` of the same spec
and seed): the rows that keep (dead PEs at most the spare columns), the first three.
"""

import numpy as np
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_core import preset
from wse_core.hw.defects import defect_map

ROOT = typer.main.get_command(app)


def test_check_takes_set():
    code, out = invoke(ROOT, ["wafer", "check", "-p", "tiny", "--set", "defect_rate=0",
                              "--grid", "3", "3"])  # fmt: skip
    assert code == 0 and out.startswith("ok:"), out


def test_a_sub_grid_refusal_names_the_rows_it_would_use():
    spec = preset("tiny").replace(defect_rate=0.1)
    dead = defect_map(spec, 3).dead
    counts = dead.sum(axis=1)
    kept = [r for r in range(spec.physical_rows) if counts[r] <= spec.spare_cols][:3]
    bad = [r for r in range(spec.physical_rows) if counts[r] > spec.spare_cols]
    assert len(bad) > spec.spare_rows  # the wafer does not repair ...
    line = refused_in_one_line(
        ROOT,
        ["wafer", "check", "-p", "tiny", "--set", "defect_rate=0.1", "--grid", "3", "3",
         "--seed", "3"],
        "not repairable",
    )  # fmt: skip
    # ... and the line says what that means for this 3 x 3 run, and where it would sit
    rows = ", ".join(map(str, kept))
    assert f"this 3 x 3 run is refused too, though its rows would sit on physical rows {rows}" in (
        line
    )
    assert np.all(counts[kept] <= spec.spare_cols)
