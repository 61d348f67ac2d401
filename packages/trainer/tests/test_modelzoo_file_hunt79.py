"""Hunt 79 (hole 3): ModelZoo's own params_gpt2_small.yaml took 13 runs of `wse train`, one
refused key a run; `data_processor` was "did you mean 'data_dir'?"; DataLoader knobs and the
loss-scale keys, which change nothing here, were refused with no note. Every setting that
cannot run is now said in one line, and those keys are read with a note. The oracle is a
hand count of the file's keys (which of them ModelZoo's file gives that this stack cannot
run), not the reader's own tables."""

from __future__ import annotations

import re

import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_trainer.config import ConfigError, load_config
from wse_trainer.config_check import config_notes

ROOT = typer.main.get_command(app)

# Cerebras/modelzoo transformers/pytorch/gpt2/configs/params_gpt2_small.yaml, data_dir set
# to stdlib (the hunter's copy)
GPT2_SMALL = """\
train_input:
    data_processor: "GptHDF5DataProcessor"
    data_dir: "stdlib"
    batch_size: 112
    shuffle: True
    shuffle_seed: 256
    num_workers: 8
    prefetch_factor: 10
    persistent_workers: True
eval_input:
    data_processor: "GptHDF5DataProcessor"
    data_dir: "stdlib"
    batch_size: 112
    shuffle: False
    num_workers: 8
model:
    hidden_size: 768
    vocab_size: 50257
    position_embedding_type: "learned"
    share_embedding_weights: True
    max_position_embeddings: 2048
    num_hidden_layers: 12
    dropout_rate: 0.1
    layer_norm_epsilon: 1.0e-5
    loss_scaling: "num_tokens"
    loss_weight: 1.0
    num_heads: 12
    attention_type: "scaled_dot_product"
    attention_dropout_rate: 0.1
    use_projection_bias_in_attention: True
    use_ffn_bias_in_attention: True
    filter_size: 3072
    nonlinearity: "gelu"
    use_ffn_bias: True
    use_bias_in_output: False
    mixed_precision: True
optimizer:
    optimizer_type: "adamw"
    betas: [0.9, 0.95]
    eps: 1.0e-8
    max_gradient_norm: 1.0
    learning_rate:
      - scheduler: "Linear"
        initial_learning_rate: 0.0
        end_learning_rate: 0.0006
        total_iters: 1600
      - scheduler: "Linear"
        initial_learning_rate: 0.0006
        end_learning_rate: 0.0
        total_iters: 150000
    weight_decay: 0.01
    initial_loss_scale: 2147483648.0
    max_loss_scale: 2147483648.0
runconfig:
    max_steps: 151600
    log_steps: 100
    checkpoint_steps: 10000
    save_initial_checkpoint: True
    seed: 1
    model_dir: "./model_dir"
    eval_steps: 32
"""
# by hand: what cannot run here (no processor, mixed_precision or dropout keys; the
# scheduler list is translated, not run) and what changes nothing here (DataLoader knobs,
# loss scaling in a run with no float16, and since hunt 80 the shuffles, at the values that
# run here: train batches shuffled, eval batches in order)
REFUSED = ["train_input.data_processor", "eval_input.data_processor", "model.mixed_precision",
           "model.dropout_rate", "model.attention_dropout_rate",
           "optimizer.learning_rate"]  # fmt: skip
IGNORED = ["train_input.num_workers", "train_input.prefetch_factor",
           "train_input.persistent_workers", "eval_input.num_workers", "train_input.shuffle",
           "eval_input.shuffle", "optimizer.initial_loss_scale",
           "optimizer.max_loss_scale"]  # fmt: skip


def _names(line: str) -> list[str]:
    """The dotted keys a line names."""
    return re.findall(r"\b(?:train_input|eval_input|model|optimizer)\.[a-z_]+\b", line)


