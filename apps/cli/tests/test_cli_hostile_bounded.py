"""Hostile inputs left by stop 55's hunt (issue 44, bounded input): loosely typed or unbounded
spec fields, plan quantities past any sense, an empty params file, a huge YAML file. Each
exits 2 with one line naming the input and what is allowed, before any work."""

from __future__ import annotations

import time

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

ROOT = typer.main.get_command(app)


def _refused(args: list, message: str, env: dict[str, str] | None = None) -> str:
    return refused_in_one_line(ROOT, args, message, env)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("base: wse3\nname: 5\n", "name must be text, got 5 (int)"),
        ("base: wse3\npe_rows: '100'\n", "pe_rows in spec file"),  # was read as 100
        ('base: wse3\nclock_hz: "1e9"\n', "must be a number, got the text '1e9'"),
        ("base: wse3\npe_rows: yes\n", "pe_rows must be a number, got True (bool)"),
        ("base: wse3\nsram_bytes_per_pe: 1e30\n", "sram_bytes_per_pe must be an integer in"),
        ("base: wse3\nspare_cols: 1e12\n", "[0, 100,000]"),
    ],
)  # fmt: skip
def test_spec_file_fields_are_typed_and_bounded(tmp_path, text, message):
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    _refused(["wafer", "info", "--spec", spec], message)


def test_spec_file_numbers_in_any_yaml_spelling_still_read(tmp_path):
    from wse_core import load_spec

    spec = tmp_path / "s.yaml"
    spec.write_text("base: wse3\nclock_hz: 1e9\npe_rows: 1e3\nflops_per_cycle: {fp32: 2e0}\n")
    got = load_spec(spec)
    assert (got.clock_hz, got.pe_rows, got.flops_per_cycle["fp32"]) == (1e9, 1000, 2.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [("pe_rows", "9223372036854775808"), ("pe_cols", "100001"), ("program_rows", "1e9")],
)
def test_set_integers_past_the_model_are_refused_naming_the_bound(field, value):
    _refused(["wafer", "info", "--set", f"{field}={value}"], f"{field} must be an integer in [")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "train", "--model", "llama3-8b", "--tokens", "1e308"], "[1, 1e+17]"),
        (["plan", "train", "--model", "llama3-8b", "--tokens", "1e12", "--systems", 2**62],
         "over the limit of 20,480 systems (wafer systems of one plan or training run); set "
         "WSE_LIMIT_SYSTEMS to lift it"),  # ran past a minute
        (["plan", "train", "--model", "llama3-8b", "--tokens", "1e12", "--batch", 2**62],
         "--batch must be"),  # ran past a minute
        (["plan", "infer", "--model", "llama3-8b", "--tokens-per-day", "1e300"], "1e+16]"),
        (["plan", "infer", "--model", "llama3-8b", "--gamma", 2**62],
         "over the limit of 64 tokens (drafted tokens per speculative round); set WSE_LIMIT_GAMMA"),
        (["plan", "infer", "--model", "llama3-8b", "--days", "1e300"], "--days"),
        (["plan", "infer", "--model", "llama3-8b", "--usd-per-gpu-hour", "1e300"],
         "1000000] (USD/h)"),
    ],
)  # fmt: skip
def test_plan_quantities_are_bounded(args, message):
    _refused(args, message)


@pytest.mark.parametrize("text", ["", "# nothing here\n", "{}\n"])
def test_an_empty_params_file_is_refused(tmp_path, text):
    params = tmp_path / "p.yaml"
    params.write_text(text)
    _refused(["train", params, "--validate-only"], "is empty: it needs its sections")


