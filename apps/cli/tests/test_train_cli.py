"""`wse train` through the root app: ModelZoo flags, overrides, the memory plan, errors."""

import json

import pytest
import yaml
from typer.testing import CliRunner
from wse_cli.app import app
from wse_trainer.testing import tiny_params, write_corpus

runner = CliRunner(env={"COLUMNS": "200", "WSE_DEVICES": "8"})  # conftest: 8 devices


@pytest.mark.parametrize(
    "name", ["tiny", "gpt2_124m", "llama3_8b", "llama3_70b", "llama_1t", "llama_24t"]
)
def test_validate_only_prints_the_memory_plan(name):
    res = runner.invoke(app, ["train", name, "--validate_only"])
    assert res.exit_code == 0, res.output
    assert "memory plan" in res.output and "optimizer state" in res.output
    assert "config is valid" in res.output
    # the predicted step of the plan on the config's systems (a RunReport)
    assert "predicted on " in res.output and "tokens/s" in res.output


def test_validate_only_says_resident_or_streaming():
    small = runner.invoke(app, ["train", "tiny", "--validate_only"]).output
    big = runner.invoke(app, ["train", "--params", "llama3_70b", "--validate_only"]).output
    assert "could stay resident" in small
    assert "must stream from MemoryX" in big


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["tiny", "optimizer.learning_rat=1e-3"], "did you mean 'learning_rate'"),
        (["tiny", "--num_csx", "3"], "not divisible by num_csx=3"),
        (["tiny", "--mode", "trian"], "did you mean 'train'"),
        (["optimizer.learning_rate=1"], "give a params file"),
        (["llama3_8b", "--num_csx", "1", "train_input.micro_batch_size=none"], "SRAM over budget"),
        (["llama_1t", "--num_csx", "0"], "--num-csx must be an integer >= 1"),
        (["tiny", "--weight_chunks", "-1"], "--weight-chunks must be an integer >= 0"),
    ],
)
def test_user_errors_exit_2_with_one_line(args, needle):
    res = runner.invoke(app, ["train", *args, "--validate_only"])
    assert res.exit_code == 2
    assert needle in res.output
    assert "Traceback" not in res.output


def test_validate_only_prints_the_weight_chunks_and_why():
    big = runner.invoke(app, ["train", "llama_1t", "--validate_only"]).output
    assert "weight chunks: wq " in big and "why: a whole layer needs" in big
    assert "MemoryX:" in big and "streams: no stall" in big and "w_down" in big
    forced = runner.invoke(app, ["train", "tiny", "--validate_only", "--weight_chunks", "4"])
    assert forced.exit_code == 0, forced.output
    assert "weight chunks: wq 4 x 32 cols" in forced.output
    assert "forced: every matrix in 4 column chunks" in forced.output
    whole = runner.invoke(app, ["train", "tiny", "--validate_only"]).output
    assert "weight chunks: whole layers" in whole


def test_train_then_continue_with_num_steps(tmp_path):
    corpus = write_corpus(tmp_path / "data")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params(corpus, tmp_path / "unused")))
    out = tmp_path / "run"
    res = runner.invoke(
        app, ["train", str(params), "-o", str(out), "--num_steps", "2", "--max_steps", "4"]
    )
    assert res.exit_code == 0, res.output
    assert "| Train Device=CSX, Step=2," in res.output
    res = runner.invoke(
        app,
        [
            "train",
            str(params),
            "--model_dir",
            str(out),
            "--max_steps",
            "4",
            "--mode",
            "train_and_eval",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "resumed from checkpoint step 2" in res.output and "| Eval Device=CSX" in res.output
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 4]  # four train records, then the eval record
    assert (out / "hf" / "tokenizer.json").exists()


def test_a_too_small_eval_split_stops_the_run_before_the_first_step(tmp_path):
    corpus = write_corpus(tmp_path / "data")
    data = tiny_params(corpus, tmp_path / "run")
    data["eval_input"]["batch_size"] = 64  # the eval twentieth packs into fewer rows
    data["runconfig"]["mode"] = "train_and_eval"
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(data))
    res = runner.invoke(app, ["train", str(params)])
    assert res.exit_code == 2, res.output
    assert "the eval split has" in res.output and "eval_input.batch_size=64" in res.output
    assert "Traceback" not in res.output and "Step=1" not in res.output
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step was taken


@pytest.mark.parametrize(
    ("override", "rc", "first"),
    [
        ("model.n_layers=1000000000", 2, "Error: model.n_layers must be an integer in [1, 4,096]"),
        ("optimizer.beta1=2", 2, "Error: optimizer.beta1 must be in [0, 1), got 2.0"),
        ("model.n_layers=2", 0, None),
    ],
)
def test_validate_only_reads_and_refuses_a_config_without_jax(override, rc, first):
    """`wse train --validate-only` is the config's checks and the wafer's plan and prediction:
    none of it needs JAX, so a bad value is refused in ~0.4 s, not after JAX's ~2-3 s import
    (hunt 57: `wse_models` imports its modules on first use, the CLI takes `validate` from
    the JAX-free `session`). A good config prints the same plan and still imports no JAX."""
    import subprocess
    import sys

    from wse_cli.testing import NO_JAX_PROBE, clean_env

    args = ["train", "tiny", override, "--validate-only"]
    r = subprocess.run([sys.executable, "-c", NO_JAX_PROBE, *args], capture_output=True,
                       text=True, timeout=120, env=clean_env(COLUMNS="200"))  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == rc, r.stdout + r.stderr
    assert lines[-1] == "jax imported: False", r.stderr
    if first is None:
        assert "config is valid" in r.stdout and "memory plan" in r.stdout
    else:
        assert lines[0].startswith(first) and len(lines) == 2, r.stderr
