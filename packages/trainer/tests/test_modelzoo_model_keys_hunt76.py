"""Hunt 76 (5): ModelZoo's GPT-2 model keys met "did you mean 'tie_embeddings'?" and
`nonlinearity` no hint. Keys with an equivalent here move to it (`share_embedding_weights`,
`layer_norm_epsilon`, `nonlinearity` by the model's arch); settings the arch fixes are read
at the value the model runs and refused at another, saying what runs.

Oracles: ModelZoo's params_gpt2_small.yaml model section as ModelZoo documents it, and its
activations (`layers/activations.py` ACT2FN, GLU_ACTIVATIONS) in NumPy/SciPy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from wse_trainer.config import ConfigError, load_config
from wse_trainer.session import model_config

# 5: ModelZoo's GPT-2 model keys -----------------------------------------------------------

# The model section of ModelZoo's params_gpt2_small.yaml, key for key as ModelZoo documents
# it (models/nlp/gpt2/configs), and its runconfig
GPT2_SMALL = """
model:
    hidden_size: 768
    vocab_size: 50257
    position_embedding_type: "learned"
    share_embedding_weights: True
    max_position_embeddings: 2048
    num_hidden_layers: 12
    dropout_rate: 0.1
    layer_norm_epsilon: 1.0e-5
    loss_scaling: "num_tokens"
    loss_weight: 1.0
    num_heads: 12
    attention_type: "scaled_dot_product"
    attention_dropout_rate: 0.1
    use_projection_bias_in_attention: True
    use_ffn_bias_in_attention: True
    filter_size: 3072
    nonlinearity: "gelu"
    use_ffn_bias: True
    use_bias_in_output: False
runconfig:
    max_steps: 151600
    log_steps: 100
    checkpoint_steps: 10000
    save_initial_checkpoint: True
    seed: 1
    model_dir: "./model_dir"
    eval_steps: 32