def test_a_yaml_file_past_yaml_bytes_is_refused_before_parsing(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("base: wse3\n" + "# a comment that pads the file out\n" * 600_000)  # 21 MB
    t0 = time.perf_counter()
    line = _refused(["wafer", "info", "--spec", spec], "over the limit of 262,144 bytes")
    assert "WSE_LIMIT_YAML_BYTES" in line and time.perf_counter() - t0 < 5  # parsing took 11 s
    small = tmp_path / "small.yaml"
    small.write_text("base: wse3\n" + "# pad\n" * 1000)
    code, _ = invoke(ROOT, ["wafer", "info", "--spec", str(small)], None)
    assert code == 0
    env = {"WSE_LIMIT_YAML_BYTES": "100"}
    _refused(["wafer", "info", "--spec", small], "WSE_LIMIT_YAML_BYTES", env)


def test_generate_refuses_an_empty_stop_string(tmp_path):
    from wse_inference.testing import save_tiny_model

    save_tiny_model(tmp_path / "m", n_layers=1)
    args = ["infer", "generate", "--model-dir", tmp_path / "m", "--prompt", "x", "--stop", ""]
    _refused(args, "--stop strings must not be empty")  # it matched at once, as in vLLM


@pytest.mark.parametrize(
    ("override", "message"),
    [("train_input.batch_size=9223372036854775808", "at most 1,048,576 sequences"),
     ("model.n_layers=1000000000", "model.n_layers must be an integer in [1, 4,096]"),
     ("model.vocab_size=1000000000000", "vocab_size must be an integer in [1, ")],
)  # fmt: skip
def test_train_sizes_past_any_model_are_refused(override, message):
    _refused(["train", "tiny", override, "--validate-only"], message)  # ran past a minute


@pytest.mark.parametrize(
    ("text", "message"),
    [("model:\n  preset: tiny-gpt2\n  d_model: '128'\n",
      "model.d_model must be a number, got the text '128'; write it unquoted (d_model: 128)"),
     ("model:\n  rope_theta: '1e4'\n", "model.rope_theta must be a number, got the text"),
     ('optimizer:\n  learning_rate: "3e-4"\n',  # was read as 3e-4
      "optimizer.learning_rate must be a number, got the text '3e-4'; write it unquoted"),
     ("train_input:\n  micro_batch_size: '4'\n", "write it unquoted (micro_batch_size: 4)"),
     ("optimizer:\n  learning_rate: inf\n", "optimizer.learning_rate must be a finite number"),
     ("model:\n  n_layers: 100000\n", "model.n_layers must be an integer in [1, 4,096]")],
)  # fmt: skip
def test_params_file_numbers_are_yaml_numbers_named_by_their_key_path(tmp_path, text, message):
    params = tmp_path / "p.yaml"
    params.write_text(text)
    _refused(["train", params, "--validate-only"], message)  # hunt 56


def test_params_file_numbers_in_any_yaml_spelling_still_read(tmp_path):
    from wse_trainer.config import load_config
    from wse_trainer.run import model_config

    params = tmp_path / "p.yaml"
    params.write_text(
        "model: {preset: tiny-gpt2, norm_eps: 1e-6, d_model: 1.28e2}\n"
        "optimizer: {learning_rate: 3e-4}\nrunconfig: {max_steps: 1e3}\n"
    )
    cfg = load_config(params, ["optimizer.eps=1e-7"])
    opt = cfg.optimizer
    assert (opt.learning_rate, opt.eps, cfg.runconfig.max_steps) == (3e-4, 1e-7, 1000)
    model = model_config(cfg)
    assert (model.norm_eps, model.d_model) == (1e-6, 128)


@pytest.mark.parametrize(
    ("args", "message"),
    [(["wafer", "info", "--set", "pe_rows=10", "--set", "pe_rows=20"],
      "--set gives pe_rows twice ('10', then '20'); give each key once"),
     (["experiments", "run", "wafer-yield", "--assume", "clock_hz=1e9", "--assume",
       " clock_hz=2e9"], "--assume gives clock_hz twice"),
     (["infer", "serve", "--model-dir", "mock", "--mock-max-context", 10**15],
      "--mock-max-context must be an integer in [2, 134217728]")],
)  # fmt: skip
def test_a_key_given_twice_and_a_context_past_any_model_are_refused(args, message):
    _refused(args, message)  # hunt 56: the last key won silently; the server started


def test_generate_refuses_a_context_past_the_models(tiny_model_dir):
    gen = ["infer", "generate", "--model-dir", tiny_model_dir, "--prompt-ids", "1,2"]
    _refused(
        [*gen, "--max-context", 10**12],  # was cut to 128 silently
        "--max-context 1,000,000,000,000 is greater than the model's context of 128",
    )
    _refused([*gen, "--max-tokens", 10**12], "exceeds the context of 128 tokens")  # said 2**30


def test_generate_names_a_file_or_a_folder_without_config_json(tmp_path, tiny_model_dir):
    weights = tmp_path / "w"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes((tiny_model_dir / "model.safetensors").read_bytes())
    gen = ["infer", "generate", "--prompt-ids", "1", "--model-dir"]
    _refused(
        [*gen, tiny_model_dir / "config.json"], "is a file; give the folder holding config.json"
    )
    _refused([*gen, weights], "has safetensors but no config.json")


@pytest.mark.parametrize(
    ("args", "message"),
    [(["hpc", "swe", "--g", "1e308"], "--g must be a finite number in [1e-30, 1e+30]"),  # NaN drift
     (["hpc", "cfd", "--ra", "1e308"], "--ra must be a finite number in [1, 1e+17]"),  # Nusselt inf
     (["hpc", "tlrmvm", "compress", "--freq-hz", "1e308", "--out", "op.npz"],
      "--freq-hz must be a finite number in (0, 1000000.0] (Hz)"),  # NumPy's warnings
     (["train", "tiny", "--validate-only", "--num-csx", 10**9],  # the option's own (hunt 67)
      "--num-csx is 1,000,000,000, over the limit of 20,480 systems (wafer systems of one "
      "plan or training run); set WSE_LIMIT_SYSTEMS to lift it")],
)  # fmt: skip
def test_physical_and_system_counts_past_any_sense_are_refused(args, message):
    _refused(args, message)  # hunt 56: each ran (or printed warnings) with nonsense values


@pytest.mark.parametrize(
    ("change", "message"),
    [({"hidden_size": "64"},
      "hidden_size in config.json must be a number, got the text '64'; write it unquoted "
      '("hidden_size": 64)'),
     ({"rope_parameters": {"rope_type": "default", "rope_theta": "1e4"}},  # was read as 1e4
      "rope_parameters.rope_theta in config.json must be a number, got the text"),
     ({"tie_word_embeddings": "false"}, "must be true or false, got 'false'")],  # tied them
)  # fmt: skip
def test_config_json_numbers_and_flags_are_json_numbers_and_booleans(
    tmp_path, tiny_model_dir, change, message
):
    import json
    import shutil

    model = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, **change}))
    _refused(["infer", "generate", "--model-dir", model, "--prompt-ids", "1"], message)
