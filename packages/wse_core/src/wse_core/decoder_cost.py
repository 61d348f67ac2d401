"""What a decoder-only transformer costs on wafer regions, counted per instruction.

Contract. `matvec_work(region, n_in, n_out, ...)` is one matrix-vector product whose
`n_in x n_out` weight is spread over a `rows x cols` PE region as the SDK's gemv examples
lay it out: the input vector is split over the columns and multicast down each column; each
PE holds an `ceil(n_out / rows) x ceil(n_in / cols)` block and runs one column AXPY (FMAC)
per input element it holds (the `single-tile-matvec` kernel); the partial outputs are
sum-reduced along each row. `decode_phases(shape, plan, ...)` is one batch-1 decode step of
`shape` laid out by `wse_core.pipeline_plan.plan_pipeline`: per layer the norms, the q/k/v,
attention, output and MLP products on that layer's region, the hop to the next region, the
passes between wafers, and the head. It is the same plan object the inference engine
emulates, so a change of the plan changes the prediction through it.

`shape` is any object with a model's counts (`n_layers, d_model, n_heads, n_kv_heads, d_ff,
vocab_size`, optionally `head_dim`, `arch`), e.g. a `wse_models.ModelConfig` or the
`LLAMA31_8B` shape of the calibration case.

Activation sparsity (ReLU and squared-ReLU MLPs): the wafer's dataflow triggers a PE's
FMAC only when a nonzero operand arrives (Cerebras states the hardware skips zeros), so the
down projection's column AXPYs run only for the nonzero hidden values: `mlp_zero_fraction`
s scales its FMACs and their SRAM traffic by (1 - s). The zeros are still multicast (the
fabric time does not shrink; a sender-side filter would be a further gain, not assumed).

Assumptions (listed in every prediction built from here): the exponential of the softmax
costs `EXP_FMACS` FMACs per element (a polynomial; not published); the attention reads the
KV cache of `kv_tokens` tokens (default: half the context); words of partial sums travel in
the weights' dtype.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from wse_core.perf import Op, Phase, Phases, Work, serial
from wse_core.sram import Region

__all__ = [
    "EXP_FMACS",
    "DECODER_ASSUMPTIONS",
    "ShapeSpec",
    "LLAMA31_8B",
    "matvec_work",
    "layer_phases",
    "decode_phases",
]

EXP_FMACS = 6.0  # assumption: exp by a degree-6 polynomial (Horner: one FMAC per term)
DECODER_ASSUMPTIONS = {
    "matvec layout": "input split over columns and multicast down them; partial sums "
    "reduced along rows (SDK gemv examples)",
    "exp": f"{EXP_FMACS:g} FMACs per element (polynomial; not published)",
    "kv_tokens": "the attention reads half the context unless stated",
    "zero skipping": "an FMAC fires only on a nonzero activation (no cost for a zero); zeros "
    "still cross the fabric; a stage's layers share its mean zero fraction",
}


@dataclasses.dataclass(frozen=True)
class ShapeSpec:
    """A decoder's published counts (for cases that must not depend on wse_models)."""

    name: str
    arch: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab_size: int
    max_seq_len: int
    tie_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def layer_params(self) -> int:
        hd = self.head_dim
        attn = self.d_model * (self.n_heads + 2 * self.n_kv_heads) * hd
        attn += self.n_heads * hd * self.d_model
        mlp = (3 if self.arch == "llama" else 2) * self.d_model * self.d_ff
        return attn + mlp + 2 * self.d_model

    def num_params(self) -> int:
        head = 0 if self.tie_embeddings else self.vocab_size * self.d_model
        return self.vocab_size * self.d_model + self.n_layers * self.layer_params() + head


# Llama 3.1 8B (Meta's model card): the calibration case of shared/REFERENCES.md.
LLAMA31_8B = ShapeSpec(
    name="llama3.1-8b",
    arch="llama",
    n_layers=32,
    d_model=4096,
    n_heads=32,
    n_kv_heads=8,
    d_ff=14336,
    vocab_size=128256,
    max_seq_len=131072,
)


