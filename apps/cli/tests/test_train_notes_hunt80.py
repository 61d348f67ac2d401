"""Hunt 80, hole 8: the config's notes (a warm-up as long as the run, ModelZoo's keys read
and ignored) were said by `wse train` alone, on stderr once the command ended, and never
written to the run's record, run.log. The run says them now, in its log and on the console
once (the CLI no longer adds its own copy); `--validate-only`, which runs nothing, still says
them. Oracle: `config_check.config_notes` of the same config, the one place that words them."""

import yaml
from typer.testing import CliRunner
from wse_cli.app import app
from wse_trainer.config import load_config
from wse_trainer.config_check import config_notes
from wse_trainer.testing import tiny_params, write_corpus

runner = CliRunner(env={"COLUMNS": "200", "WSE_DEVICES": "8"})  # conftest: 8 devices


def test_a_run_says_the_configs_notes_once_and_logs_them(tmp_path):
    corpus = write_corpus(tmp_path / "data")
    data = tiny_params(corpus, tmp_path / "unused")
    data["runconfig"].update(max_steps=2, sample_tokens=0)  # warm-up 2: not below max_steps
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(data))
    notes = config_notes(load_config(str(params), []))
    assert notes and notes[0].startswith("note: optimizer.warmup_steps=2 is not below ")
    checked = runner.invoke(app, ["train", str(params), "--validate_only"])
    assert checked.exit_code == 0, checked.output
    assert all(checked.output.count(n) == 1 for n in notes), checked.output
    out = tmp_path / "run"
    res = runner.invoke(app, ["train", str(params), "-o", str(out)])
    assert res.exit_code == 0, res.output
    log = (out / "run.log").read_text()
    for note in notes:
        assert res.output.count(note) == 1, res.output  # not twice: the run's, not the CLI's
        assert f"INFO: {note}\n" in log  # before: in no run.log
