"""Hunt 82, the command line's side: sweeps keep each value under its setting and keep the
settings that ran; the program reserve is listed where it decides a fit, never merely
where a wafer is built; wave25's refusal advises a block that then runs; a sub-grid refusal
says when too few rows keep; `--set sram_bytes_per_pe` that leaves no data names the field
set.

Oracles: the budget arithmetic by hand (49,152 B a WSE-2 PE less 2,048 B of program; 45,000
B a WSE-1 PE), the advised value run again, and the sweep's refused column read back from
its own .csv.
"""

import csv
import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_core import preset

ROOT = typer.main.get_command(app)
KEY = "code_stack_bytes_per_pe"


@pytest.mark.timeout(300)
def test_a_sweep_keeps_the_settings_that_fit(tmp_path):
    # sc20-bicgstab's 1536-cell column of 9 fields, 24 B a cell: 36,864 B; at an 8192 B
    # reserve a WSE-1 PE's 45,000 B leave 36,808 B (refused), at 4096 B 40,904 B (fits)
    args = ["experiments", "run", "sc20-bicgstab", "--quick", "--out", tmp_path,
            "--sweep", f"{KEY}=0,2048,4096,8192"]  # fmt: skip
    code, out = invoke(ROOT, args)
    assert code == 0, out[-2000:]
    assert (
        f"at {KEY}=8192 the predictions were refused (no value in its column): a Z column of "
        "1536 does not fit: 9 fields need 36864 B per PE but 36808 B are free" in out
    )
    rows = list(csv.reader((tmp_path / "sc20-bicgstab" / f"sweep_{KEY}.csv").open()))
    assert rows[0][2:] == ["0", "2048", "4096", "8192"]
    assert rows[1:] and all(r[2] and r[3] and r[4] and r[5] == "" for r in rows[1:])


def test_the_reserve_is_listed_where_it_decides_the_fit():
    code, out = invoke(
        ROOT,
        [
            "hpc",
            "stencil",
            "--kind",
            "wave25",
            "--grid",
            "5",
            "5",
            "3000",
            "--steps",
            "1",
            "--json",
        ],
    )
    assert code == 0, out[-2000:]
    d = json.loads(out[out.index("{") :])
    assert KEY in [a["name"] for a in d["assumed"]]  # its fit check sized against it
    code, out = invoke(
        ROOT, ["hpc", "stencil", "--kind", "wave25", "--grid", "5", "5", "3000", "--steps", "1"]
    )
    reserve = preset("wse2").code_stack_bytes_per_pe
    used = 12 * 3000 + 64 * 60 + 64  # default block: 60, the largest divisor of 3000 <= 64
    assert (
        f"SRAM per PE: {used:,} of the {49_152 - reserve:,} B a PE holds for data (its 49,152 B "
        f"less {reserve:,} B of program, assumed: {KEY})" in out
    )


@pytest.mark.timeout(300)
def test_a_sweep_of_the_reserve_over_fabric_ops_is_refused_as_unread(tmp_path):
    # no fabric op reads SRAM: building its wafers no longer lists the reserve (hunt 82)
    refused_in_one_line(
        ROOT,
        ["experiments", "run", "fabric-collectives", "--quick", "--out", tmp_path, "--sweep", KEY],
        f"--sweep {KEY}: experiment fabric-collectives does not read it",
    )


def test_wave25_advises_a_block_that_runs():
    line = refused_in_one_line(
        ROOT,
        [
            "hpc",
            "stencil",
            "--kind",
            "wave25",
            "--grid",
            "5",
            "5",
            "1000",
            "--block-z",
            "1000",
            "--steps",
            "1",
        ],
        "the 16 halo buffers of the Z block need 64064 B per PE",
    )
    best = (49_152 - preset("wse2").code_stack_bytes_per_pe - 12 * 1000 - 64) // 64
    assert f"the largest Z block (--block-z) that fits at nz = 1000 is {best}" in line
    code, out = invoke(
        ROOT,
        [
            "hpc",
            "stencil",
            "--kind",
            "wave25",
            "--grid",
            "5",
            "5",
            "1000",
            "--block-z",
            best,
            "--steps",
            "1",
        ],
    )
    assert code == 0, out[-2000:]


def test_a_sub_grid_refusal_says_too_few_rows_keep():
    line = refused_in_one_line(
        ROOT,
        ["wafer", "check", "--set", "defect_rate=0.5", "--grid", "3", "3"],
        "this 3 x 3 run is refused too, and no repair row by row would seat it",
    )
    assert "sit on physical row ," not in line and "a 3-row run needs 3" in line


def test_no_data_left_names_the_field_set():
    refused_in_one_line(
        ROOT,
        ["wafer", "check", "--set", "sram_bytes_per_pe=1000"],
        f"sram_bytes_per_pe = 1,000 B leaves no byte for data beside the program's {KEY} = 2,048 B",
    )
