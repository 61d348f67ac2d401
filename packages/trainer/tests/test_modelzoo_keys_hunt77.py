"""Hunt 77: ModelZoo's runconfig keys with no setting here got misleading hints:
`runconfig.num_epochs=1` -> "did you mean 'num_steps'?", `runconfig.autoload_checkpoint=false`
-> "did you mean 'save_initial_checkpoint'?".

Oracle: ModelZoo's documented meanings. `autoload_checkpoint` (default true): with no
checkpoint_path, resume from the newest checkpoint in model_dir, which every run here does,
so a params file with `autoload_checkpoint: true` is the file without it (the same
TrainConfig); false: test_autoload_hunt79.
`num_epochs` counts passes over the data, which runs here do not have: its line names
runconfig.max_steps, never num_steps."""

from __future__ import annotations

import pytest
import yaml
from wse_trainer.config import ConfigError, load_config, shipped_config


def _params(tmp_path, **runconfig):
    data = yaml.safe_load(shipped_config("tiny").read_text())
    data["runconfig"] = {**data.get("runconfig", {}), **runconfig}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("how", ["file", "override", "null"])
def test_autoload_checkpoint_true_is_what_runs(tmp_path, how):
    plain = load_config("tiny")
    if how == "file":
        got = load_config(_params(tmp_path, autoload_checkpoint=True))
    else:
        value = "null" if how == "null" else "true"
        got = load_config("tiny", [f"runconfig.autoload_checkpoint={value}"])
    assert got == plain


# `false`: test_autoload_hunt79 (refused only where a step would be loaded)


def test_autoload_checkpoint_of_no_boolean_is_refused():
    with pytest.raises(ConfigError, match="must be true or false, got 2"):
        load_config("tiny", ["runconfig.autoload_checkpoint=2"])


@pytest.mark.parametrize("key", ["num_epochs", "steps_per_epoch"])
@pytest.mark.parametrize("value", ["1"])  # a null is the key left out: test_trainlog_hunt78
def test_epochs_are_refused_naming_max_steps(key, value):
    with pytest.raises(ConfigError) as e:
        load_config("tiny", [f"runconfig.{key}={value}"])
    line = str(e.value)
    assert "did you mean" not in line  # before: "did you mean 'num_steps'?"
    assert "no epochs here" in line and "give runconfig.max_steps" in line


def test_a_typo_still_gets_its_closest_key():
    with pytest.raises(ConfigError, match="did you mean 'max_steps'"):
        load_config("tiny", ["runconfig.max_step=3"])
