"""Hostile inputs fixed by hunt 62 on the serving side: each exits 2 with one line naming the
file or setting at fault. Before the fixes: a model whose weights overflow (every value
finite) was served, its answers 500s, NaN in streamed JSON and text of NUL characters, and
`wse infer generate` exited 0 printing them; a dangling tokenizer.json link (a partly fetched
HF snapshot), a FIFO or a folder there was passed over for the byte tokenizer; a
tokenizer_config.json holding a list, a latin-1 chat_template.jinja and a chat template named
by a list were Python's own words blamed on tokenizer.json; generation_config.json that did
not parse was passed over (generation ran past the model's end tokens) and `true` was id 1;
`{"model": ""}` as the draft read the current folder; a model of a 1-token context was
refused with the warm-up's request as if it were the user's; a 200-token prompt was counted
as 1 token ("lower max_tokens to <= 0")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import refused_in_one_line

pytestmark = pytest.mark.timeout(120)

ROOT = typer.main.get_command(app)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from wse_inference.testing import save_tiny_model

    path = tmp_path_factory.mktemp("tiny")
    save_tiny_model(path, n_layers=1)
    return path


@pytest.fixture(scope="module")
def tiny_bpe(tiny, tmp_path_factory):
    """`tiny` with a tokenizer.json (its chat template files are read beside it)."""
    from wse_inference.testing import save_byte_bpe

    path = _copy(tiny, tmp_path_factory.mktemp("bpe") / "m")
    save_byte_bpe(path / "tokenizer.json")
    return path


def _serve_refused(model_dir, words: str) -> None:
    """`wse infer serve` in its own process (a server started in this one outlives the test's
    streams) exits 2 with one line holding `words`."""
    cmd = [sys.executable, "-c", "from wse_cli.app import main; main()", "infer", "serve",
           "--model-dir", str(model_dir), "--port", "0", "--grpc-port", "0"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=110)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr[-2000:])
    assert lines[0].startswith("Error: ") and words in lines[0], lines


def _copy(tiny, dst):
    dst.mkdir()
    for f in tiny.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_a_model_whose_logits_overflow_is_refused_by_generate_and_serve(tiny, tmp_path):
    from safetensors.numpy import load_file, save_file

    bad = _copy(tiny, tmp_path / "huge")
    tensors = load_file(bad / "model.safetensors")
    head = "lm_head.weight" if "lm_head.weight" in tensors else "model.embed_tokens.weight"
    tensors[head] = tensors[head] * np.float32(1e37)  # finite, but its products overflow
    tensors["model.norm.weight"] = tensors["model.norm.weight"] * np.float32(1e4)
    assert all(np.isfinite(t).all() for t in tensors.values())
    save_file(tensors, bad / "model.safetensors")
    words = "the model's log probabilities are not finite"
    refused_in_one_line(ROOT, ["infer", "generate", "--model-dir", bad, "--prompt-ids", "1,2",
                               "--max-tokens", "2"], words)  # fmt: skip
    _serve_refused(bad, words)


@pytest.mark.parametrize("kind", ["dangling link", "FIFO", "folder"])
def test_a_tokenizer_json_that_is_no_file_is_refused_not_passed_over(tiny, tmp_path, kind):
    bad = _copy(tiny, tmp_path / "m")
    tok = bad / "tokenizer.json"
    if kind == "dangling link":
        tok.symlink_to(tmp_path / "missing" / "tokenizer.json")
    elif kind == "FIFO":
        os.mkfifo(tok)
    else:
        tok.mkdir()
    words = {"dangling link": "is a broken link", "FIFO": "is a FIFO", "folder": "is a folder"}
    refused_in_one_line(ROOT, ["infer", "generate", "--model-dir", bad, "--prompt", "hi",
                               "--max-tokens", "2"], f"tokenizer.json' {words[kind]}")  # fmt: skip


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [("generation_config.json", '{"eos_token_id": [1, 2],}', "generation_config.json': Expecting"),
     ("generation_config.json", '{"eos_token_id": true}', "eos_token_id True; it must be a token"),
     ("tokenizer_config.json", "[1, 2]", "tokenizer_config.json' holds a JSON list"),
     ("chat_template.jinja", "{{ 'caf\xe9' }}".encode("latin-1"), "is not UTF-8 text (byte 0xe9")],
)  # fmt: skip
def test_a_model_file_that_cannot_be_read_is_refused_naming_it(tiny_bpe, tmp_path, name, content,
                                                               words):  # fmt: skip
    bad = _copy(tiny_bpe, tmp_path / "m")
    data = content if isinstance(content, bytes) else content.encode()
    (bad / name).write_bytes(data)
    refused_in_one_line(ROOT, ["infer", "generate", "--model-dir", bad, "--prompt", "hi",
                               "--max-tokens", "2"], words)  # fmt: skip


def test_a_chat_template_list_naming_templates_by_a_list_is_read_past(tiny_bpe, tmp_path):
    from wse_inference.model_dir import load_model

    m = _copy(tiny_bpe, tmp_path / "m")
    named = [{"name": ["x"], "template": "{{ 1 }}"}, {"name": "default", "template": "{{ 2 }}"}]
    (m / "tokenizer_config.json").write_text(json.dumps({"chat_template": named}))
    assert load_model(m).tokenizer.chat_template == "{{ 2 }}"


def test_generation_configs_end_tokens_are_read(tiny, tmp_path):
    from wse_inference.model_dir import load_model

    m = _copy(tiny, tmp_path / "m")
    (m / "generation_config.json").write_text('{"eos_token_id": [7, 9, 100000]}')
    assert load_model(m).eos_token_ids == (7, 9)  # outside the vocabulary: none can be sampled


def test_an_empty_draft_name_is_refused_not_read_as_the_current_folder(tiny, monkeypatch):
    monkeypatch.chdir(tiny)  # "" was read as ".", this model
    spec = json.dumps({"model": "", "num_speculative_tokens": 2})
    refused_in_one_line(ROOT, ["infer", "generate", "--model-dir", ".", "--speculative-config",
                               spec, "--prompt", "hi", "--max-tokens", "2"],
                        "'s model must name the draft's folder, got an empty name")  # fmt: skip


def test_a_one_token_context_is_refused_at_start_as_the_models(tiny, tmp_path):
    m = _copy(tiny, tmp_path / "m")
    config = json.loads((m / "config.json").read_text())
    (m / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 1}))
    _serve_refused(m, "the model's context is 1 token(s)")


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "words"),
    [("hi", 200, "prompt (2 tokens) + max_tokens (200) = 202 exceeds the context of 128 tokens; "
      "shorten the prompt or lower max_tokens to <= 126"),
     ("x" * 200, 2, "the prompt alone fills it: shorten it to at most 127 tokens")],
)  # fmt: skip
def test_generate_counts_a_text_prompts_tokens_before_the_model_loads(tiny, prompt, max_tokens,
                                                                      words):  # fmt: skip
    config = json.loads((tiny / "config.json").read_text())
    assert config["max_position_embeddings"] == 128 and config["vocab_size"] >= 256  # bytes
    refused_in_one_line(ROOT, ["infer", "generate", "--model-dir", tiny, "--prompt", prompt,
                               "--max-tokens", max_tokens], words)  # fmt: skip
