"""Hunt 70 on the command line: `wse hpc stencil`, `wse hpc md` and `wse hpc tlrmvm run`
list beside their predictions the swept constants that move them, as `wse hpc swe|cfd` do,
and `tlrmvm run --batch B` says what its time covers.

Broken before:
- `wse hpc stencil` printed the calibration only, `wse hpc md`'s predicted line and `wse hpc
  tlrmvm run`'s neither: no `assumed:` line, while `dsd_issue_cycles` (listed in their JSON)
  moves each prediction;
- `tlrmvm run --batch 4` printed "78.83 µs per MVM" for one product of 4 MVMs, and 2.75 GB/s
  of bases where batch 1 gave 11.0 (the bases counted once for 4 passes).

Oracles: each command's own JSON (its `assumed` entries, printed by `compact`), and the
prediction repriced inside `assume(...)`, as `--assume` runs it.
"""

from __future__ import annotations

import json
import re

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_core.cost.assumptions import assume
from wse_core.cost.listing import Listed, compact

ROOT = typer.main.get_command(app)
WIDE = {"COLUMNS": "4000"}  # one line a note
SLOWER = {"dsd_issue_cycles": 30.0}  # listed by all three; the top of its sweep


def _run(args: list, env=None) -> str:
    code, out = invoke(ROOT, [str(a) for a in args], env)
    assert code == 0, out[-2000:]
    return out


def _json(args: list) -> dict:
    out = _run([*args, "--json"])
    return json.loads(out[out.index("{") :])


def _check_listed(text: str, report: dict, swept: dict) -> None:
    """The text's `assumed:` line is the JSON's entries, non-empty, and a constant it lists
    moves the figure when swept (`swept`: the report priced under `assume(**SLOWER)`; the
    refit of the other fitted constants decides the direction)."""
    entries = [Listed.from_dict(e) for e in report["assumed"]]
    assert entries and [e.key for e in entries][:1] == ["clock_hz"]
    line = compact(entries)
    assert line.startswith("assumed: clock_hz") and line in text.splitlines()
    held = {e.key: e for e in (Listed.from_dict(d) for d in swept["assumed"])}
    assert "dsd_issue_cycles" in {e.key for e in entries}
    assert held["dsd_issue_cycles"].assumed
    assert swept["predicted_s"] != report["predicted_s"]


@pytest.fixture(scope="module")
def cu(tmp_path_factory):
    out = tmp_path_factory.mktemp("md") / "Cu.eam.alloy"
    _run(["hpc", "md", "potential", "--elements", "Cu", "--out", out, "--knots", "300"])
    return out


@pytest.fixture(scope="module")
def operator(tmp_path_factory):
    out = tmp_path_factory.mktemp("tlr") / "op.npz"
    _run(["hpc", "tlrmvm", "compress", "--n", "128", "--nb", "32", "--out", out])
    return out


def test_stencil_lists_what_moves_its_prediction():
    args = ["hpc", "stencil", "--kind", "jacobi", "--grid", "8", "8", "16", "--steps", "4"]
    text, data = _run(args, WIDE), _json(args)
    with assume(**SLOWER):
        slower = _json(args)
    _check_listed(text, data, slower)
    assert text.index("predicted on wse2") < text.index("assumed: clock_hz")


def test_md_lists_what_moves_its_prediction(cu):
    args = ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells",
            "4", "4", "4", "--potential", cu, "--steps", "1"]  # fmt: skip
    text, data = _run(args, WIDE), _json(args)
    with assume(**SLOWER):
        slower = _json(args)
    _check_listed(text, data["report"], slower["report"])


def test_tlrmvm_run_lists_what_moves_it_and_says_what_its_time_covers(operator):
    args = ["hpc", "tlrmvm", "run", "--operator", operator]
    one, text = _json(args)["predicted"], _run([*args, "--batch", "4"], WIDE)
    four = _json([*args, "--batch", "4"])["predicted"]
    with assume(**SLOWER):
        slower = _json([*args, "--batch", "4"])["predicted"]
    _check_listed(text, four, slower)
    per = four["predicted_s"] / 4 * 1e6
    shown = f"{four['predicted_s'] * 1e6:.2f} µs per product of 4 vectors, {per:.2f} µs per vector"
    assert f"predicted on wse2: {shown} (" in text
    assert "per MVM" not in text and "per MVM" in _run(args, WIDE)
    # bytes and time count the same 4 passes: the bandwidth is batch 1's (it was 4x lower)
    assert four["bases_bytes_moved"] == 4 * one["bases_bytes_moved"]
    assert four["model_bytes_per_s"] == pytest.approx(one["model_bytes_per_s"], rel=0.02)
    tb = re.search(r"; ([\d.]+) TB/s of bases", text)
    assert tb and float(tb[1]) == pytest.approx(four["model_bytes_per_s"] / 1e12, rel=0.05)
