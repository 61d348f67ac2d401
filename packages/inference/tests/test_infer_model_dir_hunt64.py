"""Hunt 64: model folders `wse_inference.model_dir` read wrong. Before the fixes:
tokenizer_config.json's "chat_template" as a list without a "default" entry, or a number,
was passed over for the plain "role: content" lines, with no word (transformers raises
"multiple chat templates with no default"); special_tokens_map.json was never read, so its
eos_token did not stop generation (transformers' tokenizer has it as eos_token); a draft
folder without tokenizer.json (its own vocabulary size equal to the target's) was refused as
"different tokenizers (token tables differ)" (vLLM runs it on the target's tokenizer); and
`read_weights` read a header listing a million tensors before finding them unused."""

from __future__ import annotations

import json
import shutil
import types

import pytest
from wse_core import preset
from wse_inference.engine import ByteTokenizer, SamplingParams
from wse_inference.load import load_engine
from wse_inference.model_dir import (
    HFTokenizer,
    LoadedModel,
    ModelLoadError,
    check_draft,
    eos_token_ids,
    read_weights,
)
from wse_inference.serve.openai_request import chat_prompt
from wse_inference.testing import one_request, save_byte_bpe, save_tiny_model
from wse_inference.tokenizer_config import read_tokenizer_config

