"""Review 80 (holes 5, 6, 7): the refusals of ModelZoo keys' values said what is not so.

5. `optimizer.loss_scaling_factor` of -1, 0 or .nan was "a static loss scale" (printed
   `nan`, where a params file spells `.nan`): only a positive finite number is a scale; the
   rest is refused as the sibling keys are, "must be a positive number or "dynamic"".
6. `train_input.prefetch_factor: 2.0` was refused ("must be a count >= 1, got 2.0 (ignored
   here: ...: ignored)"), where ModelZoo's pydantic int field takes a whole float; a value
   that is refused no longer says twice that the key is ignored.
7. `runconfig.autoload_checkpoint: maybe` said only true runs here; false runs too (in a new
   model_dir, or from --checkpoint-path: test_autoload_hunt79).

Oracles: YAML itself (a value as the line spells it reads back as the value given), the
run with the key left out (a key read and dropped changes nothing), and the arithmetic of a
whole float (2.0 == 2)."""

from __future__ import annotations

import math

import pytest
import yaml
from wse_trainer.config import ConfigError, load_config

LOSS = "optimizer.loss_scaling_factor"


def _refusal(override: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_config("tiny", [override])
    line = str(e.value)
    assert "\n" not in line and line.startswith(override.partition("=")[0])
    return line


@pytest.mark.parametrize("spelled", ["-1", "0", "0.0", ".nan", "-.inf", ".inf", "-2.5"])
def test_a_loss_scale_that_is_no_positive_number_is_not_called_a_scale(spelled):
    value = yaml.safe_load(spelled)
    assert not 0 < value < math.inf  # the oracle: no positive finite number, so no scale
    line = _refusal(f"{LOSS}={spelled}")
    assert "static loss scale" not in line  # before: "-1 is a static loss scale, ..."
    assert line.startswith(f'{LOSS} must be a positive number or "dynamic", got ')
    shown = line.rpartition("got ")[2]
    back = yaml.safe_load(shown)  # YAML reads the line's spelling back as the value given
    assert back == value or (math.isnan(back) and math.isnan(value)), shown


def test_a_positive_scale_other_than_one_is_still_a_static_scale():
    assert "128.0 is a static loss scale" in _refusal(f"{LOSS}=128.0")
    assert _refusal(f"{LOSS}=static").endswith('must be a positive number or "dynamic", got '
                                               "'static'")  # fmt: skip


@pytest.mark.parametrize(
    "override",
    ["train_input.prefetch_factor=2.0", "eval_input.num_workers=8.0",
     "train_input.num_workers=0.0", "optimizer.steps_per_increase=2000.0"],
)  # fmt: skip
def test_a_whole_float_is_the_count_modelzoo_takes(override):
    key, _, spelled = override.partition("=")
    assert float(spelled) == int(float(spelled))  # a whole number, as pydantic's lax int
    got = load_config("tiny", [override])  # before: "must be a count >= 1, got 2.0"
    assert got == load_config("tiny", [f"{key}=null"])  # read and dropped: the run without it


@pytest.mark.parametrize(
    ("override", "want"),
    [("train_input.prefetch_factor=0", "a count >= 1"),
     ("train_input.prefetch_factor=2.5", "a count >= 1"),
     ("train_input.num_workers=true", "a count >= 0"),
     ("eval_input.persistent_workers=3", "true or false")],
)  # fmt: skip
def test_a_refused_loader_value_does_not_say_it_is_ignored(override, want):
    line = _refusal(override)
    key, _, spelled = override.partition("=")
    assert line.startswith(f"{key} must be {want} as ModelZoo requires, got {spelled} ")
    assert "ignored" not in line  # before: "(ignored here: ...: ignored)"
    assert line.endswith("fix it, or leave the key out")


def test_the_autoload_refusal_says_false_runs_too():
    line = _refusal("runconfig.autoload_checkpoint=maybe")
    # before: "(true, ModelZoo's default, is what runs here: leave the key out)"
    assert "is what runs here" not in line
    assert line.startswith("runconfig.autoload_checkpoint must be true or false, got 'maybe'")
    assert "false starts from scratch in a new model_dir, or from --checkpoint-path" in line
    for value in (True, False):  # both run (false in a new folder: test_autoload_hunt79)
        assert load_config("tiny", [f"runconfig.autoload_checkpoint={str(value).lower()}"])
