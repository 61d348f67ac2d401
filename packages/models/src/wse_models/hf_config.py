"""HF `config.json` <-> `ModelConfig` for GPT2LMHeadModel and LlamaForCausalLM.

Reads both transformers 4.x keys (`rope_theta`, `rope_scaling`, `torch_dtype`) and 5.x keys
(`rope_parameters`, `dtype`); writes both, so either version loads what we save. Options that
would change the model and that we do not implement (another activation, attention or MLP
biases in Llama, cross-attention, per-layer attention scaling, RoPE types other than "llama3")
are refused by name, never ignored. The MLP activation (`activation_function` for GPT-2,
`hidden_act` for Llama) maps to `ModelConfig.mlp_activation` through `HF_ACTIVATIONS`.
RoPE is read as transformers 5 resolves it (`_rope`: a non-empty `rope_scaling` wins whole).
The weights are held in config.json's dtype where it is float32 or bfloat16, float16 and
float64 in float32 (`checkpoint_dtype`; `dtype_note` is the line a command says so in); any
other dtype (int8, float8) is refused, and so is a quantized checkpoint (config.json's
`quantization_config`: GPTQ, AWQ), by that key, before its tensors are read.
"""

from __future__ import annotations

import math
from typing import Any

from wse_core.errors import quoted_number, shown_int

from wse_models.config import ModelConfig, RopeScaling
from wse_models.errors import CheckpointError, ModelConfigError, renamed_fields

__all__ = [
    "HF_ACTIVATIONS",
    "HF_ARCHITECTURES",
    "checkpoint_dtype",
    "config_from_hf",
    "config_to_hf",
    "dtype_note",
]

HF_ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}
_ARCH_BY_HF = {v: k for k, v in HF_ARCHITECTURES.items()}
# HF activation name -> mlp_activation (HF's plain "gelu" is the erf form: not ours)
HF_ACTIVATIONS = {
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "silu": "silu",
    "swish": "silu",
    "relu": "relu",
    "relu2": "relu2",
}
# LlamaConfig's max_position_embeddings where config.json has none (transformers 4.x and 5)
_LLAMA_MAX_POSITIONS = 2048
_HF_NAME = {"gelu": "gelu_new", "silu": "silu", "relu": "relu", "relu2": "relu2"}
# ModelConfig field -> the config.json key it is read from, per architecture (refusals name
# the key the file has: `num_hidden_layers`, not `n_layers`)
_HF_KEYS = {
    "gpt2": {
        "d_model": "n_embd", "n_layers": "n_layer", "n_heads": "n_head", "d_ff": "n_inner",
        "max_seq_len": "n_positions", "norm_eps": "layer_norm_epsilon",
    },
    "llama": {
        "d_model": "hidden_size", "n_layers": "num_hidden_layers",
        "n_heads": "num_attention_heads", "n_kv_heads": "num_key_value_heads",
        "d_ff": "intermediate_size", "max_seq_len": "max_position_embeddings",
        "norm_eps": "rms_norm_eps",
    },
}  # fmt: skip


_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "true or false",
               int: "a number", float: "a number", type(None): "null"}  # fmt: skip


def _arch(d: dict[str, Any]) -> str:
    # hunt 63: `[1, 2]` or `null` (an AttributeError), a model_type list (unhashable) and
    # an architectures number (not iterable) were tracebacks: refused by the shape they need
    if not isinstance(d, dict):
        raise CheckpointError(
            f"config.json must hold a JSON object, got {_JSON_TYPES.get(type(d), 'a value')}"
        )
    mt = d.get("model_type")
    if mt is not None and not isinstance(mt, str):
        raise CheckpointError(f"config.json's model_type must be a string, got {mt!r:.40}")
    archs = d.get("architectures")
    if archs is not None and (
        not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)
    ):
        raise CheckpointError(
            f"config.json's architectures must be a list of strings, got {archs!r:.40}"
        )
    if mt in HF_ARCHITECTURES:
        return mt
    for name in archs or []:
        if name in _ARCH_BY_HF:
            return _ARCH_BY_HF[name]
    raise CheckpointError(
        f"unsupported architecture: model_type={mt!r}, architectures={d.get('architectures')}; "
        f"wse_models reads {sorted(_ARCH_BY_HF)}"
    )