"""


def test_modelzoos_gpt2_small_reads_past_its_first_modelzoo_key_to_the_dropout(tmp_path):
    path = tmp_path / "params_gpt2_small.yaml"
    path.write_text(GPT2_SMALL)
    with pytest.raises(ConfigError) as e:  # past position_embedding_type: refused as ours
        model_config(load_config(path))
    drop = "dropout_rate 0.1: there is no dropout here, and this gpt2 model runs 0.0; give 0.0"
    assert str(e.value) == (  # both dropouts in one line since hunt 79
        f"2 settings of the params file cannot run here: (1) model.{drop}, or leave the key "
        f"out; (2) model.attention_{drop}, or leave the key out"
    )
    path.write_text(GPT2_SMALL.replace("dropout_rate: 0.1", "dropout_rate: 0.0"))
    config = load_config(path)
    model = model_config(config)
    given = yaml.safe_load(GPT2_SMALL)["model"]
    got = (
        model.d_model,
        model.vocab_size,
        model.max_seq_len,
        model.n_layers,
        model.n_heads,
        model.d_ff,
        model.tie_embeddings,
        model.norm_eps,
        model.mlp_activation,
        model.arch,
    )
    assert got == (given["hidden_size"], given["vocab_size"], given["max_position_embeddings"],
                   given["num_hidden_layers"], given["num_heads"], given["filter_size"],
                   given["share_embedding_weights"], given["layer_norm_epsilon"], "gelu",
                   "gpt2")  # fmt: skip
    assert config.runconfig.keep_checkpoint_max is None  # ModelZoo's file keeps every one


def zoo_act(name: str, x: np.ndarray) -> np.ndarray:
    """ModelZoo's ACT2FN (`layers/activations.py`), in NumPy; a GLU's activation of its gate."""
    from scipy.special import erf

    gelu = 0.5 * x * (1 + erf(x / math.sqrt(2)))  # torch.nn.functional.gelu
    relu = np.maximum(x, 0)
    silu = x / (1 + np.exp(-x))
    return {
        "gelu": gelu, "geglu": gelu,
        "gelu_new": 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        "gelu_fast": 0.5 * x * (1 + np.tanh(x * 0.7978845608 * (1 + 0.044715 * x * x))),
        "relu": relu, "reglu": relu, "squared_relu": relu * relu,
        "silu": silu, "swish": silu, "swiglu": silu,
    }[name]  # fmt: skip


GLU = {"liglu", "geglu", "reglu", "swiglu"}  # ModelZoo's GLU_ACTIVATIONS


@pytest.mark.parametrize(
    "name",
    ["gelu", "gelu_new", "gelu_fast", "relu", "squared_relu", "silu", "swish", "swiglu",
     "reglu", "geglu"],
)  # fmt: skip
def test_nonlinearity_moves_to_the_activation_modelzoo_computes(name):
    from wse_models.layer import ACTIVATIONS

    base = "llama3_8b" if name in GLU else "tiny"  # a gated MLP is llama's here
    model = model_config(load_config(base, [f"model.nonlinearity={name.upper()}"]))
    assert (model.arch == "llama") == (name in GLU)
    x = np.linspace(-8, 8, 16001, dtype=np.float32)
    ours = np.asarray(ACTIVATIONS[model.mlp_activation](x), np.float64)
    gap = float(np.abs(ours - zoo_act(name, x.astype(np.float64))).max())
    # erf GELU against our tanh form: their largest gap, 4.73e-4 at x = 2.70 (the bound the
    # docs state), plus fp32 rounding; else fp32 rounding of the same formula
    assert gap < (4.8e-4 if name in ("gelu", "geglu") else 2e-6)


@pytest.mark.parametrize(
    ("base", "override", "message"),
    [
        ("tiny", "model.nonlinearity=swiglu", "model.nonlinearity 'swiglu' is a gated MLP "
         "(act(gate) * up), the llama arch's here; use one of gelu, gelu_new, gelu_fast, relu, "
         "squared_relu, silu, swish (this model is gpt2), or give model.arch: llama (or a llama "
         "preset)"),
        ("llama3_8b", "model.nonlinearity=gelu", "model.nonlinearity 'gelu' is an MLP of one "
         "activation, the gpt2 arch's here; use one of swiglu, reglu, geglu (this model is "
         "llama), or give model.arch: gpt2 (or a gpt2 preset)"),
        ("tiny", "model.nonlinearity=mish", "model.nonlinearity 'mish' has no equivalent here"),
        ("tiny", "model.position_embedding_type=rotary", "model.position_embedding_type "
         "'rotary': positions are the arch's here, and this gpt2 model runs 'learned'; give "
         "model.arch: llama (or a llama preset) to run it, or leave the key out"),
        ("tiny", "model.position_embedding_type=alibi", "give 'learned', or leave the key out"),
        ("llama3_8b", "model.use_ffn_bias=true", "model.use_ffn_bias true: biases are the "
         "arch's here, and this llama model runs false; give model.arch: gpt2 (or a gpt2 preset) "
         "to run it"),
        ("tiny", "model.embedding_dropout_rate=0.1", "model.embedding_dropout_rate 0.1: there "
         "is no dropout here"),
        # hunt 81: mixed_precision + fp16_type bfloat16 is read as model.dtype bfloat16; alone,
        # it is ModelZoo's default float16, which does not run here
        ("tiny", "model.mixed_precision=true", "model.mixed_precision true with no fp16_type "
         "(ModelZoo's default: float16): there is no float16 here"),
        ("tiny", "model.fp16_type=float16", "model.fp16_type float16: there is no float16 here"),
    ],
)  # fmt: skip
def test_modelzoo_model_keys_without_our_value_say_what_runs(base, override, message):
    with pytest.raises(ConfigError) as e:
        model_config(load_config(base, [override]))
    assert message in str(e.value) and "did you mean" not in str(e.value)


def test_modelzoo_model_keys_at_the_value_the_model_runs_are_read():
    llama = ["model.position_embedding_type=rotary", "model.norm_type=RMSNorm",
             "model.use_ffn_bias=false", "model.nonlinearity=swiglu", "model.dropout_rate=0",
             "model.attention_dropout_rate=0.0"]  # fmt: skip
    assert model_config(load_config("llama3_8b", llama)) == model_config(load_config("llama3_8b"))
    assert model_config(load_config("tiny", ["model.nonlinearity=null"])).mlp_activation == "gelu"
