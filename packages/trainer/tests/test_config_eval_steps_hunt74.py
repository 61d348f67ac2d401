"""hunt 73 (left): ModelZoo's `runconfig.eval_steps` at 0 or below was refused as
`eval_input.eval_steps`, a key the user never wrote. The line names the key as written, in a
file or on the command line; our spelling keeps its own name. Oracle: the key the user gave
(the same rule the betas' lines follow, test_config_zoo_hunt73)."""

from __future__ import annotations

import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.testing import refused_in_one_line
from wse_trainer.config import ConfigError, config_from_dict

ROOT = typer.main.get_command(app)


def _params(tmp_path, extra: dict | None = None):
    data = {"model": {"vocab_size": 300}, "runconfig": {"max_steps": 4}}
    for section, values in (extra or {}).items():
        data[section] = {**data.get(section, {}), **values}
    (path := tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("value", [0, -3])
@pytest.mark.parametrize("where", ["runconfig.eval_steps", "eval_input.eval_steps"])
@pytest.mark.parametrize("given", ["file", "override"])
def test_a_non_positive_eval_steps_is_named_as_written(tmp_path, where, value, given):
    section, key = where.split(".")
    if given == "file":
        args = [_params(tmp_path, {section: {key: value}})]
    else:
        args = [_params(tmp_path), f"{where}={value}"]
    args += ["--validate-only", "-o", tmp_path / "run"]
    line = refused_in_one_line(ROOT, ["train", *args], f"{where} must be positive")
    assert f"got {value};" in line
    assert not (tmp_path / "run").exists()  # refused before the run folder is made


def test_the_reader_names_a_zoo_key_as_written():
    with pytest.raises(ConfigError, match=r"^runconfig\.eval_steps must be positive"):
        config_from_dict({"model": {"vocab_size": 300}, "runconfig": {"eval_steps": 0}})


def test_a_positive_zoo_eval_steps_still_loads():
    config = config_from_dict({"model": {"vocab_size": 300}, "runconfig": {"eval_steps": 5}})
    assert config.eval_input.eval_steps == 5
