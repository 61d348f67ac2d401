"""Hunt 71 (`jobs6`): `wse train --validate-only` prices what the run prices for its mode.
Broken before:
- an eval-only run prices one eval pass and no step (hunt 70), but validate-only printed the
  training step ("predicted on 1 x small ...: step 0.009444 s") and no eval pass;
- train_and_eval's run prints the step and the eval pass, validate-only the step only;
- no surface said that the run's checkpoint saves are left out of its price.

Oracle: a real tiny run in each mode (`wse_trainer.run.run`, its log lines), then
validate-only of the same config through the CLI: the run's own eval line, character for
character, and its step's seconds, tokens/s and basis.
"""

from __future__ import annotations

import re

import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_trainer.config import config_from_dict
from wse_trainer.predicted import saves_note
from wse_trainer.testing import run_on_preset, tiny_config

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
WIDE = {"COLUMNS": "4000"}
FIGURES = re.compile(r"([0-9.e+-]+) s, ([0-9,]+) tokens/s")


def _with_mode(config, mode: str):
    data = config.to_dict()
    data["runconfig"]["mode"] = mode
    return config_from_dict(data)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny training run of one step, then the same folder run as train_and_eval (nothing
    left to train: its eval line alone) and evaluated (mode eval): each mode's log lines. In
    that order: a train_and_eval rerun evaluates no step whose eval is on record (hunt 78)."""
    tmp = tmp_path_factory.mktemp("modes")
    config = tiny_config(tmp, "runconfig.max_steps=1", "runconfig.checkpoint_steps=1",
                         "runconfig.mode=train", "runconfig.sample_tokens=0")  # fmt: skip
    params = tmp / "params.yaml"
    params.write_text(yaml.safe_dump(config.to_dict()))
    lines: dict[str, list[str]] = {}
    for mode in ("train", "train_and_eval", "eval"):
        lines[mode] = []
        run_on_preset(_with_mode(config, mode), echo=lines[mode].append)
    return config, params, lines


def _validated(params, mode: str) -> list[str]:
    code, out = invoke(ROOT, ["train", params, "--validate-only", "--mode", mode], WIDE)
    assert code == 0, out[-2000:]
    return out.splitlines()


def _starting(lines: list[str], head: str) -> list[str]:
    return [line for line in lines if line.startswith(head)]


def _same_step(run_line: str, shown: str, config) -> None:
    """The run's step line and validate-only's: the same figures, the same saves note and
    basis after them."""
    assert FIGURES.search(run_line).groups() == FIGURES.search(shown).groups()
    note = saves_note(config)
    assert run_line.split(note, 1)[1] == shown.split(note, 1)[1]


def test_train_mode_shows_the_runs_step_and_no_eval_pass(runs):
    config, params, lines = runs
    (step,) = _starting(lines["train"], "predicted wafer step")
    assert not _starting(lines["train"], "predicted eval pass")
    shown = _validated(params, "train")
    _same_step(step, _starting(shown, "predicted on ")[0], config)
    assert not _starting(shown, "predicted eval pass")


def test_eval_mode_shows_the_runs_eval_line_and_no_step(runs):
    config, params, lines = runs
    assert not _starting(lines["eval"], "predicted wafer step")
    (evals,) = _starting(lines["eval"], "predicted eval pass")
    shown = _validated(params, "eval")
    assert not _starting(shown, "predicted on ")  # before: the training step
    assert _starting(shown, "predicted eval pass") == [evals]  # before: none


def test_train_and_eval_shows_the_step_and_the_runs_eval_line(runs):
    config, params, lines = runs
    (step,) = _starting(lines["train"], "predicted wafer step")
    (evals,) = _starting(lines["train_and_eval"], "predicted eval pass")
    assert " every " in evals or " at the end" in evals
    shown = _validated(params, "train_and_eval")
    _same_step(step, _starting(shown, "predicted on ")[0], config)
    assert _starting(shown, "predicted eval pass") == [evals]  # before: none


def test_the_step_lines_name_the_saves_they_leave_out(runs):
    config, params, lines = runs
    note = saves_note(config)
    assert note == ("not priced: checkpoint saves (every 1 step and at the end, MemoryX's "
                    "masters and optimizer state; no sourced write rate)")  # fmt: skip
    (step,) = _starting(lines["train"], "predicted wafer step")
    assert f"; {note}; " in step
    assert f"; {note}; " in _starting(_validated(params, "train"), "predicted on ")[0]


def test_trace_of_an_eval_run_is_refused(runs, tmp_path):
    _, params, _ = runs
    refused_in_one_line(
        ROOT, ["train", params, "--validate-only", "--mode", "eval", "--trace",
               tmp_path / "t.json"], "--mode eval trains no step")  # fmt: skip
    assert not (tmp_path / "t.json").exists()
