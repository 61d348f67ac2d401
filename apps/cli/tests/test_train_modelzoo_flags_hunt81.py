"""Hunt 81, hole 8: ModelZoo's run.py flags (`-p/--params`, `-m/--mode`, `--eval_steps`,
`--is_pretrained_checkpoint`, `--compile_only`, `--logging`, `-c/--compile_dir`) were refused
as "No such option", `--eval_steps` with "Possible options: --max-steps, --num-steps" (a
train step count, not eval batches). They are read as ModelZoo's run.py reads them, or
refused in one line naming what runs instead. Oracles: the long spelling's output for the
short one; ModelZoo's cli_parser (Cerebras/modelzoo `add_general_arguments`) for what each
flag means; the run's own saved params for `--is_pretrained_checkpoint`."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner
from wse_cli.app import app
from wse_cli.testing import refused_in_one_line
from wse_trainer.testing import tiny_params, write_corpus

ROOT = typer.main.get_command(app)
runner = CliRunner(env={"COLUMNS": "200", "WSE_DEVICES": "8"})  # conftest: 8 devices


def _params(tmp_path: Path) -> str:
    data = tiny_params(write_corpus(tmp_path / "data"), tmp_path / "run")
    data["runconfig"].update(sample_tokens=0, mode="train")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_p_and_m_are_params_and_mode(tmp_path):
    params = _params(tmp_path)
    long = runner.invoke(app, ["train", "--params", params, "--mode", "eval", "--validate-only"])
    short = runner.invoke(app, ["train", "-p", params, "-m", "eval", "--validate_only"])
    assert long.exit_code == 0, long.output
    assert short.exit_code == 0 and short.output == long.output
    assert "predicted eval pass" in short.output  # mode eval: the eval pass priced, no step


def test_eval_steps_is_the_eval_batches_not_a_train_count(tmp_path):
    params = _params(tmp_path)
    res = runner.invoke(
        app, ["train", "-p", params, "-m", "train_and_eval", "--eval_steps", "3", "--validate_only"]
    )
    assert res.exit_code == 0, res.output
    assert "eval batches: eval_input.eval_steps=3;" in res.output  # the file's 2 replaced
    refused_in_one_line(
        ROOT,
        ["train", params, "eval_input.eval_steps=2", "--eval_steps", "3", "--validate-only"],
        "eval_input.eval_steps is given twice ('2', then --eval-steps 3); give it once",
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--compile_only"], "--compile_only (ModelZoo's: compile for the wafer, run nothing) "
         "has no counterpart: a run here compiles as it starts; --validate-only checks"),
        (["-c", "cdir"], "--compile_dir (ModelZoo's compile artifacts folder) has no "
         "counterpart: the compiled steps go to JAX's compile cache (WSE_CACHE_DIR"),
        (["--logging", "DEBUG"], "--logging 'DEBUG': a run here logs at one level, ModelZoo's "
         "INFO"),
        (["--is_pretrained_checkpoint"], "--is_pretrained_checkpoint loads a checkpoint's "
         "weights alone (from step 0, a fresh optimizer state): give the checkpoint with "
         "--checkpoint-path"),
        (["--is_pretrained_checkpoint", "--load_checkpoint_states", "model,dataloader"],
         "--is_pretrained_checkpoint loads the model alone and --load_checkpoint_states "
         "'model,dataloader' says otherwise"),
        (["--load_checkpoint_states", "model"], "runconfig.load_checkpoint_states 'model' "
         "names what to load from runconfig.checkpoint_path, and none is given"),
    ],
)  # fmt: skip
def test_modelzoo_flags_without_a_counterpart_are_refused_naming_what_runs(
    tmp_path, flags, message
):
    refused_in_one_line(ROOT, ["train", _params(tmp_path), *flags, "--validate-only"], message)


def test_logging_info_is_what_runs(tmp_path):
    res = runner.invoke(app, ["train", _params(tmp_path), "--logging", "INFO", "--validate-only"])
    assert res.exit_code == 0, res.output


def test_is_pretrained_checkpoint_starts_another_optimizer_from_the_weights(tmp_path):
    params = _params(tmp_path)
    base = tmp_path / "base"
    sgd = ["optimizer.optimizer_type=sgd", "runconfig.max_steps=2"]
    done = runner.invoke(app, ["train", params, *sgd, "-o", str(base)])
    assert done.exit_code == 0, done.output
    ft = tmp_path / "ft"
    args = ["train", params, "runconfig.max_steps=3", "--is_pretrained_checkpoint"]
    res = runner.invoke(
        app, [*args, "--checkpoint_path", str(base / "checkpoints" / "2"), "-o", str(ft)]
    )
    assert res.exit_code == 0, res.output
    assert "starting from checkpoint step 2's weights" in (ft / "run.log").read_text()
    saved = yaml.safe_load((ft / "train" / "params_train.yaml").read_text())
    assert saved["runconfig"]["load_checkpoint_states"] == "model"
    assert saved["optimizer"]["optimizer_type"] == "adamw"  # the checkpoint's was sgd
    assert "global step 3;" in res.output
