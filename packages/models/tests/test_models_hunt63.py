"""Hunt 63: a config.json of an odd shape, an integer past a float's range and a zero read
as "absent" in `config_from_hf` / `ModelConfig`. Each is a named `ModelError` (the CLI's one
line); a null or absent key keeps the meaning transformers gives it (the oracle, where
installed)."""

import json
import re

import pytest
import wse_models as wm
from wse_models.config import MAX_SIZES
from wse_models.testing import tiny_config

BIG = 10**400  # no float holds it


def _llama(**edit) -> dict:
    d = {**wm.config_to_hf(tiny_config("llama")), **edit}
    return {k: v for k, v in d.items() if v is not ...}  # ...: the key removed


@pytest.mark.parametrize(
    ("d", "match"),
    [([1, 2], "config.json must hold a JSON object, got an array"),
     (None, "config.json must hold a JSON object, got null"),
     ("llama", "config.json must hold a JSON object, got a string"),
     (_llama(model_type=["llama"]), r"config.json's model_type must be a string, got \['llama'\]"),
     (_llama(model_type=5), "config.json's model_type must be a string, got 5"),
     (_llama(model_type=..., architectures=5),
      "config.json's architectures must be a list of strings, got 5"),
     (_llama(model_type=..., architectures="LlamaForCausalLM"),
      "config.json's architectures must be a list of strings, got 'LlamaForCausalLM'"),
     (_llama(model_type=..., architectures=[5]),
      r"config.json's architectures must be a list of strings, got \[5\]")],
    ids=["array", "null", "string", "model_type list", "model_type number", "architectures 5",
         "architectures text", "architectures [5]"],
)  # fmt: skip
def test_a_config_json_of_the_wrong_shape_names_the_shape_it_needs(d, match):
    with pytest.raises(wm.CheckpointError, match=f"^{match}$"):
        wm.config_from_hf(d)


def test_the_architectures_list_still_chooses_the_family():
    config = wm.config_from_hf(_llama(model_type=..., architectures=["LlamaForCausalLM"]))
    assert config == wm.config_from_hf(_llama())
    assert wm.config_from_hf(_llama(model_type=None)).arch == "llama"  # null: not given


def _rope(value: str, key: str = "original_max_position_embeddings") -> dict:
    """A llama config.json whose rope_scaling `key` is the JSON text `value` (1e400 and NaN
    are what a file can hold and json.dumps never writes)."""
    rope = {"rope_type": "llama3", "factor": 8, "original_max_position_embeddings": 16,
            key: 12345}  # fmt: skip
    text = json.dumps(_llama(rope_scaling=rope, rope_parameters=None)).replace("12345", value)
    return json.loads(text)


@pytest.mark.parametrize(
    ("value", "key", "shown"),
    [("1e400", "original_max_position_embeddings", "inf"),
     ("NaN", "original_max_position_embeddings", "nan"),
     ("-Infinity", "factor", "-inf"),
     (str(BIG), "original_max_position_embeddings", "a 401-digit integer"),
     (str(BIG), "factor", "a 401-digit integer")],
    ids=["1e400", "NaN", "-Infinity factor", "401 digits", "401-digit factor"],
)  # fmt: skip
def test_a_rope_number_no_float_holds_is_refused_by_its_key(value, key, shown):
    with pytest.raises(
        wm.CheckpointError,
        match=rf"^rope_scaling\.{key} in config\.json must be a finite number, got {shown}$",
    ):
        wm.config_from_hf(_rope(value, key))


def test_a_rope_theta_no_float_holds_is_refused_by_its_key():
    d = _llama(rope_theta=BIG, rope_parameters=None)
    with pytest.raises(wm.CheckpointError, match="^rope_theta in config.json must be a finite "
                       "number, got a 401-digit integer$"):  # fmt: skip
        wm.config_from_hf(d)


def test_original_max_position_embeddings_is_a_whole_number_never_cut():
    scaling = wm.config_from_hf(_rope("8192.0")).rope_scaling
    assert scaling.original_max_position_embeddings == 8192
    assert isinstance(scaling.original_max_position_embeddings, int)
    with pytest.raises(wm.ModelConfigError, match="must be an integer, got 8192.5"):
        wm.config_from_hf(_rope("8192.5"))  # int() read it as 8192


@pytest.mark.parametrize(
    ("digits", "shown"),
    [(401, "a 401-digit integer"), (4401, "an integer of about 4,401 digits"),  # past str()'s
     (21, "1.000e+20"), (5, "10000")],
)  # fmt: skip
def test_a_size_past_its_bound_is_shown_without_overflow(digits, shown):
    value, bound = 10 ** (digits - 1), MAX_SIZES["n_layers"]
    with pytest.raises(
        wm.ModelConfigError, match=rf"^n_layers must be an integer in \[1, {bound:,}\], got "
        rf"{re.escape(shown)}$"
    ):  # fmt: skip
        tiny_config("gpt2", n_layers=value)


def test_a_config_json_integer_past_a_float_names_its_key():
    with pytest.raises(wm.ModelConfigError, match="^vocab_size must be an integer in .*, got a "
                       "401-digit integer$"):  # fmt: skip
        wm.config_from_hf(_llama(vocab_size=BIG))
    fp32 = r"must be a finite number > 0 within fp32 \(3\.4e38\), got a 401-digit integer"
    with pytest.raises(wm.ModelConfigError, match=rf"^config\.json's rms_norm_eps {fp32}$"):
        wm.config_from_hf(_llama(rms_norm_eps=BIG))


# --- zero is a value, null or absent the default (as transformers reads them) ---------------


def test_zero_key_value_heads_is_refused_not_read_as_all_heads():
    with pytest.raises(
        wm.ModelConfigError, match=r"^config\.json's num_key_value_heads must be positive, got 0$"
    ):  # fmt: skip
        wm.config_from_hf(_llama(num_key_value_heads=0))


@pytest.mark.parametrize("kv", [None, ...], ids=["null", "absent"])
def test_null_or_absent_key_value_heads_are_all_heads(kv):
    d = _llama(num_key_value_heads=kv)
    heads = d["num_attention_heads"]
    assert wm.config_from_hf(d).n_kv_heads == heads
    transformers = pytest.importorskip("transformers")
    oracle = transformers.LlamaConfig(num_attention_heads=heads, num_key_value_heads=None)
    assert oracle.num_key_value_heads == heads


def _gpt2(**edit) -> dict:
    d = {**wm.config_to_hf(tiny_config("gpt2")), **edit}
    return {k: v for k, v in d.items() if v is not ...}


def test_zero_n_inner_is_refused_not_read_as_four_times_n_embd():
    refusal = r"^config\.json's n_inner must be positive, got 0$"
    with pytest.raises(wm.ModelConfigError, match=refusal):
        wm.config_from_hf(_gpt2(n_inner=0))


@pytest.mark.parametrize("inner", [None, ...], ids=["null", "absent"])
def test_null_or_absent_n_inner_is_four_times_n_embd(inner):
    d = _gpt2(n_inner=inner)
    assert wm.config_from_hf(d).d_ff == 4 * d["n_embd"]
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    config = transformers.GPT2Config(n_embd=d["n_embd"], n_layer=1, n_head=d["n_head"],
                                     n_inner=None, vocab_size=8, n_positions=8)  # fmt: skip
    fc = transformers.GPT2Model(config).h[0].mlp.c_fc.weight  # Conv1D: (in, out)
    assert tuple(fc.shape) == (d["n_embd"], 4 * d["n_embd"])
