"""Hunt 69 (surface hf): model folders, tokenizers and generation settings as transformers
writes them. Before these fixes:

1. A folder with a slow tokenizer (vocab.json + merges.txt, or tokenizer.model) and no
   tokenizer.json ran on UTF-8 bytes as token ids, exit 0.
2. The truncation and padding saved in tokenizer.json were applied: prompts cut to 2 tokens,
   or padded to 64.
3. Text prompts never got the tokenizer's BOS (/v1/completions, /tokenize, where
   add_special_tokens was checked, then ignored); an empty prompt was refused.
4. An F64 1e300 weight passed the finite check and became inf in float32; a NaN logprob was
   answered as the number -9999.0.
5. A tokenizer that raises on encode was an HTTP 500 (and a traceback from the CLI).
6. A llama3 `rope_scaling` beside a default `rope_parameters` was dropped.
7. generation_config.json's sampling defaults were ignored.
8. An index naming a shard outside the model folder was read.
9. torch_dtype float16 was run and priced as float32 without a word; int8 ran too.

Oracles: `tokenizers` itself (the files' own ids), NumPy / ml_dtypes casts, and transformers
where it is installed (those tests skip without it).
"""

from __future__ import annotations

import json
import re

import httpx
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from tokenizers import AddedToken, ByteLevelBPETokenizer, Tokenizer, models, processors
from wse_core.errors import WseError
from wse_core.host.tensor_files import TensorFileError, weight_map
from wse_inference.engine import ByteTokenizer, TokenLogprob
from wse_inference.generation_config import sampling_defaults, server_defaults
from wse_inference.hf_tokenizer import TokenizerError, text_ids
from wse_inference.mock import MockEngine
from wse_inference.model_dir import ModelLoadError, read_tokenizer, read_weights
from wse_inference.serve.admission import InvalidRequestError
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.openai_request import parse_request, tokenize_request
from wse_inference.serve.openai_response import logprobs_body
from wse_inference.testing import save_byte_bpe

pytestmark = pytest.mark.timeout(120)
TEXTS = ["hello world", " the wafer, hello", "héllo wörld", ""]
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}