# The numbers and flags `config_from_hf` reads (rope_scaling's and rope_parameters' too).
_NUMBER_KEYS = (
    "vocab_size", "n_embd", "n_layer", "n_head", "n_inner", "n_positions", "layer_norm_epsilon",
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "max_position_embeddings", "rms_norm_eps", "rope_theta", "head_dim",
    "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
)  # fmt: skip
_FLAG_KEYS = ("tie_word_embeddings",)
# The numbers `_rope` reads with float() or int(): finite, or they overflow (hunt 63: 1e400)
_ROPE_KEYS = (
    "rope_theta", "factor", "low_freq_factor", "high_freq_factor",
    "original_max_position_embeddings",
)  # fmt: skip


def _check_types(d: dict[str, Any], where: str = "") -> None:
    """Hunt 56: a config.json number given as text (`"hidden_size": "64"`; a quoted
    `rope_theta` was read as a number, GPT-2's d_ff became '64646464') or a flag that is not
    true/false (`"tie_word_embeddings": "false"` tied the embeddings) is refused by its key."""
    for key in _NUMBER_KEYS:
        value = d.get(key)
        if isinstance(value, str):
            raise CheckpointError(
                quoted_number(f"{where}{key} in config.json", key, value, json=True)
            )
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise CheckpointError(
                f"{where}{key} in config.json must be a number, got {value!r:.40}"
            )
        if key in _ROPE_KEYS and value is not None and not _finite(value):  # hunt 63
            raise CheckpointError(
                f"{where}{key} in config.json must be a finite number, got "
                f"{shown_int(value) if isinstance(value, int) else value}"
            )
    for key in _FLAG_KEYS:
        value = d.get(key)
        if value is not None and not isinstance(value, bool):
            raise CheckpointError(f"{key} in config.json must be true or false, got {value!r:.40}")


