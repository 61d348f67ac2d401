"""Hunt new77: `wse hpc cfd --output-every` past int32 named the Python field
(`output_every must be an integer in 0..2147483647`) instead of the flag."""

from __future__ import annotations

import numpy as np
import typer
from wse_cli.app import app
from wse_cli.testing import refused_in_one_line

ROOT = typer.main.get_command(app)


def test_an_output_every_past_int32_is_refused_naming_the_flag(tmp_path):
    top = int(np.iinfo(np.int32).max)  # the oracle: the step counter's dtype in jitted code
    args = ["hpc", "cfd", "--grid", "8", "8", "1", "--preset", "tiny", "--steps", "2",
            "--output-every", top + 1, "--out", tmp_path / "c"]  # fmt: skip
    line = refused_in_one_line(ROOT, args, "--output-every")
    assert f"[0, {top}]" in line and "output_every" not in line, line
    assert not (tmp_path / "c").exists()
