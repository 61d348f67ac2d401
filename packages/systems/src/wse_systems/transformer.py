"""A decoder-only transformer's shape: one protocol of counts and one formula for its sizes.

Contract. `DecoderShape` is what every cost model reads of a decoder: `arch` ("gpt2" or
"llama"), `vocab_size`, `d_model`, `n_layers`, `n_heads`, `n_kv_heads`, `d_ff`,
`max_seq_len`, `tie_embeddings` and `hd` (the head dimension). `wse_models.ModelConfig`
satisfies it, and so does `DecoderCounts`, the frozen record of a published shape for the
cases that must not depend on wse_models (the calibration's Llama 3.1 8B, `LLAMA31_8B`).

The formula (counted, never allocated; `ModelConfig`'s methods are these functions):
- embedding: vocab x d, plus GPT-2's learned positions max_seq_len x d;
- a layer: q, k, v, o weights 2 d (H hd) + 2 d (H_kv hd); MLP 2 d ff (GELU) or 3 d ff
  (SwiGLU); GPT-2 adds the biases of q, k, v, o (H hd + 2 H_kv hd + d) and of the MLP
  (ff + d) and two LayerNorms with bias (4 d); Llama two RMSNorm scales (2 d);
- final: the last norm (2 d GPT-2, d Llama) and, untied, the head vocab x d;
- matmul parameters (what every token multiplies): the layers' weights and the head;
- KV: 2 H_kv hd values per token per layer.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

__all__ = [
    "MAX_SIZES",
    "DecoderShape",
    "DecoderCounts",
    "LLAMA31_8B",
    "embed_params",
    "attn_matmul_params",
    "mlp_matmul_params",
    "layer_params",
    "final_params",
    "num_params",
    "matmul_params",
    "attn_dim",
    "kv_values_per_token",
    "layer_products",
    "layer_matrices",
    "mlp_zeros_problem",
]


# Upper bounds of a model's sizes: well past every published model (Llama 3 405B: 126 layers,
# d_model 16,384, d_ff 53,248, 128 heads; Gemma: a 262,144-token vocabulary; Llama 4 Scout:
# a 10M-token context), inside what int32 indexing and one process's loops can take.
MAX_SIZES = {
    "vocab_size": 1 << 24,
    "d_model": 1 << 20,
    "n_layers": 4096,
    "n_heads": 1 << 16,
    "n_kv_heads": 1 << 16,
    "d_ff": 1 << 22,
    "max_seq_len": 1 << 27,
    "head_dim": 1 << 16,
}


@runtime_checkable
class DecoderShape(Protocol):
    """A decoder's counts (the module contract); read-only."""

    @property
    def arch(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def n_layers(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def n_kv_heads(self) -> int: ...
    @property
    def d_ff(self) -> int: ...
    @property
    def max_seq_len(self) -> int: ...
    @property
    def tie_embeddings(self) -> bool: ...
    @property
    def hd(self) -> int: ...


def embed_params(s: DecoderShape) -> int:
    """The token table, plus GPT-2's position table."""
    pos = s.max_seq_len * s.d_model if s.arch == "gpt2" else 0
    return s.vocab_size * s.d_model + pos


def attn_matmul_params(s: DecoderShape) -> int:
    """Weights of one layer's q, k, v, o projections."""
    d, q, kv = s.d_model, s.n_heads * s.hd, s.n_kv_heads * s.hd
    return 2 * d * q + 2 * d * kv


def mlp_matmul_params(s: DecoderShape) -> int:
    """Weights of one layer's MLP (2 matrices for GELU, 3 for SwiGLU)."""
    return (2 if s.arch == "gpt2" else 3) * s.d_model * s.d_ff


def layer_params(s: DecoderShape) -> int:
    """Parameters of one layer: weights, GPT-2's biases, and the norms."""
    d = s.d_model
    n = attn_matmul_params(s) + mlp_matmul_params(s)
    if s.arch == "gpt2":
        q, kv = s.n_heads * s.hd, s.n_kv_heads * s.hd
        return n + (q + 2 * kv + d) + (s.d_ff + d) + 4 * d
    return n + 2 * d


def final_params(s: DecoderShape) -> int:
    """The final norm and (if untied) the output head."""
    norm = 2 * s.d_model if s.arch == "gpt2" else s.d_model
    return norm + (0 if s.tie_embeddings else s.vocab_size * s.d_model)


def num_params(s: DecoderShape) -> int:
    """Every parameter (tied embeddings counted once)."""
    return embed_params(s) + s.n_layers * layer_params(s) + final_params(s)


def matmul_params(s: DecoderShape) -> int:
    """Parameters every token multiplies: all layers' weights and the head."""
    return s.n_layers * (attn_matmul_params(s) + mlp_matmul_params(s)) + s.vocab_size * s.d_model


def attn_dim(s: DecoderShape) -> int:
    """Heads x head dimension (the width of q and of the attention output)."""
    return s.n_heads * s.hd


def kv_values_per_token(s: DecoderShape) -> int:
    """K and V values one token adds to the cache over all layers."""
    return s.n_layers * 2 * s.n_kv_heads * s.hd


def layer_matrices(s: DecoderShape) -> tuple[tuple[str, str, int, int], ...]:
    """One layer's matrices as (group, name, n_in, n_out), in the order the forward multiplies
    by them: q, k, v, o, then the MLP's up (and Llama's gate) and down; the names and groups
    of `wse_models`' parameter tree (`params[group][name]` is [n_in, n_out])."""
    d, f, q, kv = s.d_model, s.d_ff, attn_dim(s), s.n_kv_heads * s.hd
    mlp = (
        (("mlp", "w_up", d, f), ("mlp", "w_gate", d, f))
        if s.arch == "llama"
        else (("mlp", "w_up", d, f),)
    )
    return (("attn", "wq", d, q), ("attn", "wk", d, kv), ("attn", "wv", d, kv),
            ("attn", "wo", q, d), *mlp, ("mlp", "w_down", f, d))  # fmt: skip


# the products a decode step runs, by `layer_matrices`' names: q, k and v are one product
# (one input, outputs side by side), as up and gate
PRODUCT_OF = {"wq": "qkv", "wk": "qkv", "wv": "qkv", "wo": "o_proj",
              "w_up": "up_gate", "w_gate": "up_gate", "w_down": "down"}  # fmt: skip


def layer_products(s: DecoderShape) -> dict[str, tuple[int, int]]:
    """One layer's products as name -> (n_in, n_out), in the forward's order: qkv, o_proj,
    up_gate, down (`PRODUCT_OF` over `layer_matrices`)."""
    out: dict[str, tuple[int, int]] = {}
    for _, name, n_in, n_out in layer_matrices(s):
        product = PRODUCT_OF[name]
        out[product] = (n_in, out.get(product, (n_in, 0))[1] + n_out)
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecoderCounts:
    """A published decoder shape (a `DecoderShape`) for cases that must not depend on
    wse_models; `head_dim` None is d_model // n_heads. Its sizes are the module's formula."""

    name: str
    arch: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    max_seq_len: int
    tie_embeddings: bool = False
    head_dim: int | None = None

    @property
    def hd(self) -> int:
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    def layer_params(self) -> int:
        return layer_params(self)

    def num_params(self) -> int:
        return num_params(self)

    def matmul_params(self) -> int:
        return matmul_params(self)


# Llama 3.1 8B (Meta's model card): the calibration case of docs/references/calibration-rows.md.
LLAMA31_8B = DecoderCounts(
    name="llama3.1-8b",
    arch="llama",
    vocab_size=128256,
    d_model=4096,
    n_layers=32,
    n_heads=32,
    n_kv_heads=8,
    d_ff=14336,
    max_seq_len=131072,
)


def mlp_zeros_problem(model: object, fraction: float) -> str | None:
    """Why `fraction` of the MLP hidden activation cannot be skipped as zeros on `model`
    (one line), or None: a fraction outside [0, 1], or a nonzero one on a model whose
    activation has no exact zeros (`relu_like` False: GELU, SiLU; hunt 68: 0.75 on GELU priced
    a 6.6% faster training step). A shape that does not say (no `relu_like`) is taken at its
    word. Training (`training.placement.check_sparsity`) and decoding
    (`decoder.decode_phases`) refuse alike."""
    if not 0.0 <= fraction <= 1.0:  # also NaN
        return f"mlp_zero_fraction must be in [0, 1], got {fraction:g}"
    if fraction and getattr(model, "relu_like", True) is False:
        act = getattr(model, "mlp_activation", None)
        return (
            f"mlp_zero_fraction={fraction:g} needs a ReLU-like MLP activation (relu, relu2: "
            f"exact zeros to skip); this model's is {act!r}, which has none: give 0, or a "
            "model with mlp_activation relu"
        )
    return None
