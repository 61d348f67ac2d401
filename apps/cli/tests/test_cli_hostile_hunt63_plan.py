"""Hostile `wse plan` (and `wse infer generate --model-dir`) inputs of hunt 63: each exits 2
with one line naming the key or option and what would be right, and leaves nothing on disk.
Before the fixes: a config.json that is not an object (`[1, 2]`, `null`), a model_type list,
an architectures number, and a rope_scaling original_max_position_embeddings of 1e400 or NaN
were tracebacks; an integer past a float's range (a 401-digit vocab_size or n_layers) was an
OverflowError in the refusal's own format; `wse plan` planned sequences longer than the
model's context (GPT-2 at 4,096 tokens, past its 1,024 positions) that a params file's
route refuses; `--gpus 12` for a model that needs 16 was refused as "1 x H100"."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_models.testing import LLAMA3_8B_HF

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
BIG = "1" + "0" * 400  # an integer no float holds: 401 digits
ROPE = {"rope_type": "llama3", "factor": 8, "original_max_position_embeddings": 12345}


def _tree(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def _config_text(base: dict, edit: dict | None, text: str | None) -> str:
    """`base` with `edit` applied (a None value: the key removed), or `text` verbatim."""
    if text is not None:
        return text
    d = {k: v for k, v in {**base, **edit}.items() if v is not None}
    return json.dumps(d)


# (name, edit, verbatim text or None, the number the edit's 12345 becomes: one that
# Python's json does not write (1e400, NaN, 401 digits), message)
SHAPES = [
    ("architectures 5", {"architectures": 5, "model_type": None}, None, None,
     "config.json's architectures must be a list of strings, got 5"),
    ("model_type list", {"model_type": ["llama"]}, None, None,
     "config.json's model_type must be a string, got ['llama']"),
    ("top level list", None, "[1, 2]", None, "config.json must hold a JSON object"),
    ("top level null", None, "null", None, "config.json must hold a JSON object"),
    ("rope 1e400", {"rope_scaling": ROPE, "rope_parameters": None}, None, "1e400",
     "rope_scaling.original_max_position_embeddings in config.json must be a finite number, "
     "got inf"),
    ("rope NaN", {"rope_scaling": ROPE, "rope_parameters": None}, None, "NaN",
     "rope_scaling.original_max_position_embeddings in config.json must be a finite number, "
     "got nan"),
    ("vocab 401 digits", {"vocab_size": 12345}, None, BIG,
     "vocab_size must be an integer in [1, 16,777,216], got a 401-digit integer"),
    ("kv heads 0", {"num_key_value_heads": 0}, None, None,
     "config.json's num_key_value_heads must be positive, got 0"),
]  # fmt: skip


def _write(folder: Path, base: dict, edit, text, number) -> Path:
    body = _config_text(base, edit or {}, text)
    if number is not None:
        assert "12345" in body
        body = body.replace("12345", number)
    (folder / "config.json").write_text(body)
    return folder


@pytest.mark.parametrize(("name", "edit", "text", "number", "message"), SHAPES,
                         ids=[s[0] for s in SHAPES])  # fmt: skip
def test_a_config_json_of_the_wrong_shape_is_one_line_in_plan_and_generate(
    tmp_path, name, edit, text, number, message
):
    from wse_inference.testing import save_tiny_model

    hf = tmp_path / "hf"
    hf.mkdir()
    _write(hf, LLAMA3_8B_HF, edit, text, number)
    for plan in (["plan", "infer"], ["plan", "train", "--tokens", "1e9"]):
        before = _tree(tmp_path)
        said = refused_in_one_line(ROOT, [*plan, "-m", hf], message)
        assert _tree(tmp_path) == before
    # the same file beside weights: `wse infer generate` reads config.json the same way
    model = tmp_path / "model"
    save_tiny_model(model)
    base = json.loads((model / "config.json").read_text())
    _write(model, base, edit, text, number)
    before = _tree(tmp_path)
    line = refused_in_one_line(
        ROOT, ["infer", "generate", "--model-dir", model, "--prompt", "hi"], message
    )
    where = f"Error: cannot read '{model / 'config.json'}': "
    assert line.startswith(where)
    # the same words (a JSON value that is no object: wse_inference's own, shorter, check)
    assert said.removeprefix("Error: ").startswith(line.removeprefix(where)), (said, line)
    assert _tree(tmp_path) == before


def test_an_integer_past_a_float_is_counted_in_digits_on_every_params_route(tmp_path):
    from wse_models.config import MAX_SIZES
    from wse_trainer.config import shipped_config

    text = shipped_config("tiny").read_text()
    assert "n_layers: 4\n" in text
    params = tmp_path / "p_big.yaml"
    params.write_text(text.replace("n_layers: 4\n", f"n_layers: {BIG}\n", 1))
    digits = len(BIG)  # 401
    message = (
        f"model.n_layers must be an integer in [1, {MAX_SIZES['n_layers']:,}], got a "
        f"{digits}-digit integer"
    )
    before = _tree(tmp_path)
    said = refused_in_one_line(ROOT, ["train", params, "--validate-only"], message)
    for plan in (["plan", "train", "--tokens", "1e9"], ["plan", "infer"]):
        assert refused_in_one_line(ROOT, [*plan, "-m", params], message) == said
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(
    ("field", "message"),
    [("pe_rows", "pe_rows must be an integer in [1, 100,000], got a 401-digit integer"),
     # a float field: math.isfinite of the integer was an OverflowError traceback
     ("clock_hz", "clock_hz must be a finite number, got a 401-digit integer"),
     ("dsd_issue_cycles", "dsd_issue_cycles must be a finite number, got a 401-digit integer")],
)  # fmt: skip
def test_a_wafer_spec_integer_past_a_float_is_counted_in_digits(tmp_path, field, message):
    import yaml
    from wse_core import preset

    spec = preset("wse3").to_dict()
    spec[field] = int(BIG)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    refused_in_one_line(ROOT, ["wafer", "info", "--spec", path], message)


# --- sequences past the model's context: the rule of a params file's route -----------------


def _params_rule(tmp_path: Path) -> str:
    """What a params file's route says of GPT-2 124M at 4,096 tokens (the oracle), from the
    word "exceeds" on."""
    from wse_trainer.config import shipped_config

    text = shipped_config("gpt2_124m").read_text()
    assert text.count("max_sequence_length: 1024") >= 1
    params = tmp_path / "gpt2_4096.yaml"
    params.write_text(text.replace("max_sequence_length: 1024", "max_sequence_length: 4096"))
    line = refused_in_one_line(ROOT, ["plan", "train", "-m", params, "--tokens", "1e12"],
                               "exceeds the model's max_seq_len=1024")  # fmt: skip
    return line[line.index(" exceeds ") :]


@pytest.mark.parametrize(
    ("args", "what"),
    [(["plan", "train", "-m", "gpt2_124m", "--tokens", "1e12", "--seq-len", "4096"],
      "--seq-len 4096"),
     (["plan", "train", "-m", "gpt2-124m", "--tokens", "1e12", "--seq-len", "1025"],
      "--seq-len 1025"),
     (["plan", "infer", "-m", "gpt2-124m", "--prompt-tokens", "4000", "--output-tokens", "256",
       "--users", "1"],
      "a request of 4256 tokens (--prompt-tokens 4000 + --output-tokens 256)"),
     (["plan", "infer", "-m", "gpt2-124m", "--prompt-tokens", "769", "--output-tokens", "256"],
      "a request of 1025 tokens (--prompt-tokens 769 + --output-tokens 256)"),
     (["plan", "infer", "-m", "gpt2-124m", "--prompt-tokens", "8", "--output-tokens", "8",
       "--context-len", "2048"], "--context-len 2048")],
    ids=["train params-file model", "train one past", "infer 4256", "infer one past",
         "infer context-len"],
)  # fmt: skip
def test_a_sequence_past_gpt2s_position_table_is_refused_as_a_params_file_is(tmp_path, args, what):
    rule = _params_rule(tmp_path)  # " exceeds the model's max_seq_len=1024; use at most 1024"
    before = _tree(tmp_path)
    line = refused_in_one_line(ROOT, args, what)
    assert line == f"Error: {what}{rule}"
    assert _tree(tmp_path) == before


def test_llama_is_held_to_its_trained_context_too(tmp_path):
    """Llama's max_seq_len is the longest context trained for (RoPE has no table); the
    params route, the engines and vLLM hold it to it all the same."""
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({**LLAMA3_8B_HF, "max_position_embeddings": 1}))
    line = refused_in_one_line(ROOT, ["plan", "infer", "-m", hf],
                               "exceeds the model's max_seq_len=1; use at most 1")  # fmt: skip
    assert line.startswith("Error: a request of ")  # the default's, whatever it is
    refused_in_one_line(ROOT, ["plan", "train", "-m", "llama3-8b", "--tokens", "1e9",
                               "--seq-len", "131073"],
                        "--seq-len 131073 exceeds the model's max_seq_len=131072")  # fmt: skip


def test_a_draft_shorter_than_the_request_is_refused_as_the_engine_refuses_it(tmp_path):
    """Found in stop 65: `--draft` with a context shorter than the request was planned (the
    draft reads the whole request; `wse infer generate` refuses that request). A draft of
    the request's length is planned."""
    hf = tmp_path / "draft"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({**LLAMA3_8B_HF, "num_hidden_layers": 1,
                                                "max_position_embeddings": 1279}))  # fmt: skip
    before = _tree(tmp_path)
    args = ["plan", "infer", "-m", "llama3-8b", "--draft", str(hf), "--alpha", "0.7"]
    line = refused_in_one_line(ROOT, args, "holds a context of 1,279 tokens, a request here "
                               "1,280: a draft reads the whole request")  # fmt: skip
    assert line.startswith(f"Error: --draft {hf} ")
    assert _tree(tmp_path) == before
    code, out = invoke(ROOT, [*args, "--prompt-tokens", "1023", "--users", "1", "--json"])
    assert code == 0, out
    assert json.loads(out)["inputs"]["speculation"]["gamma"] == 4


