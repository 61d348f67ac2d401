"""Hunt 65's `wse train` option holes. Broken before: `runconfig.validate_only: true` (ModelZoo's
key, accepted and type-checked) was never read - the whole run trained, saved and exported,
exit 0; `--validate-only` said "config is valid" for a missing `train_input.data_dir` or
`--checkpoint-path` that the run refuses in a second; the closing summary wrapped at 80
columns when piped ("predicted 0.0009 s on the\\nwafer"), so a grep for it failed."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_trainer.testing import QUICK_OVERRIDES

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
QUICK = list(QUICK_OVERRIDES)  # what is checked here is the options and the summary lines


def test_the_params_files_validate_only_validates_and_writes_nothing(tmp_path):
    run = tmp_path / "run"
    code, output = invoke(
        ROOT, ["train", "tiny", *QUICK, "runconfig.validate_only=true", "-o", run]
    )
    assert code == 0 and output.strip().endswith("config is valid"), output[-2000:]
    assert "global step" not in output and not run.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["train_input.data_dir=/nonexistent/data"],
            "data file '/nonexistent/data' does not exist",
        ),
        (
            ["--mode", "eval", "--checkpoint-path", "/nonexistent/ckpt"],
            "no committed checkpoint at '/nonexistent/ckpt'",
        ),
    ],
)
@pytest.mark.parametrize("how", [["--validate-only"], ["runconfig.validate_only=true"]])
def test_validation_refuses_what_the_run_refuses(tmp_path, how, extra, message):
    refused_in_one_line(ROOT, ["train", "tiny", *QUICK, *how, *extra], message)
    run = ["train", "tiny", *QUICK, *extra, "-o", tmp_path / "run"]
    refused_in_one_line(ROOT, run, message)  # the oracle: the run's own refusal
    assert not (tmp_path / "run").exists()


def test_the_closing_summary_is_one_line_each_when_piped(tmp_path):
    run = tmp_path / ("a-model-dir-name-long-enough-to-pass-eighty-columns" * 2)
    code, output = invoke(ROOT, ["train", "tiny", *QUICK, "runconfig.max_steps=1", "-o", run])
    assert code == 0, output[-2000:]
    lines = output.splitlines()
    summary = [ln for ln in lines if ln.startswith("global step 1; ")]
    assert len(summary) == 1 and summary[0].endswith(f"model_dir {Path(run)}"), lines[-6:]
    step = [ln for ln in lines if ln.startswith("step: measured ")]
    assert len(step) == 1 and step[0].endswith(" s on the wafer"), lines[-6:]
