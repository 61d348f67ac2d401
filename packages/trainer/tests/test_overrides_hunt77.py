"""Hunt 77: `wse train tiny runconfig.checkpoint_steps=null --validate-only` saved every 50
steps (the default) where `checkpoint_steps: null` in the params file saves no periodic
checkpoint, and `train_input.micro_batch_size=null` gave auto where the file's null gives
none: docs/tour.md's "key=null drops a key to its default" was a trap for exactly the keys
whose null means something.

Oracle: the params file itself. For every key of every section, `key=null` on the command
line gives the config that `key: null` written into the file gives; where the file refuses
a null, the override drops the key to its default (the file without the key), as Hydra's
`~key`. The ModelZoo meanings are checked on top: no periodic save, no micro-batch tiling.
"""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from wse_trainer.cadence import loop_config, saved_steps, saves_text
from wse_trainer.config import SECTIONS, ConfigError, apply_overrides, load_config, shipped_config
from wse_trainer.override_nulls import null_is_value


def _tiny() -> dict:
    return yaml.safe_load(shipped_config("tiny").read_text())


def _file(tmp_path, data: dict):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _keys() -> list[tuple[str, str]]:
    """Every key of the four dataclass sections, and the model's that may be null."""
    import wse_models

    keys = [(s, f.name) for s, cls in SECTIONS.items() if cls for f in dataclasses.fields(cls)]
    model = dataclasses.fields(wse_models.ModelConfig)
    return keys + [("model", f.name) for f in model if f.name in ("head_dim", "rope_scaling",
                                                                  "mlp_activation")]  # fmt: skip


@pytest.mark.parametrize(("section", "key"), _keys(), ids=lambda x: str(x))
def test_an_override_of_null_means_what_the_files_null_means(tmp_path, section, key):
    data = _tiny()
    with_null = {**data, section: {**data[section], key: None}}
    try:
        want = load_config(_file(tmp_path, with_null))  # the file's null
    except ConfigError:  # the file refuses a null here: the override drops the key
        without = {**data, section: {k: v for k, v in data[section].items() if k != key}}
        want = load_config(_file(tmp_path, without))
    assert load_config("tiny", [f"{section}.{key}=null"]) == want


def test_the_hunts_keys_are_the_null_valued_ones():
    got = {(s, k) for s, k in _keys() if null_is_value(SECTIONS[s], s, k)}
    assert {("runconfig", "checkpoint_steps"), ("train_input", "micro_batch_size"),
            ("eval_input", "micro_batch_size"), ("model", "rope_scaling")} <= got  # fmt: skip
    assert ("optimizer", "decay_steps") not in got  # null is its default: dropped, as before
    assert ("runconfig", "log_steps") not in got  # a file refuses its null


def test_checkpoint_steps_null_saves_at_the_end_only():
    """ModelZoo's null: no periodic checkpoint (ours still saves the last step)."""
    cfg = load_config("tiny", ["runconfig.checkpoint_steps=null"])
    run = cfg.runconfig
    assert run.checkpoint_steps is None and list(saved_steps(run, 0)) == [run.max_steps]
    assert loop_config(cfg).runconfig.checkpoint_steps == run.max_steps + 1  # reached by none
    assert saves_text(run).startswith("at the end only")
    dropped = load_config("tiny", ["runconfig.checkpoint_steps=0"])
    assert list(saved_steps(dropped.runconfig, 0)) == [run.max_steps]  # 0 as null, as before


def test_micro_batch_size_null_is_none_on_both_splits():
    """ModelZoo's "disable micro batch tiling": the whole per-system batch at once."""
    cfg = load_config("tiny", ["train_input.micro_batch_size=null",
                               "eval_input.micro_batch_size=null"])  # fmt: skip
    assert cfg.train_input.micro_batch_size == cfg.eval_input.micro_batch_size == "none"
    assert load_config("tiny").train_input.micro_batch_size == "auto"  # left out: auto


def test_rope_scaling_null_over_a_llama_preset(tmp_path):
    from wse_trainer.session import model_config

    data = {**_tiny(), "model": {"preset": "llama3-1b"}}
    preset = model_config(load_config(_file(tmp_path, data)))
    assert preset.rope_scaling is not None  # the preset's, the key left out
    data["model"]["rope_scaling"] = None
    in_file = model_config(load_config(_file(tmp_path, data)))
    del data["model"]["rope_scaling"]
    given = model_config(load_config(_file(tmp_path, data), ["model.rope_scaling=null"]))
    assert in_file.rope_scaling is None and given == in_file


def test_an_empty_value_says_what_null_would_do():
    with pytest.raises(ConfigError) as e:
        apply_overrides({}, ["runconfig.checkpoint_steps="])
    assert str(e.value).endswith(
        "runconfig.checkpoint_steps=null for null, as `checkpoint_steps: null` in a params file"
    )
    with pytest.raises(ConfigError, match="=null to drop the key and take its default$"):
        apply_overrides({}, ["runconfig.log_steps="])
