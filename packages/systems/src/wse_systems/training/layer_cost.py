"""The work of one training step's parts on the wafer, per instruction on the busiest PE.

Contract. Each layer computes on the whole wafer (`wse_systems.training.placement`):
`products(model)` are its matrix products as priced, `layer_phases(model, pl, backward=)` its
forward (or backward: dX and dW products, attention and pointwise work twice) product by product;
`head_phases` the final norm, logits, loss and their gradients; `embed_work` the embedding's
gather or scatter-add; `attention_work` / `pointwise_work` / `sparse_density` as the
`wse_systems.training.performance` contract says. `chunked_layer_phases(model, pl, streams,
backward=)`: a layer whose matrices stream in column chunks (`pl.chunks`,
`wse_systems.training.chunks`), each chunk's stream overlapped with its own product.
"""

from __future__ import annotations

from typing import Any

from wse_core import Op, Phase, Phases, Work, overlap, serial

from wse_systems.attention import exp_fmacs
from wse_systems.training.chunks import WeightChunks
from wse_systems.training.placement import StepPlacement, gemm_work
from wse_systems.training.stream_cost import Streams

__all__ = [
    "products",
    "attention_work",
    "pointwise_work",
    "sparse_density",
    "layer_phases",
    "head_phases",
    "embed_work",
    "chunked_layer_phases",
    "chunk_phases",
]


def products(model: Any) -> tuple[tuple[str, int, int], ...]:
    """A layer's matrix products: (name, n_in, n_out)."""
    d, hd = model.d_model, model.hd
    q_kv = (model.n_heads + 2 * model.n_kv_heads) * hd
    up = (2 if model.arch == "llama" else 1) * model.d_ff
    return (
        ("qkv", d, q_kv),
        ("o_proj", model.n_heads * hd, d),
        ("mlp_up", d, up),
        ("mlp_down", model.d_ff, d),
    )


def attention_work(model: Any, pl: StepPlacement) -> Work:
    """Causal attention of the pass's sequences spread over every PE: q.k and p.v FMACs of
    head_dim per score (mean context (s + 1) / 2, or the row's packed pairs, which
    `placement.StepWorkload` keeps within s .. s (s + 1) / 2), softmax in the partial-sum
    dtype."""
    p, num, b, s = pl.spec.num_pes, pl.num, pl.micro_batch, pl.seq_len
    pairs = s * (s + 1) / 2 if pl.attention_pairs_per_row is None else pl.attention_pairs_per_row
    scores = b * pairs * model.n_heads
    e = num.acc_dtype
    return Work(
        ops=(
            Op(num.kind, num.dtype, model.hd, count=2 * scores / p),
            Op("fmac", e, scores / p, count=exp_fmacs()),
            Op("max", e, scores / p),
            Op("sub", e, scores / p),
            Op("add", e, scores / p),
            Op("div", e, b * s * model.n_heads * model.hd / p),
        ),
        sram_read_bytes=2 * scores * model.hd * num.operand_bytes / p,
    )


def pointwise_work(model: Any, pl: StepPlacement) -> Work:
    """Two norms, the MLP activation (a polynomial exp, gated: one more mul) and two
    residual adds, per PE."""
    p, e, t = pl.spec.num_pes, pl.num.acc_dtype, pl.tokens
    d, ff = t * model.d_model / p, t * model.d_ff / p
    gated = (Op("mul", e, ff),) if model.arch == "llama" else ()
    return Work(
        ops=(
            Op("fmac", e, d, count=2),
            Op("mul", e, d, count=2),
            Op("fmac", e, ff, count=exp_fmacs() + 2),
            *gated,
            Op("add", e, d, count=2),
        )
    )


def sparse_density(pl: StepPlacement, name: str) -> dict[str, float]:
    """Products whose sparse operand is the MLP hidden activation h (or its gradient, zero
    where h is, through the ReLU's derivative): the down projection forward (h in) and its
    weight gradient (h^T dY), the up projection's input gradient (dH in) and weight gradient
    (X^T dH). The down projection's input gradient (dY W^T) is dense. Only a ReLU-like
    activation has these zeros: `placement.check_sparsity` refuses a fraction on another."""
    if not pl.mlp_zero_fraction or not name.startswith("mlp_"):
        return {}
    dens = 1.0 - pl.mlp_zero_fraction
    return {"mlp_down": dens, "mlp_down_dw": dens, "mlp_up_dx": dens, "mlp_up_dw": dens}


def layer_phases(model: Any, pl: StepPlacement, *, backward: bool = False) -> Phases:
    """One layer's forward (or backward) on the whole wafer, product by product."""
    parts: list[Phase] = []
    for name, n_in, n_out in products(model):
        sparse = sparse_density(pl, name)
        if backward:
            dx = sparse.get(f"{name}_dx", 1.0)
            parts.append(Phase(f"{name}_dx", gemm_work(pl, n_out, n_in, density=dx)))
            dw = sparse.get(f"{name}_dw", 1.0)
            parts.append(Phase(f"{name}_dw", gemm_work(pl, n_in, n_out, density=dw)))
        else:
            parts.append(Phase(name, gemm_work(pl, n_in, n_out, density=sparse.get(name, 1.0))))
    k = 2.0 if backward else 1.0
    parts.append(Phase("attention", attention_work(model, pl), repeat=k))
    parts.append(Phase("pointwise", pointwise_work(model, pl), repeat=k))
    return serial(*parts, name="layer_backward" if backward else "layer_forward")