def _write(folder, **files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        text = value if isinstance(value, str) else json.dumps(value)
        (folder / name.replace("_json", ".json").replace("_txt", ".txt")).write_text(text)
    return folder


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """A byte-level BPE tokenizer.json with merges (300 ids) and its vocab and merges."""
    root = tmp_path_factory.mktemp("bpe")
    save_byte_bpe(root / "tokenizer.json", vocab_size=300, texts=("hello world", "the wafer"))
    model = json.loads((root / "tokenizer.json").read_text())["model"]
    merges = "".join(" ".join(m) + "\n" for m in model["merges"])
    return root, model["vocab"], "#version: 0.2\n" + merges


def _slow(tmp_path, bpe, **config):
    _, vocab, merges = bpe
    return _write(tmp_path / "slow", config_json=LLAMA, vocab_json=vocab, merges_txt=merges,
                  tokenizer_config_json={"tokenizer_class": "GPT2Tokenizer", **config})  # fmt: skip


# --- 1: slow tokenizer files -----------------------------------------------------------------


def test_a_gpt2_vocab_and_merges_is_read_as_that_bpe(tmp_path, bpe):
    folder = _slow(tmp_path, bpe)
    oracle = ByteLevelBPETokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    tok = read_tokenizer(folder, 300)
    for text in TEXTS:
        assert text_ids(tok, text) == oracle.encode(text).ids, text  # bytes before the fix
    assert tok.decode(tok.encode("hello world")) == "hello world"


@pytest.mark.parametrize(
    "config",
    [{}, {"add_bos_token": True},
     {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
      "add_bos_token": True, "add_eos_token": True, "add_prefix_space": True},
     {"eos_token": "</s>", "add_eos_token": True, "additional_special_tokens": ["<x>"]}],
)  # fmt: skip
def test_the_slow_gpt2_tokenizer_gives_transformers_ids(tmp_path, bpe, config):
    transformers = pytest.importorskip("transformers")
    folder = _slow(tmp_path, bpe, **config)
    ref = transformers.AutoTokenizer.from_pretrained(str(folder))
    tok = read_tokenizer(folder, 300)
    assert (tok.template_vars["bos_token"], tok.template_vars["eos_token"]) == (
        ref.bos_token, ref.eos_token)  # fmt: skip
    for text in [*TEXTS, "a <s> b </s><x><|endoftext|>"]:
        assert text_ids(tok, text) == ref(text)["input_ids"], text
        assert tok.encode(text) == ref(text, add_special_tokens=False)["input_ids"], text


@pytest.mark.parametrize(
    ("files", "said"),
    [({"tokenizer_model": "x"}, "has tokenizer.model (a SentencePiece tokenizer)"),
     ({"tokenizer_config_json": {"tokenizer_class": "Qwen2Tokenizer"}},
      "has vocab.json, merges.txt of tokenizer_class 'Qwen2Tokenizer'"),
     ({"tokenizer_config_json": {}}, "has vocab.json, merges.txt but"),  # llama: no GPT-2 class
     ({"vocab_txt": "[UNK]\n"}, "has vocab.txt but no tokenizer.json")],
)  # fmt: skip
def test_other_tokenizer_files_are_refused_not_run_as_bytes(tmp_path, bpe, files, said):
    folder = _slow(tmp_path, bpe)
    if "vocab_txt" in files or "tokenizer_model" in files:
        for f in ("vocab.json", "merges.txt", "tokenizer_config.json"):
            (folder / f).unlink()
    _write(folder, **{k.replace("_model", ".model"): v for k, v in files.items()})
    with pytest.raises(ModelLoadError) as err:
        read_tokenizer(folder, 300)
    line = str(err.value)
    assert said in line and "save it as tokenizer.json" in line and "\n" not in line, line
    assert read_tokenizer(folder, 300, required=False) is None  # --prompt-ids: ids only


def test_a_folder_without_tokenizer_files_still_gets_bytes(tmp_path):
    folder = _write(tmp_path / "m", config_json=LLAMA, tokenizer_config_json={"eos_token": "x"})
    assert isinstance(read_tokenizer(folder, 300), ByteTokenizer)


# --- 2: saved truncation and padding are switched off -----------------------------------------


@pytest.mark.parametrize("saved", ["truncation", "padding"])
def test_saved_truncation_and_padding_are_off(tmp_path, bpe, saved):
    oracle = Tokenizer.from_file(str(bpe[0] / "tokenizer.json"))
    tok = Tokenizer.from_file(str(bpe[0] / "tokenizer.json"))
    if saved == "truncation":
        tok.enable_truncation(max_length=2)
    else:
        tok.enable_padding(length=64, pad_id=0, pad_token="!")
    tok.save(str(_write(tmp_path / "m", config_json=LLAMA) / "tokenizer.json"))
    ours = read_tokenizer(tmp_path / "m", 300)
    text = "hello world, this is long"
    assert text_ids(ours, text) == oracle.encode(text).ids  # cut to 2 / padded to 64 before


# --- 3: BOS on text prompts; 5: a tokenizer that raises ------------------------------------


@pytest.fixture(scope="module")
def bos(tmp_path_factory, bpe):
    """The hunt's folder: a post-processor adding <s>, a chat template writing it."""
    folder = _write(tmp_path_factory.mktemp("bos"), config_json=LLAMA)
    tok = Tokenizer.from_file(str(bpe[0] / "tokenizer.json"))
    tok.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    tok.save(str(folder / "tokenizer.json"))
    template = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
    _write(folder, tokenizer_config_json={"bos_token": "<s>", "eos_token": "</s>",
                                          "chat_template": template})  # fmt: skip
    return folder, tok


def _parse(body, tok, kind="completion", **kw):
    return parse_request({"model": "m", **body}, kind=kind, tokenizer=tok, model_names=["m"],
                         max_context=64, **kw)  # fmt: skip


def test_text_prompts_get_the_bos_transformers_adds(bos):
    folder, oracle = bos
    tok, bos_id = read_tokenizer(folder, 300), oracle.token_to_id("<s>")
    want = oracle.encode("hello").ids  # add_special_tokens=True: tokenizers' own default
    assert want[0] == bos_id and text_ids(tok, "hello") == want
    assert _parse({"prompt": "hello"}, tok).prompt_ids == want
    assert _parse({"prompt": "hello", "add_special_tokens": False}, tok).prompt_ids == want[1:]
    assert _parse({"prompt": ""}, tok).prompt_ids == [bos_id]  # vLLM: not empty once encoded
    assert text_ids(tok, "") == oracle.encode("").ids == [bos_id]
    body = {"prompt": "hello"}
    assert tokenize_request(body, tokenizer=tok, model_names=["m"], chat_template=None,
                            max_context=64)["tokens"] == want  # fmt: skip
    plain = tokenize_request({**body, "add_special_tokens": False}, tokenizer=tok,
                             model_names=["m"], chat_template=None, max_context=64)  # fmt: skip
    assert plain["tokens"] == want[1:]


def test_chat_keeps_the_templates_one_bos(bos):
    folder, oracle = bos
    tok = read_tokenizer(folder, 300)
    chat = {"messages": [{"role": "user", "content": "hello"}]}
    ids = _parse(chat, tok, kind="chat").prompt_ids
    assert ids == oracle.encode("<s>hello", add_special_tokens=False).ids
    assert ids.count(oracle.token_to_id("<s>")) == 1
    with pytest.raises(InvalidRequestError, match="add_special_tokens true is not supported"):
        _parse({**chat, "add_special_tokens": True}, tok, kind="chat")


def test_a_tokenizer_that_raises_is_a_400_in_its_words(tmp_path):
    folder = _write(tmp_path / "wl", config_json=LLAMA)
    wl = Tokenizer(models.WordLevel({"hello": 0, "world": 1}, unk_token="[UNK]"))
    wl.save(str(folder / "tokenizer.json"))
    tok = read_tokenizer(folder, 300)
    words = "WordLevel error: Missing [UNK] token from the vocabulary"
    with pytest.raises(Exception, match="Missing") as raw:
        wl.encode("hello zzz")  # the oracle: tokenizers' own bare Exception
    assert words in str(raw.value)
    with pytest.raises(TokenizerError, match=re.escape(f"cannot encode the prompt: {words}")):
        tok.encode("hello zzz")
    for kind, body in [("completion", {"prompt": "hello zzz"}),
                       ("chat", {"messages": [{"role": "user", "content": "zzz"}]})]:  # fmt: skip
        with pytest.raises(InvalidRequestError, match="cannot encode the prompt: WordLevel"):
            _parse(body, tok, kind=kind, chat_template="{{ messages[0].content }}")
    with pytest.raises(InvalidRequestError, match="cannot encode"):
        tokenize_request({"prompt": "zzz"}, tokenizer=tok, model_names=["m"], chat_template=None,
                         max_context=64)  # fmt: skip


# --- 4: values that overflow the held dtype; NaN logprobs ------------------------------------


def _checkpoint(tmp_path, dtype, value, stored=np.float64):
    from wse_inference.testing import save_tiny_model

    folder = tmp_path / "m"
    save_tiny_model(folder, n_layers=1)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "torch_dtype": dtype,
                                                    "dtype": dtype}))  # fmt: skip
    tensors = {k: v.astype(stored) for k, v in load_file(folder / "model.safetensors").items()}
    tensors["model.layers.0.mlp.up_proj.weight"][0, 0] = value
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.mark.parametrize(
    ("dtype", "stored", "value"),
    [("float32", np.float64, 1e300), ("float32", np.float64, -3.4028236e38),
     ("bfloat16", np.float32, 3.3962e38), ("bfloat16", np.float64, -1e39)],
)  # fmt: skip
def test_a_value_that_overflows_the_held_dtype_is_refused_as_read(tmp_path, dtype, stored, value):
    held = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    with np.errstate(over="ignore"):  # the oracle: the cast the loader makes
        assert np.isinf(np.asarray(value, stored).astype(held))
    folder = _checkpoint(tmp_path, dtype, value, stored)
    with pytest.raises(ModelLoadError) as err:
        read_weights(folder)
    assert str(err.value).endswith(
        f"tensor 'model.layers.0.mlp.up_proj.weight' in {folder / 'model.safetensors'} holds 1 "
        f"value beyond {dtype}'s range ({float(np.finfo(held).max):.3g}); it would be inf once "
        f"loaded in {dtype}, the model's dtype (config.json's)"
    )


