"""Hostile inputs left by stop 55's hunt (issue 44, bounded input): loosely typed or unbounded
spec fields, plan quantities past any sense, an empty params file, a huge YAML file. Each
exits 2 with one line naming the input and what is allowed, before any work."""

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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("base: wse3\nname: 5\n", "name must be text, got 5 (int)"),
        ("base: wse3\npe_rows: '100'\n", "pe_rows in spec file"),  # was read as 100
        ('base: wse3\nclock_hz: "1e9"\n', "must be a number, got the text '1e9'"),
        ("base: wse3\npe_rows: yes\n", "pe_rows must be a number, got True (bool)"),
        ("base: wse3\nsram_bytes_per_pe: 1e30\n", "sram_bytes_per_pe must be an integer in"),
        ("base: wse3\nspare_cols: 1e12\n", "[0, 100,000]"),
    ],
)  # fmt: skip
def test_spec_file_fields_are_typed_and_bounded(tmp_path, text, message):
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    _refused(["wafer", "info", "--spec", spec], message)


def test_spec_file_numbers_in_any_yaml_spelling_still_read(tmp_path):
    from wse_core import load_spec

    spec = tmp_path / "s.yaml"
    spec.write_text("base: wse3\nclock_hz: 1e9\npe_rows: 1e3\nflops_per_cycle: {fp32: 2e0}\n")
    got = load_spec(spec)
    assert (got.clock_hz, got.pe_rows, got.flops_per_cycle["fp32"]) == (1e9, 1000, 2.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [("pe_rows", "9223372036854775808"), ("pe_cols", "100001"), ("program_rows", "1e9")],
)
def test_set_integers_past_the_model_are_refused_naming_the_bound(field, value):
    _refused(["wafer", "info", "--set", f"{field}={value}"], f"{field} must be an integer in [")