def _finite(value: int | float) -> bool:
    """True for a number a float holds (not NaN, inf or an integer past 1.8e308)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _refuse(d: dict[str, Any], option: str, ok: Any, default: Any) -> None:
    value = d.get(option, default)
    allowed = ok if isinstance(ok, tuple) else (ok,)
    if value not in allowed:
        raise CheckpointError(
            f"unsupported config option {option}={value!r}; wse_models supports {allowed}"
        )


# config.json's dtype (torch's names, "torch." dropped) -> the dtype its weights are held in:
# float32 or bfloat16 (`DTYPES`); float16 and float64 weights are held exactly, or as near as
# float32 holds them, in float32, and said so (`dtype_note`; hunt 69: float16 was priced as
# float32 without a word, and int8 or float8 ran as float32 too). "auto" (the weights' own
# dtype in transformers) is float32 here, said so.
_HELD_AS = {
    "float32": "float32", "float": "float32", "bfloat16": "bfloat16", "float16": "float32",
    "half": "float32", "float64": "float32", "double": "float32", "auto": "float32",
}  # fmt: skip


def _dtype_key(d: dict[str, Any]) -> tuple[str, Any]:
    """(the key, its value) of config.json's dtype: transformers 5's `dtype`, else 4.x's
    `torch_dtype`, else float32."""
    for key in ("dtype", "torch_dtype"):
        if d.get(key) is not None:
            value = d[key]
            return key, value.removeprefix("torch.") if isinstance(value, str) else value
    return "dtype", "float32"


def _refuse_quantized(d: dict[str, Any]) -> None:
    """A config.json with a `quantization_config` (GPTQ, AWQ, bitsandbytes, fp8, as
    transformers' `from_pretrained` reads it) is a CheckpointError naming its quant_method:
    its weights are packed integers (qweight, qzeros, scales) this engine does not unpack.
    Hunt 72: such a folder was refused by its tensors, "lists 49 tensors ... not this
    config's checkpoint" or "missing tensor ...q_proj.weight"."""
    qc = d.get("quantization_config")
    if qc is None:
        return
    method = qc.get("quant_method") if isinstance(qc, dict) else None
    shown = method if isinstance(method, str) else f"{qc!r:.40}"
    raise CheckpointError(
        f"quantized checkpoints (quantization_config: {shown}) are not supported: give the "
        "dequantized fp16/bf16/fp32 weights"
    )


def checkpoint_dtype(d: dict[str, Any]) -> str:
    """The dtype the weights of config.json `d` are held in (`_HELD_AS`); a quantized
    checkpoint (`_refuse_quantized`) or a dtype that is no float this engine can hold (int8,
    float8_e4m3fn, bool, a number) is a CheckpointError. Commands call it before a tensor is
    read (`wse_inference.model_dir.read_weights`)."""
    _refuse_quantized(d)
    key, name = _dtype_key(d)
    if isinstance(name, str) and name in _HELD_AS:
        return _HELD_AS[name]
    raise CheckpointError(
        f"config.json's {key} {name!r:.40} is not a floating dtype this engine runs: it holds "
        "weights in float32 or bfloat16 (float16 and float64 as float32); dequantize a "
        "quantized checkpoint first"
    )


def dtype_note(d: dict[str, Any]) -> str | None:
    """The line a command says when config.json's dtype is held in another (float16 as
    float32: 4 bytes a parameter, priced so), else None."""
    key, name = _dtype_key(d)
    held = checkpoint_dtype(d)
    if name == held or name == "float":
        return None
    return (
        f"note: config.json's {key} {name} is run and priced as {held} (4 bytes a parameter): "
        "this engine holds weights in float32 or bfloat16"
    )


def _activation(d: dict[str, Any], key: str, default: str) -> str:
    _refuse(d, key, tuple(HF_ACTIVATIONS), default)
    return HF_ACTIVATIONS[d.get(key, default)]


def _or_default(d: dict[str, Any], key: str, default: Any) -> Any:
    """`d[key]`, or `default` where it is null or absent, as HF reads it (hunt 63: `or` read
    num_key_value_heads 0 as all heads and n_inner 0 as 4 x n_embd)."""
    value = d.get(key)
    return default if value is None else value


def _gpt2(d: dict[str, Any]) -> dict[str, Any]:
    _refuse(d, "scale_attn_by_inverse_layer_idx", False, False)
    _refuse(d, "scale_attn_weights", True, True)
    _refuse(d, "add_cross_attention", False, False)
    d_model = d.get("n_embd", 768)
    return dict(
        vocab_size=d.get("vocab_size", 50257), d_model=d_model, n_layers=d.get("n_layer", 12),
        n_heads=d.get("n_head", 12), n_kv_heads=d.get("n_head", 12),
        d_ff=_or_default(d, "n_inner", 4 * d_model), max_seq_len=d.get("n_positions", 1024),
        norm_eps=d.get("layer_norm_epsilon", 1e-5),
        tie_embeddings=d.get("tie_word_embeddings", True),
        mlp_activation=_activation(d, "activation_function", "gelu_new"),
    )  # fmt: skip


def _rope(d: dict[str, Any]) -> tuple[float, RopeScaling | None]:
    """(rope_theta, the llama3 scaling or None) as transformers 5 resolves them: a non-empty
    4.x `rope_scaling` object is the RoPE parameters, whole, else 5.x `rope_parameters`
    (`convert_rope_params_to_dict`: `rope_scaling or rope_parameters`); rope_theta is that
    object's, else the top-level key's, else 10000. Hunt 69: the two objects were merged key
    by key, so an exported folder's `rope_parameters` (rope_type default) switched off the
    llama3 `rope_scaling` a user wrote, silently. A llama3 object without
    `original_max_position_embeddings` takes config.json's `max_position_embeddings`, as
    transformers 5 fills it (`RotaryEmbeddingConfigMixin.standardize_rope_params`:
    `setdefault("original_max_position_embeddings", self.max_position_embeddings)`); hunt 72:
    8192 was taken, Llama 3's own, and a 128-position model's logits were 8.57 off."""
    params: dict[str, Any] = {}
    for key in ("rope_parameters", "rope_scaling"):  # both checked; the 4.x key wins
        value = d.get(key) or {}
        if not isinstance(value, dict):
            raise CheckpointError(f"{key} must be an object or null, got {value!r:.60}")
        _check_types(value, f"{key}.")
        params = value or params
    theta = float(params.get("rope_theta", d.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind in (None, "default"):
        return theta, None
    if kind != "llama3":
        raise CheckpointError(
            f"unsupported config option rope_type={kind!r}; wse_models supports "
            "'default' and 'llama3'"
        )
    if "factor" not in params:
        raise CheckpointError("rope_type 'llama3' needs a factor (rope_scaling.factor)")
    scaling = RopeScaling(
        factor=float(params["factor"]),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=_whole(
            params.get("original_max_position_embeddings", _max_positions(d))
        ),
    )
    return theta, scaling


def _whole(value: Any) -> Any:
    """A whole float as an int (8192.0 -> 8192); anything else as is, for RopeScaling to
    refuse (hunt 63: int() cut 8192.5 to 8192)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _max_positions(d: dict[str, Any]) -> Any:
    """config.json's max_position_embeddings, else LlamaConfig's default."""
    return d.get("max_position_embeddings", _LLAMA_MAX_POSITIONS)


def _llama(d: dict[str, Any]) -> dict[str, Any]:
    _refuse(d, "attention_bias", False, False)
    _refuse(d, "mlp_bias", False, False)
    heads = d.get("num_attention_heads", 32)
    theta, scaling = _rope(d)
    return dict(
        vocab_size=d.get("vocab_size", 32000), d_model=d.get("hidden_size", 4096),
        n_layers=d.get("num_hidden_layers", 32), n_heads=heads,
        n_kv_heads=_or_default(d, "num_key_value_heads", heads),
        d_ff=d.get("intermediate_size", 11008),
        max_seq_len=_max_positions(d),
        norm_eps=d.get("rms_norm_eps", 1e-6), rope_theta=theta, rope_scaling=scaling,
        tie_embeddings=d.get("tie_word_embeddings", False), head_dim=d.get("head_dim"),
        mlp_activation=_activation(d, "hidden_act", "silu"),
    )  # fmt: skip


def config_from_hf(
    d: dict[str, Any], *, dtype: str = "float32", param_dtype: str | None = None
) -> ModelConfig:
    """A `ModelConfig` from a parsed HF config.json (param_dtype default: the checkpoint's)."""
    arch = _arch(d)
    _refuse_quantized(d)
    _check_types(d)
    fields = _gpt2(d) if arch == "gpt2" else _llama(d)
    try:
        return ModelConfig(
            arch=arch, dtype=dtype, param_dtype=param_dtype or checkpoint_dtype(d),
            name=str(d.get("_name_or_path") or ""), **fields,
        )  # fmt: skip
    except ModelConfigError as e:
        names = {k: f"config.json's {v}" for k, v in _HF_KEYS[arch].items()}
        raise ModelConfigError(renamed_fields(str(e), names)) from None


def _gpt2_to_hf(c: ModelConfig) -> dict[str, Any]:
    return {
        "vocab_size": c.vocab_size, "n_positions": c.max_seq_len, "n_embd": c.d_model,
        "n_layer": c.n_layers, "n_head": c.n_heads, "n_inner": c.d_ff,
        "activation_function": _HF_NAME[str(c.mlp_activation)], "layer_norm_epsilon": c.norm_eps,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
    }  # fmt: skip


def _llama_to_hf(c: ModelConfig) -> dict[str, Any]:
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.rope_scaling is not None:
        s = c.rope_scaling
        rope.update(
            rope_type="llama3", factor=s.factor, low_freq_factor=s.low_freq_factor,
            high_freq_factor=s.high_freq_factor,
            original_max_position_embeddings=s.original_max_position_embeddings,
        )  # fmt: skip
    legacy = {k: v for k, v in rope.items() if k != "rope_theta"}
    return {
        "vocab_size": c.vocab_size, "hidden_size": c.d_model, "intermediate_size": c.d_ff,
        "num_hidden_layers": c.n_layers, "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads, "head_dim": c.hd,
        "hidden_act": _HF_NAME[str(c.mlp_activation)],
        "max_position_embeddings": c.max_seq_len, "rms_norm_eps": c.norm_eps,
        "rope_theta": c.rope_theta, "rope_parameters": rope,
        "rope_scaling": legacy if c.rope_scaling is not None else None,
        "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
    }  # fmt: skip


def config_to_hf(config: ModelConfig) -> dict[str, Any]:
    """The HF config.json dict for `config` (GPT2LMHeadModel or LlamaForCausalLM)."""
    body = _gpt2_to_hf(config) if config.arch == "gpt2" else _llama_to_hf(config)
    return {
        "architectures": [HF_ARCHITECTURES[config.arch]],
        "model_type": config.arch,
        "tie_word_embeddings": config.tie_embeddings,
        "dtype": config.param_dtype,
        "torch_dtype": config.param_dtype,
        **body,
    }