def head_phases(model: Any, pl: StepPlacement, part: str = "whole") -> Phases:
    """The final norm, logits, softmax cross-entropy and their gradients; `part` "forward"
    (logits and loss), "backward" (the logits' two gradient products) or "whole" (both, back
    to back: the step prices the head as one unit its weights stream under)."""
    p, e, t, v, d = pl.spec.num_pes, pl.num.acc_dtype, pl.tokens, model.vocab_size, model.d_model
    logits = t * v / p
    softmax = Work(
        ops=(
            Op("fmac", e, logits, count=exp_fmacs()),
            Op("max", e, logits),
            Op("sub", e, logits, count=2),  # shift; the gradient p - onehot
            Op("add", e, logits),
            Op("fmac", e, t * d / p, count=2),  # final norm
        )
    )
    forward = [Phase("logits", gemm_work(pl, d, v)), Phase("softmax_loss", softmax)]
    backward = [Phase("logits_dx", gemm_work(pl, v, d)), Phase("logits_dw", gemm_work(pl, d, v))]
    parts = {"forward": forward, "backward": backward, "whole": forward + backward}[part]
    return serial(*parts, name="head" if part == "whole" else f"head_{part}")


def embed_work(model: Any, pl: StepPlacement, *, backward: bool) -> Work:
    """The embedding's gather (moves) or its gradient's scatter-add."""
    n = pl.tokens * model.d_model / pl.spec.num_pes
    op = Op("add", pl.num.acc_dtype, n) if backward else Op("move", pl.num.dtype, n)
    return Work(ops=(op,))


# The products as priced for each of wse_models' matrices (sparse densities are by these).
_PRICED = {"wq": "qkv", "wk": "qkv", "wv": "qkv", "wo": "o_proj",
           "w_up": "mlp_up", "w_gate": "mlp_up", "w_down": "mlp_down"}  # fmt: skip


def _chunk_sizes(ck: WeightChunks, i: int) -> list[tuple[int, int]]:
    """[(columns, how many chunks have them)] of matrix i: the full chunks and the rest."""
    n, c = ck.matrices[i].n_out, ck.cols(i)
    full, rest = divmod(n, c)
    return [(c, full)] + ([(rest, 1)] if rest else [])


def chunk_phases(pl: StepPlacement, st: Streams, i: int, cols: int, backward: bool) -> list[Phase]:
    """One column chunk of matrix i: its product (backward: dX, dW) and, on the link, its
    weights in (backward: its gradient out and MemoryX's update of it too)."""
    m = pl.chunks.matrices[i]
    priced, n = _PRICED.get(m.name, m.name), m.n_in * cols
    dens = sparse_density(pl, priced)

    def product(suffix: str, n_in: int, n_out: int) -> Phase:
        work = gemm_work(pl, n_in, n_out, density=dens.get(priced + suffix, 1.0))
        return Phase(m.name + suffix, work)

    if not backward:
        return [st.weights_in(n), product("", m.n_in, cols)]
    grad = serial(product("_dx", cols, m.n_in), product("_dw", m.n_in, cols), name="grad")
    return [st.weights_in(n), grad, st.gradients_out(n), st.update(n)]


def chunked_layer_phases(
    model: Any, pl: StepPlacement, st: Streams, *, backward: bool = False, vectors_in: bool = True
) -> Phases:
    """One layer streamed in column chunks (`pl.chunks`): each chunk's stream overlapped
    with its own product, matrix by matrix (backward: in reverse, each chunk's gradient out
    and update overlapped too); the layer's vectors stream during its attention and
    pointwise work (twice in the backward), their gradient out there in the backward.
    `vectors_in` False: the vectors are already on the wafer. A step's backward runs the
    forward again first (its inner recompute, vectors in with it) and then this backward
    with `vectors_in=False` (`wse_systems.training.performance._chunked_step`), as the
    trainer takes them once for both (`ChunkedLayer.backward_items`; hunt 74: priced three
    times a step, the run's twice)."""
    ck = pl.chunks
    order = range(len(ck.matrices))
    parts: list[Phase | Phases] = []
    for i in reversed(order) if backward else order:
        for cols, count in _chunk_sizes(ck, i):
            name = f"{ck.matrices[i].name}_chunks"
            parts.append(overlap(*chunk_phases(pl, st, i, cols, backward), name=name, repeat=count))
    k = 2.0 if backward else 1.0
    rest = serial(Phase("attention", attention_work(model, pl), repeat=k),
                  Phase("pointwise", pointwise_work(model, pl), repeat=k), name="mix")  # fmt: skip
    v = ck.vector_params
    grads = (st.gradients_out(v), st.update(v)) if backward else ()
    ins = (st.weights_in(v),) if vectors_in else ()
    parts.append(overlap(*ins, rest, *grads, name="vectors"))
    return serial(*parts, name="layer_backward" if backward else "layer_forward")
