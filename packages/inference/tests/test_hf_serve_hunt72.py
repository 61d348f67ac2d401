"""Hunt 72, a model folder's generation_config.json as the server and `wse infer generate` read it.

Broken before:
1. where the model's end-of-sequence id is a plain token (generation_config.json's
   eos_token_id; the byte tokenizer has no special tokens), the server's completion text
   ended with that token's text while `wse infer generate` left it out: the server's
   detokenizer was given the request's stop_token_ids only, the model's EOS ids being added
   inside the engine. vLLM's detokenizer drops the token that ended the sequence (an EOS or
   a stop token id) unless include_stop_str_in_output. Oracle: the tokenizer's decode of the
   prompt and the tokens before the EOS, less the prompt's text;
2. generation_config.json's min_p (vLLM reads it: `get_diff_sampling_param`) was dropped
   without a word; it is refused at load as the server refuses a request's min_p > 0.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_core import preset
from wse_inference.engine import SamplingParams
from wse_inference.generation_config import sampling_defaults
from wse_inference.load import load_engine
from wse_inference.model_files import ModelLoadError
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.testing import one_request, save_tiny_model

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
PROMPT = [72, 105, 32]  # "Hi "
MAX_TOKENS = 12


def _eos_from(tokens: list[int]) -> tuple[int, int]:
    """(k, token): a token first generated at position k >= 2."""
    for k in range(2, len(tokens)):
        if tokens[k] not in tokens[:k]:
            return k, tokens[k]
    pytest.skip("the greedy output repeats one token")


def test_a_plain_eos_tokens_text_is_in_neither_the_servers_nor_generates_completion(tmp_path):
    model = save_tiny_model(tmp_path, n_layers=1)
    greedy = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0)
    engine = load_engine(str(tmp_path), spec=preset("wse3"), max_slots=1, max_context=32)
    free, _ = one_request(engine, PROMPT, greedy)
    k, eos = _eos_from(free)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    tok = model.tokenizer
    want = tok.decode(PROMPT + free[:k])[len(tok.decode(PROMPT)) :]
    assert tok.decode([eos])  # the case: the EOS is a plain token with text of its own

    engine = load_engine(str(tmp_path), spec=preset("wse3"), max_slots=1, max_context=32)
    server = Server(engine, ServeConfig(port=0, warmup=False)).start()
    try:
        body = {"model": engine.model_name, "prompt": tok.decode(PROMPT), "temperature": 0}
        r = httpx.post(
            server.http_url + "/v1/completions", json={**body, "max_tokens": MAX_TOKENS},
            timeout=120,
        ).json()  # fmt: skip
    finally:
        server.close()
    choice = r["choices"][0]
    assert (choice["finish_reason"], r["usage"]["completion_tokens"]) == ("stop", k + 1)
    assert choice["text"] == want  # before: want + the EOS token's text

    args = ["infer", "generate", "--model-dir", tmp_path, "--prompt", tok.decode(PROMPT),
            "--max-tokens", str(MAX_TOKENS), "--temperature", "0", "--json"]  # fmt: skip
    code, out = invoke(ROOT, args)
    assert code == 0, out[-2000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got["token_ids"] == free[: k + 1]
    assert got["text"] == want == choice["text"]


def test_generation_configs_min_p_is_refused_at_load_or_is_nothing_at_0(tmp_path):
    save_tiny_model(tmp_path, n_layers=1)
    gen = tmp_path / "generation_config.json"
    gen.write_text(json.dumps({"min_p": 0.5, "temperature": 1.0}))
    with pytest.raises(ModelLoadError, match="generation_config.json' has min_p 0.5: min_p is"):
        sampling_defaults(tmp_path)  # before: {"temperature": 1.0}, min_p dropped
    code, out = invoke(
        ROOT, ["infer", "generate", "--model-dir", tmp_path, "--prompt-ids", "1,2", "--json"]
    )
    assert code == 2 and "min_p 0.5" in out and len(out.strip().splitlines()) == 1, out
    for bad in ("0.5", "true", "2", '"x"'):  # as a request's min_p: a number in [0, 1]
        gen.write_text(f'{{"min_p": {bad}}}')
        with pytest.raises(ModelLoadError, match="min_p"):
            sampling_defaults(tmp_path)
    for off in ("0", "0.0", "null"):
        gen.write_text(f'{{"min_p": {off}, "top_k": 5}}')
        assert sampling_defaults(tmp_path) == {"top_k": 5}


def test_generate_refuses_a_gptq_folder_by_its_quantization_config(tmp_path):
    """Hunt 72: `wse infer generate` said "model.safetensors lists 49 tensors ... it is not
    this config's checkpoint" (or "missing tensor ...q_proj.weight") of a GPTQ folder."""
    from safetensors.numpy import load_file, save_file

    save_tiny_model(tmp_path, n_layers=1)
    f = tmp_path / "model.safetensors"
    tensors = dict(load_file(f))
    for name in [k for k in tensors if k.endswith("_proj.weight")]:  # as GPTQ packs them
        out, inp = tensors.pop(name).shape
        stem = name.removesuffix(".weight")
        tensors[f"{stem}.qweight"] = np.zeros((max(inp // 8, 1), out), np.int32)
        tensors[f"{stem}.qzeros"] = np.zeros((1, max(out // 8, 1)), np.int32)
        tensors[f"{stem}.scales"] = np.ones((1, out), np.float16)
    save_file(tensors, f)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, out = invoke(
        ROOT, ["infer", "generate", "--model-dir", tmp_path, "--prompt-ids", "1,2", "--json"]
    )
    assert code == 2 and len(out.strip().splitlines()) == 1, out
    assert out.strip().endswith(
        "quantized checkpoints (quantization_config: gptq) are not supported: give the "
        "dequantized fp16/bf16/fp32 weights"
    ), out