@pytest.mark.parametrize(
    ("held", "name", "stored"),
    [(np.float32, "float32", np.float64), (ml_dtypes.bfloat16, "bfloat16", np.float32)],
)
def test_the_overflow_edge_is_the_casts_own(held, name, stored):
    """Around halfway past the held max: refused exactly where NumPy's cast gives inf."""
    from wse_core.host.tensor_files import _check_fits

    top = np.array(ml_dtypes.finfo(held).max, held)
    half = (top.astype(np.float64) - np.nextafter(top, held(0)).astype(np.float64)) / 2
    x = np.array(top.astype(np.float64) + half, stored)
    for step in [0, 1, 1, 1, -4, -1]:  # up to 3 of the stored dtype's steps either side
        for _ in range(abs(step)):
            x = np.nextafter(x, stored(np.inf) if step > 0 else stored(0))
        for sign in (1, -1):
            with np.errstate(over="ignore"):
                overflows = bool(np.isinf((sign * x).astype(held)))
            try:
                _check_fits(np.array([sign * x], stored), "w", "f", name)
                refused = False
            except TensorFileError:
                refused = True
            assert refused == overflows, (name, float(sign * x))


def test_a_nan_logprob_is_null_never_a_number():
    nan = TokenLogprob(token=65, logprob=float("nan"), top=((65, float("nan")),))
    for kind in ("completion", "chat"):
        p = _parse({"prompt": "a"} if kind == "completion" else
                   {"messages": [{"role": "user", "content": "a"}]},
                   ByteTokenizer(), kind=kind)  # fmt: skip
        p = type(p)(**{**p.__dict__, "sampling": type(p.sampling)(logprobs=1)})
        body = json.dumps(logprobs_body(p, [nan], ByteTokenizer()), allow_nan=False)
        assert "-9999" not in body and "null" in body  # -9999.0 before the fix


