"""Hunt 79: `runconfig.autoload_checkpoint: false` was refused when the file was read, before
the run knew its model_dir or checkpoint_path: in a new or empty folder, and with the
`--checkpoint-path` its own line advised.

Oracle: ModelZoo's meaning (false: no resume from model_dir's newest checkpoint; a
checkpoint_path is loaded whatever autoload says) against the folder's contents: with no
committed step in the model_dir, or with a checkpoint_path, false loads what true loads, so
it runs (`--validate-only` exits 0); only a model_dir holding a step with no checkpoint_path
would load what the user asked not to load, and is refused in one line naming the step."""

from __future__ import annotations

import dataclasses

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_trainer.config import ConfigError, load_config
from wse_trainer.modelzoo_runconfig import autoload_problem
from wse_trainer.session import check_inputs

ROOT = typer.main.get_command(app)
FALSE = ["runconfig.autoload_checkpoint=false", "train_input.max_corpus_bytes=20000"]


def _with_steps(folder, *steps):
    for step in steps:
        (folder / "checkpoints" / str(step)).mkdir(parents=True)
    return folder


def _config(model_dir, checkpoint_path=None):
    config = load_config("tiny", FALSE)
    run = dataclasses.replace(
        config.runconfig, model_dir=str(model_dir), checkpoint_path=checkpoint_path
    )
    return dataclasses.replace(config, runconfig=run)


def test_false_is_read_and_kept():
    assert load_config("tiny", FALSE).runconfig.autoload_checkpoint is False
    assert load_config("tiny").runconfig.autoload_checkpoint is True


@pytest.mark.parametrize("folder", ["new", "empty", "no_steps"])
def test_false_runs_where_nothing_would_be_loaded(tmp_path, folder):
    model_dir = tmp_path / "run"
    if folder != "new":
        model_dir.mkdir()
    if folder == "no_steps":
        (model_dir / "checkpoints").mkdir()
    check_inputs(_config(model_dir))  # no ConfigError


def test_false_with_a_checkpoint_path_runs(tmp_path):
    source = _with_steps(tmp_path / "A", 3)
    check_inputs(_config(tmp_path / "E", str(source / "checkpoints" / "3")))
    # a checkpoint_path into the run's own folder too: it is the step loaded, as ModelZoo's
    check_inputs(_config(source, str(source / "checkpoints" / "3")))


def test_false_where_a_step_would_be_resumed_is_refused(tmp_path):
    model_dir = _with_steps(tmp_path / "run", 2, 4)
    with pytest.raises(ConfigError) as e:
        check_inputs(_config(model_dir))
    line = str(e.value)
    assert "\n" not in line and "checkpoint step 4" in line and "new model_dir (-o)" in line
    assert autoload_problem(_config(model_dir).runconfig, []) is None


def test_cli_false_in_a_new_folder_validates_and_in_a_run_folder_is_refused(tmp_path):
    code, output = invoke(ROOT, ["train", "tiny", *FALSE, "-o", tmp_path / "x", "--validate-only"])
    assert code == 0 and "config is valid" in output, output[-2000:]
    run = _with_steps(tmp_path / "run", 3)
    args = ["train", "tiny", *FALSE, "-o", run, "--validate-only"]
    refused_in_one_line(ROOT, args, "autoload_checkpoint false: model_dir")
    ok = args + ["--checkpoint-path", run / "checkpoints" / "3"]
    code, output = invoke(ROOT, ok)
    assert code == 0 and "config is valid" in output, output[-2000:]
