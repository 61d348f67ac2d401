"""Review 82, hole 7: `wse plan infer -m gpt2-124m --users 1` printed "8 x H100-SXM5-80GB
(tp 6, pp 1)" for a replica that runs tp 6 on 6 of its 8 GPUs (GPT-2's 12 heads: vLLM runs
no tp 8), the 2 idle GPUs unsaid. Oracle: 8 - 1 x 6 x 1 by hand; the JSON's own layout."""

from __future__ import annotations

import json

import typer
from wse_cli.app import app
from wse_cli.testing import invoke

ROOT = typer.main.get_command(app)
ARGS = ["plan", "infer", "-m", "gpt2-124m", "--users", "1"]


def test_the_layout_line_says_the_idle_gpus():
    code, out = invoke(ROOT, ARGS, {"COLUMNS": "400"})
    assert code == 0, out[-2000:]
    row = next(line for line in out.splitlines() if "per replica" in line)
    assert "8 x H100-SXM5-80GB (tp 6, pp 1; 2 GPUs idle)" in row
    code, out = invoke(ROOT, [*ARGS, "--json"], None)
    assert code == 0, out[-2000:]
    g = json.loads(out)["gpu"]
    lay = g["point"]["layout"]
    assert g["idle_gpus"] == 8 - lay["replicas"] * lay["tp"] * lay["pp"] == 2