# --- 7: generation_config.json's sampling defaults -------------------------------------------


def _generation(tmp_path, **config):
    return _write(tmp_path / "g", generation_config_json=config)


def test_the_files_sampling_settings_are_read_as_vllm_reads_them(tmp_path):
    folder = _generation(tmp_path, do_sample=False, temperature=0.6, top_k=-1, top_p=0.9,
                         max_new_tokens=3, repetition_penalty=1.1, eos_token_id=2)  # fmt: skip
    assert sampling_defaults(folder) == {
        "temperature": 0.0,  # do_sample false: transformers' generate is greedy
        "top_k": 0, "top_p": 0.9, "repetition_penalty": 1.1, "max_tokens": 3,
    }  # fmt: skip
    assert sampling_defaults(_generation(tmp_path, eos_token_id=2, temperature=None)) == {}
    for bad in ({"temperature": 7}, {"top_p": 0}, {"max_new_tokens": 0}, {"top_k": "1"}):
        with pytest.raises(ModelLoadError, match=f"generation_config.json' has {next(iter(bad))}"):
            sampling_defaults(_generation(tmp_path, **bad))


def test_a_request_gets_the_files_defaults_where_it_sets_none():
    defaults = {"temperature": 0.0, "top_k": 1, "top_p": 0.5, "max_tokens": 3}
    chat = {"messages": [{"role": "user", "content": "abc"}]}
    s = _parse(chat, ByteTokenizer(), "chat", sampling_defaults=defaults).sampling
    assert (s.temperature, s.top_k, s.top_p, s.max_tokens) == (0.0, 1, 0.5, 3)
    # /v1/completions: vLLM's CompletionRequest max_tokens 16 comes before the file's (its
    # get_max_tokens reads the file's for a None only; hunt 82: 3 here)
    s = _parse({"prompt": "abc"}, ByteTokenizer(), sampling_defaults=defaults).sampling
    assert (s.temperature, s.top_k, s.top_p, s.max_tokens) == (0.0, 1, 0.5, 16)
    own = {"prompt": "abc", "temperature": 0.7, "top_k": 0, "top_p": 1.0, "max_tokens": 9}
    s = _parse(own, ByteTokenizer(), sampling_defaults=defaults).sampling
    assert (s.temperature, s.top_k, s.top_p, s.max_tokens) == (0.7, 0, 1.0, 9)
    s = _parse({"prompt": "abc"}, ByteTokenizer(), sampling_defaults={"max_tokens": 999})
    # vLLM: min(the request's (16 on /v1/completions: hunt 75), the file's, the context's rest)
    assert s.sampling.max_tokens == 16


