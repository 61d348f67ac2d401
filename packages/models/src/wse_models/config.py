"""One frozen dataclass describes a model; sizes, bytes and FLOPs follow from it analytically.

`ModelConfig` covers both families: "gpt2" (LayerNorm with bias, learned positions, GELU MLP,
biases everywhere, usually tied embeddings) and "llama" (RMSNorm, RoPE, SwiGLU, grouped-query
attention, no biases). `mlp_activation` swaps the MLP's nonlinearity (default: the family's
own, "gelu" for gpt2 and "silu" for llama): gpt2 applies it to the up projection, llama to
the gate (relu(gate) * up, as HF's LlamaMLP does with `hidden_act`). "relu" (OPT) and "relu2"
(squared ReLU, Primer) give exact zeros that sparse hardware can skip (`RELU_LIKE`).

Counting methods never allocate: the performance model and the planners ask them about
Llama-3 405B on a laptop. They are `wse_systems.transformer`'s one formula (a `ModelConfig` is
a `wse_systems.transformer.DecoderShape`). Presets carry the published shapes; their parameter
counts are checked against the published totals in the tests.

The config is hashable, so it can be a static argument of `jax.jit`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from wse_core.errors import SpecError, shown_int, suggest
from wse_core.hw import spec
from wse_systems import transformer

from wse_models.errors import ModelConfigError

__all__ = [
    "ARCHS",
    "DTYPES",
    "MLP_ACTIVATIONS",
    "RELU_LIKE",
    "PRESETS",
    "ModelConfig",
    "RopeScaling",
    "dtype_bytes",
    "preset_config",
]

ARCHS = ("gpt2", "llama")
DTYPES = ("float32", "bfloat16")
MLP_ACTIVATIONS = ("gelu", "silu", "relu", "relu2")  # gelu: tanh approximation (gelu_new)
RELU_LIKE = ("relu", "relu2")  # activations with exact zeros (counted by wse_models.sparsity)
_DEFAULT_ACTIVATION = {"gpt2": "gelu", "llama": "silu"}
FP32_MAX = 3.4028234663852886e38  # norm_eps and rope_theta run in fp32


def dtype_bytes(dtype: object) -> int:
    """Bytes per element of a dtype ("float32", "bfloat16", "int8", a numpy/jax dtype...):
    `wse_core.hw.spec.dtype_bytes`, its error as a ModelConfigError."""
    try:
        return spec.dtype_bytes(dtype)
    except SpecError as err:
        raise ModelConfigError(str(err)) from None


@dataclass(frozen=True, kw_only=True)
class RopeScaling:
    """Llama 3.1+ RoPE frequency scaling (HF `rope_type: "llama3"`)."""

    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        for name in ("factor", "low_freq_factor", "high_freq_factor"):  # hunt 60: "x" was a
            v = getattr(self, name)  # TypeError at the comparison below
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ModelConfigError(
                    f"rope_scaling.{name} must be a finite number, got {v!r:.40}"
                )
        v = self.original_max_position_embeddings
        if isinstance(v, bool) or not isinstance(v, int):
            raise ModelConfigError(
                f"rope_scaling.original_max_position_embeddings must be an integer, got {v!r:.40}"
            )
        if not self.factor > 0 or not self.original_max_position_embeddings > 0:
            raise ModelConfigError(
                f"rope_scaling needs factor > 0 and original_max_position_embeddings > 0, got "
                f"{self.factor} and {self.original_max_position_embeddings}"
            )
        if not self.high_freq_factor > self.low_freq_factor:
            raise ModelConfigError(
                f"rope_scaling needs high_freq_factor > low_freq_factor, got "
                f"{self.high_freq_factor} <= {self.low_freq_factor}"
            )


def _rope_scaling(value: object) -> RopeScaling | None:
    """`value` as a RopeScaling: a params file's mapping (`model.rope_scaling: {factor: 8}`)
    is read as one; anything else but None is a ModelConfigError (hunt 60: `rope_scaling=5`
    was taken, then an AttributeError once the run had made its folder)."""
    if value is None or isinstance(value, RopeScaling):
        return value
    keys = [f.name for f in dataclasses.fields(RopeScaling)]
    if not isinstance(value, Mapping) or "factor" not in value or set(value) - set(keys):
        raise ModelConfigError(
            f"rope_scaling must be null or a mapping of factor (required), {', '.join(keys[1:])};"
            f" got {value!r:.60}"
        )
    return RopeScaling(**value)  # type: ignore[arg-type]


MAX_SIZES = transformer.MAX_SIZES  # a model's size bounds (one table, for the CLI too)


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A decoder-only transformer. `dtype` is the compute dtype, `param_dtype` the storage one.

    `head_dim` defaults to d_model // n_heads. `max_seq_len` sizes GPT-2's learned position
    table; for Llama it is only the longest context the model was trained for.
    """

    arch: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    max_seq_len: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_embeddings: bool = False
    dtype: str = "float32"
    param_dtype: str = "float32"
    head_dim: int | None = None
    rope_scaling: RopeScaling | None = None
    mlp_activation: str | None = None  # None: the arch's own ("gelu" gpt2, "silu" llama)
    name: str = ""

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ModelConfigError(f"unknown arch {self.arch!r}; use one of {ARCHS}")
        sizes = ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff")
        for field in (*sizes, "max_seq_len", "head_dim"):
            v = getattr(self, field)
            if v is None and field == "head_dim":
                continue
            if isinstance(v, float) and v.is_integer():
                v = int(v)
                object.__setattr__(self, field, v)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ModelConfigError(f"{field} must be an integer, got {v!r}")
            if v <= 0:
                what = "positive" if field in sizes else "a positive integer"
                raise ModelConfigError(f"{field} must be {what}, got {v}")
            if v > MAX_SIZES[field]:  # hunt 55: n_layers=1e9 ran past a minute
                raise ModelConfigError(
                    f"{field} must be an integer in [1, {MAX_SIZES[field]:,}], got {shown_int(v)}"
                )
        object.__setattr__(self, "rope_scaling", _rope_scaling(self.rope_scaling))
        if not isinstance(self.tie_embeddings, bool):  # hunt 60: the text "false" tied them
            raise ModelConfigError(
                f"tie_embeddings must be true or false, got {self.tie_embeddings!r:.60}"
            )
        for field in ("norm_eps", "rope_theta"):  # hunt 61: 1e308 overflowed the fp32 cast
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= FP32_MAX:
                raise ModelConfigError(
                    f"{field} must be a finite number > 0 within fp32 (3.4e38), got "
                    f"{shown_int(v) if isinstance(v, int) else repr(v)}"  # hunt 63: 401 digits
                )
        if self.n_heads % self.n_kv_heads:
            raise ModelConfigError(
                f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}"
            )
        if self.arch == "gpt2" and self.n_kv_heads != self.n_heads:
            raise ModelConfigError("gpt2 has no grouped-query attention: set n_kv_heads=n_heads")
        if self.head_dim is not None and self.head_dim * self.n_heads == self.d_model:
            object.__setattr__(self, "head_dim", None)  # the default, so equal configs compare ==
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ModelConfigError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                "set head_dim explicitly"
            )
        if self.hd % 2 and self.arch == "llama":
            raise ModelConfigError(f"RoPE needs an even head_dim, got {self.hd}")
        for field in ("dtype", "param_dtype"):
            if getattr(self, field) not in DTYPES:
                raise ModelConfigError(f"{field}={getattr(self, field)!r}; use one of {DTYPES}")
        if self.rope_scaling is not None and self.arch != "llama":
            raise ModelConfigError("rope_scaling applies to arch='llama' only")
        if self.mlp_activation is None:  # resolved, so equal configs compare ==
            object.__setattr__(self, "mlp_activation", _DEFAULT_ACTIVATION[self.arch])
        if self.mlp_activation not in MLP_ACTIVATIONS:
            act = str(self.mlp_activation)
            raise ModelConfigError(
                f"mlp_activation={act!r}{suggest(act, MLP_ACTIVATIONS)}; "
                f"use one of {MLP_ACTIVATIONS}"
            )

    @property
    def relu_like(self) -> bool:
        """True when the MLP's activation has exact zeros ("relu", "relu2")."""
        return self.mlp_activation in RELU_LIKE

    @property
    def hd(self) -> int:
        """Head dimension (explicit `head_dim`, else d_model // n_heads)."""
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    def replace(self, **changes: object) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    # ---- analytic counts (no allocation) --------------------------------------------------

    def embed_params(self) -> int:
        """Parameters of the embedding (token table, plus GPT-2's position table)."""
        return transformer.embed_params(self)

    def attn_matmul_params(self) -> int:
        """Weights of one layer's q, k, v, o projections."""
        return transformer.attn_matmul_params(self)

    def mlp_matmul_params(self) -> int:
        """Weights of one layer's MLP (2 matrices for GELU, 3 for SwiGLU)."""
        return transformer.mlp_matmul_params(self)

    def layer_params(self) -> int:
        """Parameters of one transformer layer (weights, biases and norms)."""
        return transformer.layer_params(self)

    def final_params(self) -> int:
        """Parameters of the final norm and (if untied) the output head."""
        return transformer.final_params(self)

    def num_params(self) -> int:
        """Total parameter count (tied embeddings counted once)."""
        return transformer.num_params(self)

    def param_bytes(self, dtype: str | None = None) -> int:
        """Bytes of all parameters stored in `dtype` (default: param_dtype)."""
        return self.num_params() * dtype_bytes(dtype or self.param_dtype)

    def layer_bytes(self, dtype: str | None = None) -> int:
        """Bytes of one layer's parameters in `dtype` (default: param_dtype)."""
        return self.layer_params() * dtype_bytes(dtype or self.param_dtype)

    def matmul_params(self) -> int:
        """Parameters that take part in a matmul for every token (all layers and the head)."""
        return transformer.matmul_params(self)

    def attn_flops_per_token(self, seq_len: int) -> int:
        """Forward FLOPs of q.k and p.v for one token attending to `seq_len` keys."""
        return 4 * self.n_layers * self.n_heads * self.hd * int(seq_len)

    def flops_per_token(self, seq_len: int) -> int:
        """Forward FLOPs for one token that attends to `seq_len` keys (2 per multiply-add).

        Matmuls of all layers and the head plus attention scores and mixing; norms,
        activations and softmax are left out (< 1% for the presets). For a decode step at
        context length n, pass n; for the mean over a causal sequence of length S, (S + 1) / 2.
        """
        return 2 * self.matmul_params() + self.attn_flops_per_token(seq_len)

    def train_flops_per_token(self, seq_len: int) -> int:
        """Forward + backward FLOPs per token (3x the forward) at causal mean context."""
        return 3 * self.flops_per_token((int(seq_len) + 1) // 2)

    def kv_bytes_per_token(self, dtype: str | None = None) -> int:
        """KV-cache bytes one token adds over all layers (k and v) in `dtype` (default dtype)."""
        return transformer.kv_values_per_token(self) * dtype_bytes(dtype or self.dtype)


def _gpt2(name: str, d: int, layers: int, heads: int, **kw: object) -> ModelConfig:
    base = dict(vocab_size=50257, max_seq_len=1024, tie_embeddings=True, norm_eps=1e-5)
    base.update(kw)
    return ModelConfig(
        arch="gpt2", name=name, d_model=d, n_layers=layers, n_heads=heads,
        n_kv_heads=heads, d_ff=4 * d, **base,
    )  # fmt: skip


_LLAMA31 = RopeScaling(factor=8.0, original_max_position_embeddings=8192)
_LLAMA32 = RopeScaling(factor=32.0, original_max_position_embeddings=8192)


def _llama(name: str, d: int, layers: int, heads: int, ff: int, **kw: object) -> ModelConfig:
    base = dict(
        vocab_size=128256, n_kv_heads=8, max_seq_len=131072, norm_eps=1e-5,
        rope_theta=500000.0, rope_scaling=_LLAMA31, tie_embeddings=False,
    )  # fmt: skip
    base.update(kw)
    return ModelConfig(
        arch="llama", name=name, d_model=d, n_layers=layers, n_heads=heads, d_ff=ff, **base
    )


PRESETS: dict[str, ModelConfig] = {
    "tiny-gpt2": _gpt2("tiny-gpt2", 64, 2, 4, vocab_size=256, max_seq_len=128),
    "tiny-llama": _llama(
        "tiny-llama",
        64,
        2,
        4,
        128,
        vocab_size=256,
        n_kv_heads=2,
        max_seq_len=128,
        rope_theta=10000.0,
        rope_scaling=None,
    ),  # fmt: skip
    "gpt2-124m": _gpt2("gpt2-124m", 768, 12, 12),
    "gpt2-355m": _gpt2("gpt2-355m", 1024, 24, 16),
    "gpt2-774m": _gpt2("gpt2-774m", 1280, 36, 20),
    "gpt2-1.5b": _gpt2("gpt2-1.5b", 1600, 48, 25),
    "llama3-1b": _llama(
        "llama3-1b", 2048, 16, 32, 8192, tie_embeddings=True, rope_scaling=_LLAMA32
    ),  # fmt: skip
    "llama3-3b": _llama(
        "llama3-3b", 3072, 28, 24, 8192, tie_embeddings=True, rope_scaling=_LLAMA32
    ),  # fmt: skip
    "llama3-8b": _llama("llama3-8b", 4096, 32, 32, 14336),
    "llama3-70b": _llama("llama3-70b", 8192, 80, 64, 28672),
    "llama3-405b": _llama("llama3-405b", 16384, 126, 128, 53248),
}


def preset_config(name: str, /, **overrides: object) -> ModelConfig:
    """The preset called `name`, with optional field overrides (e.g. dtype="bfloat16")."""
    if name not in PRESETS:
        raise ModelConfigError(
            f"unknown model preset {name!r}{suggest(name, PRESETS)}; use one of {list(PRESETS)}"
        )
    return PRESETS[name].replace(**overrides) if overrides else PRESETS[name]
