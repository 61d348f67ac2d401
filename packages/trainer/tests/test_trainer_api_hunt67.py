"""Hunt 67's holes in the trainer's Python API (holes 4 and 5 of hunt67_api2). Before:
- a `TrainConfig` changed in Python (`dataclasses.replace`) skipped the type and
  finiteness checks a params file gets: `validate` took NaN learning_rate / weight_decay /
  eps / max_gradient_norm, max_steps / warmup_steps / seed / max_sequence_length 2.5,
  num_csx True, packing "no", and learning_rate "3e-3" was a TypeError from a comparison;
  `run(weight_decay=nan)` trained 11.5 s, blamed the learning rate and left a run folder;
- `runconfig.sample_temperature` -1 (from a params file too) or NaN sampled greedily
  without a word.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import refused_in_one_line
from wse_trainer.config import SHIPPED, ConfigError, load_config

# hunt 72: check_types moved to config_check (the checks' module), making room in config for
# ModelZoo's keys; config cannot import it back (tests/test_import_circles.py)
from wse_trainer.config_check import check_config, check_types
from wse_trainer.sample import generate

ROOT = typer.main.get_command(app)
NAN = float("nan")


def _changed(config, section: str, **kw):
    return dataclasses.replace(
        config, **{section: dataclasses.replace(getattr(config, section), **kw)}
    )


def _refusal(fn) -> str:
    with pytest.raises(ConfigError) as e:
        fn()
    return str(e.value)


# (section, key, the value set in Python, the same value as a params-file override)
HOSTILE = [
    ("optimizer", "learning_rate", NAN, ".nan"),
    ("optimizer", "weight_decay", NAN, ".nan"),
    ("optimizer", "eps", NAN, ".nan"),
    ("optimizer", "max_gradient_norm", NAN, ".nan"),
    ("optimizer", "min_learning_rate", math.inf, ".inf"),
    ("optimizer", "warmup_steps", 2.5, "2.5"),
    ("runconfig", "max_steps", 2.5, "2.5"),
    ("runconfig", "seed", 1.5, "1.5"),
    ("runconfig", "num_csx", True, "true"),
    ("train_input", "max_sequence_length", 64.5, "64.5"),
    ("train_input", "packing", "no", '"no"'),
    ("optimizer", "learning_rate", "3e-3", '"3e-3"'),
]


@pytest.mark.parametrize(("section", "key", "value", "text"), HOSTILE)
def test_a_config_changed_in_python_is_refused_as_the_file_reader_refuses_it(
    section, key, value, text
):
    from_file = _refusal(lambda: load_config("tiny", [f"{section}.{key}={text}"]))
    changed = _changed(load_config("tiny"), section, **{key: value})
    assert _refusal(lambda: check_config(changed)) == from_file
    assert from_file.startswith(f"{section}.{key} must be ")


def test_the_messages_are_the_readers_own_words():
    opt = dict(weight_decay=NAN)
    line = _refusal(lambda: check_config(_changed(load_config("tiny"), "optimizer", **opt)))
    assert line == "optimizer.weight_decay must be a finite number, got nan"
    run = dict(max_steps=2.5)
    line = _refusal(lambda: check_config(_changed(load_config("tiny"), "runconfig", **run)))
    # hunt 81: max_steps may be left out (null: num_steps past the start), as num_steps
    assert line == "runconfig.max_steps must be int or NoneType, got 2.5"


def test_a_whole_float_is_refused_in_python_but_still_read_from_a_file():
    # the reader converts `max_steps: 2.0` to 2; nothing converts a frozen config's 2.0
    assert load_config("tiny", ["runconfig.max_steps=2.0"]).runconfig.max_steps == 2
    changed = _changed(load_config("tiny"), "runconfig", max_steps=2.0)
    assert _refusal(lambda: check_config(changed)) == "runconfig.max_steps must be int, got 2.0"
    sections = dataclasses.replace(load_config("tiny"), optimizer={"learning_rate": 1e-3})
    assert "optimizer must be a OptimizerConfig" in _refusal(lambda: check_types(sections))


def test_an_int_where_a_float_goes_and_the_shipped_configs_still_pass():
    check_config(_changed(load_config("tiny"), "optimizer", learning_rate=1, weight_decay=0))
    for name in SHIPPED:
        check_types(load_config(name))


def test_run_with_a_nan_weight_decay_is_refused_before_a_folder_is_made(tmp_path):
    from wse_core import preset
    from wse_trainer.run import run

    config = _changed(load_config("tiny"), "runconfig", model_dir=str(tmp_path / "md"))
    config = _changed(config, "optimizer", weight_decay=NAN)
    with pytest.raises(ConfigError, match="optimizer.weight_decay must be a finite number"):
        run(config, preset(config.runconfig.wafer))
    assert not (tmp_path / "md").exists()


TEMPERATURE = "runconfig.sample_temperature must be a finite number >= 0 (0 is greedy), got {}"


@pytest.mark.parametrize("text", ["-1", "-0.5", "-1e308"])
def test_a_negative_sample_temperature_in_a_params_file_is_refused(text):
    config = load_config("tiny", [f"runconfig.sample_temperature={text}"])
    shown = repr(float(text))
    assert _refusal(lambda: check_config(config)) == TEMPERATURE.format(shown)


def test_a_nan_sample_temperature_set_in_python_is_refused():
    changed = _changed(load_config("tiny"), "runconfig", sample_temperature=NAN)
    assert _refusal(lambda: check_config(changed)) == (
        "runconfig.sample_temperature must be a finite number, got nan"
    )


@pytest.mark.parametrize("value", [0.0, 0, 0.7, 2.0])
def test_greedy_and_positive_temperatures_still_pass(value):
    check_config(_changed(load_config("tiny"), "runconfig", sample_temperature=value))


def test_wse_train_refuses_a_negative_sample_temperature_in_one_line(tmp_path):
    args = ["train", "tiny", "runconfig.sample_temperature=-1", "-o", tmp_path / "run"]
    line = refused_in_one_line(ROOT, args, "runconfig.sample_temperature")
    assert line == "Error: " + TEMPERATURE.format("-1.0")  # the float field reads -1 as -1.0
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", [-1, NAN, math.inf, "0.5", True])
def test_generate_refuses_a_temperature_pick_would_take_as_greedy(value):
    # checked on the host before the model is touched (pick's `temperature > 0` is greedy)
    line = _refusal(lambda: generate(None, None, [1, 2], 4, temperature=value))
    assert line == f"temperature must be a finite number >= 0 (0 is greedy), got {value!r}"
