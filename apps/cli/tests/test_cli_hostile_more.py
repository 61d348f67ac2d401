"""Hostile inputs found by issue 56's hunt (the options and files issue 54's left untried):
each exits 2 with one line naming the input and what is allowed, before any work, with
nothing written."""

from __future__ import annotations

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke

ROOT = typer.main.get_command(app)


def _refused(args: list, message: str, env: dict[str, str] | None = None) -> str:
    code, output = invoke(ROOT, [str(a) for a in args], env)
    lines = output.strip().splitlines()
    assert code == 2, (code, output[-2000:])
    assert len(lines) == 1 and lines[0].startswith("Error: "), lines
    assert message in lines[0] and "Traceback" not in output, lines[0]
    return lines[0]


@pytest.mark.parametrize("value", ["1e308", "2.5", "-0.1", "nan"])
def test_generate_temperature_outside_openai_range_is_refused(value):
    args = ["infer", "generate", "--model-dir", "x", "--prompt", "x", "--temperature", value]
    _refused(args, "--temperature must be a finite number in [0, 2]")  # 1e308 was sampled
