"""Hunt 64, model folders for `wse infer generate` / `serve`: each exits 2 with one line
naming what is wrong, or now runs as vLLM would. Before the fixes: an index whose
"weight_map" was a list was a 61-line traceback; an FP8 checkpoint was `module 'numpy' has
no attribute 'float8_e4m3fn'`; a second *.safetensors of zeros with the same names was
served instead (token ids [0, 0, 0, ...], exit 0); BOOL weights were cast and served; a
header of a million empty tensors was refused after 20 s and 1.2 GB; a chat template list
without "default" started the server on "role: content" lines; a draft folder without
tokenizer.json was refused as "different tokenizers"."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
import typer
from safetensors.numpy import load_file, save_file
from wse_cli.app import app
from wse_cli.testing import (
    NO_JAX_PROBE,
    RSS_CAP,
    clean_env,
    invoke,
    refused_in_one_line,
    run_watched,
)

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)
GEN = ["infer", "generate", "--prompt-ids", "1,2,3", "--max-tokens", "4", "--temperature", "0"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from wse_inference.testing import save_byte_bpe, save_tiny_model

    path = tmp_path_factory.mktemp("tiny") / "m"
    save_tiny_model(path, n_layers=2)
    save_byte_bpe(path / "tokenizer.json")
    return path


def _variant(tiny, tmp_path, edit) -> str:
    folder = tmp_path / "v"
    shutil.copytree(tiny, folder)
    edit(folder, load_file(str(folder / "model.safetensors")))
    return str(folder)


def _index_list(folder, _):
    (folder / "model.safetensors.index.json").write_text('{"weight_map": ["a"]}')


def _fp8(folder, tensors):
    header, blob = {}, b""
    for name, x in tensors.items():
        data = bytes(x.size)  # one byte a value: what it holds is never read
        offsets = [len(blob), len(blob) + len(data)]
        header[name] = {"dtype": "F8_E4M3", "shape": list(x.shape), "data_offsets": offsets}
        blob += data
    text = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + blob)


def _second_file(folder, tensors):
    save_file({k: np.zeros_like(v) for k, v in tensors.items()}, str(folder / "model2.safetensors"))


def _bool(folder, tensors):
    save_file({k: v > 0 for k, v in tensors.items()}, str(folder / "model.safetensors"))


@pytest.mark.parametrize(
    ("edit", "words"),
    [(_index_list, '"weight_map" must be an object of tensor name -> shard file name, got a list'),
     (_fp8, "model.safetensors is F8_E4M3; this loader reads F16, BF16, F32 and F64"),
     (_second_file, "is in both model.safetensors and model2.safetensors; remove one"),
     (_bool, "tensor 'model.embed_tokens.weight' is bool; model weights must be floating point")],
    ids=["weight_map list", "FP8", "two files", "BOOL"],
)  # fmt: skip
def test_a_broken_checkpoint_is_one_line_exit_2(tiny, tmp_path, edit, words):
    folder = _variant(tiny, tmp_path, edit)
    line = refused_in_one_line(ROOT, [*GEN, "--model-dir", folder], words)
    assert line.startswith(f"Error: cannot load the model in {folder!r}: "), line


def test_a_header_of_300k_empty_tensors_is_refused_at_once_without_jax(tiny, tmp_path):
    def many(folder, tensors):
        header, blob = {}, b""
        for name, x in tensors.items():
            offsets = [len(blob), len(blob) + x.nbytes]
            header[name] = {"dtype": "F32", "shape": list(x.shape), "data_offsets": offsets}
            blob += x.tobytes()
        empty = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
        header |= {f"x{i}": empty for i in range(300_000)}
        text = json.dumps(header, separators=(",", ":")).encode()
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + blob)

    folder = _variant(tiny, tmp_path, many)
    seen = run_watched([*GEN, "--model-dir", folder], timeout_s=60)
    assert seen.killed is None and seen.returncode == 2, (seen.killed, seen.stderr[-2000:])
    words = "model.safetensors lists 300,021 tensors; a checkpoint of 2 layers lists at most 48"
    assert words in seen.stderr, seen.stderr
    # a million: was 20.5 s and 1,226,040 KB; now the header's text is counted (1 s, 0.1 GB)
    assert seen.peak_rss < RSS_CAP // 4 and seen.wall_s < 15, (seen.peak_rss, seen.wall_s)
    r = subprocess.run([sys.executable, "-c", NO_JAX_PROBE, *GEN, "--model-dir", folder],
                       capture_output=True, text=True, env=clean_env(), timeout=60)  # fmt: skip
    assert r.stderr.strip().splitlines()[-1] == "jax imported: False", r.stderr[-2000:]


def test_serve_refuses_named_templates_without_default_unless_given_one(
    tiny, tmp_path, monkeypatch
):
    import wse_inference.serve.app
    from wse_cli.commands import infer_serve
    from wse_inference.model_dir import HFTokenizer

    folder = tmp_path / "m"
    shutil.copytree(tiny, folder)
    named = [{"name": "tool_use", "template": "TOOLS {{ messages[0].content }}"}]
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": named}))
    engine = type("Engine", (), {"tokenizer": HFTokenizer(folder / "tokenizer.json")})()
    monkeypatch.setattr(infer_serve, "_real_engine", lambda *a, **k: engine)
    served = []
    monkeypatch.setattr(wse_inference.serve.app, "serve", lambda e, config, **_: served.append(1))
    args = ["infer", "serve", "--model-dir", str(folder), "--port", "0"]
    refused_in_one_line(ROOT, args, "has chat templates ['tool_use'] and none named 'default'")
    assert not served
    code, out = invoke(ROOT, [*args, "--chat-template", "{{ messages[0].content }}"])
    assert code == 0 and served == [1], out


def test_a_draft_without_a_tokenizer_runs_on_the_targets_and_changes_no_token(tiny, tmp_path):
    from wse_inference.testing import save_tiny_model

    save_tiny_model(tmp_path / "draft", n_layers=1, seed=5)  # no tokenizer.json
    spec = json.dumps({"model": str(tmp_path / "draft"), "num_speculative_tokens": 2})
    args = ["infer", "generate", "--model-dir", str(tiny), "--prompt", "hello", "--json",
            "--max-tokens", "5", "--temperature", "0"]  # fmt: skip
    outs = [invoke(ROOT, args), invoke(ROOT, [*args, "--speculative-config", spec])]
    assert [code for code, _ in outs] == [0, 0], outs
    alone, drafted = (json.loads(out.strip().splitlines()[-1]) for _, out in outs)
    assert drafted["token_ids"] == alone["token_ids"]  # greedy: the target's tokens exactly
