"""Hostile inputs found by hunt 58: each exits 2 with one line that names the input and what
is allowed. Before the fixes: `plan infer --gamma 4` without `--draft` was dropped and the plan
ran without speculation (exit 0), `--tokens-per-day 1e-300` made the energy per token inf
and the refusal asked for smaller values, a misspelt `WSE_LIMIT_*` lifted nothing silently,
`WSE_LIMIT_SWEEP_VALUES=1.5` was read as 1, `WSE_LIMIT_FILE_BYTES=1e12` made every file read a
MemoryError traceback (1e26: an OverflowError), and `JAX_PLATFORMS=nope` (or `cuda` where JAX
has no CUDA) was a traceback with exit 1. A JSON key given twice (`--speculative-config`, a
model's config.json) silently took the last value: every JSON file now reads as the server's
request bodies do. `infer serve --chat-template` of an empty (or plain-text) file served a
template that ignores every message, and `--chat-template ''` served the default silently.
`infer generate --prompt-ids 1_0` was token 10 (Python's int() syntax; "+1" and Arabic-Indic
digits too), and every --prompt-ids refusal waited ~2 s for the model to load. `experiments run
--sweep K --assume K=v` dropped the --assume value; `train --weight-chunks 1000000` planned one
column a chunk and reported "every matrix in 1000000 column chunks". An empty output path
(`--out ''`) was click's Path('.'): `experiments run` wrote into the current folder."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import clean_env, invoke, refused_in_one_line

ROOT = typer.main.get_command(app)
INFER = ["plan", "infer", "--model", "llama3-8b"]


def _refused(args: list, message: str, env: dict[str, str] | None = None) -> str:
    return refused_in_one_line(ROOT, [str(a) for a in args], message, env)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([*INFER, "--gamma", "4"], "--gamma needs --draft"),
        ([*INFER, "--tokens-per-day", "1e-300"],
         "--tokens-per-day must be a finite number in [1, 1e+16] (tokens/day), got 1e-300"),
    ],
)  # fmt: skip
def test_plan_options_that_were_dropped_or_misread_are_refused(args, message):
    _refused(args, message)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WSE_LIMIT_SWEEP_VALUE": "100"},
         "WSE_LIMIT_SWEEP_VALUE is no limit (did you mean 'WSE_LIMIT_SWEEP_VALUES'?)"),
        ({"WSE_LIMIT_SWEEP_VALUES": "1.5"},
         "WSE_LIMIT_SWEEP_VALUES must be a positive integer of at most 64 bits, got '1.5'"),
        ({"WSE_LIMIT_FILE_BYTES": "1e26"}, "WSE_LIMIT_FILE_BYTES must be a positive integer"),
    ],
)  # fmt: skip
def test_a_limit_variable_that_is_no_limit_or_no_count_is_refused(env, message):
    _refused(["wafer", "info"], message, env)  # a command that reads no limit: still refused


@pytest.mark.parametrize("cap", ["1e12", str(2**63 - 1)])
def test_a_lifted_file_limit_still_reads_a_small_file(tmp_path, cap):
    spec = tmp_path / "s.yaml"
    spec.write_text("base: wse3\nclock_hz: 1e9\n")
    code, output = invoke(ROOT, ["wafer", "info", "--spec", spec, "--json"],
                          {"WSE_LIMIT_FILE_BYTES": cap})  # fmt: skip
    assert code == 0 and '"clock_hz": 1000000000.0' in output, output[-500:]


@pytest.mark.parametrize(
    ("platforms", "message"),
    [("nope", "Unable to initialize backend 'nope'"),
     ("cuda", "JAX cannot start JAX_PLATFORMS='cuda' on this machine; set JAX_PLATFORMS=cpu")],
)  # fmt: skip
def test_a_jax_platform_that_cannot_start_is_one_line(platforms, message):
    """JAX reads JAX_PLATFORMS once per process: a fresh `wse` each. (`cuda` without a GPU
    fails inside JAX on an assert, not with its RuntimeError.)"""
    if platforms == "cuda" and shutil.which("nvidia-smi"):
        pytest.skip("this machine may start CUDA")
    p = subprocess.run(
        [sys.executable, "-m", "wse_cli", "wafer", "check", "--grid", "3", "3"],
        env=clean_env(JAX_PLATFORMS=platforms), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and message in lines[0], p.stderr[-2000:]


def test_a_json_key_given_twice_is_refused_in_every_json_input(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama", "num_hidden_layers": 2, '
                                          '"num_hidden_layers": 7}')  # fmt: skip
    twice = "the key 'num_hidden_layers' appears more than once in one object"
    _refused(["plan", "train", "--model", tmp_path, "--tokens", "1e9"], twice)
    spec = '{"num_speculative_tokens": 2, "num_speculative_tokens": 3}'
    _refused(["infer", "serve", "--model-dir", "mock", "--port", "0", "--speculative-config", spec],
             "the key 'num_speculative_tokens' appears more than once")  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "holds no Jinja ({{ }} or {% %}): every chat would render the same text"),
     ("You are helpful.", "holds no Jinja"),
     (None, "--chat-template must not be empty")],
)  # fmt: skip
def test_a_chat_template_that_reads_no_message_is_refused(tmp_path, text, message):
    value = ""
    if text is not None:
        (tmp_path / "t.jinja").write_text(text)
        value = tmp_path / "t.jinja"
    _refused(["infer", "serve", "--model-dir", "mock", "--port", "0", "--chat-template", value],
             message)  # fmt: skip


@pytest.mark.parametrize("ids", ["1_0", "+1", "\u0663", "1,2,"])
def test_prompt_ids_are_ascii_digits_refused_before_the_model_is_read(ids):
    # "x" is no model folder: the refusal comes before any file is read
    message = f"--prompt-ids must be comma-separated integers (e.g. 1,2,3), got {ids!r}"
    _refused(["infer", "generate", "--model-dir", "x", "--prompt-ids", ids], message)


def test_a_prompt_id_past_64_bits_is_one_short_line():
    line = _refused(["infer", "generate", "--model-dir", "x", "--prompt-ids", "1," + "9" * 5000],
                    "prompt id 99999999999999999999... is outside every vocabulary")  # fmt: skip
    assert len(line) < 200


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["experiments", "run", "wafer-yield", "--sweep", "clock_hz=1e9", "--assume",
          "clock_hz=2e9"], "--sweep clock_hz and --assume clock_hz=2e+09 set the same assumption"),
        (["train", "tiny", "--validate-only", "--weight-chunks", "1000000"],
         "must be at most 512, the widest matrix's columns, got 1,000,000"),
    ],
)  # fmt: skip
def test_options_that_were_silently_overridden_or_clamped_are_refused(args, message):
    _refused(args, message)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["experiments", "run", "wafer-yield", "--quick", "--out", ""],
         "--out is empty; give a folder name, e.g. out"),
        (["wafer", "defects", "--preset", "tiny", "--png", ""],
         "--png is empty; give a file name, e.g. output.png"),
        (["hpc", "tlrmvm", "compress", "--matrix", "synthetic-seismic", "--n", "64", "--out", ""],
         "--out is empty; give a file name"),
    ],
)  # fmt: skip
def test_an_empty_output_path_is_refused_not_read_as_here(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    _refused(args, message)
    assert list(tmp_path.iterdir()) == []  # nothing written where the command ran
