"""Hunt 76: `wse wafer check --help` said "Run every fabric op" while the check ran 6 cases
over 5 of the fabric's 11 data ops (never reduce, multicast_apply, halo_apply, window_apply,
sliding_extreme, allreduce_apply or local_apply; max along rows only, never with a NaN).

Oracles: the fabric's own public list (`wse_core.fabric.__all__`) for what must be run, and
NumPy's answers for each case (`wse_cli.commands.wafer_cases`); a max that drops a NaN, as
`fabric.reduce` did on a multi-device mesh, must fail the check."""

from __future__ import annotations

import importlib
import json

import pytest
import typer
from jax import lax
from wse_cli.app import app
from wse_cli.testing import invoke

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
WIDE = {"COLUMNS": "200"}
NOT_OPS = {"Direction", "Boundary", "count"}  # types, and the count that moves nothing


def _data_ops() -> list[str]:
    from wse_core import fabric

    ops = [n for n in fabric.__all__ if n not in NOT_OPS]
    assert len(ops) == 11, ops
    return ops


def _check(args: list[str]) -> tuple[int, dict]:
    code, output = invoke(ROOT, ["wafer", "check", *args, "--json"])
    return code, json.loads(output[output.index("{") :])


def test_the_help_names_every_op_the_check_runs():
    code, out = invoke(ROOT, ["wafer", "check", "--help"], WIDE)
    assert code == 0
    text = " ".join(out.split())
    for op in _data_ops():
        assert op in text, op
    assert "NaN" in text


@pytest.mark.parametrize("grid", [("13", "21"), ("3", "1"), ("5", "2")])
def test_every_data_op_runs_against_numpy_and_passes(grid):
    code, out = _check(["-p", "small", "--grid", *grid])
    assert code == 0 and out["ok"], out
    assert out["mesh"][0] * out["mesh"][1] > 1  # the test process's 8 devices
    names = list(out["mismatched"])
    for op in _data_ops():
        assert any(n.startswith(op) for n in names), (op, names)
    assert sum("nan" in n for n in names) >= 3  # reduce, allreduce and the sliding max
    assert set(out["max_abs_error"].values()) == {0.0}


def test_a_max_that_drops_nan_fails_the_check(monkeypatch):
    # the module (`wse_core.fabric.reduce` the attribute is the function it exports)
    fabric_reduce = importlib.import_module("wse_core.fabric.reduce")
    monkeypatch.setattr(fabric_reduce, "_pmax", lax.pmax)  # hunt 76's max, NaN dropped
    code, out = _check(["-p", "small", "--grid", "13", "21"])
    assert code == 1 and not out["ok"]
    wrong = {k for k, n in out["mismatched"].items() if n}
    assert wrong == {"reduce_max_nan", "allreduce_max_nan"}
    assert out["max_abs_error"]["reduce_max_nan"] == float("inf")
