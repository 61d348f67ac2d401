"""Hunt 69's follow-up on gRPC (`wse_inference.serve.grpc_server`). Broken before: the HTTP
routes learned to add the tokenizer's BOS to a text prompt and to take generation_config.json's
sampling defaults, but gRPC's Generate encoded text without special tokens, read none of the
file's defaults, and a tokenizer that raised was not the client's INVALID_ARGUMENT.

Oracles: tokenizers' own `encode` (add_special_tokens true), the defaults given, the rest of
the context."""

from __future__ import annotations

import json
import types

import pytest
from tokenizers import AddedToken, Tokenizer, models, processors
from wse_inference.model_dir import read_tokenizer
from wse_inference.serve.admission import InvalidRequestError, RequestLimits
from wse_inference.serve.grpc_server import _Generation, pb2, sampling_from_request
from wse_inference.testing import save_byte_bpe

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
DEFAULTS = {"temperature": 0.0, "top_k": 5, "top_p": 0.9, "max_tokens": 200,
            "repetition_penalty": 1.2}  # fmt: skip


def _folder(tmp_path, tokenizer: Tokenizer):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    return tmp_path


def _generation(tokenizer) -> _Generation:
    model = types.SimpleNamespace(sampling_defaults=DEFAULTS)
    engine = types.SimpleNamespace(tokenizer=tokenizer, max_context=64, model=model)
    return _Generation(types.SimpleNamespace(engine=engine), ["m"], RequestLimits())


def test_a_text_prompt_gets_the_tokenizers_bos(tmp_path):
    save_byte_bpe(tmp_path / "tokenizer.json", vocab_size=300, texts=("hello world",))
    oracle = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    oracle.add_special_tokens([AddedToken("<s>", special=True)])
    oracle.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", oracle.token_to_id("<s>"))]
    )
    tok = read_tokenizer(_folder(tmp_path, oracle), 300)
    ids = _generation(tok)._prompt_ids(pb2.GenerateRequest(text="hello"))
    assert ids == oracle.encode("hello").ids and ids[0] == oracle.token_to_id("<s>")


def test_a_tokenizer_that_raises_is_the_clients_error(tmp_path):
    wl = Tokenizer(models.WordLevel({"hello": 0}, unk_token="[UNK]"))
    tok = read_tokenizer(_folder(tmp_path, wl), 300)
    with pytest.raises(InvalidRequestError, match="cannot encode the prompt: WordLevel"):
        _generation(tok)._prompt_ids(pb2.GenerateRequest(text="hello zzz"))


def test_unset_fields_take_the_files_defaults_and_set_ones_are_kept():
    s = sampling_from_request(pb2.GenerateRequest(text="a"), prompt_len=3, max_context=100,
                              defaults=DEFAULTS)  # fmt: skip
    assert (s.temperature, s.top_k, s.top_p, s.repetition_penalty) == (0.0, 5, 0.9, 1.2)
    assert s.max_tokens == 97  # the file's 200, at most the rest of the context
    req = pb2.GenerateRequest(text="a", temperature=0.5, top_k=-1, top_p=1.0, max_tokens=4,
                              repetition_penalty=1.0)  # fmt: skip
    s = sampling_from_request(req, prompt_len=3, max_context=100, defaults=DEFAULTS)
    assert (s.temperature, s.top_k, s.top_p, s.max_tokens, s.repetition_penalty) == (
        0.5, 0, 1.0, 4, 1.0)  # fmt: skip
    bare = sampling_from_request(pb2.GenerateRequest(text="a"), prompt_len=3, max_context=100)
    assert (bare.temperature, bare.top_k, bare.max_tokens) == (1.0, 0, 97)  # OpenAI's
