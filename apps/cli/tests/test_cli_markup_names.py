"""Names a user gives (a model folder, a wafer spec's `name:`) are printed as text, never read
as rich markup. Found in stop 65 after hunt 64's `wse wafer info` fix: `wse plan infer -m
'm[/x]'` (an HF folder of that name) and `wse hpc stencil --spec` of a wafer named 'w[/x]'
were MarkupError tracebacks, and '[red]...[/red]' in a name lost its brackets."""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_models.testing import LLAMA3_8B_HF

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)


@pytest.mark.parametrize("name", ["m[/x]", "[red]m[/red]"])
def test_a_model_folder_name_is_printed_as_given(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).mkdir(parents=True)  # "m[/x]": a folder "x]" in "m["
    (tmp_path / name / "config.json").write_text(json.dumps(LLAMA3_8B_HF))
    code, out = invoke(ROOT, ["plan", "infer", "-m", name, "--users", "1"])
    assert code == 0, out
    assert f"wse plan infer: {name} (8.03B params)" in out


def test_a_wafer_spec_name_is_printed_as_given(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text('base: wse2\nname: "w[/x] [bold]b[/bold]"\n')
    args = ["hpc", "stencil", "--kind", "heat", "--spec", spec, "--grid", "8", "8", "4",
            "--steps", "2"]  # fmt: skip
    code, out = invoke(ROOT, args)
    assert code == 0, out
    assert "(w[/x] [bold]b[/bold], fp32," in " ".join(out.split())  # the title wraps
