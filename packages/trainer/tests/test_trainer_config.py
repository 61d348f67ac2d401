"""Params files: ModelZoo sections, dotted overrides, errors that suggest the right key."""

import pytest
from wse_core import preset
from wse_trainer.config import (
    SHIPPED,
    ConfigError,
    apply_overrides,
    config_from_dict,
    load_config,
    shipped_config,
)
from wse_trainer.config_check import check_config
from wse_trainer.run import model_config, validate


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_config_parses_and_validates(name):
    cfg = load_config(shipped_config(name))
    model, plan = validate(cfg, preset(cfg.runconfig.wafer))
    assert model.num_params() > 0
    assert plan.streaming is not None, plan.streaming_error
    # The plan's masters row is the analytic count: 4 bytes per parameter for the weights.
    assert plan.rows[0]["bytes"] == 4 * model.num_params()


def test_published_presets_keep_their_shapes():
    assert model_config(load_config("gpt2_124m")).num_params() == pytest.approx(124.4e6, rel=0.01)
    assert model_config(load_config("llama3_70b")).num_params() == pytest.approx(70.6e9, rel=0.01)


def test_dotted_overrides_apply_with_yaml_types(tmp_path):
    cfg = load_config(
        "tiny",
        [
            "optimizer.learning_rate=3e-4",
            "runconfig.num_csx=2",
            "model.n_layers=2",
            "train_input.data_dir=[a.txt, b.txt]",
        ],
    )
    assert cfg.optimizer.learning_rate == 3e-4
    assert cfg.runconfig.num_csx == 2
    assert cfg.model["n_layers"] == 2
    assert cfg.train_input.data_dir == ["a.txt", "b.txt"]


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("optimizer.learning_rat=1", "did you mean 'learning_rate'"),
        ("runconfig.num_cs=2", "did you mean 'num_csx'"),
        ("optimiser.learning_rate=1", "did you mean 'optimizer'"),
        ("runconfig.max_steps=ten", "must be int"),
        ("learning_rate=3", "section.key=value"),
    ],
)
def test_bad_keys_are_errors_with_a_suggestion(override, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config("tiny", [override])


def test_unknown_model_key_suggests():
    with pytest.raises(Exception, match="did you mean 'n_layers'"):  # read with the file's
        model_config(load_config("tiny", ["model.n_layer=2"]))  # other keys (hunt 79)


def test_duplicate_keys_are_refused(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("runconfig:\n  max_steps: 3\n  max_steps: 4\n")
    with pytest.raises(ConfigError, match="duplicate key 'max_steps' at line 3"):
        load_config(p)


def test_batch_must_divide_over_replicas():
    cfg = config_from_dict({"train_input": {"batch_size": 10}, "runconfig": {"num_csx": 4}})
    with pytest.raises(ConfigError, match="not divisible by num_csx=4; use a multiple such as 8"):
        check_config(cfg)


@pytest.mark.parametrize(
    ("shards", "needle"),
    [(-1, "cpu_shards must be 0 \\(choose\\) or positive, got -1"), (3, "does not divide")],
)
def test_cpu_shards_must_split_each_replicas_batch(shards, needle):
    cfg = config_from_dict(
        {"train_input": {"batch_size": 8}, "runconfig": {"num_csx": 2, "cpu_shards": shards}}
    )
    with pytest.raises(ConfigError, match=needle):
        check_config(cfg)
    ok = config_from_dict({"train_input": {"batch_size": 8}, "runconfig": {"cpu_shards": 4}})
    check_config(ok)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (
            3,
            "micro_batch_size=3 does not divide the per-system batch of 8 "
            r"\(train_input.batch_size=16 over num_csx=2\); use a divisor such as 2 or 4",
        ),
        (0, "micro_batch_size must be positive, got 0"),
        ("most", "micro_batch_size='most' is not valid; choose one of: auto, explore, none"),
        (True, "micro_batch_size must be int or str or NoneType, got true"),
    ],
)
def test_micro_batch_size_must_divide_the_per_system_batch(value, needle):
    """ModelZoo's micro_batch_size is per system: it divides batch_size / num_csx."""
    base = {"train_input": {"batch_size": 16}, "runconfig": {"num_csx": 2}}
    with pytest.raises(ConfigError, match=needle):
        check_config(
            config_from_dict(apply_overrides(base, [f"train_input.micro_batch_size={value}"]))
        )
    for ok in (1, 2, 4, 8, "auto", "explore", "none", None):
        cfg = config_from_dict({**base, "train_input": {"batch_size": 16, "micro_batch_size": ok}})
        check_config(cfg)


def test_cpu_shards_must_split_the_micro_batch():
    cfg = config_from_dict(
        {"train_input": {"batch_size": 8, "micro_batch_size": 2}, "runconfig": {"cpu_shards": 4}}
    )
    with pytest.raises(ConfigError, match="does not divide each replica's micro-batch of 2"):
        check_config(cfg)


def test_sequence_longer_than_the_model_is_refused():
    cfg = load_config("tiny", ["train_input.max_sequence_length=4096"])
    with pytest.raises(ConfigError, match="exceeds the model's max_seq_len=256"):
        validate(cfg, preset(cfg.runconfig.wafer))


def test_missing_file_names_the_shipped_configs(tmp_path):
    with pytest.raises(ConfigError, match="shipped config: tiny"):
        load_config(tmp_path / "nope.yaml")