TEMPLATE = "{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    """A folder holding only a byte-level BPE tokenizer.json (300 ids: merges of 'hello')."""
    folder = tmp_path_factory.mktemp("tok")
    save_byte_bpe(folder / "tokenizer.json", vocab_size=300, texts=("hello world", "L L"))
    return folder


def _folder(tok_dir, tmp_path, **files):
    """A copy of `tok_dir` with `files` beside it ({'special_tokens_map_json': JSON value})."""
    folder = tmp_path / "m"
    shutil.copytree(tok_dir, folder)
    for name, value in files.items():
        (folder / name.replace("_json", ".json")).write_text(json.dumps(value))
    return folder


def _transformers(folder):
    transformers = pytest.importorskip("transformers")
    return transformers.PreTrainedTokenizerFast.from_pretrained(str(folder))


# --- 5: a chat template that cannot be chosen ----------------------------------------------


def test_named_templates_without_default_are_refused_when_a_chat_needs_them(tok_dir, tmp_path):
    named = [{"name": "tool_use", "template": TEMPLATE}, {"name": "rag", "template": "x"}]
    folder = _folder(tok_dir, tmp_path, tokenizer_config_json={"chat_template": named})
    tok = HFTokenizer(folder / "tokenizer.json")  # reading it is no chat: fine
    message = (
        f"{str(folder / 'tokenizer_config.json')!r} has chat templates ['rag', 'tool_use'] and "
        "none named 'default' (the one used without tools); pass --chat-template, or name the "
        "one to use 'default'"
    )
    with pytest.raises(ModelLoadError) as err:
        chat_prompt(HI, tok)  # was 'user: hi\nassistant:', the model's template dropped
    assert str(err.value) == message
    # the server's --chat-template is used as before, the folder's never looked at
    assert tok.decode(chat_prompt(HI, tok, "{{ messages[0].content }}!")) == "hi!"
    with pytest.raises(ValueError, match="multiple chat templates with no default"):
        _transformers(folder).apply_chat_template(HI, tokenize=False)  # the oracle's refusal


@pytest.mark.parametrize("value", [5, {"default": TEMPLATE}, [{"name": "default", "template": 7}]])
def test_a_chat_template_that_is_no_template_is_refused_naming_it(tok_dir, tmp_path, value):
    folder = _folder(tok_dir, tmp_path, tokenizer_config_json={"chat_template": value})
    shown = value if isinstance(value, int | dict) else 7
    tok = HFTokenizer(folder / "tokenizer.json")
    with pytest.raises(ModelLoadError) as err:
        chat_prompt(HI, tok)
    assert str(err.value) == (
        f"{str(folder / 'tokenizer_config.json')!r} has chat_template {shown!r:.60}; it must "
        "be a Jinja template (a string) or a list of {'name': ..., 'template': ...} objects, "
        "one named 'default'"
    )


def test_chat_template_jinja_wins_over_a_config_template_that_cannot_be_chosen(tok_dir, tmp_path):
    folder = _folder(tok_dir, tmp_path, tokenizer_config_json={"chat_template": [{"name": "x"}]})
    (folder / "chat_template.jinja").write_text(TEMPLATE)  # transformers reads this first
    tok = HFTokenizer(folder / "tokenizer.json")
    assert tok.chat_template == TEMPLATE
    assert tok.decode(chat_prompt(HI, tok)) == "user=hi;"
    assert _transformers(folder).apply_chat_template(HI, tokenize=False) == "user=hi;"


# --- 10: special_tokens_map.json ------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "want"),
    [({"special_tokens_map_json": {"eos_token": "L", "bos_token": "h"}},
      {"eos_token": "L", "bos_token": "h"}),
     ({"special_tokens_map_json": {"eos_token": {"content": "L", "special": True}}},
      {"eos_token": "L"}),
     ({"special_tokens_map_json": {"eos_token": "L", "bos_token": "h"},
       "tokenizer_config_json": {"bos_token": "e", "eos_token": "o"}},
      {"eos_token": "L", "bos_token": "h"}),
     ({"special_tokens_map_json": {"eos_token": "L", "bos_token": "h"},
       "tokenizer_config_json": {"bos_token": "e", "added_tokens_decoder": {}}},
      {"bos_token": "e"})],
    ids=["strings", "AddedToken", "older format: the map wins", "newer format: map not read"],
)  # fmt: skip
def test_special_tokens_map_is_read_as_transformers_reads_it(tok_dir, tmp_path, files, want):
    folder = _folder(tok_dir, tmp_path, **files)
    tok = HFTokenizer(folder / "tokenizer.json")
    assert tok.template_vars == want
    oracle = _transformers(folder)  # transformers' tokenizer: the same eos and bos
    got = {"eos_token": oracle.eos_token, "bos_token": oracle.bos_token}
    assert {k: v for k, v in got.items() if v is not None} == want
    eos = (tok.vocab()["L"],) if "eos_token" in want else ()
    assert eos_token_ids(folder, tok, 300) == eos


def test_an_unreadable_special_tokens_map_is_refused_naming_it(tok_dir, tmp_path):
    folder = _folder(tok_dir, tmp_path)
    (folder / "special_tokens_map.json").write_text('{"eos_token": "L",}')
    with pytest.raises(ModelLoadError, match="special_tokens_map.json': Expecting"):
        read_tokenizer_config(folder)
    (folder / "special_tokens_map.json").write_text("[1]")
    with pytest.raises(ModelLoadError) as err:
        read_tokenizer_config(folder)
    assert str(err.value) == (
        f"{str(folder / 'special_tokens_map.json')!r} holds a JSON list; "
        "special_tokens_map.json must be a JSON object (or absent)"
    )


def _greedy(folder) -> tuple[list[int], str]:
    """Greedy tokens after [5, 6, 7] from the engine `wse infer serve` runs on `folder`."""
    engine = load_engine(str(folder), spec=preset("wse3"), max_slots=1, max_context=16)
    return one_request(engine, [5, 6, 7], SamplingParams(max_tokens=8, temperature=0.0))


@pytest.mark.timeout(120)
def test_generation_stops_at_the_special_tokens_maps_eos(tmp_path):
    save_tiny_model(tmp_path, n_layers=1)
    save_byte_bpe(tmp_path / "tokenizer.json")
    free, reason = _greedy(tmp_path)  # the oracle: the same decoder without an end token
    k = next((k for k in range(1, len(free)) if free[k] not in free[:k]), None)
    if reason != "length" or k is None:
        pytest.skip("the greedy output repeats one token")
    text = {i: t for t, i in HFTokenizer(tmp_path / "tokenizer.json").vocab().items()}[free[k]]
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"eos_token": text}))
    assert _greedy(tmp_path) == (free[: k + 1], "stop")  # was all 8, "length"


# --- 7: a draft without tokenizer.json ------------------------------------------------------


def _loaded(name: str, tokenizer) -> LoadedModel:
    return LoadedModel(name, None, types.SimpleNamespace(vocab_size=300), None, tokenizer)


def test_a_draft_without_a_tokenizer_runs_on_the_targets(tok_dir, tmp_path):
    target = _loaded("t", HFTokenizer(tok_dir / "tokenizer.json"))
    check_draft(target, _loaded("d", ByteTokenizer()))  # no tokenizer.json, vocab >= 256
    check_draft(target, _loaded("d", None))  # no tokenizer.json, vocab < 256 (ids only)
    check_draft(target, _loaded("d", HFTokenizer(tok_dir / "tokenizer.json")))  # the same
    other = tmp_path / "other"
    other.mkdir()
    save_byte_bpe(other / "tokenizer.json", vocab_size=300, texts=("wafer scale",))
    with pytest.raises(ModelLoadError, match="token tables differ"):  # both have one: compared
        check_draft(target, _loaded("d", HFTokenizer(other / "tokenizer.json")))


# --- 4: the layer count of config.json bounds the tensors listed, before JAX ----------------


def test_read_weights_bounds_the_tensors_by_config_layers_without_jax(tmp_path):
    from wse_core.testing import refused_without_jax

    save_tiny_model(tmp_path, n_layers=1)
    index = {"weight_map": {f"x{i}": "model.safetensors" for i in range(33)}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelLoadError) as err:
        read_weights(tmp_path)
    assert str(err.value) == (
        f"cannot load the model in {str(tmp_path)!r}: model.safetensors.index.json lists 33 "
        "tensors; a checkpoint of 1 layer lists at most 32 (16 a layer, 16 besides): it is "
        "not this config's checkpoint"
    )
    got = refused_without_jax(
        "wse_inference.model_dir", f"read_weights({str(tmp_path)!r})", "ModelLoadError"
    )
    assert got == ["refused", "False"], got
