"""Hunt 81, the command line's side: the SRAM a PE offers data is its 48 kB less its program's
code and stack (`code_stack_bytes_per_pe`, assumed), and the messages that say what fits say
so; `wse wafer info` shows that budget and the program rectangle (hunt 81 L2: TLR-MVM's
predictions read `program_rows` / `program_cols`, which no surface showed).

Oracles: the budget arithmetic by hand (49,152 B less the reserve, 12 B a cell for three fp32
fields, 16 B of halo buffers) and REFERENCES.md's largest user rectangle (750 x 994).
"""

import json

import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_core import preset

ROOT = typer.main.get_command(app)
SRAM = 48 * 1024  # B a PE holds (REFERENCES.md)


def test_the_stencils_largest_nz_is_the_data_budgets():
    spec = preset("wse2")
    best = (SRAM - spec.code_stack_bytes_per_pe - 16) // 12  # 3 fp32 fields, 16 B buffers
    line = refused_in_one_line(
        ROOT,
        ["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "10000", "--steps", "1"],
        f"the largest nz that fits is {best}",
    )
    assert f"{SRAM - spec.code_stack_bytes_per_pe} B are free on the wse2 PEs" in line
    assert "code and stack" in line
    assert best < (SRAM - 16) // 12  # 4094 before


def test_a_set_that_leaves_no_data_is_one_line():
    refused_in_one_line(
        ROOT,
        ["wafer", "info", "-p", "tiny", "--set", "sram_bytes_per_pe=1024"],
        "leaves no byte",
    )


def test_wafer_info_shows_the_data_budget_and_the_program_rectangle():
    code, out = invoke(ROOT, ["wafer", "info", "-p", "wse2", "--json"])
    assert code == 0, out
    d = json.loads(out)
    reserve = preset("wse2").code_stack_bytes_per_pe
    assert (d["code_stack_bytes_per_pe"], d["data_bytes_per_pe"]) == (reserve, SRAM - reserve)
    assert d["program_grid"] == [750, 994]  # REFERENCES.md: the largest user rectangle
    code, out = invoke(ROOT, ["wafer", "info", "-p", "tiny"], env={"COLUMNS": "200"})
    assert code == 0 and "program rectangle" in out and "8 x 8 = 64 PEs (the whole grid)" in out
    assert f"{SRAM - reserve:,} B a PE" in out
