"""Hunt 69's model-folder holes as `wse infer generate` met them. Before these fixes: a folder
with vocab.json + merges.txt and no tokenizer.json ran "hello" as the UTF-8 bytes
[104, 101, 108, 108, 111] (exit 0), and one with a SentencePiece tokenizer.model took the same
byte path; a text prompt never got the BOS its tokenizer adds, and `--prompt ''` was refused
although it is [bos]; a tokenizer that raises on encode was a 61-line traceback, exit 1; an
F64 weight of 1e300 (inf in float32) passed the finite check and failed 17 s later in three
lines; an index naming `../other/model.safetensors` was read from outside the folder, exit
0; generation_config.json's sampling defaults were ignored (32 tokens sampled at temperature
1 where the file says 3 greedy ones), and torch_dtype float16 ran as float32 without a word.
Each is now the tokenizer's own ids, or one line (exit 2), or said in one note line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from safetensors.numpy import load_file, save_file
from tokenizers import AddedToken, ByteLevelBPETokenizer, Tokenizer, models, processors
from wse_cli.app import app
from wse_cli.commands import infer_prompt as prompts
from wse_cli.testing import invoke, refused_in_one_line
from wse_inference import run_export
from wse_inference.model_dir import read_tokenizer
from wse_inference.testing import save_byte_bpe, save_tiny_model

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The hunt's tiny Llama (vocabulary 300) with a byte-level BPE tokenizer.json."""
    folder = tmp_path_factory.mktemp("models") / "base"
    save_tiny_model(folder, n_layers=2, vocab_size=300)
    save_byte_bpe(folder / "tokenizer.json", vocab_size=290, texts=("hello world",))
    return folder


def _copy(base, tmp_path, name="m"):
    import shutil

    return shutil.copytree(base, tmp_path / name)


def _generate(folder, *args):
    code, out = invoke(ROOT, ["infer", "generate", "--model-dir", folder, *args, "--json"])
    assert code == 0, out[-2000:]
    return json.loads(out.strip().splitlines()[-1]), out


GREEDY = ("--max-tokens", "3", "--temperature", "0")


def test_a_gpt2_vocab_and_merges_gives_its_own_ids(base, tmp_path):
    folder = _copy(base, tmp_path)
    model = json.loads((folder / "tokenizer.json").read_text())["model"]
    (folder / "tokenizer.json").unlink()
    (folder / "vocab.json").write_text(json.dumps(model["vocab"]))
    merges = "".join(" ".join(m) + "\n" for m in model["merges"])
    (folder / "merges.txt").write_text("#version: 0.2\n" + merges)
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "GPT2Tokenizer"}')
    oracle = ByteLevelBPETokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    want = oracle.encode("hello world").ids
    assert want != list(b"hello world")  # the bytes run before
    tok = read_tokenizer(folder, 300)  # what the command reads, before the model loads
    assert prompts.prompt_ids("hello world", None, tok, 300) == want


def test_a_sentencepiece_model_without_tokenizer_json_is_one_line(base, tmp_path):
    folder = _copy(base, tmp_path)
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.model").write_bytes(b"\x0a\x00")
    line = refused_in_one_line(ROOT, ["infer", "generate", "--model-dir", folder, "--prompt",
                                      "hello", *GREEDY], "but no tokenizer.json")  # fmt: skip
    assert line == (
        f"Error: {str(folder)!r} has tokenizer.model (a SentencePiece tokenizer) but no "
        "tokenizer.json; save it as tokenizer.json (AutoTokenizer.from_pretrained(dir)"
        ".save_pretrained(dir), with transformers) or pass --prompt-ids"
    )