def test_a_request_at_the_context_is_planned():
    code, out = invoke(ROOT, ["plan", "infer", "-m", "gpt2-124m", "--prompt-tokens", "768",
                              "--output-tokens", "256", "--users", "1", "--json"])  # fmt: skip
    assert code == 0, out
    assert json.loads(out)["inputs"]["workload"]["held_tokens"] == 1024


def test_the_planners_default_request_fits_a_short_context():
    """`plan_infer` with no workload serves 1,024 + 256 tokens, or the same 4:1 split of a
    shorter context (GPT-2: 820 + 204 = 1,024 positions)."""
    import wse_models
    from wse_core import preset
    from wse_systems.planning.choice import ModelChoice
    from wse_systems.planning.infer import Target, WaferSetup, default_workload, plan_infer

    gpt2 = wse_models.preset_config("gpt2-124m")
    work = default_workload(gpt2)
    assert (work.prompt_tokens, work.output_tokens) == (1024 - 1024 // 5, 1024 // 5)
    llama = default_workload(wse_models.preset_config("llama3-8b"))
    assert (llama.prompt_tokens, llama.output_tokens) == (1024, 256)
    plan = plan_infer(ModelChoice("gpt2", gpt2), wafer=WaferSetup(preset("wse3"), 1),
                      target=Target(users=1))  # fmt: skip
    assert plan.inputs["workload"]["held_tokens"] == 1024


# --- a GPU count that is not whole nodes ---------------------------------------------------


@pytest.mark.parametrize(("gpus", "largest"), [(12, 4), (9, 1), (15, 1), (8, None), (6, None)])
def test_too_few_gpus_are_named_as_given_not_as_their_smallest_replica(gpus, largest):
    import wse_models
    from wse_systems import gpu as gpum

    model = wse_models.preset_config("llama3-405b")
    need = math.ceil(2 * model.num_params() / (gpum.USABLE_MEMORY * gpum.H100.memory_bytes))
    nodes = 8 * math.ceil(need / 8)  # past one node: whole nodes
    at_least = f"use at least {nodes} GPUs (up to 8 per node, then whole nodes)"
    line = refused_in_one_line(ROOT, ["plan", "infer", "-m", "llama3-405b", "--gpus", gpus],
                               at_least)  # fmt: skip
    assert line.startswith(f"Error: {gpus} x {gpum.H100.name} cannot hold this model")
    split = f"so {gpus} GPUs make replicas of at most {largest}"
    assert (split in line) == (largest is not None), line
