"""Hostile inputs found by issue 54's hunt (every option of every command, tried as a careless
or hostile user would): each exits 2 with one line that names the input and what is allowed,
before any work, with nothing written. Before the fix: a FIFO as --spec hung, --preset ''
ran the default wafer, clock_hz=1e308 printed Infinity into --json, a spec without base:
quoted WaferSpec.__init__'s TypeError, and a 10^5 x 10^5 PE wafer's defect map was
attempted (a numpy MemoryError traceback)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke

ROOT = typer.main.get_command(app)


def _refused(args: list, message: str, env: dict[str, str] | None = None) -> str:
    code, output = invoke(ROOT, args, env)
    lines = output.strip().splitlines()
    assert code == 2, (code, output[-2000:])
    assert len(lines) == 1 and lines[0].startswith("Error: "), lines
    assert message in lines[0] and "Traceback" not in output, lines[0]
    return lines[0]


@pytest.fixture
def files(tmp_path) -> Path:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "bare.yaml").write_text("clock_hz: 1.0e9\n")
    (tmp_path / "nan_flops.yaml").write_text("base: wse3\nflops_per_cycle: {fp32: .nan}\n")
    (tmp_path / "inf_latency.yaml").write_text("base: wse3\nsystem_latency_s: .inf\n")
    return tmp_path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["wafer", "info", "--spec", "{d}/fifo"], "not a regular file"),
        (["wafer", "info", "--spec", "{d}"], "is a folder"),
        (["wafer", "info", "--spec", "{d}/bare.yaml"], "lacks the fields name, pe_rows"),
        (["wafer", "info", "--spec", "{d}/nan_flops.yaml"], "flops_per_cycle needs positive"),
        (["wafer", "info", "--spec", "{d}/inf_latency.yaml"], "system_latency_s must be"),
        (["wafer", "info", "--preset", ""], "unknown wafer preset ''"),
        (["hpc", "stencil", "--preset", "", "--kind", "jacobi", "--grid", "4", "4", "4"],
         "unknown wafer preset ''"),
        (["wafer", "info", "--set", "clock_hz=1e308", "--json"], "overflows a float"),
        (["wafer", "defects", "--set", "pe_rows=100000", "--set", "pe_cols=100000"],
         "of host memory"),
        (["wafer", "defects", "--set", "spare_rows=100000000000"], "of host memory"),
    ],
)  # fmt: skip
def test_wafer_inputs_are_refused_in_one_line(files, args, message):
    _refused([a.format(d=files) for a in args], message)