def test_a_text_prompt_gets_its_bos_and_an_empty_one_is_bos(base, tmp_path):
    folder = _copy(base, tmp_path)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.add_special_tokens([AddedToken("<s>", special=True)])
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", bos)])  # fmt: skip
    tok.save(str(folder / "tokenizer.json"))
    want = tok.encode("hello").ids  # tokenizers' own: with the post-processor's <s>
    assert want[0] == bos
    by_text, _ = _generate(folder, "--prompt", "hello", *GREEDY)
    by_ids, _ = _generate(folder, "--prompt-ids", ",".join(map(str, want)), *GREEDY)
    assert by_text["token_ids"] == by_ids["token_ids"]
    # "the prompt is empty" before; transformers' tokenizer("") is [bos], and vLLM runs it
    assert prompts.prompt_ids("", None, read_tokenizer(folder, 300), 300) == [bos]


def test_a_tokenizer_that_raises_is_one_line(base, tmp_path):
    folder = _copy(base, tmp_path)
    wl = Tokenizer(models.WordLevel({"hello": 0, "world": 1}, unk_token="[UNK]"))
    wl.save(str(folder / "tokenizer.json"))
    words = "WordLevel error: Missing [UNK] token from the vocabulary"
    line = refused_in_one_line(ROOT, ["infer", "generate", "--model-dir", folder, "--prompt",
                                      "hello zzz", *GREEDY], words)  # fmt: skip
    assert (
        line
        == f"Error: the tokenizer in {folder / 'tokenizer.json'} cannot encode the prompt: {words}"
    )


def test_a_weight_that_overflows_float32_is_refused_as_read(base, tmp_path):
    folder = _copy(base, tmp_path)
    name = "model.layers.0.mlp.up_proj.weight"
    tensors = {k: v.astype(np.float64) for k, v in load_file(folder / "model.safetensors").items()}
    tensors[name][0, 0] = 1e300
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with np.errstate(over="ignore"):
        assert np.isinf(np.float64(1e300).astype(np.float32))  # the oracle: the cast's inf
    line = refused_in_one_line(ROOT, ["infer", "generate", "--model-dir", folder,
                                      "--prompt-ids", "1,2", *GREEDY], name)  # fmt: skip
    assert line.endswith("holds 1 value beyond float32's range (3.4e+38); it would be inf "
                         "once loaded in float32, the model's dtype (config.json's)")  # fmt: skip


def test_a_shard_outside_the_folder_is_refused(base, tmp_path):
    folder, other = _copy(base, tmp_path), tmp_path / "other"
    other.mkdir()
    (folder / "model.safetensors").rename(other / "model.safetensors")
    names = load_file(other / "model.safetensors")
    index = {"metadata": {}, "weight_map": {k: "../other/model.safetensors" for k in names}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    refused_in_one_line(
        ROOT,
        ["infer", "generate", "--model-dir", folder, "--prompt-ids", "1", *GREEDY],
        "has a shard filename that points outside the model directory: ../other/model.safetensors",
    )


def test_generation_config_sets_the_defaults_and_float16_is_said(base, tmp_path, monkeypatch):
    monkeypatch.setattr(run_export, "_said", set())  # notes are said once per process
    folder = _copy(base, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "torch_dtype": "float16",
                                                    "dtype": "float16"}))  # fmt: skip
    gen = {"do_sample": False, "temperature": 0.0, "top_k": 1, "max_new_tokens": 3}
    (folder / "generation_config.json").write_text(json.dumps(gen))
    run, out = _generate(folder, "--prompt-ids", "7,8", "--seed", "1")
    flags, _ = _generate(folder, "--prompt-ids", "7,8", "--top-k", "1", *GREEDY)
    assert run["token_ids"] == flags["token_ids"] and len(run["token_ids"]) == 3  # 32 before
    assert run["predicted"]["bytes_per_param"] == 4
    assert (
        "note: generation_config.json's sampling defaults applied, where the command line "
        "gives none: max_tokens 3, temperature 0.0, top_k 1 (vLLM's --generation-config auto)"
    ) in out.splitlines()
    assert (
        "note: config.json's dtype float16 is run and priced as float32 (4 bytes a parameter): "
        "this engine holds weights in float32 or bfloat16"
    ) in out.splitlines()
