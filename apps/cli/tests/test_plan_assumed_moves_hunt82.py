"""Hunt 82 (jobs18 L1): a constant listed as moving a plan's figures moves them.

Before: `wse plan infer -m llama3-8b --users 64 --assume gpu.ib_latency_s=2e-5` (8 H100s, one
node: nothing crosses InfiniBand) printed the latency under "assumed constants that move
these figures" though every figure of its JSON equals the run without it. Now such an entry
says "read, moves nothing here", sits under its own header, and its JSON entry has
"moves": false; a plan that crosses nodes (Llama 3.1 405B on 16 H100s, two stages a node
each) lists it as moving.

Oracle: the same plan without the `--assume`, every figure compared.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner
from wse_cli.app import app

runner = CliRunner()
IB = "gpu.ib_latency_s"


def _plan(model: str, users: str, *extra: str, json_out: bool = True):
    r = runner.invoke(app, ["plan", "infer", "-m", model, "--users", users, *extra,
                            *(["--json"] if json_out else [])])  # fmt: skip
    assert r.exit_code == 0, r.output
    return json.loads(r.output) if json_out else r.output


def _bare(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in ("assume", "assumed")}


def test_an_assumed_constant_no_figure_moves_with_is_not_listed_as_moving():
    with_ib = _plan("llama3-8b", "64", "--assume", f"{IB}=2e-5")
    assert _bare(with_ib) == _bare(_plan("llama3-8b", "64"))  # no figure moves
    entry = next(e for e in with_ib["assumed"] if e["name"] == IB)
    assert entry["assumed"] and entry["moves"] is False
    text = _plan("llama3-8b", "64", "--assume", f"{IB}=2e-5", json_out=False)
    notes = " ".join(text.split()).split(" - ")  # the notes below the table, one a "- "
    moving = next(i for i, x in enumerate(notes) if x.startswith("assumed constants that move"))
    idle = next(i for i, x in enumerate(notes) if x.startswith("assumed (--assume) and read,"))
    at = next(i for i, x in enumerate(notes) if x.startswith(f"{IB} ="))
    assert moving < idle < at and "read, moves nothing here" in notes[at]


def test_a_plan_across_nodes_lists_the_infiniband_latency_as_moving():
    with_ib = _plan("llama3-405b", "8", "--assume", f"{IB}=2e-5")
    entry = next(e for e in with_ib["assumed"] if e["name"] == IB)
    assert entry["moves"] is True
    assert with_ib["gpu"]["tokens_per_s"] != _plan("llama3-405b", "8")["gpu"]["tokens_per_s"]
