"""Hostile inputs found by hunt 58: each exits 2 with one line that names the input and what
is allowed. Before the fixes: `plan infer --gamma 4` without `--draft` was dropped and the plan
ran without speculation (exit 0), and `--tokens-per-day 1e-300` made the energy per token inf
and the refusal asked for smaller values."""

from __future__ import annotations

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import refused_in_one_line

ROOT = typer.main.get_command(app)
INFER = ["plan", "infer", "--model", "llama3-8b"]


def _refused(args: list, message: str, env: dict[str, str] | None = None) -> str:
    return refused_in_one_line(ROOT, [str(a) for a in args], message, env)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([*INFER, "--gamma", "4"], "--gamma needs --draft"),
        ([*INFER, "--tokens-per-day", "1e-300"],
         "--tokens-per-day must be a finite number in [1, 1e+16] (tokens/day), got 1e-300"),
    ],
)  # fmt: skip
def test_plan_options_that_were_dropped_or_misread_are_refused(args, message):
    _refused(args, message)