def test_the_whole_file_is_refused_in_one_line_naming_every_key(tmp_path):
    path = tmp_path / "params_gpt2_small.yaml"
    path.write_text(GPT2_SMALL)
    line = refused_in_one_line(ROOT, ["train", path, "--validate-only"], "6 settings")
    assert line.startswith("Error: 6 settings of the params file cannot run here: (1) ")
    named = set(_names(line))
    assert set(REFUSED) <= named, set(REFUSED) - named
    assert not set(IGNORED) & named  # read, not refused
    assert line.count("; (") == 4  # the two processors share their note
    assert "did you mean 'data_dir'" not in line
    assert "GptHDF5DataProcessor" in line and ".parquet" in line and "stdlib" in line


def test_the_file_with_the_lines_fixes_validates_and_notes_the_ignored_keys(tmp_path):
    data = yaml.safe_load(GPT2_SMALL)
    for split in ("train_input", "eval_input"):
        del data[split]["data_processor"]
        data[split]["batch_size"] = 8
    del data["model"]["mixed_precision"]
    data["model"].update(dropout_rate=0.0, attention_dropout_rate=0.0, num_hidden_layers=2)
    data["optimizer"].update(learning_rate=0.0006, warmup_steps=1600, lr_schedule="linear",
                             decay_steps=151600, min_learning_rate=0.0)  # fmt: skip
    path = tmp_path / "fixed.yaml"
    path.write_text(yaml.safe_dump(data))
    notes = config_notes(load_config(path))
    said = [n for n in notes if "ignored" in n]
    assert sorted(k for n in said for k in _names(n.split(": ")[1])) == sorted(IGNORED)
    code, output = invoke(ROOT, ["train", path, "--validate-only", "-o", tmp_path / "run"])
    assert code == 0, output[-2000:]
    assert "config is valid" in output
    assert "train_input.prefetch_factor" in output and "optimizer.max_loss_scale" in output


@pytest.mark.parametrize(
    ("override", "note"),
    [
        ("optimizer.loss_scaling_factor=1.0", "no loss scaling is applied"),
        ("optimizer.loss_scaling_factor=null", "no loss scaling is applied"),
        ("optimizer.loss_scaling_factor=dynamic", "stops the run instead of being skipped"),
        ("optimizer.min_loss_scale=1.0e-4", "no loss scaling is applied"),
        ("optimizer.steps_per_increase=2000", "no loss scaling is applied"),
        ("train_input.persistent_workers=false", "no loader runs here"),
        ("eval_input.prefetch_factor=null", "no loader runs here"),
    ],
)
def test_keys_that_change_nothing_are_read_with_a_note(tmp_path, override, note):
    key, _, value = override.partition("=")
    section, name = key.split(".")
    path = tmp_path / "p.yaml"  # in a file (an override's null drops the key, as Hydra's ~)
    path.write_text(f"{section}:\n  {name}: {value}\nrunconfig:\n  max_steps: 3\n")
    config = load_config(path)
    assert config == load_config(path, [f"{key}=null"])  # the run is the one without the key
    assert any(key in n and note in n for n in config_notes(config)), config_notes(config)
    assert not [n for n in config_notes(load_config("tiny", [f"{key}=null"])) if key in n]


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("optimizer.loss_scaling_factor=128.0", "is a static loss scale"),
        ("optimizer.loss_scaling_factor=static", 'must be a positive number or "dynamic"'),
        ("optimizer.initial_loss_scale=-1", "must be a positive number"),
        ("optimizer.steps_per_increase=0", "must be a count >= 1"),
        ("train_input.prefetch_factor=0", "must be a count >= 1"),
        ("train_input.num_workers=-2", "must be a count >= 0"),
        ("train_input.persistent_workers=2", "must be true or false"),
    ],
)
def test_values_that_would_change_the_run_are_refused(override, says):
    with pytest.raises(ConfigError) as e:
        load_config("tiny", [override])
    assert says in str(e.value) and str(e.value).startswith(override.partition("=")[0])
    assert "\n" not in str(e.value)