def test_the_server_applies_them_and_says_so(monkeypatch):
    import wse_inference.generation_config as gc

    said = []
    monkeypatch.setattr(gc, "say_once", said.append)  # its stderr line (the CLI test reads it)
    engine = MockEngine(max_context=64)
    engine.model = type("Loaded", (), {"sampling_defaults": {"max_tokens": 3}})()
    assert server_defaults(MockEngine()) == {}
    server = Server(engine, ServeConfig(port=0)).start()
    try:
        body = {"model": "mock", "messages": [{"role": "user", "content": "abc"}]}
        r = httpx.post(f"{server.http_url}/v1/chat/completions", json=body, timeout=30)
        done = httpx.post(f"{server.http_url}/v1/completions", json={"prompt": "abc"}, timeout=30)
    finally:
        server.close()
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == ";<="  # the mock: after ":"; 61 before
    assert r.json()["usage"]["completion_tokens"] == 3
    assert done.json()["usage"]["completion_tokens"] == 16  # vLLM's completions default
    assert said[-1] == (
        "note: generation_config.json's sampling defaults apply where a request leaves a "
        "setting out (max_tokens on chat and gRPC; /v1/completions' stays 16, as vLLM's): "
        "max_tokens 3 (vLLM's --generation-config auto)"
    )


# --- 6: rope_scaling beside rope_parameters; 8: shards outside; 9: torch_dtype -------------


def _hf(**edit):
    import wse_models
    from wse_models.testing import tiny_config

    return {**wse_models.config_to_hf(tiny_config("llama")), **edit}


def test_a_llama3_rope_scaling_wins_over_a_default_rope_parameters(tmp_path):
    import wse_models

    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}  # fmt: skip
    d = _hf(rope_scaling=scaling, rope_theta=5000.0,
            rope_parameters={"rope_type": "default", "rope_theta": 20000.0})  # fmt: skip
    config = wse_models.config_from_hf(d)  # None and 20000 before
    assert (config.rope_scaling.factor, config.rope_theta) == (8.0, 5000.0)
    transformers = pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps(d))
    ref = transformers.AutoConfig.from_pretrained(str(tmp_path)).rope_parameters
    assert (ref["rope_type"], ref["factor"], ref["rope_theta"]) == ("llama3", 8.0, 5000.0)


@pytest.mark.parametrize("shard", ["../other/model.safetensors", "/abs/model.safetensors"])
def test_a_shard_named_outside_the_folder_is_refused_in_transformers_words(tmp_path, shard):
    index = _write(tmp_path / "m", **{"model.safetensors.index_json": {"weight_map": {
        "model.norm.weight": shard}}}) / "model.safetensors.index.json"  # fmt: skip
    words = f"The checkpoint index {index} has a shard filename that points outside the model "
    with pytest.raises(TensorFileError, match=re.escape(f"{words}directory: {shard}; shard ")):
        weight_map(index.parent)
    hub = pytest.importorskip("transformers.utils.hub")
    with pytest.raises(ValueError, match=re.escape(f"{words}directory: {shard}")):
        hub._check_shard_filenames_stay_in_model_dir([shard], str(index))


def test_float16_is_said_to_run_as_float32_and_int8_is_refused(tmp_path, monkeypatch):
    import wse_inference.model_dir as md
    from wse_core.hw.dtypes import dtype_bytes

    said = []
    monkeypatch.setattr(md, "say_once", lambda line: said.append(line))
    _write(tmp_path / "m", config_json=_hf(torch_dtype="float16", dtype=None))
    assert dtype_bytes(md.read_config(tmp_path / "m").param_dtype) == 4  # what runs, priced
    note = "note: config.json's torch_dtype float16 is run and priced as float32 (4 bytes a "
    assert [x for x in said if x] == [
        note + "parameter): this engine holds weights in float32 or bfloat16"
    ]
    _write(tmp_path / "m", config_json=_hf(torch_dtype="int8", dtype=None))
    with pytest.raises(WseError, match="torch_dtype 'int8' is not a floating dtype"):
        md.read_config(tmp_path / "m")