def _head_dim(shape: Any) -> int:
    return int(getattr(shape, "head_dim", None) or shape.d_model // shape.n_heads)


def _dtype(bytes_per_value: int) -> str:
    return "fp16" if bytes_per_value == 2 else "fp32"


def matvec_work(
    region: Region, n_in: int, n_out: int, *, bytes_per_value: int = 2, input_density: float = 1.0
) -> Work:
    """y (n_out) = W^T x (n_in) on `region`, on its busiest PE (see the module contract).

    `input_density`: the fraction of x that is nonzero; a zero triggers no column AXPY."""
    if not 0.0 <= input_density <= 1.0:
        raise ValueError(f"input_density must be in [0, 1], got {input_density}")
    r, c = region.rows, region.cols
    rows_out, cols_in = math.ceil(n_out / r), math.ceil(n_in / c)
    words = bytes_per_value / 4
    fired = cols_in * input_density
    elems = rows_out * fired
    return Work(
        ops=(Op("fmac", _dtype(bytes_per_value), rows_out, count=fired),),
        # FMAC y += w * x: reads w and y, writes y (x is a scalar from the fabric).
        sram_read_bytes=2 * elems * bytes_per_value,
        sram_write_bytes=elems * bytes_per_value,
        links={"S": cols_in * words, "E": rows_out * words},
        latency_hops=(r - 1) + (c - 1),
    )


def _reduce_work(region: Region, words: float) -> Work:
    """A sum (or max) over the region and back to every PE (norms, softmax)."""
    hops = (region.rows - 1) + (region.cols - 1)
    return Work(links={"E": words, "S": words}, latency_hops=2 * hops)


def _elementwise(kind: str, n: float, region: Region, dtype: str, per: float = 1.0) -> Op:
    return Op(kind, dtype, math.ceil(n / region.num_pes), count=per)


def layer_phases(
    shape: Any,
    region: Region,
    *,
    kv_tokens: int,
    bytes_per_value: int = 2,
    mlp_zero_fraction: float = 0.0,
) -> Phases:
    """One layer's decode step (one token) on `region`, phase by phase (`mlp_zero_fraction`:
    the share of the MLP hidden activation that is zero, skipped by the down projection)."""
    d, hd = shape.d_model, _head_dim(shape)
    nh, nkv, ff = shape.n_heads, shape.n_kv_heads, shape.d_ff
    dt, b = _dtype(bytes_per_value), bytes_per_value
    gated = getattr(shape, "arch", "llama") == "llama"
    pes = region.num_pes
    norm = Work(ops=(_elementwise("fmac", d, region, dt), _elementwise("mul", d, region, dt)))
    norm = norm + _reduce_work(region, 1)
    # Attention over kv_tokens cached tokens: q.k and p.v FMACs, softmax on the scores.
    scores = kv_tokens * nh
    attn = Work(
        ops=(
            Op("fmac", dt, hd, count=2 * scores / pes),
            _elementwise("fmac", scores, region, dt, EXP_FMACS),
            _elementwise("max", scores, region, dt),
            _elementwise("sub", scores, region, dt),
            _elementwise("add", scores, region, dt),
            Op("div", dt, math.ceil(nh * hd / pes)),
        ),
        sram_read_bytes=2 * kv_tokens * nkv * hd * b / pes,
    ) + _reduce_work(region, 2)
    mlp_out = (2 if gated else 1) * ff
    act = Work(ops=(_elementwise("fmac", ff, region, dt, EXP_FMACS + 2),))
    return serial(
        Phase("norm_attn", norm),
        Phase("qkv", matvec_work(region, d, (nh + 2 * nkv) * hd, bytes_per_value=b)),
        Phase("attention", attn),
        Phase("o_proj", matvec_work(region, nh * hd, d, bytes_per_value=b)),
        Phase("norm_mlp", norm),
        Phase("up_gate", matvec_work(region, d, mlp_out, bytes_per_value=b)),
        Phase("activation", act),
        Phase(
            "down",
            matvec_work(region, ff, d, bytes_per_value=b, input_density=1 - mlp_zero_fraction),
        ),
        name="layer",
    )


def decode_phases(
    shape: Any,
    plan: Any,
    *,
    kv_tokens: int | None = None,
    mlp_zero_fraction: float | Sequence[float] = 0.0,
) -> Phases:
    """One batch-1 decode step (one token) of `shape` on `plan` (a `PipelinePlan`);
    `mlp_zero_fraction` is one value or one per layer (a stage takes its layers' mean).

    At batch 1 only one region works at a time: the regions' phases are serial. Each region
    passes the residual stream to the next (adjacent rows: its own height in hops); each
    wafer boundary and the way back to wafer 0 is a system pass of d_model values."""
    kv = plan.context_len // 2 if kv_tokens is None else kv_tokens
    b = plan.bytes_per_param
    d = shape.d_model
    parts: list[Phase | Phases] = []
    zeros = np.broadcast_to(np.asarray(mlp_zero_fraction, np.float64), (shape.n_layers,))
    for stage in plan.stages:
        s = float(zeros[stage.layers[0] : stage.layers[1]].mean())
        layer = layer_phases(
            shape, stage.region, kv_tokens=kv, bytes_per_value=b, mlp_zero_fraction=s
        )
        parts.append(
            serial(
                dataclasses.replace(layer, repeat=stage.num_layers),
                Phase("to_next", Work(latency_hops=stage.region.rows)),
                name=stage.name,
            )
        )
    head = plan.head.region
    head_work = serial(
        Phase("lm_head", matvec_work(head, d, shape.vocab_size, bytes_per_value=b)),
        Phase("argmax", _reduce_work(head, 2)),
        Phase("embed", Work(latency_hops=head.rows + head.cols)),
        name="head",
    )
    passes = Work(host_io_bytes=plan.wafer_crossings * d * b, system_hops=plan.wafer_crossings)
    return serial(*parts, head_work, Phase("between_wafers", passes), name="decode_step")
